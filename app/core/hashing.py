"""File hashing shared by the backend source pin, patches and (later) downloads."""

from __future__ import annotations

import hashlib
import queue
import threading
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class BackgroundSha256:
    """sha256 fed from one thread and computed on another, so hashing overlaps network reads.

    hashlib releases the GIL on large buffers, so on a multi-core machine the digest costs the
    download loop almost nothing. Buffers must not change after ``update`` (bytes, or views of bytes).
    """

    _DONE = object()

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=16)
        self._thread: threading.Thread | None = None
        self._result: str | None = None

    def update(self, data: bytes | memoryview) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
            self._thread.start()
        self._queue.put(data)

    def _run(self) -> None:
        while (item := self._queue.get()) is not self._DONE:
            self._digest.update(item)  # type: ignore[arg-type]

    def close(self) -> None:
        """Finish hashing what was fed; safe to call more than once."""
        if self._thread is not None:
            self._queue.put(self._DONE)
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        if self._result is None:
            self.close()
            self._result = self._digest.hexdigest()
        return self._result
