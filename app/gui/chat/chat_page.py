"""The Chat page: the conversation list, the transcript and its composer, send / stop / regenerate / edit,
the reply streaming into the ``ChatView`` and saved to the history as it grows, the per-chat settings, the
engine's banners and the HUD's view of the engine.

The page composes the conversation list (``sidebar.py``) and the column beside it (``chat_column.py``: the top bar,
the strips, the transcript) and runs the chat; the reply from its request to its save (``reply_stream.py``), a
message's versions (``reply_versions.py``), export and import (``chat_transfer.py``), a message waiting for the load
(``waiting_message.py``) and each chat's unsent text (``chat_drafts.py``) are their own.

The model selector (``ModelSelector``) sits in its top bar, but is its own widget; the window decides what to
load and tells this page (``load`` / ``load_remote``). The page reports its status line through
``status_changed`` and asks the window to remember its state through ``state_changed``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QSplitter,
    QWidget,
)

from app.chats.history import Conversation, HistoryError, HistoryStore
from app.engine.breakeven import describe_mode
from app.engine.config import EngineConfig
from app.gui.chat.carry_exchange import carry_last_exchange
from app.gui.chat.chat_column import ChatColumn
from app.gui.chat.chat_drafts import ChatDrafts
from app.gui.chat.chat_settings_dialog import ChatSettingsDialog
from app.gui.chat.chat_transfer import ChatTransfer
from app.gui.chat.chat_view import ChatEntry
from app.gui.chat.reply_stream import ReplyHooks, ReplyStream
from app.gui.chat.reply_versions import ReplyVersions
from app.gui.chat.sidebar import Sidebar
from app.gui.chat.waiting_message import WaitingMessage
from app.gui.shell.engine_bridge import EngineBridge
from app.gui.shell.palette import Palette
from app.machines.remote_servers import RemoteServer
from app.settings.chat_settings import ChatSettings

TITLE_CHARS = 40  # a new conversation's title: the start of its first message
WAITING_STATUS = "Loading the model… your message waits and is sent when it is ready (more text joins it)"
BUSY_STATUS = "Busy: stop the reply first"


def conversation_title(text: str) -> str:
    """The first ``TITLE_CHARS`` characters of a message, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


