"""``generate`` (one reply) and ``chat`` (a terminal chat with a status line), on the local engine or, with
``--remote NAME``, on a remote server.

``--mtp auto`` is the window's Auto drafting (``app.engine.auto_mode``, the same records): ``chat`` gives its
replies to drafting off, the embedded head (when the model has one) and the d2t sidecar (``--draft``) in turn,
each with adaptive depth, loading the next mode before each message, until the verdict names the fastest; from
then on (and in ``generate``, a single reply that cannot be compared) the winner is used, or off while nothing
is decided yet."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from app.core.engine_limits import check_engine_numbers
from app.core.errors import EngineError, FastMTPError
from app.engine.config import CHAT_MAX_TOKENS, CHAT_SAMPLING, DRAFT_DEPTH_MAX, EngineConfig, SamplingParams

if TYPE_CHECKING:
    from app.engine.auto_mode import AutoDrafting, AutoKey, AutoMemory

GENERATE_MAX_TOKENS = 256


@dataclass
class AutoRun:
    """``--mtp auto``: the record of this model here, and the configuration of each mode Auto measures."""

    auto: AutoDrafting
    memory: AutoMemory
    key: AutoKey
    configs: dict[str, EngineConfig]

    def config(self, measure: bool = True) -> EngineConfig:
        """The mode's configuration for the next reply: in turn while measuring (``measure``), else the winner
        (off while nothing is decided)."""
        return self.configs[self.auto.next_mode() if measure or not self.auto.measuring else "off"]

    def observe(self, config: EngineConfig, stats: dict[str, Any]) -> None:
        """A finished reply: counted when it is from the mode Auto asked for; the record is saved."""
        from app.engine.verdict import condition_for, load_average

        mode = self.auto.next_mode()
        if config != self.configs.get(mode) or not stats.get("sampling"):
            return
        if self.auto.observe(mode, condition_for(config, str(stats["sampling"]), mode), float(stats["decode_tps"]),
                             int(stats.get("generated") or 0), load_average()):
            try:
                self.memory.remember(self.key, self.auto)
            except OSError as exc:
                print(f"note: Auto drafting's record could not be saved: {exc}", file=sys.stderr)


def auto_run(args: argparse.Namespace) -> AutoRun:
    """The modes ``--mtp auto`` measures for ``--model`` (and ``--draft``, the d2t sidecar) and their record."""
    from app.backend.registry import active
    from app.core.paths import depth_memory_dir
    from app.engine.auto_mode import AutoMemory, auto_key
    from app.gguftools.inspect import inspect_gguf

    off = replace(engine_config(argparse.Namespace(**{**vars(args), "mtp": "off", "adaptive": False})), draft=None)
    adaptive = replace(off, adaptive=True, draft_depth=DRAFT_DEPTH_MAX, depth_memory=depth_memory_dir())
    configs = {"off": off}
    if inspect_gguf(off.target).nextn_layers:
        configs["embedded"] = replace(adaptive, mode="embedded")
    if args.draft is not None:
        configs["d2t"] = replace(adaptive, mode="sidecar", draft=args.draft)
    manifest = active()
    try:
        key = auto_key(off.target, args.draft, manifest.id if manifest is not None else "no backend", off.n_threads,
                       off.n_gpu_layers, off.rpc)
    except OSError as exc:
        raise FastMTPError(f"A model file cannot be read: {exc}.", "Check the --model and --draft paths.") from exc
    memory = AutoMemory(depth_memory_dir())
    return AutoRun(memory.recall(key, tuple(configs)), memory, key, configs)


def cmd_generate(args: argparse.Namespace) -> int:
    from app.engine.session import ChatSession

    if args.remote:
        from app.cli.remote import remote_generate

        return remote_generate(args)
    messages = prompt_messages(args)  # read (bounded) before the model loads: a bad file costs no load
    options = chat_options(args)  # numbers checked before the load too
    auto = auto_run(args) if args.mtp == "auto" else None
    if auto is not None:
        print(f"auto: {auto.auto.status()}" + (" One reply cannot be compared: this one uses drafting off; "
                                               "`chat --mtp auto` measures." if auto.auto.measuring else ""),
              file=sys.stderr)
    config = auto.config(measure=False) if auto is not None else engine_config(args)
    check_engine_numbers(config.n_threads, config.n_batch, config.n_ctx, config.n_gpu_layers)
    session = ChatSession(config)
    try:
        model = session.decoder.target

        def on_token(token: int, _provenance: str, _stats: Any) -> None:
            if not model.is_eog(token):
                sys.stdout.write(model.piece(token).decode("utf-8", errors="replace"))
                sys.stdout.flush()

        reply, text = session.reply(messages, options, for_people(args, on_token))
        stats = reply.stats.to_dict()
        config = session.decoder.config
        # the window's two judgements of the drafting: its banner (warning) and the HUD's note
        from app.engine.breakeven import drafting_warning, no_gain_note  # the release chain: only when needed

        warning, note = drafting_warning(config, stats), no_gain_note(config, stats)
        emit(args, {"text": text, "tokens": reply.tokens, "provenance": reply.provenance,
                    "stop_reason": reply.stop_reason, "stats": stats, "warning": warning, "note": note},
             lambda: print(f"\n[{reply.stop_reason}] {_status_of(stats)}", file=sys.stderr))
        if warning is not None:
            print(f"warning: {warning}", file=sys.stderr)
        elif note is not None:
            print(f"note: {note}", file=sys.stderr)
        from app.engine.chat_template import take_notices

        for notice in take_notices():  # the model's chat template could not be used: ChatML, said once
            print(f"note: {notice}", file=sys.stderr)
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
    auto = auto_run(args) if args.mtp == "auto" else None
    first = auto.config() if auto is not None else engine_config(args)
    check_engine_numbers(first.n_threads, first.n_batch, first.n_ctx, first.n_gpu_layers)
    with EngineClient() as client:
        loaded = client.load(first)
        if loaded["kind"] == "error" and loaded.get("error") == "WorkerCrashed":
            print(f"error: {loaded['message']}\nwhat to do: {loaded.get('advice', '')}", file=sys.stderr)
            _restarted(client)
        elif loaded["kind"] == "error":
            raise FastMTPError(loaded["message"], loaded.get("advice", ""))
        mode = client.config.mode if client.config is not None else args.mtp
        print(f"FastMTP chat ({'auto: ' if auto is not None else ''}{mode}). Type /continue to go on with a cut "
              "reply, /new for a new chat carrying the last exchange, /reset for an empty one, /quit or Ctrl-D to "
              "leave.", file=sys.stderr)
        if auto is not None:
            print(f"auto: {auto.auto.status()}", file=sys.stderr)
        warned = False
        cut: list[int] = []  # the last reply's tokens while it was cut by the cap or the context: /continue
        while True:
            try:
                line = input("you> ")
            except EOFError:
                break
            command = line.strip()
            if command in ("/quit", "/exit"):
                break
            if command in ("/reset", "/new"):
                # /new: a new chat carrying the last exchange (what "stop at the limit" offers)
                last = history[-2:] if command == "/new" and len(history) >= 2 else []
                history = [*(history[:1] if args.system else []), *last]
                cut = []
                continue
            continuing = command == "/continue"
            if continuing and not cut:
                print("note: the last reply was not cut; /continue goes on with a reply cut by --max-tokens or the "
                      "context.", file=sys.stderr)
                continue
            reply_to = history[:-1] if continuing else [*history, Message("user", line)]
            if auto is not None and auto.config() != client.config:  # Auto wants this reply from another mode
                switched = client.load(auto.config())
                if switched["kind"] == "error":
                    raise FastMTPError(switched["message"], switched.get("advice", ""))
            asked = replace(reply_options(args, options), continue_tokens=tuple(cut) if continuing else ())
            final = stream_reply(client, reply_to, asked, _status_of if args.status else None)
            if final.get("kind") == "error":
                print(f"error: {final['message']}\nwhat to do: {final.get('advice', '')}", file=sys.stderr)
                if final.get("error") == "WorkerCrashed":
                    _restarted(client)
                elif final.get("policy") == "stop":
                    print("note: /new starts a new chat carrying the last exchange.", file=sys.stderr)
                continue
            text = final.get("text", "")
            if continuing:
                history[-1] = Message("assistant", history[-1].content + text)
                cut = [*cut, *final.get("tokens", [])]
            else:
                history = [*reply_to, Message("assistant", text)]
                cut = list(final.get("tokens", []))
            if final.get("stop_reason") not in ("length", "context_full"):
                cut = []
            print(f"[{_status_of(final['stats'])}]", file=sys.stderr)
            for notice in final.get("state_notices") or []:  # a chat template set aside, a state not saved: once
                print(f"note: {notice}", file=sys.stderr)
            if cut:
                why = "the reply cap" if final.get("stop_reason") == "length" else "the full context"
                print(f"note: the reply was cut by {why}; /continue goes on with it.", file=sys.stderr)
            if final["stats"].get("trimmed_turns"):
                print(f"note: {final['stats']['trimmed_turns']} oldest turn(s) are no longer in the model's context "
                      "(the system prompt and the latest turns are).", file=sys.stderr)
            if auto is not None and client.config is not None:
                auto.observe(client.config, final["stats"])
                print(f"auto: {auto.auto.status()}", file=sys.stderr)
            from app.engine.breakeven import reply_warning

            warning = reply_warning(client.config, final["stats"])  # what the window's banner or HUD would say
            if warning is not None and not warned:
                print(f"warning: {warning}", file=sys.stderr)
                warned = True
    return 0


def _status_of(stats: dict[str, Any]) -> str:
    from app.engine.stats import acceptance_words, context_meter

    words = acceptance_words(stats)
    acc = words.text if words is not None else "acceptance -"
    tpp = f"{stats['tokens_per_pass']:.2f}" if stats.get("tokens_per_pass") is not None else "-"
    depth = f" | depth {stats['depth']}" if stats.get("drafted") else ""

    meter = f" | {context_meter(stats)}" if stats.get("context_size") else ""
    return f"{stats['rolling_tps']:6.1f} tok/s | {acc} | {tpp} tokens/pass{depth}{meter}"


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
