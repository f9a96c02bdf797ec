"""One reply from its request to its final save: the conversation sent to the engine, the tokens streaming into the
transcript (and saved as they grow), the done or error event, and the reply's row in the history with its stats.

Continue is exact while this window holds the reply's token ids (``tokens``): the engine goes on from them; after a
restart of the window only the text is left, and the reply goes on from its text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import QObject

from app.chats.history import HistoryError, HistoryStore
from app.engine.breakeven import drafting_warning
from app.engine.chat_template import Message, take_notices
from app.engine.config import ChatOptions
from app.gui.chat.chat_column import ChatColumn
from app.gui.chat.chat_view import ChatEntry
from app.gui.chat.reply_saving import ReplySaving
from app.gui.chat.reply_versions import ReplyVersions
from app.gui.shell.engine_bridge import EngineBridge
from app.settings.chat_settings import ChatSettings


@dataclass(frozen=True)
class ReplyHooks:
    """What a reply tells the page around it: its status and notices, its mode in words, the context after it,
    the conversation list to refresh."""

    status: Callable[[str], None]
    notice: Callable[[str], None]
    mode_text: Callable[[], str]
    show_context: Callable[[dict[str, Any] | None], None]
    refresh: Callable[[], None]


class ReplyStream(QObject):
    """The reply under way for the Chat page, which it tells what happened through ``hooks``."""

    def __init__(self, history: HistoryStore, bridge: EngineBridge, column: ChatColumn, versions: ReplyVersions,
                 hooks: ReplyHooks, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.bridge = bridge
        self.column = column
        self.chat = column.chat
        self.versions = versions
        self.hooks = hooks
        self.saving = ReplySaving(history, self.chat.streaming_entry, self)  # saved to the history as it grows
        # the tokens of the reply under way (or the latest one), by its history id: what Continue extends exactly
        self.tokens: tuple[int | None, list[int]] = (None, [])
        self.seed: int | None = None  # the seed of the reply under way (kept with its stats)
        self._continued = ""  # a continued reply's text before this part (its done event's text is the new part)

    def start(self, conversation: int, settings: ChatSettings, options: ChatOptions, reply: int | None = None,
              replaces: int | None = None, continued: ChatEntry | None = None) -> None:
        """Stream a reply to the saved conversation; the reply is saved as it grows, into ``reply`` when that
        row exists (a regenerated reply's new version, hiding ``replaces``; a continued reply, ``continued``, whose
        text it goes on from). A blank system prompt (the "None" preset) sends none."""
        message = reply if reply is not None else \
            self.history.add_message(conversation, "assistant", "", complete=False)
        system = settings.system_prompt
        messages = ([Message("system", system)] if system.strip() else []) + \
            [Message(m.role, m.content) for m in self.history.messages(conversation)
             if m.role != "system" and m.id != message]  # the conversation up to the new reply
        self._continued = ""
        if continued is not None:  # the same reply goes on: exactly, from its tokens while this window has them
            held_for, tokens = self.tokens
            self._continued = continued.text
            options = (replace(options, continue_tokens=tuple(tokens)) if held_for == reply and tokens
                       else replace(options, continue_text=continued.text))
        else:
            self.tokens = (message, [])
        entry = self.chat.begin_reply(message)
        if reply is not None:
            entry.version_ids = tuple(v.id for v in self.history.versions(reply))
        if continued is not None:  # its text so far, drawn again as it was streamed (its tint kept)
            entry.version_ids = continued.version_ids
            self.chat.append_tokens({"piece": piece, "provenance": provenance}
                                    for piece, provenance in continued.pieces)
        for strip in (self.column.cut_notice, self.column.limit_banner, self.column.drafting_banner):
            strip.hide()
        self.hooks.status("Generating…")
        self.saving.begin(conversation, message, replaces)
        if continued is None or not options.continue_tokens or self.seed is None:
            self.seed = settings.reply_seed()  # a fresh one per reply in the random mode; a continued reply's goes on
        options = replace(options, sampling=replace(options.sampling, seed=self.seed))
        self.bridge.generate(messages, options, str(conversation))

    def on_tokens(self, events: list[dict[str, Any]]) -> None:
        """The token events that arrived since the last batch: queued for the transcript's next frame; the
        drafting banner judges the newest stats once."""
        self.chat.append_tokens(events)
        # the token ids (a remote server's events carry none): what Continue extends exactly
        self.tokens[1].extend(e["token"] for e in events if isinstance(e.get("token"), int))
        self.column.reading_bar.hide()
        stats = (events[-1].get("stats") or {}) if events else {}
        if stats:
            self.column.meter.show_streaming(stats)  # at a bounded rate (the reply's end shows its last)
        banner = self.column.drafting_banner
        warning = drafting_warning(self.bridge.config, stats)
        if warning is not None or banner.isVisible():
            banner.show_warning(warning)
        self.saving.streamed(len(events))

    def on_done(self, event: dict[str, Any]) -> None:
        """The reply finished (or was stopped): its footer, its final save with its stats and why it ended."""
        # the reply's stats carry the seed it was sampled with (what reproduces it, as the fixed seed) and the
        # drafting mode that produced it (its footer names it, also when the chat is reopened)
        self.column.reading_bar.hide()
        if self._continued:  # a continued reply: its text is the earlier part and this one
            event = {**event, "text": self._continued + str(event.get("text", ""))}
            self._continued = ""
        stats = event.get("stats") or {}
        sampling = f" · {stats['sampling']}" if stats.get("sampling") else ""  # what its speed was measured at
        event["stats"] = {**stats, "seed": self.seed, "mode": self.hooks.mode_text() + sampling}
        entry = self.chat.finish_reply(event)
        if entry is not None:  # a finished or stopped reply, with its stats and why it ended
            stats = {**event["stats"], "stop_reason": event.get("stop_reason")}
            self.column.drafting_banner.show_warning(drafting_warning(self.bridge.config, stats))
            self.save(entry.text, stats, entry.draft_ranges())
            self.hooks.show_context(stats)
        self.hooks.status("Ready")
        # said once each, after the lasting "Ready": the model's chat template set aside for ChatML (the engine's,
        # or a remote server's rendered here), a chat state that could not be kept
        for text in [*(event.get("state_notices") or []), *take_notices()]:
            self.hooks.notice(str(text))

    def on_error(self, event: dict[str, Any]) -> None:
        """An engine error ended the reply: what it said before the error is kept, marked incomplete."""
        self.column.reading_bar.hide()
        self._continued = ""
        entry = self.chat.finish_reply(event)
        if entry is not None:
            self.save(entry.text, None, entry.draft_ranges())

    def save(self, text: str, stats: dict[str, Any] | None, drafts: list[tuple[int, int]] | None = None) -> None:
        """The reply's final text (with its accepted-draft ranges): with its stats when it finished, marked
        incomplete after an error; an empty reply an error ended is deleted (a regenerated one's hidden version is
        shown again)."""
        conversation, message, replaced = self.saving.end()
        if conversation is None or message is None:
            return
        try:
            if stats is None and not text.strip():
                self.history.delete_messages_from(conversation, message)
                if replaced is not None and self.chat.entries:  # a failed new version: the one it hid is back
                    self.history.show_version(replaced)
                    self.versions.redraw_version(len(self.chat.entries) - 1, replaced)
            else:
                self.history.update_message(message, text, stats, complete=stats is not None, drafts=drafts)
        except HistoryError:  # its conversation was deleted meanwhile (``python -m app history``)
            return
        self.hooks.refresh()

