"""Callbacks that outlive their widget: a background op may finish after the page that started it is gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import shiboken6
from PySide6.QtWidgets import QWidget

T = TypeVar("T")


def while_alive(widget: QWidget, callback: Callable[[T], None]) -> Callable[[T], None]:
    """``callback``, skipped once Qt has deleted ``widget`` (its result has nowhere to be shown then)."""

    def call(value: T) -> None:
        if shiboken6.isValid(widget):
            callback(value)

    return call
