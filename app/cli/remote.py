"""CLI for more than one machine: ``remote add|list|remove|test`` (servers the chat can use), ``generate`` and
``chat`` with ``--remote NAME``, ``serve`` (this machine as a server) and ``rpc-worker`` (this machine's device
for another machine's model, over llama.cpp's RPC)."""

from __future__ import annotations

import argparse
import getpass
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from app.cli.common import (
    Subparsers,
    chat_options,
    command,
    depth_argument,
    emit,
    emit_line,
    group,
    prompt_messages,
    reply_options,
    stream,
    stream_reply,
)
from app.core import defaults, engine_limits, processes
from app.core.errors import FastMTPError
from app.engine.config import DEFAULT_DRAFT_DEPTH

# ----------------------------------------------------------------------------- remote servers


def _read_key(args: argparse.Namespace) -> str | None:
    """The API key from standard input (never from the command line, where other users of the machine see it)."""
    if not args.api_key_stdin:
        return None
    if sys.stdin.isatty():
        return getpass.getpass("API key: ")
    return sys.stdin.readline().strip()


def cmd_remote_add(args: argparse.Namespace) -> int:
    from app.machines.remote_servers import add_server

    server, warning = add_server(args.name, args.url, _read_key(args), model=args.model or "",
                                 verify_tls=not args.no_verify_tls)
    def text() -> None:
        key = "an API key in the keyring" if server.api_key() else "no API key"
        print(f"Added {server.name}: {server.url} ({key}"
              + (f", model {server.model}" if server.model else "") + ")")
        if warning:
            print(f"warning: {warning}", file=sys.stderr)

    emit(args, server.to_dict(), text)
    return 0


def cmd_remote_list(args: argparse.Namespace) -> int:
    from app.machines.remote_servers import load_servers

    servers = load_servers()
    emit(args, [s.to_dict() for s in servers], lambda: _print_servers(servers))
    return 0


def _print_servers(servers: list[Any]) -> None:
    if not servers:
        print("No remote servers. Add one with: python -m app remote add NAME URL [--api-key-stdin]")
    for server in servers:
        data = server.to_dict()
        flags = ["key" if data["has_key"] else "no key"]
        if not server.verify_tls:
            flags.append("TLS not verified")
        print(f"{server.name:20} {server.url}  " + (f"model {server.model}  " if server.model else "")
              + f"({', '.join(flags)})")
        if data["warning"]:
            print(f"{'':20} ! {data['warning']}")


def cmd_remote_remove(args: argparse.Namespace) -> int:
    from app.machines.remote_servers import RemoteError, remove_server

    if not remove_server(args.name):
        raise RemoteError(f"There is no remote server named {args.name!r}.", "`python -m app remote list` shows them.")
    emit(args, {"removed": args.name}, f"Removed {args.name} and its API key.")
    return 0


def cmd_remote_test(args: argparse.Namespace) -> int:
    """Connect, ask for a few tokens, report what the server is and what the HUD will be able to show."""
    from app.engine.chat_template import Message
    from app.engine.config import ChatOptions
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import get_server
    from app.settings.chat_settings import REPLY_TOKENS_MAX

    if not 0 <= args.max_tokens <= REPLY_TOKENS_MAX:
        raise FastMTPError(f"--max-tokens {args.max_tokens} is outside 0..{REPLY_TOKENS_MAX:,}.",
                           "Give a few tokens: the test only needs a short reply.", kind="bad-usage")
    with RemoteClient(get_server(args.name)) as client:
        loaded = client.load()
        if loaded["kind"] == "error":
            raise _error_of(loaded)
        final = list(client.generate([Message("user", args.prompt)], ChatOptions(max_tokens=args.max_tokens,
                                                                                  thinking=False)))[-1]
    if final["kind"] == "error":
        raise _error_of(final)
    stats = final["stats"]
    result = {**{k: loaded.get(k) for k in ("server", "server_kind", "model", "warning", "drafting")},
              "reply": final["text"], "stats": stats}
    def text() -> str:
        if loaded.get("warning"):
            print(f"warning: {loaded['warning']}", file=sys.stderr)
        return (f"{loaded['server']}: {loaded['server_kind']}, model {loaded['model']}\n"
                f"reply: {final['text'].strip()[:200]!r}\n{_status_of(stats)}")

    emit(args, result, text)
    return 0


def _error_of(event: dict[str, Any]) -> FastMTPError:
    from app.machines.remote_servers import RemoteError, RemoteNetworkError

    kind = RemoteNetworkError if event.get("error") in ("RemoteNetworkError", "RemoteConnectionLost") else RemoteError
    return kind(str(event.get("message", "The remote server failed.")), str(event.get("advice", "")))


