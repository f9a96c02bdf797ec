"""The strip under a page's long job (a build, an install, a download): one line saying what it is doing, the
progress bar with its Cancel button, and the live log.

One job at a time shows in it; the page that owns the job says what to show (``begin``, ``say``) and wires
Cancel. Shared so every page's job reads the same way: words above, the bar and Cancel beside it, the log under.
"""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.gui.shell.labels import wrapping_label
from app.gui.shell.status_text import bad_colour

LOG_LINES = 5000  # the live log keeps this many lines; a job's own log file keeps them all


class JobStrip(QWidget):
    """``step_label`` (what the job is doing, or how it ended), ``progress`` with ``cancel_button`` beside it,
    and ``log`` (every line the job reports)."""

    def __init__(self, first_words: str = "", cancel: str = "Cancel", log_placeholder: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.step_label = wrapping_label(first_words)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.cancel_button = QPushButton(cancel)
        self.cancel_button.setEnabled(False)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setPlaceholderText(log_placeholder)
        self.log.setMinimumHeight(110)
        status = QHBoxLayout()
        status.addWidget(self.progress, 1)
        status.addWidget(self.cancel_button)
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.step_label)
        box.addLayout(status)
        box.addWidget(self.log, 1)

    def begin(self, message: str) -> None:
        """A new job: its first words, an empty log and the bar at 0."""
        self.log.clear()
        self.progress.setValue(0)
        self.say(message)

    def say(self, text: str, *, bad: bool = False) -> None:
        """What the job is doing or how it ended; ``bad`` (a failure or a refusal) in the theme's bad colour."""
        self.step_label.setText(text)
        self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};" if bad else "")
