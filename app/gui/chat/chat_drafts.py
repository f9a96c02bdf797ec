"""Each chat's typed but unsent text, kept while another chat is open and put back when it is opened again (issue 36
item 9). Not an edit of a sent message: that text is the message's own."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.gui.chat.chat_view import ChatView


class ChatDrafts:
    """The unsent texts of the chats shown in ``chat`` by conversation id (None: the new chat)."""

    def __init__(self, chat: ChatView) -> None:
        self.chat = chat
        self._kept: dict[int | None, str] = {}

    def stash(self, conversation_id: int | None) -> None:
        """The open chat is left: its text in the box is kept for it, and the box is emptied."""
        if self.chat.editing is not None:
            return
        text = self.chat.input.toPlainText()
        if text.strip():
            self._kept[conversation_id] = text
        else:
            self._kept.pop(conversation_id, None)
        self.chat.input.clear()

    def restore(self, conversation_id: int | None) -> None:
        """The opened chat's own unsent text back in the box (empty when it had none)."""
        text = self._kept.pop(conversation_id, "")
        self.chat.input.setPlainText(text)
        self.chat.input.moveCursor(QTextCursor.MoveOperation.End)

    def of(self, conversation_id: int | None) -> str:
        """A chat's kept unsent text (the open chat's is in the box)."""
        return self._kept.get(conversation_id, "")
