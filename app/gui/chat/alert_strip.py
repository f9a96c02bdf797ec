"""The one look of the coloured strips above the chat: the error and drafting banners, the demo note, the context
notes (``context_strip``)."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel


def alert_strip(frame: QFrame, name: str, background: str, border: str, ink: str) -> tuple[QLabel, QHBoxLayout]:
    """Style ``frame`` as a coloured strip above the chat and give it its wrapping text label (hidden at first)."""
    frame.setObjectName(name)
    frame.setStyleSheet(f"#{name} {{ background: {background}; border: 2px solid {border}; border-radius: 6px; }}"
                        f"#{name} QLabel {{ color: {ink}; }}")
    text = QLabel()
    text.setWordWrap(True)
    layout = QHBoxLayout(frame)
    layout.setContentsMargins(10, 6, 10, 6)
    layout.addWidget(text, 1)
    frame.hide()
    return text, layout
