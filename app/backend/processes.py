"""Child processes of builds and installs: stop a whole process group, tell whether a pid still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` and everything it started (it was started with ``start_new_session=True``)."""
    try:
        if sys.platform == "win32":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (ours counts); a stale folder named for it can go."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
