"""``python -m app <command>``: every job of the app, headless, with ``--json`` for scripts."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from app.cli import (
    backend,
    bench,
    depth_memory,
    engine,
    gguf,
    gpu,
    history,
    models,
    release,
    remote,
    state_cache,
    update,
)
from app.cli.common import command, permission_denied, report_error
from app.core.errors import FastMTPError


def build_parser() -> argparse.ArgumentParser:
    """Every command; each group module registers its own."""
    parser = argparse.ArgumentParser(prog="fastmtp-chat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    w = command(sub, "window", cmd_window, "open the desktop app (what the bare command does)")
    w.add_argument("--check", action="store_true",
                   help="open the window, print what it shows as JSON once it is up, and close (packaging checks)")
    for group in (backend, gpu, gguf, models, engine, depth_memory, state_cache, history, bench, release, update,
                  remote):
        group.add_commands(sub)
    return parser


def cmd_window(args: argparse.Namespace) -> int:
    from app.gui.main import run
    from app.gui.shell.startup import qt_start_problem

    problem = qt_start_problem()
    if problem is not None:
        raise FastMTPError(problem, "Install the libraries named above, or use the terminal: `quickstart`, `chat`.",
                           kind="qt-unavailable")
    return run(sys.argv[:1], check=args.check)


def _has_display() -> bool:
    """False on a Linux machine without X11/Wayland (a server, CI), unless Qt is told a platform."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _install_bundled_backend() -> None:
    """A packaged app's first start: its prebuilt CPU backend becomes the active one (no compiler needed)."""
    from app.backend import bundled

    try:
        bundled.ensure_installed(lambda line: print(line, file=sys.stderr, flush=True))
    except FastMTPError as exc:  # the app still works: the Backend page and `backend build` remain
        print(f"The bundled backend could not be installed: {exc.message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    _install_bundled_backend()
    if not (sys.argv[1:] if argv is None else argv):  # no command: open the desktop app
        if not _has_display():
            print("No display found: running the terminal quickstart instead of the window.", file=sys.stderr)
            return main(["quickstart"])
        try:
            from app.gui.main import run
            from app.gui.shell.startup import qt_start_problem
        except ImportError as exc:  # Qt's own libraries (libEGL, libGL, …) are missing
            problem: str | None = f"Qt cannot be loaded: {exc}"
        else:
            problem = qt_start_problem()
        if problem is not None:
            print(problem, file=sys.stderr)
            print("Running the terminal quickstart instead of the window.", file=sys.stderr)
            return main(["quickstart"])
        return run()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except FastMTPError as exc:
        return report_error(args, exc)
    except PermissionError as exc:  # a file the user named, or one of ours, that this user may not read or write
        return report_error(args, permission_denied(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
