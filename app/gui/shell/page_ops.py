"""What the pages share: background ops owned by a widget, and errors in words.

A page starts its slow work through :class:`OwnedOps` instead of calling ``run_in_background``
directly: the callbacks are skipped once Qt has deleted the page (a download or a build may end
after it), and ``idle`` tells a test, or a window about to close, whether any of it still runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import shiboken6
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QMessageBox, QWidget

from app.core.errors import FastMTPError
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


def error_text(exc: Exception, advice_by_kind: Mapping[str, str] | None = None) -> str:
    """What went wrong and what to do, for a label; unexpected errors keep their type name.

    ``advice_by_kind`` is a page's own advice for the error kinds it knows (the core's advice may name a
    command): chosen by ``exc.kind`` (a child job's error carries the child's kind), never by the core's words.
    """
    if isinstance(exc, FastMTPError):
        advice = advice_by_kind.get(exc.kind, exc.advice) if advice_by_kind else exc.advice
        return exc.message + (f"\n{advice}" if advice else "")
    return f"{type(exc).__name__}: {exc}"


def status_colours(widget: QWidget) -> tuple[QColor, QColor]:
    """(good, bad) text colours that read well on ``widget``'s background, in the light or the dark theme."""
    dark = widget.palette().color(QPalette.ColorRole.Base).lightness() < 128
    return (QColor("#4ade80"), QColor("#f87171")) if dark else (QColor("#15803d"), QColor("#b91c1c"))


def good_colour(widget: QWidget) -> QColor:
    return status_colours(widget)[0]


def bad_colour(widget: QWidget) -> QColor:
    return status_colours(widget)[1]


def confirm_destructive(parent: QWidget, title: str, question: str, detail: str, action: str) -> bool:
    """Ask before something is deleted for good; Cancel is the default button (Enter or Esc keeps it)."""
    box = QMessageBox(QMessageBox.Icon.Question, title, question, parent=parent)
    box.setInformativeText(detail)
    confirm = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    box.exec()
    return box.clickedButton() is confirm
