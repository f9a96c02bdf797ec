"""Background ops owned by a page (or a dialog, the engine bridge), and a page's shutdown with its window.

A page starts its slow work through :class:`OwnedOps` instead of calling ``run_in_background``
directly: the callbacks are skipped once Qt has deleted the page (a download or a build may end
after it), and ``idle`` tells a test, or a window about to close, whether any of it still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import shiboken6
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget

from app.gui.shell.ops import BackgroundOp, Report, run_in_background

T = TypeVar("T")


def while_alive(widget: QObject, callback: Callable[[T], None]) -> Callable[[T], None]:
    """``callback``, skipped once Qt has deleted ``widget`` (its result has nowhere to be shown then)."""

    def call(value: T) -> None:
        if shiboken6.isValid(widget):
            callback(value)

    return call


class ShutdownWithWindow(QObject):
    """Calls ``shutdown`` when the window that holds ``page`` is closing: a page sees no close event of its
    own, and its running build or download must be cancelled before the window goes."""

    def __init__(self, page: QWidget, shutdown: Callable[[], None]) -> None:
        super().__init__(page)
        self._page = page
        self._shutdown = shutdown
        self._window: QWidget | None = None
        page.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._page and event.type() == QEvent.Type.Show:
            window = self._page.window()
            if window is not self._page and window is not self._window:  # shown in a (new) window
                window.installEventFilter(self)
                self._window = window
        elif watched is self._window and event.type() == QEvent.Type.Close:
            self._shutdown()
        return False


class OwnedOps:
    """Start background ops on behalf of ``owner`` (a page, a dialog, the engine bridge); remember them until
    they finish."""

    def __init__(self, owner: QObject) -> None:
        self._owner = owner
        self._ops: list[BackgroundOp[Any]] = []

    def start(self, work: Callable[[Report], T], on_success: Callable[[T], None],
              on_failure: Callable[[Exception], None], on_progress: Callable[[Any], None] | None = None,
              ) -> BackgroundOp[T]:
        owner = self._owner
        op = run_in_background(work, while_alive(owner, on_success), while_alive(owner, on_failure),
                               while_alive(owner, on_progress) if on_progress is not None else None)
        self._ops = [o for o in self._ops if o.running] + [op]
        return op

    @property
    def idle(self) -> bool:
        return not any(op.running for op in self._ops)
