"""What every command group shares: registering a command, the one place that reads ``--json``, the signal
handling of long jobs, and the engine options of ``generate`` and ``chat``.

The group modules import from here only (never from ``app.cli`` itself), so the entry point can import them
all without a cycle.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeAlias, TypeVar

from app.core import defaults, engine_limits
from app.core.cancel import CancelToken
from app.core.errors import FastMTPError
from app.engine.config import (
    DEFAULT_DRAFT_DEPTH,
    DRAFT_DEPTH_MAX,
    DRAFT_DEPTH_MIN,
    MODES,
    OVERFLOW_POLICIES,
    SamplingParams,
)

if TYPE_CHECKING:
    from app.engine.chat_template import Message
    from app.engine.config import ChatOptions, EngineConfig
    from app.release.trust import Confirm

Handler = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Text = str | Callable[[], str | None] | None  # None: nothing for people
T = TypeVar("T")

# ----------------------------------------------------------------------------- registration


def command(parent: Subparsers, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
    """A subcommand with ``--json`` that runs ``handler``."""
    p = parent.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handler)
    return p


def group(sub: Subparsers, name: str, help_text: str) -> Subparsers:
    """A command group such as ``backend``: a subcommand is required (kept in ``<name>_command``)."""
    return sub.add_parser(name, help=help_text).add_subparsers(dest=f"{name}_command", required=True)


# ----------------------------------------------------------------------------- output: the only reader of --json


def emit(args: argparse.Namespace, data: Any, text: Text, *, compact: bool = False) -> None:
    """A command's result: ``data`` as JSON with ``--json`` (indented, or one line when ``compact``), else
    ``text`` for people (if any); a callable ``text`` is only run then, and may print itself and return None."""
    if args.json:
        print(json.dumps(data, indent=None if compact else 2, default=str), flush=True)
        return
    human = text() if callable(text) else text
    if human is not None:
        print(human)


def emit_line(args: argparse.Namespace, data: Mapping[str, Any] | str | None, text: str | None = None,
              file: TextIO | None = None) -> None:
    """One progress event: with ``--json`` a JSON line on stdout (``data``, or a line already encoded; None
    prints nothing), else ``text`` (when any) on ``file``, stderr by default."""
    if args.json:
        if data is not None:
            print(data if isinstance(data, str) else json.dumps(data, default=str), flush=True)
    elif text:
        print(text, file=sys.stderr if file is None else file, flush=True)


def stream(args: argparse.Namespace, piece: str) -> None:
    """A piece of a reply as it comes, for people only (with ``--json`` the whole reply comes at the end)."""
    if not args.json:
        sys.stdout.write(piece)
        sys.stdout.flush()


def for_people(args: argparse.Namespace, value: T) -> T | None:
    """``value`` (a progress callback, a prompt, a token printer) when a person reads the output, None with
    ``--json``: scripts get no questions and no interleaved text."""
    return None if args.json else value


def trust_prompt(args: argparse.Namespace) -> Confirm | None:
    """The terminal question "trust this publisher key?", never asked with ``--json``."""
    if args.json:
        return None
    from app.release import trust

    return trust.default_confirm()


def report_error(args: argparse.Namespace, exc: FastMTPError) -> int:
    """A failed command: its error as JSON (``--json``) or as "error:" and "what to do:" on stderr."""
    if getattr(args, "json", False):
        print(json.dumps(exc.to_json()), flush=True)
    else:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.advice:
            print(f"what to do: {exc.advice}", file=sys.stderr)
    return exc.exit_code


def permission_denied(exc: PermissionError) -> FastMTPError:
    """A file or folder the command needed but may not use (its mode bits, an ACL): a message naming it, exit 1."""
    name = exc.filename if exc.filename is not None else "A file or folder the command needs"
    return FastMTPError(f"{name} cannot be used: permission denied.",
                        "Check the permissions of that file and of the folders above it (`ls -l`), or run as a "
                        "user who may read it.", kind="permission-denied")


# ----------------------------------------------------------------------------- long jobs


class Cancellable(Protocol):
    def cancel(self) -> None: ...


C = TypeVar("C", bound=Cancellable)


def stop_on_signals(job: C) -> C:
    """Ctrl-C and SIGTERM (the window's cancel) stop ``job`` at its next check instead of killing it half-way."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: job.cancel())
    return job


def cancel_on_signals() -> CancelToken:
    """A backend job's cancel token, set by Ctrl-C and SIGTERM."""
    return stop_on_signals(CancelToken())


def log_stderr(line: str) -> None:
    """A job's log line for people, on stderr so stdout stays the result."""
    print(line, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- argument types


def cuda_archs(text: str) -> list[str]:
    archs = [part.strip() for part in text.split(",") if part.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise argparse.ArgumentTypeError("CUDA architectures are numbers like 89,90")
    return archs


# ``--depth``: a whole number in the one draft-depth range (app/engine/config.py)
depth_argument = engine_limits.whole_number("the draft depth", DRAFT_DEPTH_MIN, DRAFT_DEPTH_MAX)


# the counts the benchmarks take (``bench ...``, ``gpu-check``): whole numbers in a range that makes sense, refused in
# words by argparse (exit 2) before anything loads; a run count of 0 once ended in a numpy traceback
runs_argument = engine_limits.whole_number("the number of runs", 1, 10_000)
count_argument = engine_limits.whole_number("the count", 1, 10_000)  # turns, rounds, prompts, rows, reread intervals
tokens_argument = engine_limits.whole_number("the number of tokens", 1, defaults.CONTEXT_MAX)
optional_tokens_argument = engine_limits.whole_number("the number of tokens", 0, defaults.CONTEXT_MAX)  # 0: none
bench_context_argument = engine_limits.whole_number("the context", defaults.CONTEXT_MIN, defaults.CONTEXT_MAX)
megabytes_argument = engine_limits.whole_number("the size in MB", 1, 1_000_000)
busy_cores_argument = engine_limits.whole_number("the number of busy cores", 0, None)
adaptive_max_argument = engine_limits.whole_number("the deepest adaptive depth", 0, DRAFT_DEPTH_MAX)  # 0: no adaptive


def real_number(name: str, low: float, high: float, *, above_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``low..high`` (``above_low``: greater than ``low``), else words; NaN
    and infinities are refused (no comparison holds for NaN, so it would slip past a plain range check)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        fits = math.isfinite(value) and (value > low if above_low else value >= low) and value <= high
        if not fits:
            lowest = f"above {low:g}" if above_low else f"from {low:g}"
            raise argparse.ArgumentTypeError(f"{name} is a number {lowest} to {high:g}, not {text[:40]!r}")
        return value
    return parse


acceptance_argument = real_number("the draft agreement", 0.0, 1.0)
seconds_argument = real_number("the time in seconds", 0.0, 1e6, above_low=True)
time_limit_argument = real_number("the time limit in seconds", 0.0, 1e6)  # 0: the first variant only
bandwidth_argument = real_number("the memory bandwidth in GB/s", 0.0, 1e6, above_low=True)


def context_list_argument(text: str) -> list[int]:
    """``150,1000,3000``: tokens of context, each checked as :data:`tokens_argument` checks one."""
    values = [tokens_argument(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one context length, e.g. 150,1000,3000")
    return values


def context_argument(text: str) -> int:
    """``--ctx``: ``auto`` (or 0) for the largest context that fits, else a whole number of tokens."""
    if text.strip().lower() == "auto":
        return defaults.CONTEXT_AUTO
    try:
        tokens = int(text)
    except ValueError:
        tokens = -1
    if tokens < 0 or tokens > defaults.CONTEXT_MAX or 0 < tokens < defaults.CONTEXT_MIN:
        raise argparse.ArgumentTypeError(f"the context is auto or a number of tokens from {defaults.CONTEXT_MIN} to "
                                         f"{defaults.CONTEXT_MAX}, not {text!r}")
    return tokens


# ----------------------------------------------------------------------------- generate and chat


def add_engine_options(p: argparse.ArgumentParser, sampling: SamplingParams, max_tokens: int,
                       seed: int | None, temp_help: str, seed_help: str) -> None:
    """The model, drafting and sampling options of ``generate`` and ``chat``; the sampling defaults are the
    command's own (greedy for ``generate``, the chat's for ``chat``), all from app/engine/config.py."""
    p.add_argument("--model", type=Path, help="target GGUF (needed unless --remote)")
    p.add_argument("--remote", metavar="NAME", help="a remote server (`remote add`) instead of the local engine")
    p.add_argument("--rpc", metavar="HOST:PORT[,HOST:PORT]",
                   help="RPC workers (`rpc-worker`) that take the offloaded layers (--gpu-layers)")
    p.add_argument("--draft", type=Path, help="FastMTP sidecar GGUF (full or d2t)")
    p.add_argument("--mtp", choices=[*MODES, "auto"], default=MODES[0],
                   help="drafting mode; auto: the mode Auto drafting measured fastest for this model on this machine "
                        "(the window's default; `chat` takes turns until it knows; --draft names the d2t sidecar)")
    p.add_argument("--depth", "--n-max", dest="draft_depth", type=depth_argument, default=DEFAULT_DRAFT_DEPTH,
                   help=f"draft depth {DRAFT_DEPTH_MIN}..{DRAFT_DEPTH_MAX} (with --adaptive: the deepest it may go)")
    p.add_argument("--p-min", type=float, default=0.0, help="stop drafting below this draft confidence")
    p.add_argument("--adaptive", action="store_true",
                   help="choose the depth round by round from the measured acceptance and costs")
    p.add_argument("--ctx", type=context_argument, default=defaults.CONTEXT_AUTO, metavar="TOKENS|auto",
                   help="context size in tokens; auto (the default): the largest that fits the model on this machine "
                        "(`python -m app context` shows the arithmetic)")
    p.add_argument("--batch", type=engine_limits.batch_argument, default=512)
    p.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0)
    p.add_argument("--threads", type=engine_limits.threads_argument)
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                   help="flash attention; auto (the default): off on a CPU, where llama.cpp's plain kernel decodes "
                        "long chats faster, unless its scores would take more than 256 MiB; llama.cpp's choice on a "
                        "GPU")
    p.add_argument("--max-tokens", type=int, default=max_tokens,
                   help=f"reply cap in tokens; 0: until the model stops or the context is full (default {max_tokens})")
    p.add_argument("--overflow", choices=OVERFLOW_POLICIES, default=defaults.OVERFLOW_POLICY,
                   help="a conversation longer than the context: trim (keep the system prompt and the latest turns) "
                        "or stop")
    p.add_argument("--thinking-budget", type=int, default=0, metavar="TOKENS",
                   help="close the thinking after this many tokens so the model answers (0: no budget)")
    p.add_argument("--temp", type=float, default=sampling.temperature, help=temp_help)
    p.add_argument("--top-k", type=int, default=sampling.top_k)
    p.add_argument("--top-p", type=float, default=sampling.top_p)
    p.add_argument("--min-p", type=float, default=sampling.min_p)
    p.add_argument("--repeat-penalty", type=float, default=sampling.repeat_penalty)
    p.add_argument("--seed", type=int, default=seed, help=seed_help)
    p.add_argument("--stop", action="append", help="stop string (repeatable)")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--no-think", action="store_true", help="thinking off (Qwen enable_thinking=false)")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """What the local engine loads, from the engine options."""
    from app.backend.rpc import parse_endpoints
    from app.core.paths import depth_memory_dir
    from app.engine.config import EngineConfig

    if args.model is None:
        raise FastMTPError("No model was given.", "Pass --model TARGET.gguf, or --remote NAME for a remote server.",
                           kind="no-model")
    return EngineConfig(target=args.model, mode=args.mtp, draft=args.draft, draft_depth=args.draft_depth,
                        p_min=args.p_min, adaptive=args.adaptive, n_ctx=context_for(args), n_batch=args.batch,
                        n_gpu_layers=args.gpu_layers,
                        n_threads=args.threads, flash_attn={"on": True, "off": False}.get(args.flash_attn),
                        rpc=tuple(parse_endpoints(args.rpc)) if args.rpc else (),
                        depth_memory=depth_memory_dir() if args.adaptive else None)


def context_for(args: argparse.Namespace) -> int:
    """``--ctx`` resolved for ``--model`` (and ``--draft``, ``--gpu-layers``) on this machine: Auto's figure, or the
    user's own number, about which a note on stderr warns before the load when it does not fit."""
    from app.models.context_size import AUTO, check_context

    fit = check_context(args.ctx, args.model, args.draft, args.gpu_layers)
    if fit is None:  # the model cannot be read: the load says why
        return args.ctx if args.ctx > AUTO else defaults.CONTEXT_SIZE
    warning = fit.warning()
    if warning is not None:
        print(f"note: {warning}", file=sys.stderr, flush=True)
    return fit.tokens


def chat_options(args: argparse.Namespace) -> ChatOptions:
    """How to sample a reply, from the engine options (``--seed`` unset: SamplingParams' seed)."""
    from app.engine.config import ChatOptions

    _check_numbers(args)
    seed = SamplingParams().seed if args.seed is None else args.seed
    sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                              repeat_penalty=args.repeat_penalty, seed=seed)
    if args.max_tokens < 0 or args.thinking_budget < 0:
        raise FastMTPError("--max-tokens and --thinking-budget are numbers of tokens (0: none).",
                           "Give 0 or a positive number.", kind="bad-usage")
    return ChatOptions(max_tokens=args.max_tokens, sampling=sampling, stop=tuple(args.stop or ()),
                       thinking=not args.no_think, overflow=args.overflow, thinking_budget=args.thinking_budget)


def _check_numbers(args: argparse.Namespace) -> None:
    """The sampling numbers in range before they reach llama.cpp or a server's JSON (issue 37): NaN, infinities,
    negative or astronomically large values are refused in words, exit 2."""
    import math

    from app.settings.chat_settings import REPLY_TOKENS_MAX

    for flag, value in (("--temp", args.temp), ("--top-p", args.top_p), ("--min-p", args.min_p),
                        ("--repeat-penalty", args.repeat_penalty)):
        if not math.isfinite(value) or value < 0 or value > 1e6:
            raise FastMTPError(f"{flag} {value} is not a number the sampler can use.",
                               f"Give {flag} a finite number of 0 or more (e.g. --temp 0.7, --top-p 0.95).",
                               kind="bad-usage")
    p_min = getattr(args, "p_min", 0.0)
    if not (isinstance(p_min, float | int) and 0 <= p_min <= 1):  # also NaN: no comparison holds
        raise FastMTPError(f"--p-min {p_min} is not a draft confidence.", "Give --p-min a number from 0 to 1.",
                           kind="bad-usage")
    for flag, number, high in (("--max-tokens", args.max_tokens, REPLY_TOKENS_MAX),
                               ("--thinking-budget", args.thinking_budget, REPLY_TOKENS_MAX),
                               ("--top-k", args.top_k, 2**31 - 1), ("--seed", args.seed, 2**32 - 1)):
        if number is not None and not 0 <= number <= high:
            raise FastMTPError(f"{flag} {number} is outside 0..{high:,}.",
                               f"Give {flag} a number from 0 to {high:,}"
                               + (" (0: none)." if flag in ("--max-tokens", "--thinking-budget") else "."),
                               kind="bad-usage")


def reply_options(args: argparse.Namespace, options: ChatOptions) -> ChatOptions:
    """One chat reply's options, seeded as the window seeds it: ``--seed`` fixes the seed, else each reply at a
    temperature above 0 draws a fresh one (the chat settings' rule, reused)."""
    from dataclasses import replace

    from app.settings.chat_settings import ChatSettings

    settings = ChatSettings(temperature=options.sampling.temperature, seed=options.sampling.seed,
                            seed_mode="random" if args.seed is None else "fixed")
    return replace(options, sampling=replace(options.sampling, seed=settings.reply_seed()))


MESSAGES_MAX_BYTES = 64 << 20
"""The largest ``--messages`` file read: far more than any context holds."""


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a message's {what} is {type(value).__name__}, not text")
    return value


def prompt_messages(args: argparse.Namespace) -> list[Message]:
    """``generate``'s conversation: ``--messages FILE``, else ``--system`` and ``--prompt``."""
    from app.engine.chat_template import Message

    if args.messages:
        from app.core import settings_file

        try:  # the bounded reader: a regular file of at most MESSAGES_MAX_BYTES, no FIFO/device, no deep nesting
            data = settings_file.read_json(Path(args.messages), MESSAGES_MAX_BYTES)
            if data is None:
                raise FileNotFoundError(f"there is no file {args.messages}")
            if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
                raise ValueError("it is not a list of objects")
            return [Message(_text(m["role"], "role"), _text(m["content"], "content")) for m in data]
        except (settings_file.DamagedFile, OSError, ValueError, KeyError, TypeError) as exc:
            raise FastMTPError(f"{args.messages} is not a JSON list of {{role, content}} messages ({str(exc)[:300]}).",
                               'Write it like [{"role": "user", "content": "Hi"}].', kind="bad-messages-file") from exc
    messages = [Message("system", args.system)] if args.system else []
    return [*messages, Message("user", args.prompt)]


def stream_reply(client: Any, messages: list[Any], options: Any,
                 live_status: Callable[[dict[str, Any]], str] | None = None) -> dict[str, Any]:
    """One reply of a terminal chat, printed as it streams after ``assistant> `` (Ctrl-C cancels it, keeping
    what came); the last event (``done`` or ``error``). ``live_status``: a status line redrawn on a terminal."""
    sys.stdout.write("assistant> ")
    final: dict[str, Any] = {}
    try:
        for event in client.generate(messages, options):
            if event["kind"] == "token":
                sys.stdout.write(event["piece"])
                sys.stdout.flush()
                if live_status is not None and sys.stderr.isatty():
                    sys.stderr.write("\0337\r\033[2K" + live_status(event["stats"]) + "\0338")
            final = event
    except KeyboardInterrupt:
        client.cancel()
    print()
    return final
