"""First run without an engine backend: offer to build one, with progress, log line and cancel."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.backend.builder import BuildOptions, build_backend
from app.backend.events import BuildEvent, CancelToken
from app.backend.registry import BackendManifest
from app.errors import FastMTPError
from app.gui.ops import Report, run_in_background


class BuildBackendDialog(QDialog):
    """Accepted once a backend is built, self-tested and active; rejected when the user gives up."""

    def __init__(self, options: BuildOptions | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Build the engine backend")
        self.setMinimumWidth(520)
        self._options = options or BuildOptions()
        self._cancel: CancelToken | None = None
        self.manifest: BackendManifest | None = None

        self.message = QLabel("FastMTP Chat runs models on its own patched llama.cpp build, and none is "
                              "installed yet. Build it now? It takes a few minutes the first time.")
        self.message.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setVisible(False)
        self.log_line = QLabel()
        self.log_line.setStyleSheet("color: #6b7280; font-family: monospace;")
        self.log_line.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.build_button = QPushButton("Build")
        self.build_button.setDefault(True)
        self.build_button.clicked.connect(self.start_build)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._cancel_clicked)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.build_button)
        buttons.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.message)
        layout.addWidget(self.progress)
        layout.addWidget(self.log_line)
        layout.addLayout(buttons)

    def start_build(self) -> None:
        cancel = self._cancel = CancelToken()
        options = self._options
        self.build_button.setEnabled(False)
        self.progress.setVisible(True)
        self.progress.setValue(0)
        self.message.setText("Building the engine backend…")

        def work(report: Report) -> BackendManifest:
            return build_backend(options, report, cancel)

        run_in_background(work, self._built, self._failed, self._event)

    def _event(self, event: Any) -> None:
        if not isinstance(event, BuildEvent):
            return
        if event.percent is not None:
            self.progress.setValue(round(event.percent))
        if event.kind == "step":
            self.message.setText(event.message)
        elif event.kind == "log" and event.message.strip():
            self.log_line.setText(event.message.strip()[:90])

    def _built(self, manifest: BackendManifest) -> None:
        self._cancel = None
        self.manifest = manifest
        self.accept()

    def _failed(self, exc: Exception) -> None:
        cancelled = self._cancel is not None and self._cancel.cancelled
        self._cancel = None
        if cancelled:
            self.reject()
            return
        text = exc.message if isinstance(exc, FastMTPError) else str(exc)
        advice = exc.advice if isinstance(exc, FastMTPError) else ""
        self.message.setText(f"The build failed: {text}" + (f"\n{advice}" if advice else ""))
        self.build_button.setText("Try again")
        self.build_button.setEnabled(True)

    def _cancel_clicked(self) -> None:
        if self._cancel is not None:
            self.message.setText("Cancelling the build…")
            self.cancel_button.setEnabled(False)
            self._cancel.cancel()
        else:
            self.reject()
