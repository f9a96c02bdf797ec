"""The Settings page's Updates group: whether a newer FastMTP Chat is out, from the signed release feed
(:mod:`app.release.updates`), checked in the background on "Check now", or once a day at start when the user
allowed it (the box "Check for updates once a day", saved with the other settings). It only tells and links: the
app never downloads or replaces itself."""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import UTC, datetime

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app import __version__
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import bad_colour, error_text, good_colour
from app.release import updates
from app.release.updates import UpdateCheck, UpdateSource

NOTES_SHOWN = 800  # characters of the release notes shown on the page; the link has the rest


class UpdatesBox(QGroupBox):
    """``source`` is the feed the checks ask (default: the catalog's); ``clock`` gives the time of a check (tests
    pass a fixed one). ``ops`` runs the one check at a time."""

    def __init__(self, source: UpdateSource | None = None, clock: Callable[[], datetime] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__("Updates", parent)
        self.ops = OwnedOps(self)
        self.source = source
        self.clock = clock or (lambda: datetime.now(UTC))
        self.last_update: UpdateCheck | None = updates.last_check()
        self.check_updates = QCheckBox("Check for updates once a day")
        self.check_updates.setToolTip("At start, at most once in 24 hours, ask the signed release feed whether a "
                                      "newer FastMTP Chat is out. Off: the app never asks unless you press Check now.")
        self.check_now_button = QPushButton("Check now")
        self.check_now_button.clicked.connect(self.check_now)
        self.update_label = QLabel()
        self.update_label.setWordWrap(True)
        self.update_label.setTextFormat(Qt.TextFormat.RichText)
        self.update_label.setOpenExternalLinks(True)
        self.update_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.update_checked = QLabel()
        self.update_checked.setStyleSheet("color: #6b7280;")
        self.update_checked.setWordWrap(True)
        self.update_checked.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box = QVBoxLayout(self)
        row = QHBoxLayout()
        row.addWidget(self.check_updates)
        row.addStretch(1)
        row.addWidget(self.check_now_button)
        box.addLayout(row)
        box.addWidget(self.update_label)
        box.addWidget(self.update_checked)
        if self.last_update is not None:
            self.show_update(self.last_update)
        else:
            self.update_label.setText(f"FastMTP Chat {html.escape(__version__)}. Not checked for updates yet.")

    @property
    def checking(self) -> bool:
        return not self.ops.idle

    def check_now(self) -> None:
        """Ask the feed now, in the background."""
        self._start_check(automatic=False)

    def check_if_due(self, allowed: bool) -> bool:
        """The automatic check at start: only when the saved settings allow it (no network otherwise) and the
        last check is 24 h old; the rule is applied off the GUI thread. Returns whether a check was started."""
        if not allowed or self.checking:
            return False
        self._start_check(automatic=True)
        return True

    def _start_check(self, *, automatic: bool) -> None:
        now, source = self.clock(), self.source

        def work(_report: object) -> UpdateCheck | None:
            if automatic:
                return updates.check_if_due(True, __version__, now=now, source=source)
            return updates.check_for_update(__version__, source=source, now=now)

        self.check_now_button.setEnabled(False)
        if not automatic:
            self.update_label.setText("Checking for updates…")
        self.ops.start(work, self._checked, self._failed)

    def _checked(self, check: UpdateCheck | None) -> None:
        self.check_now_button.setEnabled(True)
        if check is not None:
            self.show_update(check)

    def _failed(self, exc: Exception) -> None:
        self.check_now_button.setEnabled(True)
        self._set_text(html.escape(error_text(exc)).replace("\n", "<br>"), bad=True)

    def show_update(self, check: UpdateCheck) -> None:
        """The result in words: up to date, a newer version with its notes and link, or why there is no answer."""
        self.last_update = check
        if check.status == "available":
            self.update_label.setText(_available_html(check, good_colour(self).name()))
        elif check.status == "up_to_date":
            self._set_text(html.escape(check.summary()), bad=False)
        else:
            text = html.escape(check.summary()) + (f"<br>{html.escape(check.advice)}" if check.advice else "")
            self._set_text(text, bad=True)
        when = check.checked_at.astimezone().strftime("%Y-%m-%d %H:%M")
        signed = f"; the answer was signed by {check.fingerprint}" if check.fingerprint else ""
        self.update_checked.setText(f"Last checked {when}{signed}.")

    def _set_text(self, text: str, *, bad: bool) -> None:
        colour = (bad_colour(self) if bad else good_colour(self)).name()
        self.update_label.setText(f'<span style="color: {colour};">{text}</span>')


def _available_html(check: UpdateCheck, colour: str) -> str:
    """A newer version: what it is (in ``colour``), the link, the notes; and that the user installs it, not the app."""
    head = (f'<span style="color: {colour};"><b>FastMTP Chat {html.escape(check.latest_version or "")} is available'
            f"</b> (you have {html.escape(check.current_version)}).</span>")
    if check.download_url and check.download is not None:
        size = f"{check.download.size / 1e6:.0f} MB" if check.download.size >= 1e6 else f"{check.download.size} bytes"
        link = (f'<a href="{html.escape(check.download_url, quote=True)}">Download '
                f"{html.escape(check.download.name)}</a> ({size}, sha256 {check.download.sha256[:16]}…)")
    elif check.download_url:
        link = (f'No download for this computer is listed; see <a href="{html.escape(check.download_url, quote=True)}">'
                "the release page</a>")
    else:
        link = "No download for this computer is listed"
    notes = check.notes.strip()
    if len(notes) > NOTES_SHOWN:
        notes = notes[:NOTES_SHOWN].rstrip() + "…"
    shown = f"<br>{html.escape(notes).replace(chr(10), '<br>')}" if notes else ""
    return f"{head}<br>{link}. Install it over this one; the app does not replace itself.{shown}"
