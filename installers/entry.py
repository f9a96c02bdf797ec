"""The frozen app's entry point: ``fastmtp-chat [command ...]``, exactly like ``python -m app``.

The app starts child processes as ``sys.executable -m MODULE ...`` (the engine worker, the backend
self-test) and ``sys.executable -c CODE`` (the Qt start probe). In a frozen app ``sys.executable`` is
this program, so ``-m MODULE`` and ``-c CODE`` are handled here, like the Python interpreter does.
The bundled cmake and ninja go on PATH, and the bundled pinned sdist
is offered as the wheelhouse, so the first-run backend build needs only a C/C++ compiler.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path


def _prepare_frozen_environment(bundle: Path) -> None:
    tools = [bundle / "tools" / "cmake" / "bin", bundle / "tools" / "ninja"]
    found = [str(folder) for folder in tools if folder.is_dir()]
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])
    sdist = bundle / "sdist"
    if sdist.is_dir() and not os.environ.get("FASTMTP_WHEELHOUSE"):
        os.environ["FASTMTP_WHEELHOUSE"] = str(sdist)


def _no_missing_streams() -> None:
    """A windowed program (Windows' ``FastMTP Chat.exe``) has no standard streams: give it the null device,
    so a ``print`` or ``sys.stdin.isatty()`` anywhere in a command does not crash it."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115 (lives as long as the app)


def main() -> int:
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is not None:
        _no_missing_streams()
        _prepare_frozen_environment(Path(bundle))
        if len(sys.argv) > 2 and sys.argv[1] == "-m":
            module = sys.argv[2]
            sys.argv = [sys.argv[0], *sys.argv[3:]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            return 0
        if len(sys.argv) > 2 and sys.argv[1] == "-c":  # a probe child, e.g. the Qt start check
            code = sys.argv[2]
            sys.argv = ["-c", *sys.argv[3:]]
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
            return 0
    from app.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
