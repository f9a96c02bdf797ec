"""The reply under way, saved to the history as it grows: every ``SAVE_EVERY_TOKENS`` tokens and every
``SAVE_INTERVAL_MS``, so a killed app keeps what it said; and marked "interrupted" when the window closes under it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

from app.chats.history import HistoryError, HistoryStore
from app.gui.chat.chat_view import ChatEntry
from app.gui.chat.messages import INTERRUPTED_STATS, STOP_WORDS

SAVE_EVERY_TOKENS = 32  # a streaming reply is saved to the history this often, and every SAVE_INTERVAL_MS
SAVE_INTERVAL_MS = 1000


class ReplySaving(QObject):
    """Where the reply under way is saved: its ``conversation``, its history row ``message`` and the version it
    hid (``replaces``, a regenerated reply's; shown again if the new one fails). ``streaming`` gives the
    transcript's streaming entry, whose text is what is saved."""

    def __init__(self, history: HistoryStore, streaming: Callable[[], ChatEntry | None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.streaming = streaming
        self.conversation: int | None = None
        self.message: int | None = None
        self.replaces: int | None = None
        self._unsaved = 0
        self._timer = QTimer(self)
        self._timer.setInterval(SAVE_INTERVAL_MS)
        self._timer.timeout.connect(self.save_partial)

    def begin(self, conversation: int, message: int, replaces: int | None) -> None:
        """A reply starts streaming into ``message``: from now on it is saved as it grows."""
        self.conversation, self.message, self.replaces = conversation, message, replaces
        self._unsaved = 0
        self._timer.start()

    def streamed(self, tokens: int) -> None:
        """``tokens`` more arrived: saved once enough are unsaved (the timer saves the rest)."""
        self._unsaved += tokens
        if self._unsaved >= SAVE_EVERY_TOKENS:
            self.save_partial()

    def save_partial(self) -> None:
        """Save the streaming reply as it is so far (a killed app keeps it)."""
        entry = self.streaming()
        if entry is None or self.message is None or self._unsaved == 0:
            return
        self._unsaved = 0
        self.history.update_message(self.message, entry.text, complete=False, drafts=entry.draft_ranges())

    def end(self) -> tuple[int | None, int | None, int | None]:
        """The reply ended: no more partial saves; (conversation, message, replaces) for its final save."""
        self._timer.stop()
        ended = self.conversation, self.message, self.replaces
        self.conversation = self.message = self.replaces = None
        return ended

    def interrupt(self) -> None:
        """The window closes while a reply streams: what it said so far is saved marked "interrupted" (its footer
        says so when the chat is opened again), before the engine stops (issue 36 item 9)."""
        entry = self.streaming()
        if entry is None or self.message is None or self.conversation is None:
            return
        _conversation, message, _replaces = self.end()
        assert message is not None
        with contextlib.suppress(HistoryError):
            self.history.update_message(message, entry.text, dict(INTERRUPTED_STATS), complete=False,
                                        drafts=entry.draft_ranges())
        entry.footer = STOP_WORDS["interrupted"]