def _status_of(stats: dict[str, Any]) -> str:
    """What a client can see: speed and first token from the stream, acceptance only from llama-server's timings."""
    from app.engine.stats import acceptance_words

    first = stats.get("time_to_first_token")
    acc = acceptance_words(stats)
    parts = [f"{stats.get('decode_tps') or 0:6.1f} tok/s",
             f"first token {first * 1000:.0f} ms" if isinstance(first, int | float) else "first token -",
             f"{acc.text} ({acc.counts})" if acc is not None
             else "acceptance - (the server reports no drafts)"]
    return " | ".join(parts)


def remote_generate(args: argparse.Namespace) -> int:
    """``generate --remote NAME``: one reply streamed from the server."""
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import get_server

    options, messages = chat_options(args), prompt_messages(args)  # refused in words before any connection
    with RemoteClient(get_server(args.remote)) as client:
        loaded = client.load()
        if loaded["kind"] == "error":
            raise _error_of(loaded)
        final: dict[str, Any] = {}
        for event in client.generate(messages, options):
            if event["kind"] == "token":
                stream(args, event["piece"])
            final = event
    if final.get("kind") == "error":
        emit(args, {**final, "kept_text": final.get("text", "")}, None)
        raise _error_of(final)
    emit(args, {"text": final["text"], "tokens": final["tokens"], "stop_reason": final["stop_reason"],
                "stats": final["stats"], "server": loaded["server"], "server_kind": loaded["server_kind"],
                "model": loaded["model"], "warning": loaded.get("warning")},
         lambda: print(f"\n[{final['stop_reason']}] {_status_of(final['stats'])}", file=sys.stderr))
    from app.engine.chat_template import take_notices

    for notice in take_notices():  # the server's chat template could not be used: ChatML, said once
        print(f"note: {notice}", file=sys.stderr)
    return 0


