"""The build's state where a page shows it: progress, step, elapsed time, the estimate left, Cancel, and the log.

Every ``BuildStatus`` is bound to the window's one :class:`~app.gui.shell.build_job.BuildJob`, so the first-run
panel and the Backend page show the same build the same way. Hidden until a build has started; after it ends it
says how it ended and keeps the log.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.backend.build_estimate import duration_words
from app.gui.shell.build_job import BuildJob

TICK_MS = 1000  # the elapsed time is redrawn once a second while a build runs


class BuildStatus(QWidget):
    """One page's view of the window's build."""

    def __init__(self, job: BuildJob, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, 100)
        self.detail = QLabel()
        self.detail.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel build")
        self.cancel_button.clicked.connect(job.cancel)
        self.log_button = QPushButton("Show log")
        self.log_button.setCheckable(True)
        self.log_button.toggled.connect(self._show_log)
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log_view.setMaximumBlockCount(job.log.maxlen or 0)
        self.log_view.setMinimumHeight(120)
        self.log_view.hide()
        self._shown_lines = 0
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.log_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.bar)
        layout.addWidget(self.detail)
        layout.addLayout(buttons)
        layout.addWidget(self.log_view)
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.refresh)
        job.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        """Draw the job's state now (on every change, and each second while it runs)."""
        job = self.job
        self.setVisible(job.running or bool(job.outcome))
        flavor = job.flavor.upper()
        if job.running:
            self.title.setText(f"Building the {flavor} backend")
            left = job.remaining()
            words = [job.step_text[:1].upper() + job.step_text[1:], f"{duration_words(job.elapsed())} elapsed"]
            if left is not None:
                words.append(f"about {duration_words(left)} left")
            self.detail.setText(" · ".join(words))
            if not self.timer.isActive():
                self.timer.start()
        else:
            self.timer.stop()
            self.title.setText({"built": f"The {flavor} backend was built in {duration_words(job.elapsed())}.",
                                "cancelled": "The build was cancelled; nothing was installed.",
                                "failed": "The build failed; nothing was installed."}.get(job.outcome, ""))
            self.detail.setText(str(job.error) if job.outcome == "failed" and job.error is not None else "")
        self.bar.setValue(round(job.percent))
        self.bar.setVisible(job.running)
        self.cancel_button.setVisible(job.running)
        self.cancel_button.setEnabled(job.running and job.step_text != "cancelling")
        self._append_log()

    def _append_log(self) -> None:
        if self.job.log_count < self._shown_lines:  # a new build: its log starts afresh
            self.log_view.clear()
        for line in self.job.lines_since(self._shown_lines):
            self.log_view.appendPlainText(line)
        self._shown_lines = self.job.log_count

    def _show_log(self, shown: bool) -> None:
        self.log_view.setVisible(shown)
        self.log_button.setText("Hide log" if shown else "Show log")
