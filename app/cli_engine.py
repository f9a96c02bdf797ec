"""CLI for the engine: ``generate`` (one reply) and ``chat`` (a terminal chat with a status line)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli import print_json


def _config(args: argparse.Namespace) -> Any:
    from app.backend.rpc import parse_endpoints
    from app.engine.config import EngineConfig
    from app.errors import FastMTPError

    if args.model is None:
        raise FastMTPError("No model was given.", "Pass --model TARGET.gguf, or --remote NAME for a remote server.")
    return EngineConfig(target=args.model, mode=args.mtp, draft=args.draft, n_max=args.n_max, p_min=args.p_min,
                        adaptive=args.adaptive, n_ctx=args.ctx, n_batch=args.batch, n_gpu_layers=args.gpu_layers,
                        n_threads=args.threads, flash_attn={"on": True, "off": False}.get(args.flash_attn),
                        rpc=tuple(parse_endpoints(args.rpc)) if args.rpc else ())


def _options(args: argparse.Namespace) -> Any:
    from app.engine.config import ChatOptions, SamplingParams

    sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                              repeat_penalty=args.repeat_penalty, seed=args.seed)
    return ChatOptions(max_tokens=args.max_tokens, sampling=sampling, stop=tuple(args.stop or ()),
                       thinking=not args.no_think)


def _messages(args: argparse.Namespace) -> list[Any]:
    from app.engine.chat_template import Message
    from app.errors import FastMTPError

    if args.messages:
        try:
            data = json.loads(Path(args.messages).read_text(encoding="utf-8"))
            return [Message(str(m["role"]), str(m["content"])) for m in data]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FastMTPError(f"{args.messages} is not a JSON list of {{role, content}} messages ({exc}).",
                               'Write it like [{"role": "user", "content": "Hi"}].') from exc
    messages = [Message("system", args.system)] if args.system else []
    return [*messages, Message("user", args.prompt)]




def cmd_generate(args: argparse.Namespace) -> int:
    from app.engine.session import ChatSession

    if args.remote:
        from app.cli_remote import remote_generate

        return remote_generate(args)
    session = ChatSession(_config(args))
    try:
        model = session.decoder.target
        if not args.json:
            def on_token(token: int, _provenance: str, _stats: Any) -> None:
                if not model.is_eog(token):
                    sys.stdout.write(model.piece(token).decode("utf-8", errors="replace"))
                    sys.stdout.flush()
        reply, text = session.reply(_messages(args), _options(args), None if args.json else on_token)
        warning = _pair_warning(args, reply.stats.to_dict())
        if args.json:
            print_json({"text": text, "tokens": reply.tokens, "provenance": reply.provenance,
                        "stop_reason": reply.stop_reason, "stats": reply.stats.to_dict(), "warning": warning})
        else:
            print(f"\n[{reply.stop_reason}] {_status_of(reply.stats.to_dict())}", file=sys.stderr)
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr)
    finally:
        session.close()
    return 0


def _pair_warning(args: argparse.Namespace, stats: dict[str, Any]) -> str | None:
    """The wrong-pair warning (a sidecar's drafts almost never accepted), for sidecar mode."""
    from app.engine.stats import wrong_pair_warning

    if args.mtp != "sidecar":
        return None
    return wrong_pair_warning(stats, args.draft.name if args.draft is not None else None)


def _restarted(client: Any) -> None:
    """Restart a crashed worker (without the sidecar when the pair is the suspect, saying why); a restart that
    fails again ends the chat with its error instead of looping."""
    from app.errors import EngineError

    loaded = client.restart()
    if loaded is None or loaded["kind"] == "error":
        event = loaded or {}
        raise EngineError(str(event.get("message", "The engine could not be restarted.")),
                          str(event.get("advice", "")))
    if loaded.get("notice"):
        print(f"note: {loaded['notice']}", file=sys.stderr)


def cmd_chat(args: argparse.Namespace) -> int:
    """A terminal chat through the engine worker, with a live status line on stderr."""
    from app.engine.chat_template import Message
    from app.engine.client import EngineClient
    from app.errors import FastMTPError

    if args.remote:
        from app.cli_remote import remote_chat

        return remote_chat(args)
    history: list[Message] = [Message("system", args.system)] if args.system else []
    options = _options(args)
    with EngineClient() as client:
        loaded = client.load(_config(args))
        if loaded["kind"] == "error" and loaded.get("error") == "WorkerCrashed":
            print(f"error: {loaded['message']}\nwhat to do: {loaded.get('advice', '')}", file=sys.stderr)
            _restarted(client)
        elif loaded["kind"] == "error":
            raise FastMTPError(loaded["message"], loaded.get("advice", ""))
        mode = client.config.mode if client.config is not None else args.mtp
        print(f"FastMTP chat ({mode}). Type /reset for a new chat, /quit or Ctrl-D to leave.", file=sys.stderr)
        warned = False
        while True:
            try:
                line = input("you> ")
            except EOFError:
                break
            if line.strip() in ("/quit", "/exit"):
                break
            if line.strip() == "/reset":
                history = history[:1] if args.system else []
                continue
            history.append(Message("user", line))
            sys.stdout.write("assistant> ")
            final: dict[str, Any] = {}
            try:
                for event in client.generate(history, options):
                    if event["kind"] == "token":
                        sys.stdout.write(event["piece"])
                        sys.stdout.flush()
                        if args.status and sys.stderr.isatty():
                            sys.stderr.write("\0337\r\033[2K" + _status_of(event["stats"]) + "\0338")
                    final = event
            except KeyboardInterrupt:
                client.cancel()
            print()
            if final.get("kind") == "error":
                print(f"error: {final['message']}\nwhat to do: {final.get('advice', '')}", file=sys.stderr)
                if final.get("error") == "WorkerCrashed":
                    _restarted(client)
                history.pop()
                continue
            history.append(Message("assistant", final.get("text", "")))
            print(f"[{_status_of(final['stats'])}]", file=sys.stderr)
            warning = _pair_warning(args, final["stats"]) if client.config and client.config.mode == "sidecar" else None
            if warning is not None and not warned:
                print(f"warning: {warning}", file=sys.stderr)
                warned = True
    return 0


def _status_of(stats: dict[str, Any]) -> str:
    acc = f"{stats['acceptance']:.0%}" if stats.get("acceptance") is not None else "-"
    tpp = f"{stats['tokens_per_pass']:.2f}" if stats.get("tokens_per_pass") is not None else "-"
    depth = f" | depth {stats['depth']}" if stats.get("drafted") else ""
    return f"{stats['rolling_tps']:6.1f} tok/s | acceptance {acc} | {tpp} tokens/pass{depth}"


def add_engine_options(p: argparse.ArgumentParser) -> None:
    from app.cli_remote import add_engine_options as add_remote_options

    p.add_argument("--model", type=Path, help="target GGUF (needed unless --remote)")
    add_remote_options(p)
    p.add_argument("--draft", type=Path, help="FastMTP sidecar GGUF (full or d2t)")
    p.add_argument("--mtp", choices=["off", "embedded", "sidecar"], default="off")
    p.add_argument("--n-max", type=int, default=3, help="draft depth 1..8 (with --adaptive: the deepest it may go)")
    p.add_argument("--p-min", type=float, default=0.0, help="stop drafting below this draft confidence")
    p.add_argument("--adaptive", action="store_true",
                   help="choose the depth round by round from the measured acceptance and costs")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--gpu-layers", type=int, default=0)
    p.add_argument("--threads", type=int)
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto", help="flash attention")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--no-think", action="store_true", help="thinking off (Qwen enable_thinking=false)")


def add_commands(sub: Any, command: Any) -> None:
    gen = command(sub, "generate", cmd_generate, "one reply from a model, with MTP drafting and stats")
    add_engine_options(gen)
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the user message")
    source.add_argument("--messages", type=Path, help="JSON list of {role, content}")
    chat = command(sub, "chat", cmd_chat, "a terminal chat with a live speed / acceptance status line")
    add_engine_options(chat)
    chat.add_argument("--no-status", dest="status", action="store_false", help="no live status line")
