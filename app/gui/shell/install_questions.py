"""The questions a signed install or download asks the user, and their dialogs: trust on first use (show the
publisher key's fingerprint and ask for an explicit yes: ``TrustQuestion``, ``TrustKeyDialog``), and "download this
many gigabytes there?" (``SizeQuestion``). The Models page's download and the Backend page's installs ask them from
their workers through ``shell/worker_questions.py``.

The core decides when to ask (``app.release.trust.decide``); this dialog is the GUI's answer to its
``Confirm`` question. The Trust button stays disabled until the user pastes the fingerprint the
publisher announced (checked here, character for character) or types ``yes`` after comparing it by
eye; closing the dialog or pressing Don't trust refuses the key, and nothing is installed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import TrustError
from app.core.units import format_bytes
from app.release.signing import normalize_fingerprint


class TrustKeyDialog(QDialog):
    """Accepted only on an explicit confirmation of ``fingerprint`` for ``repo``."""

    def __init__(self, repo: str, fingerprint: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Trust this publisher key?")
        self.setMinimumWidth(560)
        self.repo = repo
        self.fingerprint = fingerprint

        intro = QLabel(f"The release of <b>{repo}</b> is signed with a key this app has never seen. "
                       "Compare its fingerprint with the one the publisher announced (model card, website) "
                       "before you trust it: from now on, only this key is accepted for this repository.")
        intro.setWordWrap(True)
        self.fingerprint_label = QLabel(_grouped(fingerprint))
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPointSize(mono.pointSize() + 1)
        mono.setWeight(QFont.Weight.DemiBold)
        self.fingerprint_label.setFont(mono)
        self.fingerprint_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fingerprint_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.answer = QLineEdit()
        self.answer.setPlaceholderText("paste the announced fingerprint, or type yes")
        self.answer.textChanged.connect(self._check)
        self.hint = QLabel("Paste the fingerprint the publisher announced, or type <b>yes</b> once you compared "
                           "it by eye.")
        self.hint.setWordWrap(True)
        self.trust_button = QPushButton("Trust this key")
        self.trust_button.setEnabled(False)
        self.trust_button.clicked.connect(self.accept)
        self.refuse_button = QPushButton("Don't trust")
        self.refuse_button.setDefault(True)
        self.refuse_button.clicked.connect(self.reject)

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.refuse_button)
        buttons.addWidget(self.trust_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.fingerprint_label)
        layout.addWidget(self.hint)
        layout.addWidget(self.answer)
        layout.addLayout(buttons)

    def _check(self, text: str) -> None:
        """Enable Trust for ``yes`` or the same fingerprint; say so plainly when a pasted one differs."""
        text = text.strip()
        if text.lower() == "yes":
            self._verdict(True, "Trust it only if it matched the announcement.")
            return
        try:
            pasted = normalize_fingerprint(text) if text else None
        except TrustError:
            pasted = None
        if pasted is None:
            self._verdict(False, "Paste the fingerprint the publisher announced, or type <b>yes</b> once you "
                                 "compared it by eye.")
        elif pasted == self.fingerprint:
            self._verdict(True, "The fingerprint matches the one you pasted.")
        else:
            self._verdict(False, "<b>This is not the key the release is signed with.</b> Do not trust it; "
                                 "the download may come from an impostor.")

    def _verdict(self, ok: bool, hint: str) -> None:
        self.trust_button.setEnabled(ok)
        self.trust_button.setDefault(ok)
        self.refuse_button.setDefault(not ok)
        self.hint.setText(hint)


def _grouped(fingerprint: str) -> str:
    """Two lines of eight groups: easier to compare than one long line."""
    groups = fingerprint.split(":")
    return ":".join(groups[:8]) + "\n" + ":".join(groups[8:]) if len(groups) > 8 else fingerprint


@dataclass
class TrustQuestion:
    """The core's first-use question about a signing key, asked from a page's worker thread; it waits on
    ``answered``."""

    repo: str
    fingerprint: str
    answered: threading.Event = field(default_factory=threading.Event)
    trusted: bool = False


def ask_trust(question: TrustQuestion, parent: QWidget, on_closed: Callable[[], None]) -> TrustKeyDialog:
    """Open the trust dialog for ``question`` (window-modal, not blocking); closing it answers the worker.

    ``on_closed`` lets the page forget the dialog; Cancel or closing refuses the key.
    """
    dialog = TrustKeyDialog(question.repo, question.fingerprint, parent)

    def answered(result: int) -> None:
        question.trusted = result == TrustKeyDialog.DialogCode.Accepted.value
        question.answered.set()
        on_closed()
        dialog.deleteLater()

    dialog.finished.connect(answered)
    dialog.open()
    return dialog


@dataclass
class SizeQuestion:
    """The core's "download this much?" question (``fetch_release(confirm_size=...)``), asked from a page's worker
    thread once the signed manifest gave the real sizes; the worker waits on ``answered``."""

    quant: str
    needed: int  # bytes still to fetch
    dest: Path
    free: int  # free bytes on the destination's disk
    answered: threading.Event = field(default_factory=threading.Event)
    accepted: bool = False

    def text(self) -> str:
        return (f"Download {self.quant}: about {format_bytes(self.needed)} into {self.dest} "
                f"({format_bytes(self.free)} free there). Download now?")


def ask_size(question: SizeQuestion, parent: QWidget, box_opened: Callable[[QMessageBox | None], None]) -> bool:
    """Ask ``question`` in a message box (No is the default: Enter or Esc downloads nothing) and answer the worker.

    ``box_opened`` gets the box while it is open (so the page's Cancel can close it) and None after.
    """
    box = QMessageBox(QMessageBox.Icon.Question, "Download a big file?", question.text(),
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setDefaultButton(QMessageBox.StandardButton.No)
    box.setEscapeButton(QMessageBox.StandardButton.No)
    box_opened(box)
    try:
        question.accepted = box.exec() == QMessageBox.StandardButton.Yes
    finally:
        box_opened(None)
        question.answered.set()
        if shiboken6.isValid(box):  # its page may have been closed while it was open
            box.deleteLater()
    return question.accepted
