"""The strips above the chat: the loud banner for engine errors (with Restart or Retry when it helps), the drafting
warning, the quiet note while the built-in demo model is loaded, and the one that says the chat history was damaged."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QFrame, QPushButton, QWidget

from app.gguftools.builtin_demo import DEMO_NATURE
from app.gui.chat.alert_strip import alert_strip


class Banner(QFrame):
    """A loud strip above the chat for engine errors, in words, with a restart button when it helps."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, layout = alert_strip(self, "banner", "#fdecea", "#dc2626", "#7f1d1d")
        self.restart_button = QPushButton("Restart engine")
        layout.addWidget(self.restart_button)

    def show_error(self, event: dict[str, Any]) -> None:
        message = str(event.get("message") or event.get("error") or "The engine failed.")
        advice = str(event.get("advice") or "")
        # escaped as text: an error may quote a path or a server's reply with ``<`` or ``&`` in it
        shown = f"<b>{html.escape(message, quote=False)}</b>"
        self.text.setText(shown + (f"<br>{html.escape(advice, quote=False)}" if advice else ""))
        self.restart_button.setVisible(event.get("error") == "WorkerCrashed" or bool(event.get("retryable")))
        self.restart_button.setText("Retry" if event.get("retryable") else "Restart engine")
        self.show()


class DemoNote(QFrame):
    """A quiet strip above the chat while the built-in demo model is loaded: what the demo is (``DEMO_NATURE``)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, _layout = alert_strip(self, "demo_note", "#eef2ff", "#6366f1", "#312e81")
        self.text.setText(DEMO_NATURE)


class DraftingBanner(QFrame):
    """The loud warning that drafting is configured but not running, or running below break-even."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, _layout = alert_strip(self, "drafting", "#fff4d6", "#d97706", "#78350f")

    def show_warning(self, warning: str | None) -> None:
        if warning is None:
            self.hide()
            return
        self.text.setText(f"<b>⚠ {html.escape(warning, quote=False)}</b>")
        self.show()


def history_banner(damaged_copy: Path | None) -> Banner:
    """The banner that stays until closed (engine loads hide the engine's banner, not this one): shown when the chat
    history was damaged (``damaged_copy``: where the damaged file was copied), saying what was kept."""
    banner = Banner()
    banner.restart_button.setText("Close")
    banner.restart_button.clicked.connect(banner.hide)
    if damaged_copy is not None:
        banner.show_error({
            "message": f"The chat history was damaged and could not be read, so a new one was started. "
                       f"The damaged file was copied to {damaged_copy.name} in {damaged_copy.parent}; nothing was "
                       "deleted.",
            "advice": f"Tools such as `sqlite3 {damaged_copy.name} .recover` may save some of its chats."})
        banner.restart_button.show()
    return banner