class ChatPage(QWidget):
    """The chat with the loaded model: conversations are saved in ``history`` as they happen.

    ``selector`` (the model selector) is placed first in the top bar. ``status_changed(text)`` carries the
    window's status line (a state: "Ready"), ``notice(text)`` an event the status bar shows for a while ("Chat
    deleted"); ``state_changed`` fires when something the window remembers changed (the open chat,
    the splitter, the HUD's place).
    """

    status_changed = Signal(str)
    notice = Signal(str)
    state_changed = Signal()

    def __init__(self, bridge: EngineBridge, history: HistoryStore, selector: QWidget,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bridge = bridge
        self.history = history
        self.conversation_id: int | None = None  # None: a new chat, saved on its first message
        self.ready = False
        self._loading = False  # a model load (or the demo model being written first) is under way
        # Auto drafting's hook (the window's): the configuration to load before the next message is sent, or None
        self.switch_before_send: Callable[[], EngineConfig | None] | None = None
        self.chat_settings = ChatSettings()  # the declared chat defaults (max tokens: CHAT_MAX_TOKENS)
        self.default_overflow = self.chat_settings.overflow  # new chats' overflow policy (the Settings page's)
        self.options = self.chat_settings.options()

        self.column = ChatColumn(selector, self.history.damaged_copy)  # the top bar, the strips, the transcript
        column = self.column
        self.chat, self.meter, self.thinking_box = column.chat, column.meter, column.thinking_box
        self.chat_settings_button, self.history_banner = column.chat_settings_button, column.history_banner
        self.banner, self.drafting_banner, self.demo_note = column.banner, column.drafting_banner, column.demo_note
        self.load_bar, self.reading_bar = column.load_bar, column.reading_bar
        self.cut_notice, self.trim_note, self.limit_banner = column.cut_notice, column.trim_note, column.limit_banner
        self.thinking_box.setChecked(self.chat_settings.thinking)
        self.thinking_box.toggled.connect(self.set_thinking)
        self.chat_settings_button.clicked.connect(self.edit_chat_settings)
        self.banner.restart_button.clicked.connect(self._restart)
        self.cut_notice.continue_button.clicked.connect(self.continue_reply)
        self.limit_banner.new_chat_button.clicked.connect(self.new_chat_with_last_exchange)
        self.chat.send_requested.connect(self.send)
        self.chat.stop_requested.connect(self.bridge.cancel)
        self.chat.regenerate_requested.connect(self.regenerate)
        self.chat.edit_submitted.connect(self.resend_edited)
        self.chat.version_requested.connect(self.show_version)
        self.chat.hud_placement_changed.connect(lambda _corner, _collapsed: self.state_changed.emit())
        self.waiting = WaitingMessage(self.chat)  # a message sent while the model loads, sent once it is ready
        self.drafts = ChatDrafts(self.chat)  # each chat's unsent text, kept while another chat is open
        self.sidebar = Sidebar(self.history)
        self.sidebar.conversation_selected.connect(self.open_conversation)
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.conversation_deleted.connect(self._conversation_deleted)
        self.versions = ReplyVersions(self.history, self.chat, lambda: self.conversation_id, self._show_context)
        self.stream = ReplyStream(self.history, self.bridge, self.column, self.versions, ReplyHooks(
            self._status, self.notice.emit, self._mode_text, self._show_context, self.sidebar.refresh), self)
        self.transfer = ChatTransfer(self.history, lambda: self.conversation_id, self.banner, self.notice.emit,
                                     self.sidebar.refresh, self)  # Chats → Export / Import

        self.chat_splitter = QSplitter()  # sidebar | chat: the user sets the sidebar's width (remembered)
        self.chat_splitter.setChildrenCollapsible(False)
        self.chat_splitter.addWidget(self.sidebar)
        self.chat_splitter.addWidget(self.column)
        self.chat_splitter.setStretchFactor(1, 1)
        self.chat_splitter.splitterMoved.connect(lambda _pos, _index: self.state_changed.emit())
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 10, 0, 12)
        row.addWidget(self.chat_splitter)

        self.bridge.loaded.connect(self._loaded)
        self.bridge.tokens.connect(self.stream.on_tokens)
        self.bridge.done.connect(self.stream.on_done)
        self.bridge.error.connect(self.show_error)
        self.bridge.busy_changed.connect(self._busy_changed)
        self.bridge.load_progress.connect(self.column.show_load_progress)
        self.bridge.prompt_progress.connect(self.column.show_prompt_progress)

    def _status(self, text: str) -> None:
        self.status_changed.emit(text)

    def set_palette(self, colours: Palette) -> None:
        """The theme's colours for the transcript and the conversation list."""
        self.chat.set_palette(colours)
        self.sidebar.set_palette(colours)

    # ------------------------------------------------------------------ the engine, as the chat sees it

    def expect_model(self, status: str) -> None:
        """A model is on its way (the demo model being written first): a message sent meanwhile waits."""
        self._status(status)
        self._loading = True

    def _begin_load(self, status: str) -> bool:
        """Start a load (the chat is not ready until it ends); False, said in the status, while the engine is
        busy with a reply or another load (one engine request at a time)."""
        if self.bridge.busy:
            self._status(BUSY_STATUS)
            return False
        self.ready = False
        self._loading = True
        self.banner.hide()
        self._status(status)
        return True

    def load(self, config: EngineConfig) -> None:
        """Load a model pair; refused while a reply or another load is under way (one engine request at a time)."""
        if not self._begin_load(WAITING_STATUS if self.waiting.text is not None else "Loading the model…"):
            return
        self.chat.hud.set_config(config)
        self.bridge.load(config)

    def load_remote(self, server: RemoteServer) -> None:
        """Chat through a remote server: drafting is the server's own, tokens are not tinted (the reason is shown)."""
        if not self._begin_load(f"Connecting to {server.name}…"):
            return
        self.chat.hud.set_config(None)
        self.chat.hud.mode.setText(f"remote · {server.name}")
        self.bridge.load_remote(server)

    def _mode_text(self) -> str:
        """The drafting mode in words for the HUD and a reply's footer (a remote server's name)."""
        remote = self.bridge.remote
        return f"remote · {remote.name}" if remote is not None else describe_mode(self.bridge.config)

    # ------------------------------------------------------------------ conversations

    def new_chat(self) -> None:
        """An empty transcript; the next message starts a new saved conversation (with this chat's settings)."""
        if self.bridge.busy and not self.bridge.loading:
            self._status(BUSY_STATUS)
            return
        self._unwait()
        self.drafts.stash(self.conversation_id)
        self.conversation_id = None
        self.set_chat_settings(replace(self.chat_settings, overflow=self.default_overflow))
        self.chat.show_conversation([])
        self.drafts.restore(None)
        self._show_context(None)
        self.sidebar.set_current(None)
        self.state_changed.emit()
        if self.chat.isVisible():
            self.chat.input.setFocus(Qt.FocusReason.ShortcutFocusReason)  # type the first message at once

    def draft_of(self, conversation_id: int | None) -> str:
        """A chat's kept unsent text (the open chat's is in the box; for tests)."""
        return self.drafts.of(conversation_id)

    def focus_search(self) -> None:
        """The cursor in the sidebar's search box, its text selected (to type over)."""
        self.sidebar.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.sidebar.search.selectAll()

    def _conversation_deleted(self, conversation_id: int) -> None:
        """The sidebar deleted a chat: when it was the open one, an empty new chat takes its place."""
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self.chat.show_conversation([])
            self._show_context(None)
            self.state_changed.emit()
        self.notice.emit("Chat deleted")

    def set_chat_settings(self, chat: ChatSettings) -> None:
        """This chat's settings; saved with the conversation when it has been saved."""
        self.chat_settings = chat
        self.options = chat.options()
        self.thinking_box.blockSignals(True)
        self.thinking_box.setChecked(chat.thinking)
        self.thinking_box.blockSignals(False)
        if self.conversation_id is not None:
            with contextlib.suppress(HistoryError):  # deleted meanwhile (``python -m app history delete``)
                self.history.update_conversation(self.conversation_id, system_prompt=chat.system_prompt,
                                                 settings=chat.to_dict())

    def set_thinking(self, on: bool) -> None:
        """The per-chat thinking switch."""
        self.set_chat_settings(replace(self.chat_settings, thinking=on))

    def edit_chat_settings(self) -> None:
        dialog = ChatSettingsDialog(self.chat_settings, self)
        if dialog.exec() == QDialog.DialogCode.Accepted:
            self.set_chat_settings(dialog.result_settings())

    def open_conversation(self, conversation_id: int) -> None:
        """Show a saved conversation (also while a model loads); the next message goes on with it."""
        if self.bridge.busy and not self.bridge.loading:
            self._status(BUSY_STATUS)
            self.sidebar.set_current(self.conversation_id)
            return
        self._unwait()
        self.drafts.stash(self.conversation_id)
        self.conversation_id = conversation_id
        conversation = self.history.get(conversation_id)
        self.set_chat_settings(ChatSettings.from_conversation(conversation.system_prompt, conversation.settings))
        messages = self.history.messages(conversation_id)
        self.chat.show_conversation(messages, self.history.version_ids(conversation_id))
        self.drafts.restore(conversation_id)
        last = messages[-1] if messages else None
        self._show_context(last.stats if last is not None and last.role == "assistant" and last.stats else None)
        self.sidebar.set_current(conversation_id)
        self.state_changed.emit()

    def _current_conversation(self) -> Conversation | None:
        if self.conversation_id is None:
            return None
        try:
            return self.history.get(self.conversation_id)
        except HistoryError:
            return None

    # ------------------------------------------------------------------ send, regenerate, edit, stop

    def send(self, text: str) -> None:
        """Save the user's message and stream the reply to the whole saved conversation.

        While the model loads, the message is shown at once, marked as waiting, and sent when the model is
        ready; one message waits: a second one sent meanwhile is added to it (a blank line between)."""
        if self._loading and not self.ready:
            self._wait(text)
            return
        switch = self.switch_before_send() if self.switch_before_send is not None and self.ready else None
        if switch is not None and not self.bridge.busy:  # Auto wants this reply from another mode: load it first
            self._wait(text)
            self.load(switch)
            return
        if not self._can_generate():
            return
        conversation = self._current_conversation()
        if conversation is None:  # a new chat (or its conversation was deleted meanwhile)
            conversation = self.history.get(self.history.create_conversation(
                conversation_title(text), self.chat_settings.system_prompt, self.chat_settings.to_dict()))
            self.conversation_id = conversation.id
            self.state_changed.emit()
        message_id = self.history.add_message(conversation.id, "user", text)
        self.sidebar.set_current(conversation.id)
        self.chat.add_user(text, message_id)
        self._generate(conversation)

    def regenerate(self) -> None:
        """A new version of the last reply, streamed in its place; the earlier ones are kept (its ‹ › arrows
        show them), as the history's ``add_version`` keeps them."""
        conversation = self._current_conversation()
        entries = self.chat.entries
        if not self._can_generate() or conversation is None or not entries or entries[-1].role != "assistant":
            return
        last = entries[-1]
        reply: int | None = None
        if last.message_id is not None:
            with contextlib.suppress(HistoryError):  # its row is gone (an empty reply an error ended): a new one
                reply = self.history.add_version(last.message_id)
        self.chat.truncate(len(entries) - 1)  # the place is kept: no jump to the top
        self._generate(conversation, reply, last.message_id if reply is not None else None)

    def show_version(self, index: int, step: int) -> None:
        """A message's ‹ or ›: its older (-1) or newer (+1) version is shown (not while a reply streams)."""
        if not (self.bridge.busy and not self.bridge.loading):
            self.versions.step(index, step)

    def resend_edited(self, index: int, text: str) -> None:
        """A user message was edited: the edited text becomes a new version of it and the reply streams again;
        the old message and everything after it stay, as its other version (‹ ›), as regenerate keeps replies."""
        conversation = self._current_conversation()
        if not self._can_generate() or conversation is None or index >= len(self.chat.entries):
            return
        edited = self.chat.entries[index]
        message_id: int | None = None
        if edited.message_id is not None:
            with contextlib.suppress(HistoryError):  # its row is gone (deleted meanwhile): a plain new message
                message_id = self.history.edit_branch(edited.message_id, text)
        if message_id is None:
            message_id = self.history.add_message(conversation.id, "user", text)
        self.chat.truncate(index)
        self.chat.add_user(text, message_id, self.versions.ids(message_id))
        self._generate(conversation)

    def close_with_app(self) -> None:
        """The window closes while a reply streams: what it said so far is saved marked "interrupted"."""
        self.stream.saving.interrupt()

    def stop_reply(self) -> None:
        """Esc: stop the reply as it streams (nothing while the model loads)."""
        if self.chat.streaming_entry() is not None:
            self.bridge.cancel()

    def _wait(self, text: str) -> None:
        """Hold a message until the model is loaded (see ``send``)."""
        self.waiting.hold(text)
        self._status(WAITING_STATUS)

    def _unwait(self) -> None:
        """Another chat is opened while a message waits for the load: the message goes back into the box (it was
        meant for the chat left), so it is neither lost nor sent into the chat opened."""
        if self.waiting.back_to_box():
            self._status("Loading the model… your waiting message was not sent: it is back in its chat's box")

    def _can_generate(self) -> bool:
        if not self.ready or self.bridge.busy:
            self.show_error({"message": "The model is not loaded yet.", "advice": "Wait for it, or pick a mode."})
            return False
        return True

    def _generate(self, conversation: Conversation, reply: int | None = None, replaces: int | None = None,
                  continued: ChatEntry | None = None) -> None:
        """Stream a reply to the saved conversation with this chat's settings (``ReplyStream.start``)."""
        self.stream.start(conversation.id, self.chat_settings, self.options, reply, replaces, continued)

    # ------------------------------------------------------------------ the reply as it streams, and saving it

    def _busy_changed(self, busy: bool) -> None:
        self.chat.set_busy(busy)
        if busy and self._loading:  # Enter while the model loads: the message waits (``send``)
            self.chat.send_button.setEnabled(True)
        # a load can take a minute: the old chats stay there to read meanwhile; a streaming reply keeps its chat
        self.sidebar.setEnabled(not busy or self.bridge.loading)
        if not busy:
            self.load_bar.hide()

    def _loaded(self, event: dict[str, Any]) -> None:
        self.ready = True
        self._loading = False
        self._status("Ready")
        self.column.show_tinting(event.get("mode") == "remote")
        if event.get("mode") == "remote":
            self.chat.hud.mode.setText(f"{self._mode_text()} ({event.get('server_kind')}, {event.get('model')})")
            self._status(f"Ready: {event.get('server')}" + (f". {event['warning']}" if event.get("warning")
                                                              else ""))
        if event.get("notice"):  # a restart after a crash dropped the sidecar: say why, loudly
            self.chat.hud.set_config(self.bridge.config)
            self.banner.show_error({"error": "SidecarDropped", "message": event["notice"]})
        waiting = self.waiting.take()
        if waiting is not None:
            self.send(waiting)

    def show_error(self, event: dict[str, Any]) -> None:
        """An engine error (or a model that could not be prepared): the reply so far is kept, a message waiting
        for the load goes back into the box, and the banner says what happened."""
        self.stream.on_error(event)  # what the reply said before the error is kept
        if event.get("error") == "WorkerCrashed":
            self.ready = False
        if event.get("error") == "ContextFullError" and event.get("policy") == "stop":  # the chat's own limit
            entries = self.chat.entries
            if entries and entries[-1].role == "assistant" and not entries[-1].text.strip():
                self.chat.truncate(len(entries) - 1)  # no reply was started: the banner says why
            self.limit_banner.show_error(event)
            self._status("The context is full")
            return
        self._status("Engine error")
        if self._loading:
            self._loading = False
            if self.waiting.back_to_box():  # the load failed: nothing is lost, the message goes back into the box
                self._status("Engine error: the model did not load; your message is back in the box")
        self.banner.show_error(event)

    # ------------------------------------------------------------------ the context: meter, Continue, its limit

    def _show_context(self, stats: dict[str, Any] | None) -> None:
        """The meter, Continue and the trim note for the latest reply's stats (None: an empty chat)."""
        config = self.bridge.config if self.bridge.remote is None else None
        self.column.show_context(stats, config.n_ctx if config is not None else 0, self.bridge.remote is None,
                                 self.chat_settings.max_tokens)

    def continue_reply(self) -> None:
        """Continue: the last reply, cut by its cap or the full context, goes on where it stopped (the same
        reply, saved as one message; exactly the tokens one longer reply would have while this window holds
        its tokens)."""
        conversation = self._current_conversation()
        entries = self.chat.entries
        if not self._can_generate() or conversation is None or not entries or entries[-1].role != "assistant" \
                or entries[-1].message_id is None:
            return
        last = entries[-1]
        self.chat.truncate(len(entries) - 1)
        self._generate(conversation, last.message_id, continued=last)

    def new_chat_with_last_exchange(self) -> None:
        """"Stop at the limit" reached: a new chat with this one's settings, carrying its last question and
        answer, opened at once (the message that did not fit goes back into the box)."""
        conversation = self._current_conversation()
        if conversation is None or (self.bridge.busy and not self.bridge.loading):
            return
        created, unanswered = carry_last_exchange(self.history, conversation)
        carried_text = None
        if unanswered is not None:  # it was not answered: back into the box, not lost
            typed = self.chat.input.toPlainText().strip()
            carried_text = unanswered + ("\n\n" + typed if typed else "")
            self.chat.input.clear()  # it goes with the new chat, not kept as the old one's draft
        self.sidebar.refresh()
        self.open_conversation(created)
        if carried_text is not None:
            self.chat.input.setPlainText(carried_text)
        self.notice.emit("A new chat carries the last exchange")

    def _restart(self) -> None:
        if self.bridge.remote is not None:  # "Retry" after a dropped connection: ask again
            self.banner.hide()
            self.regenerate()
            return
        self.banner.hide()
        self._status("Restarting the engine…")
        self.bridge.restart()
