"""Child processes of builds and installs: run one with its output streamed and cancellable, stop a whole
process group, tell whether a pid still runs, prove a process is one we started (:class:`OwnedProcess`)."""

from __future__ import annotations

import contextlib
import hmac
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
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


PID_T_LIMIT = 2**31
"""pid_t is a C int: no process has a larger id, and ``os.kill`` overflows on one."""


def parse_pid(text: str) -> int | None:
    """The pid a name ends with (``…-12345``) when it is ASCII digits of a pid_t, else None (``²``, 20 digits)."""
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    pid = int(text)
    return pid if 0 < pid < PID_T_LIMIT else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (ours counts); a stale folder or state file named for it can go.

    A zombie (a child of ours that ended and is not yet reaped) is not running. A number no process can have (0 and
    below would ask about process groups, past pid_t's range ``kill`` overflows) is not running either."""
    if type(pid) is not int or not 0 < pid < PID_T_LIMIT:
        return False
    if pid == os.getpid():
        return True
    if sys.platform == "win32":  # os.kill with any signal but Ctrl+C/Break calls TerminateProcess there
        return _windows_pid_alive(pid)
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


def _windows_pid_alive(pid: int) -> bool:
    """Windows: open the process for a query only and ask whether it has an exit code yet."""
    import ctypes

    query_limited_information, still_active = 0x1000, 259
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    handle = kernel32.OpenProcess(query_limited_information, False, pid)
    if not handle:
        last_error: int = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
        return last_error == 5  # ERROR_ACCESS_DENIED: it exists, and is not ours to query
    try:
        code = ctypes.c_ulong()
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then deliver them to the handlers they would have met.

    For the start of a child server: a handler that raises (``serve``'s stop, Python's KeyboardInterrupt) while
    ``subprocess.Popen`` waits for the child's exec leaves a running child whose handle was never returned, so
    nothing can stop it (found as a llama-server left behind by a ``serve`` stopped under load). Around
    ``self.proc = Popen(...)`` the handle is kept first and the stop comes after. Only the main thread has
    handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


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


# ----------------------------------------------------------------------------- proving a process is ours

MAX_ENVIRON = 4 << 20
"""The most of a process's environment read to find a token (Linux caps it near this; more is not ours)."""


def _environ_holds(raw: bytes, entry: bytes) -> bool:
    return any(hmac.compare_digest(item, entry) for item in raw.split(b"\0"))


def _linux_environ(pid: int) -> bytes | None:
    """``/proc/PID/environ``, at most :data:`MAX_ENVIRON` bytes; None when unreadable (gone, another user's)."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_ENVIRON:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def _ps_environ(pid: int) -> bytes | None:
    """Elsewhere (macOS, BSD): ``ps -E`` prints a process's arguments and environment (its owner's, or root's)."""
    try:
        done = subprocess.run(["ps", "-E", "-ww", "-o", "command=", "-p", str(pid)], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or len(done.stdout) > MAX_ENVIRON:
        return None
    return b"\0".join(done.stdout.split())


class OwnedProcess:
    """A process proven to hold ``NAME=token`` in its own environment: the secret it was started with, which a
    state file naming its pid cannot forge. On Linux it is held by a pidfd from the proof on, so a pid that is
    reused after the check is never signalled; elsewhere the pid is signalled right after the proof."""

    def __init__(self, pid: int, pidfd: int | None) -> None:
        self.pid = pid
        self._pidfd = pidfd

    @classmethod
    def prove(cls, pid: int, name: str, token: str) -> OwnedProcess | None:
        """The process ``pid`` when its environment holds ``name=token``; None when it does not, is gone, is a
        zombie or belongs to someone else, or the system cannot say (Windows): then nothing may signal it."""
        entry = f"{name}={token}".encode()
        if not token or sys.platform == "win32" or pid <= 1:
            return None
        if hasattr(os, "pidfd_open") and os.path.exists("/proc/self/environ"):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                return None
            raw = _linux_environ(pid)
            # still the same process after the read (the pidfd keeps its identity): then the read was of it
            if raw is not None and _environ_holds(raw, entry) and _pidfd_alive(pidfd) and pid_alive(pid):
                return cls(pid, pidfd)
            os.close(pidfd)
            return None
        raw = _ps_environ(pid)
        return cls(pid, None) if raw is not None and _environ_holds(raw, entry) else None

    def signal(self, signum: int) -> None:
        """Send ``signum``; a process that has ended meanwhile is not an error."""
        with contextlib.suppress(ProcessLookupError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:
                os.kill(self.pid, signum)

    def wait_gone(self, timeout: float) -> bool:
        """Whether the process ended within ``timeout`` seconds (it is not our child: it cannot be waited for)."""
        deadline = time.monotonic() + timeout
        if self._pidfd is not None:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)  # readable once the process has exited
            while time.monotonic() < deadline:
                if poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                    return True
            return False
        while time.monotonic() < deadline:
            if not pid_alive(self.pid):
                return True
            time.sleep(0.05)  # polling a process that is not ours to wait for; not test synchronisation
        return not pid_alive(self.pid)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def _pidfd_alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    return True
