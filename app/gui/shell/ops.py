"""The one way the GUI runs slow work: a background op on a worker thread, results on the main thread.

Like Anki's ``QueryOp``: ``work(report)`` runs on a pool thread and may call ``report(value)`` any number
of times; ``on_progress`` (each reported value), then ``on_success`` (the return value) or ``on_failure``
(the exception) run on the thread that created the op, which is the GUI thread. Nothing else in the GUI
starts threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal, Slot

T = TypeVar("T")
Report = Callable[[Any], None]

_POOL = QThreadPool()
_POOL.setMaxThreadCount(8)  # a reply stream holds one thread for its whole length
_RUNNING: set[BackgroundOp[Any]] = set()  # keeps running ops (and their Python callbacks) alive


class _Relay(QObject):
    """The one object that carries every op's results to the GUI thread; it lives as long as the app.

    Its signals, emitted from workers, are queued onto the thread it was created on (the GUI thread). There is
    one for all ops, never deleted, so no op's end can free a Qt object while a worker or a queued call still
    points at it: a per-op relay once did, freed by Python's cycle collector on a worker thread, and crashed.
    """

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        # receivers are this object's own slots, so Qt queues each call onto this object's (GUI) thread
        self.progress.connect(self._progress)
        self.succeeded.connect(self._succeeded)
        self.failed.connect(self._failed)

    @Slot(object)
    def _progress(self, op_and_value: tuple[BackgroundOp[Any], Any]) -> None:
        op, value = op_and_value
        op._progress(value)

    @Slot(object)
    def _succeeded(self, op_and_result: tuple[BackgroundOp[Any], Any]) -> None:
        op, result = op_and_result
        op._succeeded(result)

    @Slot(object)
    def _failed(self, op_and_exc: tuple[BackgroundOp[Any], Exception]) -> None:
        op, exc = op_and_exc
        op._failed(exc)


_relay: _Relay | None = None


def _gui_relay() -> _Relay:
    """The shared relay, made on first use; ``start()`` runs on the GUI thread, so that is where it lives."""
    global _relay
    if _relay is None:
        _relay = _Relay()
        app = QCoreApplication.instance()
        if app is not None:
            _relay.moveToThread(app.thread())
    return _relay


class _Job(QRunnable):
    def __init__(self, op: BackgroundOp[Any], relay: _Relay) -> None:
        super().__init__()
        self._op = op
        self._relay = relay

    def run(self) -> None:
        op, relay = self._op, self._relay
        try:
            result = op._work(lambda value: _emit(relay.progress, (op, value)))
        except Exception as exc:  # delivered to on_failure on the GUI thread
            _emit(relay.failed, (op, exc))
        else:
            _emit(relay.succeeded, (op, result))


def _emit(signal: Any, payload: object) -> None:
    """Emit from a worker; once the app is gone (its objects deleted at exit while a job still ran), there is no
    one to tell: the result is dropped, not printed as "Signal source has been deleted" (issue 37)."""
    with contextlib.suppress(RuntimeError):
        signal.emit(payload)


def _alive(callback: Callable[..., Any] | None) -> bool:
    """Whether ``callback``'s widget (a bound method's QObject) still exists: a window closed while its job ran
    has nothing to update."""
    owner = getattr(callback, "__self__", None)
    return not isinstance(owner, QObject) or shiboken6.isValid(owner)


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
        self.running = False

    def start(self) -> BackgroundOp[T]:
        if self.running:
            raise RuntimeError("This operation is already running.")
        self.running = True
        _RUNNING.add(self)
        _POOL.start(_Job(self, _gui_relay()))
        return self

    def _progress(self, value: Any) -> None:
        if self._on_progress is not None and _alive(self._on_progress):
            self._on_progress(value)

    def _succeeded(self, result: T) -> None:
        self._finish()
        if _alive(self._on_success):
            self._on_success(result)

    def _failed(self, exc: Exception) -> None:
        self._finish()
        if self._on_failure is None:
            raise exc
        if _alive(self._on_failure):
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
