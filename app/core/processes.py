"""Child processes of builds and installs: run one with its output streamed and cancellable, stop a whole
process group, tell whether a pid still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.core import paths
from app.core.cancel import CancelToken

CREATE_NO_WINDOW = 0x08000000  # winbase.h; ``subprocess`` only defines the name on Windows
CONSOLE_PROGRAM = f"{paths.APP_NAME}.exe"  # the frozen Windows app's console program (installers/bundle.py)


def creationflags(platform: str = sys.platform) -> int:
    """Windows: start console programs (cmake, ninja, cl, the engine worker) without a console window.

    The windowed app has no console of its own, so every console child would open one and flash it.
    """
    return CREATE_NO_WINDOW if platform == "win32" else 0


def child_python(executable: str | None = None, platform: str | None = None, frozen: bool | None = None) -> str:
    """The program that runs the app's ``-m MODULE`` children (engine worker, self-test): this one, except in
    the frozen Windows app started from the Start menu, where it is the console program beside it.

    A windowed program has no standard streams of its own and shows a dialog for an uncaught exception; the
    console one writes its traceback to the child's log, and with CREATE_NO_WINDOW it shows no window either.
    """
    executable = sys.executable if executable is None else executable
    platform = sys.platform if platform is None else platform
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    if platform != "win32" or not frozen:
        return executable
    console = Path(executable).with_name(CONSOLE_PROGRAM)
    return str(console) if console.is_file() else executable


def run_streaming(cmd: list[str], on_line: Callable[[str], None], cancel: CancelToken, *, cwd: Path | None = None,
                  keep: int = 30, env: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """Run ``cmd`` in a process group of its own, handing each non-blank output line to ``on_line``;
    ``cancel`` kills the whole group. Returns the exit code and the last ``keep`` lines (for messages).
    ``env`` replaces the inherited environment (the MSVC one on Windows, ``Toolchain.child_env``).
    The caller checks ``cancel`` afterwards: a killed command's code says nothing."""
    tail: deque[str] = deque(maxlen=keep)
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True, env=env, creationflags=creationflags())
    cancel.set_kill(lambda: kill_group(proc))
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                tail.append(line)
                on_line(line)
        code = proc.wait()
    finally:
        cancel.set_kill(None)
        if proc.poll() is None:
            kill_group(proc)
            proc.wait()
    return code, list(tail)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and everything it started (it was started with ``start_new_session=True``)."""
    try:
        if sys.platform == "win32":
            # no process groups to signal: taskkill ends the tree (ninja's cl.exe jobs), kill() at least cmake
            subprocess.run(kill_tree_command(proc.pid), capture_output=True, check=False,
                           creationflags=creationflags(), timeout=30)
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except (OSError, subprocess.TimeoutExpired):  # gone already, or not ours
        pass


def kill_tree_command(pid: int) -> list[str]:
    """Windows: the command that kills a process and all its descendants."""
    return ["taskkill", "/F", "/T", "/PID", str(pid)]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (ours counts); a stale folder or state file named for it can go.

    A zombie (a child of ours that ended and is not yet reaped) is not running."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:  # no /proc (macOS, Windows): kill(0) is the answer
        return True


def stop_process(proc: subprocess.Popen[Any] | None, grace_s: float = 10.0) -> None:
    """Ask a child server to end (SIGTERM), and kill it when it has not after ``grace_s``; then reap it."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def file_tail(path: Path, lines: int) -> str:
    """The last ``lines`` non-empty lines of a child's log file ("" when there is none yet), for error messages."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])
