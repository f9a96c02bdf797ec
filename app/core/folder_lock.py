"""An exclusive lock per folder, so two processes (two app windows, a test run and a command) never write the
same folder at once: two builds never run CMake or ninja in one tree (the second waits, then reuses the first's
work), and two first uses of the built-in demo never write its files together.

The lock is an OS file lock on ``<folder>.lock``: the OS releases it when the holder dies, so a
killed build never leaves a stale lock behind.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def _try_lock(handle: IO[bytes], wait: bool) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            if wait:
                raise
            return False
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


@contextmanager
def locked(folder: Path, on_wait: Callable[[str], None] = lambda _line: None) -> Iterator[None]:
    """Hold the lock of ``folder`` (which need not exist yet) for the ``with`` block."""
    lock_path = folder.with_name(folder.name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+b") as handle:
        if not _try_lock(handle, wait=False):
            on_wait(f"another process is using {folder.name}; waiting for it to finish")
            _try_lock(handle, wait=True)
        yield
