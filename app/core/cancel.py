"""Stopping a long job promptly: one token shared by the caller and the job (a build, an install, a child process)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class CancelToken:
    """Shared between the caller and a running build; ``cancel()`` stops the build promptly.

    The builder registers a kill function for its current child process, so cancelling
    does not wait for a long compile step to finish on its own.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._kill: Callable[[], None] | None = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            if self._kill is not None:
                self._kill()

    def set_kill(self, kill: Callable[[], None] | None) -> None:
        with self._lock:
            self._kill = kill
        if kill is not None and self.cancelled:
            kill()
