"""The one way the GUI runs slow work: a background op on a worker thread, results on the main thread.

Like Anki's ``QueryOp``: ``work(report)`` runs on a pool thread and may call ``report(value)`` any number
of times; ``on_progress`` (each reported value), then ``on_success`` (the return value) or ``on_failure``
(the exception) run on the thread that created the op, which is the GUI thread. Nothing else in the GUI
starts threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

T = TypeVar("T")
Report = Callable[[Any], None]

_POOL = QThreadPool()
_POOL.setMaxThreadCount(8)  # a reply stream holds one thread for its whole length
_RUNNING: set[BackgroundOp[Any]] = set()  # keeps running ops (and their Python callbacks) alive


class _Relay(QObject):
    """Lives on the GUI thread; its signals, emitted from the worker, are delivered there (queued)."""

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, op: BackgroundOp[Any]) -> None:
        super().__init__()
        self._op = op
        # receivers are this object's own slots, so Qt queues each call onto this object's (GUI) thread
        self.progress.connect(self._progress)
        self.succeeded.connect(self._succeeded)
        self.failed.connect(self._failed)

    @Slot(object)
    def _progress(self, value: Any) -> None:
        self._op._progress(value)

    @Slot(object)
    def _succeeded(self, result: Any) -> None:
        self._op._succeeded(result)

    @Slot(object)
    def _failed(self, exc: Exception) -> None:
        self._op._failed(exc)


class _Job(QRunnable):
    def __init__(self, work: Callable[[Report], Any], relay: _Relay) -> None:
        super().__init__()
        self._work = work
        self._relay = relay

    def run(self) -> None:
        try:
            result = self._work(self._relay.progress.emit)
        except Exception as exc:  # delivered to on_failure on the GUI thread
            self._relay.failed.emit(exc)
        else:
            self._relay.succeeded.emit(result)


class BackgroundOp(Generic[T]):
    """Runs ``work`` off the GUI thread once ``start()`` is called.

    Args:
        work: the slow function; its argument is a ``report(value)`` callable for progress.
        on_success: called with the result on the GUI thread.
        on_failure: called with the exception on the GUI thread (default: re-raised there).
        on_progress: called with each reported value on the GUI thread, in order.
    """

    def __init__(self, work: Callable[[Report], T], on_success: Callable[[T], None],
                 on_failure: Callable[[Exception], None] | None = None,
                 on_progress: Callable[[Any], None] | None = None) -> None:
        self._work = work
        self._on_success = on_success
        self._on_failure = on_failure
        self._on_progress = on_progress
        self._relay = _Relay(self)
        self.running = False

    def start(self) -> BackgroundOp[T]:
        if self.running:
            raise RuntimeError("This operation is already running.")
        self.running = True
        _RUNNING.add(self)
        _POOL.start(_Job(self._work, self._relay))
        return self

    def _progress(self, value: Any) -> None:
        if self._on_progress is not None:
            self._on_progress(value)

    def _succeeded(self, result: T) -> None:
        self._finish()
        self._on_success(result)

    def _failed(self, exc: Exception) -> None:
        self._finish()
        if self._on_failure is None:
            raise exc
        self._on_failure(exc)

    def _finish(self) -> None:
        self.running = False
        _RUNNING.discard(self)


def run_in_background(work: Callable[[Report], T], on_success: Callable[[T], None],
                      on_failure: Callable[[Exception], None] | None = None,
                      on_progress: Callable[[Any], None] | None = None) -> BackgroundOp[T]:
    """Create and start a ``BackgroundOp``."""
    return BackgroundOp(work, on_success, on_failure, on_progress).start()


def wait_for_all(timeout_ms: int = 30_000) -> bool:
    """Block until every background op's worker has returned (used when the app quits)."""
    return _POOL.waitForDone(timeout_ms)
