"""A message sent while the model loads: shown at once in the transcript, marked as waiting, and sent when the model
is ready. One message waits: a second one sent meanwhile joins it (a blank line between). If the chat is left or the
load fails, it goes back into the message box rather than being lost or sent into another chat."""

from __future__ import annotations

from app.gui.chat.chat_view import ChatEntry, ChatView

WAITING_NOTE = "waiting: sent as soon as the model has loaded"


class WaitingMessage:
    """The one waiting message of ``chat`` (``text`` None: none waits) and its place in the transcript."""

    def __init__(self, chat: ChatView) -> None:
        self.chat = chat
        self.text: str | None = None
        self._entry: ChatEntry | None = None

    def hold(self, text: str) -> None:
        """Hold ``text`` until the model is loaded: a new waiting message, or added to the one waiting."""
        if self.text is None or self._entry not in self.chat.entries:
            self.text = text
            self._entry = self.chat.add_user(text)
        else:
            assert self._entry is not None
            self.text += "\n\n" + text
            self._entry.pieces = [(self.text, "user")]
        self._entry.footer = WAITING_NOTE
        self.chat.redraw()

    def take(self) -> str | None:
        """The waiting message's text, its transcript entry removed (sending it shows it again, saved)."""
        text, entry = self.text, self._entry
        self.text = self._entry = None
        if text is not None and entry is not None:
            for index, shown in enumerate(self.chat.entries):
                if shown is entry:
                    self.chat.truncate(index)
                    break
        return text

    def back_to_box(self) -> bool:
        """The waiting message goes back into the message box, before what is typed there; False: none waited."""
        waiting = self.take()
        if waiting is None:
            return False
        typed = self.chat.input.toPlainText().strip()
        self.chat.input.setPlainText(waiting + ("\n\n" + typed if typed else ""))
        return True
