"""How a page says how something went: an error in words (what went wrong, then what to do), and the good and
bad colours that read well in the light and the dark theme."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QWidget

from app.core.errors import FastMTPError


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
