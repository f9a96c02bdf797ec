"""A message's versions in the transcript: a reply's ‹ › (regenerated replies) and an edited message's (each with
the branch that followed it), switched in the history and drawn where the reader is."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from app.chats.history import HistoryError, HistoryStore, StoredMessage
from app.gui.chat.chat_view import ChatView
from app.gui.chat.messages import entry_from_stored


def _arrow_ids(versions: list[StoredMessage]) -> tuple[int, ...]:
    """The versions' ids for a message's ‹ › arrows; empty when there is only the one (no arrows)."""
    return tuple(v.id for v in versions) if len(versions) > 1 else ()


class ReplyVersions:
    """``conversation`` gives the open chat's id; ``show_context`` shows the latest reply's stats after a redraw."""

    def __init__(self, history: HistoryStore, chat: ChatView, conversation: Callable[[], int | None],
                 show_context: Callable[[dict[str, Any] | None], None]) -> None:
        self.history = history
        self.chat = chat
        self.conversation = conversation
        self.show_context = show_context

    def step(self, index: int, step: int) -> None:
        """The ``index``-th message's older (-1) or newer (+1) version is shown, and the conversation goes on from
        it (the history's ``messages``, which the engine is sent, has the shown versions)."""
        if not 0 <= index < len(self.chat.entries):
            return
        entry = self.chat.entries[index]
        target = entry.version_step(step)
        if target is not None:
            with contextlib.suppress(HistoryError):  # deleted meanwhile (``python -m app history delete``)
                self.history.show_version(target)
                if entry.role == "user":  # an edited message: what follows is that version's branch
                    self.redraw_branch()
                else:
                    self.redraw_version(index, target)

    def redraw_branch(self) -> None:
        """The transcript from the history again, after an edited message switched to another of its versions
        (the messages after it are that version's)."""
        conversation = self.conversation()
        if conversation is None:
            return
        messages = self.history.messages(conversation)
        self.chat.show_conversation(messages, self.history.version_ids(conversation))
        last = messages[-1] if messages else None
        self.show_context(last.stats if last is not None and last.role == "assistant" and last.stats else None)

    def redraw_version(self, index: int, message_id: int) -> None:
        """The transcript's ``index``-th message becomes the saved version ``message_id``, drawn where the
        reader is."""
        versions = self.history.versions(message_id)
        shown = next((v for v in versions if v.id == message_id), None)
        if shown is None:
            return
        self.chat.replace_entry(index, entry_from_stored(shown, _arrow_ids(versions)))

    def ids(self, message_id: int) -> tuple[int, ...]:
        """The ids of ``message_id``'s versions, oldest first; empty when it has only the one (no arrows)."""
        return _arrow_ids(self.history.versions(message_id))
