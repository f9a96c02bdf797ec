"""The main window (chat, HUD, drafting mode, engine banner) and ``run()``, the desktop app's entry point."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.builtin_demo import ensure_demo_model
from app.engine.chat_template import Message
from app.engine.sampling import SamplingParams
from app.engine.session import ChatOptions
from app.engine.speculative import EngineConfig
from app.gguftools.demo_model import DemoModel
from app.gui.chat_view import ChatView
from app.gui.engine_bridge import EngineBridge
from app.gui.ops import run_in_background, wait_for_all
from app.gui.sidebar import Sidebar
from app.history import Conversation, HistoryError, HistoryStore

SYSTEM_PROMPT = "You are a helpful assistant."
TITLE_CHARS = 40  # a new conversation's title: the start of its first message
# (label, key): key picks the EngineConfig in ``MainWindow.config_for``
MODES = [("FastMTP d2t sidecar", "sidecar-d2t"), ("Full sidecar", "sidecar-full"),
         ("Embedded MTP head", "embedded"), ("Off (target only)", "off")]


class Banner(QFrame):
    """A loud strip above the chat for engine errors, in words, with a restart button when it helps."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.setStyleSheet("#banner { background: #fdecea; border: 1px solid #f5c2c0; border-radius: 6px; }"
                           "#banner QLabel { color: #7f1d1d; }")
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.restart_button = QPushButton("Restart engine")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.restart_button)
        self.hide()

    def show_error(self, event: dict[str, Any]) -> None:
        message = str(event.get("message") or event.get("error") or "The engine failed.")
        advice = str(event.get("advice") or "")
        self.text.setText(f"<b>{_escape(message)}</b>" + (f"<br>{_escape(advice)}" if advice else ""))
        self.restart_button.setVisible(event.get("error") == "WorkerCrashed")
        self.show()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def conversation_title(text: str) -> str:
    """The first ``TITLE_CHARS`` characters of a message, on one line."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


class MainWindow(QMainWindow):
    """Chat with the built-in demo model (or any target / draft pair) and watch the drafting work.

    Conversations are saved in ``history`` (default: the user's history file) as they happen.
    """

    def __init__(self, bridge: EngineBridge | None = None, history: HistoryStore | None = None) -> None:
        super().__init__()
        self.setWindowTitle("FastMTP Chat")
        self.resize(1180, 700)
        self.bridge = bridge or EngineBridge(self)
        self._owns_history = history is None
        self.history = history or HistoryStore()
        self.conversation_id: int | None = None  # None: a new chat, saved on its first message
        self._reply_conversation: int | None = None  # where the reply under way is saved
        self.demo: DemoModel | None = None
        self.ready = False
        self.options = ChatOptions(max_tokens=256, sampling=SamplingParams(temperature=0.7, seed=1))

        self.model_label = QLabel("No model loaded")
        self.model_label.setStyleSheet("font-weight: 600;")
        self.mode_box = QComboBox()
        for label, key in MODES:
            self.mode_box.addItem(label, key)
        self.mode_box.currentIndexChanged.connect(lambda _i: self.reload())
        self.status = QLabel()
        self.status.setStyleSheet("color: #6b7280;")
        top = QHBoxLayout()
        top.addWidget(QLabel("Model:"))
        top.addWidget(self.model_label)
        top.addSpacing(16)
        top.addWidget(QLabel("Drafting:"))
        top.addWidget(self.mode_box)
        top.addStretch(1)
        top.addWidget(self.status)

        self.banner = Banner()
        self.banner.restart_button.clicked.connect(self._restart)
        self.chat = ChatView()
        self.chat.send_requested.connect(self.send)
        self.chat.stop_requested.connect(self.bridge.cancel)
        self.sidebar = Sidebar(self.history)
        self.sidebar.conversation_selected.connect(self.open_conversation)
        self.sidebar.new_chat_requested.connect(self.new_chat)

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.addLayout(top)
        layout.addWidget(self.banner)
        layout.addWidget(self.chat, 1)
        chat_page = QWidget()
        row = QHBoxLayout(chat_page)
        row.setContentsMargins(12, 10, 0, 12)
        row.addWidget(self.sidebar)
        row.addWidget(central, 1)

        self.nav = QListWidget()  # the page switcher: Chat, then the pages added with ``add_page``
        self.nav.setObjectName("nav")
        self.nav.setFixedWidth(112)
        self.nav.currentRowChanged.connect(self._show_page)
        self.pages = QStackedWidget()
        outer = QWidget()
        shell = QHBoxLayout(outer)
        shell.setContentsMargins(0, 0, 0, 0)
        shell.setSpacing(0)
        shell.addWidget(self.nav)
        shell.addWidget(self.pages, 1)
        self.setCentralWidget(outer)
        self.add_page("Chat", chat_page)

        self.bridge.loaded.connect(self._loaded)
        self.bridge.token.connect(self.chat.append_token)
        self.bridge.done.connect(self._done)
        self.bridge.error.connect(self._error)
        self.bridge.busy_changed.connect(self._busy_changed)

    # ------------------------------------------------------------------ pages

    def add_page(self, name: str, widget: QWidget) -> None:
        """Add a page to the switcher on the left (Chat, Models, Backend, …; Settings stays last).

        A page that is already there under ``name`` is replaced; pages keep running when hidden, so a
        download or a build goes on while the user chats."""
        for row in range(self.nav.count()):
            item = self.nav.item(row)
            if item.text() == name:
                old = self.pages.widget(row)
                self.pages.insertWidget(row, widget)
                if old is not None:
                    self.pages.removeWidget(old)
                    old.deleteLater()
                self.pages.setCurrentIndex(max(self.nav.currentRow(), 0))
                return
        row = self.nav.count()
        if row and self.nav.item(row - 1).text() == "Settings":
            row -= 1  # Settings stays last
        item = QListWidgetItem(name)
        item.setData(Qt.ItemDataRole.UserRole, name)
        self.nav.insertItem(row, item)
        self.pages.insertWidget(row, widget)
        if self.nav.currentRow() < 0:
            self.nav.setCurrentRow(0)

    def show_page(self, name: str) -> None:
        """Switch to the page called ``name``."""
        for row in range(self.nav.count()):
            if self.nav.item(row).text() == name:
                self.nav.setCurrentRow(row)
                return
        raise KeyError(name)

    def page_names(self) -> list[str]:
        return [self.nav.item(row).text() for row in range(self.nav.count())]

    def current_page(self) -> str:
        item = self.nav.currentItem()
        return item.text() if item is not None else ""

    def _show_page(self, row: int) -> None:
        if row >= 0:
            self.pages.setCurrentIndex(row)

    # ------------------------------------------------------------------ models

    def load_demo(self) -> None:
        """Write the built-in demo model on first use (a background op), then load it."""
        self.status.setText("Preparing the demo model…")
        run_in_background(lambda _report: ensure_demo_model(paths.demo_model_dir()), self.use_demo,
                          lambda exc: self._error({"message": f"The demo model could not be written: {exc}"}))

    def use_demo(self, demo: DemoModel) -> None:
        self.demo = demo
        self.reload()

    def config_for(self, key: str) -> EngineConfig | None:
        if self.demo is None:
            return None
        if key == "sidecar-d2t":
            return EngineConfig(self.demo.target, mode="sidecar", draft=self.demo.sidecar_d2t, n_ctx=2048)
        if key == "sidecar-full":
            return EngineConfig(self.demo.target, mode="sidecar", draft=self.demo.sidecar_full, n_ctx=2048)
        if key == "embedded":
            return EngineConfig(self.demo.target, mode="embedded", n_ctx=2048)
        return EngineConfig(self.demo.target, mode="off", n_ctx=2048)

    def reload(self) -> None:
        """Load the model pair the mode selector names."""
        config = self.config_for(str(self.mode_box.currentData()))
        if config is not None:
            self.load(config)

    def load(self, config: EngineConfig) -> None:
        """Load a model pair; refused while a reply or another load is under way (one engine request at a time)."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            return
        self.ready = False
        self.banner.hide()
        self.status.setText("Loading the model…")
        self.model_label.setText(f"{config.target.parent.name}/{config.target.name}")
        self.chat.hud.set_config(config)
        self.bridge.load(config)

    # ------------------------------------------------------------------ chat

    def new_chat(self) -> None:
        """An empty transcript; the next message starts a new saved conversation."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            return
        self.conversation_id = None
        self.chat.show_conversation([])
        self.sidebar.set_current(None)

    def open_conversation(self, conversation_id: int) -> None:
        """Show a saved conversation; the next message goes on with it."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            self.sidebar.set_current(self.conversation_id)
            return
        self.conversation_id = conversation_id
        self.chat.show_conversation(self.history.messages(conversation_id))
        self.sidebar.set_current(conversation_id)

    def send(self, text: str) -> None:
        """Save the user's message and stream the reply to the whole saved conversation."""
        if not self.ready or self.bridge.busy:
            self._error({"message": "The model is not loaded yet.", "advice": "Wait for it, or pick a mode."})
            return
        conversation = self._current_conversation()
        if conversation is None:  # a new chat (or its conversation was deleted meanwhile)
            conversation = self.history.get(
                self.history.create_conversation(conversation_title(text), SYSTEM_PROMPT))
            self.conversation_id = conversation.id
        self.history.add_message(conversation.id, "user", text)
        self._reply_conversation = conversation.id
        self.sidebar.set_current(conversation.id)
        self.chat.add_user(text)
        messages = [Message("system", conversation.system_prompt or SYSTEM_PROMPT),
                    *(Message(m.role, m.content) for m in self.history.messages(conversation.id)
                      if m.role != "system")]
        self.chat.begin_reply()
        self.status.setText("Generating…")
        self.bridge.generate(messages, self.options)

    def _current_conversation(self) -> Conversation | None:
        if self.conversation_id is None:
            return None
        try:
            return self.history.get(self.conversation_id)
        except HistoryError:
            return None

    def _busy_changed(self, busy: bool) -> None:
        self.chat.set_busy(busy)
        self.mode_box.setEnabled(not busy)
        self.sidebar.setEnabled(not busy)

    def _done(self, event: dict[str, Any]) -> None:
        entry = self.chat.finish_reply(event)
        if entry is not None:  # a finished or stopped reply, with its stats and why it ended
            stats = {**(event.get("stats") or {}), "stop_reason": event.get("stop_reason")}
            self._save_reply(entry.text, stats)
        self.status.setText("Ready")

    def _save_reply(self, text: str, stats: dict[str, Any] | None) -> None:
        conversation, self._reply_conversation = self._reply_conversation, None
        if conversation is None or (stats is None and not text.strip()):
            return
        try:
            self.history.add_message(conversation, "assistant", text, stats)
        except HistoryError:  # its conversation was deleted meanwhile (``python -m app history``)
            return
        self.sidebar.refresh()

    def _loaded(self, _event: dict[str, Any]) -> None:
        self.ready = True
        self.status.setText("Ready")

    def _error(self, event: dict[str, Any]) -> None:
        entry = self.chat.finish_reply(event)
        if entry is not None:  # keep what the reply said before the error, if anything
            self._save_reply(entry.text, None)
        if event.get("error") == "WorkerCrashed":
            self.ready = False
        self.status.setText("Engine error")
        self.banner.show_error(event)

    def _restart(self) -> None:
        self.banner.hide()
        self.status.setText("Restarting the engine…")
        self.bridge.restart()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.bridge.close()
        wait_for_all(10_000)
        if self._owns_history:
            self.history.close()
        super().closeEvent(event)


def ensure_backend() -> bool:
    """True once an active backend exists; asks to build one when there is none."""
    from app.backend.registry import active
    from app.gui.backend_dialog import BuildBackendDialog

    if active() is not None:
        return True
    return BuildBackendDialog().exec() == QDialog.DialogCode.Accepted


def run(argv: Sequence[str] | None = None) -> int:
    """Open the desktop app; returns the process exit code."""
    app = QApplication.instance() or QApplication(list(argv) if argv is not None else sys.argv)
    assert isinstance(app, QApplication)
    app.setApplicationName("FastMTP Chat")
    if not ensure_backend():
        return 1
    window = MainWindow()
    window.show()
    window.load_demo()
    return app.exec()
