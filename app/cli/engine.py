"""``generate`` (one reply) and ``chat`` (a terminal chat with a status line), on the local engine or, with
``--remote NAME``, on a remote server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli.common import (
    Subparsers,
    add_engine_options,
    chat_options,
    command,
    emit,
    engine_config,
    for_people,
    prompt_messages,
    reply_options,
    stream_reply,
)
from app.engine.breakeven import drafting_warning, no_gain_note, reply_warning
from app.engine.config import CHAT_MAX_TOKENS, CHAT_SAMPLING, SamplingParams
from app.errors import EngineError, FastMTPError

GENERATE_MAX_TOKENS = 256


def cmd_generate(args: argparse.Namespace) -> int:
    from app.engine.session import ChatSession

    if args.remote:
        from app.cli.remote import remote_generate

        return remote_generate(args)
    session = ChatSession(engine_config(args))
    try:
        model = session.decoder.target

        def on_token(token: int, _provenance: str, _stats: Any) -> None:
            if not model.is_eog(token):
                sys.stdout.write(model.piece(token).decode("utf-8", errors="replace"))
                sys.stdout.flush()

        reply, text = session.reply(prompt_messages(args), chat_options(args), for_people(args, on_token))
        stats = reply.stats.to_dict()
        config = session.decoder.config
        # the window's two judgements of the drafting: its banner (warning) and the HUD's note
        warning, note = drafting_warning(config, stats), no_gain_note(config, stats)
        emit(args, {"text": text, "tokens": reply.tokens, "provenance": reply.provenance,
                    "stop_reason": reply.stop_reason, "stats": stats, "warning": warning, "note": note},
             lambda: print(f"\n[{reply.stop_reason}] {_status_of(stats)}", file=sys.stderr))
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr)
        elif note is not None:
            print(f"note: {note}", file=sys.stderr)
    finally:
        session.close()
    return 0


def _restarted(client: Any) -> None:
    """Restart a crashed worker (without the sidecar when the pair is the suspect, saying why); a restart that
    fails again ends the chat with its error instead of looping."""
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

    if args.remote:
        from app.cli.remote import remote_chat

        return remote_chat(args)
    history: list[Message] = [Message("system", args.system)] if args.system else []
    options = chat_options(args)
    with EngineClient() as client:
        loaded = client.load(engine_config(args))
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
            final = stream_reply(client, history, reply_options(args, options),
                                 _status_of if args.status else None)
            if final.get("kind") == "error":
                print(f"error: {final['message']}\nwhat to do: {final.get('advice', '')}", file=sys.stderr)
                if final.get("error") == "WorkerCrashed":
                    _restarted(client)
                history.pop()
                continue
            history.append(Message("assistant", final.get("text", "")))
            print(f"[{_status_of(final['stats'])}]", file=sys.stderr)
            warning = reply_warning(client.config, final["stats"])  # what the window's banner or HUD would say
            if warning is not None and not warned:
                print(f"warning: {warning}", file=sys.stderr)
                warned = True
    return 0


def _status_of(stats: dict[str, Any]) -> str:
    acc = f"{stats['acceptance']:.0%}" if stats.get("acceptance") is not None else "-"
    tpp = f"{stats['tokens_per_pass']:.2f}" if stats.get("tokens_per_pass") is not None else "-"
    depth = f" | depth {stats['depth']}" if stats.get("drafted") else ""
    return f"{stats['rolling_tps']:6.1f} tok/s | acceptance {acc} | {tpp} tokens/pass{depth}"


def add_commands(sub: Subparsers) -> None:
    """``generate`` (greedy by default, for repeatable scripts) and ``chat`` (the window's chat defaults)."""
    greedy = SamplingParams()
    gen = command(sub, "generate", cmd_generate, "one reply from a model, with MTP drafting and stats")
    add_engine_options(gen, greedy, GENERATE_MAX_TOKENS, greedy.seed,
                       temp_help=f"sampling temperature (default {greedy.temperature:g}: greedy, so a script gets "
                                 "the same reply every time)",
                       seed_help=f"sampling seed (default {greedy.seed})")
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the user message")
    source.add_argument("--messages", type=Path, help="JSON list of {role, content}")
    chat = command(sub, "chat", cmd_chat, "a terminal chat with a live speed / acceptance status line")
    add_engine_options(chat, CHAT_SAMPLING, CHAT_MAX_TOKENS, None,
                       temp_help=f"sampling temperature (default {CHAT_SAMPLING.temperature:g}, as in the window)",
                       seed_help="one seed for every reply (default: a fresh seed per reply above temperature 0, "
                                 "as in the window)")
    chat.add_argument("--no-status", dest="status", action="store_false", help="no live status line")
