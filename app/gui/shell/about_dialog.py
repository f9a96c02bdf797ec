"""The Help menu's two dialogs: the keyboard shortcuts, and About (the versions of the app, its backend, llama.cpp,
CUDA and the driver, with a Copy button for bug reports).

The versions come from ``app.backend.about`` (the backend registry's manifest and ``nvidia-smi``); asking the driver can
take a moment, so it runs as a background op and the dialog fills in its rows when the answer is there.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.about import Versions, collect
from app.gui.shell.page_ops import OwnedOps

ABOUT_TEXT = ("A desktop chat for local LLMs with FastMTP drafting: a trimmed draft head (the d2t sidecar) "
              "drafts tokens ahead and the target model checks them, so replies come faster and stay exactly "
              "the same.")


def rows_html(rows: Sequence[tuple[str, str]]) -> str:
    """Two columns (what, value), the values escaped: they are text, whatever a manifest holds."""
    cells = "".join(f"<tr><td align='right' style='padding-right:14px'>{html.escape(what)}</td>"
                    f"<td>{html.escape(value)}</td></tr>" for what, value in rows)
    return f"<table cellspacing='3'>{cells}</table>"


class ShortcutsDialog(QDialog):
    """The keys, two columns (key, what it does); ``rows`` come from the window's own actions."""

    def __init__(self, rows: Sequence[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.rows = list(rows)
        layout = QVBoxLayout(self)
        grid = QGridLayout()
        grid.setHorizontalSpacing(18)
        grid.setVerticalSpacing(5)
        for row, (keys, what) in enumerate(self.rows):
            key = QLabel(f"<b>{html.escape(keys)}</b>", self)
            key.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            grid.addWidget(key, row, 0)
            grid.addWidget(QLabel(what, self), row, 1)
        grid.setColumnStretch(1, 1)
        layout.addLayout(grid)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)


class AboutDialog(QDialog):
    """The app's icon and name, what it is in a sentence, and the versions; "Copy" puts them on the clipboard."""

    def __init__(self, icon: QIcon, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ops = OwnedOps(self)
        self.setWindowTitle("About FastMTP Chat")
        self.setMinimumWidth(520)
        self.versions: Versions | None = None  # once the driver answered (``loaded``)
        logo = QLabel(self)
        logo.setPixmap(icon.pixmap(64, 64))
        logo.setAlignment(Qt.AlignmentFlag.AlignTop)
        title = QLabel("<h2 style='margin:0'>FastMTP Chat</h2>", self)
        blurb = QLabel(ABOUT_TEXT, self)
        blurb.setWordWrap(True)
        heading = QVBoxLayout()
        heading.addWidget(title)
        heading.addWidget(blurb)
        top = QHBoxLayout()
        top.addWidget(logo)
        top.addSpacing(8)
        top.addLayout(heading, 1)

        self.table = QLabel(self)  # the versions, filled again when the driver's answer comes
        self.table.setTextFormat(Qt.TextFormat.RichText)
        self.table.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.shown_rows: list[tuple[str, str]] = []

        self.copy_button = QPushButton("Copy versions")
        self.copy_button.setToolTip("Put these lines on the clipboard, e.g. for a bug report")
        self.copy_button.clicked.connect(self.copy)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table)
        layout.addStretch(1)
        layout.addWidget(buttons)
        self.refresh()

    def refresh(self) -> None:
        """Show what the manifest says now, and ask the driver (a background op; its row says "checking…")."""
        self._show(collect(ask_driver=False), checking=True)
        self.ops.start(lambda _report: collect(), self._loaded, lambda _exc: self._loaded(None))

    def rows(self, versions: Versions, checking: bool = False) -> list[tuple[str, str]]:
        """The versions' rows, Qt's added; ``checking``: the driver's row says it is being asked."""
        rows = [(what, "checking…" if checking and what == "NVIDIA driver" else value)
                for what, value in versions.rows()]
        return [*rows, ("Qt", f"{qVersion()} (PySide6 {pyside_version})")]

    def _show(self, versions: Versions, checking: bool = False) -> None:
        self.shown_rows = self.rows(versions, checking)
        self.table.setText(rows_html(self.shown_rows))

    def _loaded(self, versions: Versions | None) -> None:
        self.versions = versions or collect(ask_driver=False)
        self._show(self.versions)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText("\n".join(f"{what}: {value}" for what, value in self.shown_rows))