def remote_chat(args: argparse.Namespace) -> int:
    """``chat --remote NAME``: the terminal chat over a remote server; ``/retry`` asks again after a drop."""
    from app.engine.chat_template import Message
    from app.machines.remote_client import NO_TINT_REASON, RemoteClient
    from app.machines.remote_servers import get_server

    history: list[Message] = [Message("system", args.system)] if args.system else []
    options = chat_options(args)
    with RemoteClient(get_server(args.remote)) as client:
        loaded = client.load()
        if loaded["kind"] == "error":
            raise _error_of(loaded)
        print(f"FastMTP chat through {loaded['server']} ({loaded['server_kind']}, {loaded['model']}). "
              "Type /reset for a new chat, /retry to ask again, /quit or Ctrl-D to leave.", file=sys.stderr)
        if loaded.get("warning"):
            print(f"warning: {loaded['warning']}", file=sys.stderr)
        print(f"note: {NO_TINT_REASON}", file=sys.stderr)
        pending: list[Message] | None = None  # the turn to send again with /retry
        while True:
            try:
                line = input("you> ")
            except EOFError:
                break
            command = line.strip()
            if command in ("/quit", "/exit"):
                break
            if command == "/reset":
                history, pending = (history[:1] if args.system else []), None
                continue
            if command == "/retry":
                if pending is None:
                    print("Nothing to retry.", file=sys.stderr)
                    continue
                turn = pending
            else:
                turn = [*history, Message("user", line)]
            final = stream_reply(client, turn, reply_options(args, options))
            if final.get("kind") == "error":
                print(f"error: {final['message']}\nwhat to do: {final.get('advice', '')}", file=sys.stderr)
                if final.get("retryable"):
                    print("Type /retry to ask again.", file=sys.stderr)
                pending = turn
                continue
            pending = None
            history = [*turn, Message("assistant", final.get("text", ""))]
            if final.get("stats"):
                print(f"[{_status_of(final['stats'])}]", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- serve


def _default_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model to serve: ``--model`` (with ``--draft``), else the chat's model from the settings, else the
    built-in demo model, with its d2t sidecar unless ``--no-draft``."""
    from app.machines import serve
    from app.settings import app_settings

    if args.model is not None:
        return args.model, None if args.no_draft else args.draft
    return serve.chat_model_files(app_settings.load().chat_model, draft=not args.no_draft)


def cmd_serve(args: argparse.Namespace) -> int:
    from app.backend.rpc import parse_endpoints
    from app.machines import serve

    if args.stop:
        state, stale = serve.stop_detached_checked()
        emit(args, {"stopped": state is not None, "server": state, "stale": stale},
             f"Stopped the server at {state['url']}." if state else _not_running(stale))
        return 0
    if args.status:
        state, stale = serve.find_running()
        emit(args, {"running": state is not None, "server": state, "stale": stale},
             f"Serving at {state['url']} (pid {state['pid']})." if state else _not_running(stale))
        return 0
    running, stale = serve.find_running()
    if running is not None:
        raise serve.ServeError("A detached server is already running.", "Stop it first: `python -m app serve --stop`.")
    if stale:
        print(f"note: {stale}; nothing was signalled.", file=sys.stderr)
    warning = serve.check_host(args.host, allow_public=args.i_understand_no_tls)
    rpc = parse_endpoints(args.rpc) if args.rpc else []
    target, draft = _default_model(args)
    plan = serve.ServePlan(target=target, draft=draft, host=args.host, port=args.port, parallel=args.parallel,
                           ctx_size=args.ctx, n_gpu_layers=args.gpu_layers, draft_depth=args.draft_depth,
                           threads=args.threads, rpc=rpc)
    key, created = serve.ensure_key(new=args.new_key)
    binary = serve.server_binary(bool(rpc), _progress(args))
    server = serve.make_server(plan, binary, key)

    def announce() -> None:
        _announce(args, {"kind": "serving", "url": f"http://{_url_host(args.host)}:{server.port}",
                         "local_url": server.url, "model": str(target), "draft": str(draft) if draft else None,
                         "parallel": args.parallel, "rpc": rpc, "pid": server.proc.pid if server.proc else None,
                         "api_key": key if created else None, "api_key_created": created, "warning": warning,
                         "detached": args.detach, "log": str(server.log_path)})

    if args.detach:
        server.start(detach=True)
        serve.write_state(server, plan)
        announce()
        return 0
    code = _run_until_stopped(server.start, announce, lambda: server.proc, server.stop)
    if code is not None:
        raise FastMTPError(f"llama-server ended by itself (exit code {code}). Last lines:\n" + server.log_tail(),
                           "See the log named above.")
    emit_line(args, {"kind": "stopped"}, "Stopped.")
    return 0


def _not_running(stale: str | None) -> str:
    if stale is None:
        return "No detached server is running."
    return f"No detached server is running: {stale}. Nothing was signalled."


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _progress(args: argparse.Namespace) -> Any:
    def on_event(event: Any) -> None:
        if event.kind == "step":
            emit_line(args, None, f"==> {event.message}")

    return on_event


def _announce(args: argparse.Namespace, info: dict[str, Any]) -> None:
    emit(args, info, lambda: _print_announcement(info), compact=True)


def _print_announcement(info: dict[str, Any]) -> None:
    print(f"Serving {info['model']}" + (f" with the sidecar {info['draft']}" if info["draft"] else "")
          + f" at {info['url']} ({info['parallel']} slot{'s' if info['parallel'] != 1 else ''}).", flush=True)
    if info["api_key"]:
        print(f"API key (shown this once; it is kept in the keyring): {info['api_key']}", flush=True)
    else:
        print("API key: the one in the keyring, shown when it was made (`serve --new-key` makes another).")
    print(f"On the other machine: python -m app remote add NAME {info['url']} --api-key-stdin", flush=True)
    if info["warning"]:
        print(f"warning: {info['warning']}", file=sys.stderr)
    if info["detached"]:
        print("It keeps running after this command; stop it with: python -m app serve --stop")
    else:
        print("Ctrl-C stops it.", flush=True)


class _StopAsked(KeyboardInterrupt):
    """Ctrl-C or SIGTERM reached a command that runs a child server: unwind, stopping the child on the way."""


def _ask_to_stop(_signum: int, _frame: Any) -> None:
    raise _StopAsked


def _run_until_stopped(start: Callable[[], None], announce: Callable[[], None],
                       process: Callable[[], subprocess.Popen[bytes] | None], stop: Callable[[], None]) -> int | None:
    """Start a child server, announce it and wait for Ctrl-C, SIGTERM or its own end; stop it whatever happens.

    The signals are caught from before the start: one that comes while the child starts, or between its start and
    the wait, still stops it (SIGTERM's default ends this process at once and leaves the child running: found as a
    llama-server left behind by a ``serve`` stopped under load). The child's exit code when it ended by itself, else
    None.
    """
    signals = processes.STOP_SIGNALS
    previous = {sig: signal.signal(sig, _ask_to_stop) for sig in signals}
    code: int | None = None
    try:
        start()
        announce()
        child = process()
        code = child.wait() if child is not None else None
    except _StopAsked:
        code = None
    finally:
        for sig in signals:  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        try:
            stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return code


# ----------------------------------------------------------------------------- rpc-worker


def cmd_rpc_worker(args: argparse.Namespace) -> int:
    """Run llama.cpp's rpc-server: this machine's device for a model loaded on another machine."""
    from app.backend.rpc import RpcWorker, build_worker, check_bind_address, rpc_options

    warning = check_bind_address(args.host, allow_public=args.i_understand_no_auth)
    binary = build_worker(rpc_options(), _progress(args))
    worker = RpcWorker(binary, host=args.host, port=args.port, threads=args.threads, cache=args.cache)

    def announce() -> None:
        info = {"kind": "rpc-worker", "endpoint": worker.endpoint, "pid": worker.proc.pid if worker.proc else None,
                "warning": warning, "log": str(worker.log_path)}

        def text() -> None:
            print(f"RPC worker listening on {worker.endpoint}. On the machine with the model: "
                  f"--rpc {worker.endpoint} (or Settings → RPC workers). Ctrl-C stops it.", flush=True)
            if warning:
                print(f"warning: {warning}", file=sys.stderr, flush=True)

        emit(args, info, text, compact=True)

    code = _run_until_stopped(worker.start, announce, lambda: worker.proc, worker.stop)
    if code is not None:
        raise FastMTPError(f"The RPC worker ended by itself (exit code {code}). Last lines:\n" + worker.log_tail(),
                           "See the log named above.")
    return 0


# ----------------------------------------------------------------------------- parser


def add_commands(sub: Subparsers) -> None:
    """``remote add|list|remove|test``, ``serve`` and ``rpc-worker``."""
    rsub = group(sub, "remote", "remote servers the chat can use (llama-server, vLLM, OpenAI-compatible)")
    add = command(rsub, "add", cmd_remote_add, "add or replace a remote server (its API key goes to the keyring)")
    add.add_argument("name", help="a short name, such as gpu-box")
    add.add_argument("url", help="base URL, such as https://gpu-box.example:8080 or http://192.168.1.20:8080")
    add.add_argument("--api-key-stdin", action="store_true", help="read the API key from standard input")
    add.add_argument("--model", help="the model name to ask for (default: the server's first)")
    add.add_argument("--no-verify-tls", action="store_true",
                     help="do not check the HTTPS certificate (anyone on the way could read the chat and the key)")
    command(rsub, "list", cmd_remote_list, "list the remote servers")
    rm = command(rsub, "remove", cmd_remote_remove, "forget a remote server and its API key")
    rm.add_argument("name")
    test = command(rsub, "test", cmd_remote_test, "connect and ask for a short reply: what the server is, its speed")
    test.add_argument("name")
    test.add_argument("--prompt", default="Say hello in five words.")
    test.add_argument("--max-tokens", type=int, default=16)

    sv = command(sub, "serve", cmd_serve,
                 "serve this machine: our patched llama-server with the model and its FastMTP sidecar, with an API key")
    sv.add_argument("--model", type=_path, help="target GGUF (default: the chat's model, else the demo model)")
    sv.add_argument("--draft", type=_path, help="FastMTP sidecar GGUF (default: the model's d2t sidecar)")
    sv.add_argument("--no-draft", action="store_true", help="serve without drafting")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, default=defaults.SERVER_PORT)
    sv.add_argument("--parallel", type=int, default=1, help="slots: replies served at once")
    sv.add_argument("--ctx", type=int, default=defaults.CONTEXT_SIZE, help="context size per slot")
    sv.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=0)
    sv.add_argument("--depth", "--n-max", dest="draft_depth", type=depth_argument, default=DEFAULT_DRAFT_DEPTH,
                    help="draft depth")
    sv.add_argument("--threads", type=engine_limits.threads_argument)
    sv.add_argument("--rpc", metavar="HOST:PORT[,HOST:PORT]", help="RPC workers to spread the layers over")
    sv.add_argument("--new-key", action="store_true", help="make a new API key (the old one stops working)")
    sv.add_argument("--detach", action="store_true", help="keep running after this command ends")
    sv.add_argument("--stop", action="store_true", help="stop the detached server")
    sv.add_argument("--status", action="store_true", help="is a detached server running?")
    sv.add_argument("--i-understand-no-tls", action="store_true",
                    help="allow a public address or every interface (0.0.0.0): llama-server has no TLS")

    rw = command(sub, "rpc-worker", cmd_rpc_worker,
                 "offer this machine's device to another machine's model over llama.cpp's RPC (no authentication)")
    rw.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    rw.add_argument("--port", type=int, default=defaults.RPC_PORT)
    rw.add_argument("--threads", type=engine_limits.threads_argument, help="CPU threads when the device is the CPU")
    rw.add_argument("--cache", action="store_true", help="cache received tensors on disk (faster reloads)")
    rw.add_argument("--i-understand-no-auth", action="store_true",
                    help="allow a public address: anyone who reaches the port can use this machine's device")


def _path(text: str) -> Any:
    from pathlib import Path

    return Path(text)

