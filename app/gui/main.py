"""The main window (pages, first-run panel, chat, HUD, drafting mode, banners, export / import) and ``run()``,
the entry point."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QResizeEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app import settings as app_settings
from app.builtin_demo import ensure_demo_model
from app.chat_settings import ChatSettings
from app.engine.chat_template import Message
from app.engine.config import EngineConfig
from app.engine.remote import NO_TINT_REASON
from app.errors import FastMTPError
from app.gguftools.demo_model import DemoModel
from app.gui import local_choices, theme, window_state
from app.gui.about_dialog import AboutDialog, ShortcutsDialog
from app.gui.backend_page import BackendPage
from app.gui.benchmark_page import BenchmarkPage, BenchModel
from app.gui.chat_settings_dialog import ChatSettingsDialog
from app.gui.chat_view import ChatEntry, ChatView
from app.gui.engine_bridge import EngineBridge
from app.gui.first_run import FirstRunPanel
from app.gui.hud import describe_mode, drafting_warning
from app.gui.local_models_panel import GgufDrop
from app.gui.machines import RemoteServerDialog
from app.gui.models_page import ModelsPage
from app.gui.nav_rail import NavRail
from app.gui.ops import run_in_background, wait_for_all
from app.gui.settings_page import SettingsPage
from app.gui.sidebar import Sidebar
from app.gui.window_state import WindowState
from app.history import Conversation, HistoryError, HistoryStore, read_export
from app.release.installed import InstalledModel, list_installed, model_roots
from app.remote_servers import RemoteServer, load_servers
from app.resources import resources_dir
from app.settings import Settings

SYSTEM_PROMPT = "You are a helpful assistant."
SAVE_EVERY_TOKENS = 32  # a streaming reply is saved to the history this often, and every SAVE_INTERVAL_MS
SAVE_INTERVAL_MS = 1000
TITLE_CHARS = 40  # a new conversation's title: the start of its first message
# (label, key): key picks the EngineConfig in ``MainWindow.config_for``
MODES = [("FastMTP d2t sidecar", "sidecar-d2t"), ("Full sidecar", "sidecar-full"),
         ("Embedded MTP head", "embedded"), ("Off (target only)", "off")]
DEMO_KEY = ""  # the model selector's (and the settings') key of the built-in demo model
REMOTE_PREFIX = "remote:"  # the selector's key of a remote server: "remote:NAME"
ADD_REMOTE_KEY = "remote:+"  # the selector's last item, "Remote server…": opens the dialog
DEMO_LABEL = "Demo model (built-in)"
WAITING_NOTE = "waiting: sent as soon as the model has loaded"
WAITING_STATUS = "Loading the model… your message waits and is sent when it is ready (more text joins it)"


class Banner(QFrame):
    """A loud strip above the chat for engine errors, in words, with a restart button when it helps."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.setStyleSheet("#banner { background: #fdecea; border: 2px solid #dc2626; border-radius: 6px; }"
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
        self.restart_button.setVisible(event.get("error") == "WorkerCrashed" or bool(event.get("retryable")))
        self.restart_button.setText("Retry" if event.get("retryable") else "Restart engine")
        self.show()


class DraftingBanner(QFrame):
    """The loud warning that drafting is configured but not running, or running below break-even."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("drafting")
        self.setStyleSheet("#drafting { background: #fff4d6; border: 2px solid #d97706; border-radius: 6px; }"
                           "#drafting QLabel { color: #78350f; }")
        self.text = QLabel()
        self.text.setWordWrap(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.text, 1)
        self.hide()

    def show_warning(self, warning: str | None) -> None:
        if warning is None:
            self.hide()
            return
        self.text.setText(f"<b>⚠ {_escape(warning)}</b>")
        self.show()


class StatusLabel(QLabel):
    """The window's one-line status (in the status bar). Its text never changes the layout: the label takes
    the room it is given (it asks for none), elides what does not fit, and keeps the whole text in ``text()``
    and the tooltip. A plain QLabel asked for its text's width, so "Loading the model…" re-laid out the
    window and re-wrapped the chat."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def setText(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def text(self) -> str:
        return self._full

    def displayed_text(self) -> str:
        """What the label shows: the text, elided to its width."""
        return super().text()

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        super().setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.width()))


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

    def __init__(self, bridge: EngineBridge | None = None, history: HistoryStore | None = None,
                 settings: Settings | None = None) -> None:
        super().__init__()
        self.setWindowTitle(APP_TITLE)
        self.setWindowIcon(app_icon())
        self.resize(1180, 700)
        self.bridge = bridge or EngineBridge(self)
        self._owns_history = history is None
        self.history = history or HistoryStore(recover=True)  # a damaged file is copied aside, a new one started
        self.settings = settings or app_settings.load()
        self.conversation_id: int | None = None  # None: a new chat, saved on its first message
        self._reply_conversation: int | None = None  # where the reply under way is saved
        self._reply_message: int | None = None  # its history row, saved as it streams
        self._unsaved_tokens = 0
        self.demo: DemoModel | None = None
        self.installed: list[InstalledModel] = []  # the models folder's models, as last listed
        self._listing = 0  # model listings under way
        self._pending_chat: tuple[Path, str] | None = None  # "Chat with it now": folder and quantization
        self._legend_text: str | None = None  # the tint legend, kept while a remote engine shows why it is off
        self.ready = False
        self._loading = False  # a model load (or the demo model being written first) is under way
        self._waiting: str | None = None  # a message sent while loading: sent once the model is ready
        self._waiting_entry: ChatEntry | None = None  # its place in the transcript, marked as waiting
        self.chat_settings = ChatSettings(max_tokens=256)
        self.options = self.chat_settings.options()
        self._reply_seed = self.chat_settings.seed  # the seed of the reply under way (kept with its stats)
        self._save_timer = QTimer(self)
        self._save_timer.setInterval(SAVE_INTERVAL_MS)
        self._save_timer.timeout.connect(self._save_partial)

        self.model_box = QComboBox()  # the demo model, then each installed model (``refresh_models``)
        self.model_box.setToolTip("The model the chat uses; downloads from the Models page appear here")
        self.model_box.addItem(DEMO_LABEL, DEMO_KEY)
        self.model_box.currentIndexChanged.connect(lambda _i: self._model_chosen())
        self.mode_box = QComboBox()
        for label, key in MODES:
            self.mode_box.addItem(label, key)
        self.mode_box.currentIndexChanged.connect(lambda _i: self.reload())
        self.mode_box.currentIndexChanged.connect(lambda _i: self.remember_state())
        self.status = StatusLabel()
        self.status.setStyleSheet("color: #6b7280;")
        top = QHBoxLayout()
        top.addWidget(QLabel("Model:"))
        top.addWidget(self.model_box)
        top.addSpacing(16)
        top.addWidget(QLabel("Drafting:"))
        top.addWidget(self.mode_box)
        self.thinking_box = QCheckBox("Thinking")
        self.thinking_box.setToolTip("Let the model think in a <think> block before answering (this chat)")
        self.thinking_box.setChecked(self.chat_settings.thinking)
        self.thinking_box.toggled.connect(self.set_thinking)
        top.addSpacing(16)
        top.addWidget(self.thinking_box)
        self.chat_settings_button = QPushButton("Chat settings…")
        self.chat_settings_button.clicked.connect(self.edit_chat_settings)
        top.addWidget(self.chat_settings_button)
        top.addStretch(1)

        self.banner = Banner()
        self.banner.restart_button.clicked.connect(self._restart)
        self.drafting_banner = DraftingBanner()
        self.history_banner = Banner()  # stays until closed: engine loads hide ``banner``, not this one
        self.history_banner.restart_button.setText("Close")
        self.history_banner.restart_button.clicked.connect(self.history_banner.hide)
        if self.history.damaged_copy is not None:
            copy = self.history.damaged_copy
            self.history_banner.show_error({
                "message": f"The chat history was damaged and could not be read, so a new one was started. "
                           f"The damaged file was copied to {copy.name} in {copy.parent}; nothing was deleted.",
                "advice": f"Tools such as `sqlite3 {copy.name} .recover` may save some of its chats."})
            self.history_banner.restart_button.show()
        self.chat = ChatView()
        self.chat.send_requested.connect(self.send)
        self.chat.stop_requested.connect(self.bridge.cancel)
        self.chat.regenerate_requested.connect(self.regenerate)
        self.chat.edit_submitted.connect(self.resend_edited)
        self.chat.hud_placement_changed.connect(lambda _corner, _collapsed: self.remember_state())
        self.sidebar = Sidebar(self.history)
        self.sidebar.conversation_selected.connect(self.open_conversation)
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.conversation_deleted.connect(self._conversation_deleted)

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.addLayout(top)
        layout.addWidget(self.history_banner)
        layout.addWidget(self.banner)
        layout.addWidget(self.drafting_banner)
        layout.addWidget(self.chat, 1)
        self.chat_splitter = QSplitter()  # sidebar | chat: the user sets the sidebar's width (remembered)
        self.chat_splitter.setChildrenCollapsible(False)
        self.chat_splitter.addWidget(self.sidebar)
        self.chat_splitter.addWidget(central)
        self.chat_splitter.setStretchFactor(1, 1)
        self.chat_splitter.splitterMoved.connect(lambda _pos, _index: self.remember_state())
        chat_page = QWidget()
        row = QHBoxLayout(chat_page)
        row.setContentsMargins(12, 10, 0, 12)
        row.addWidget(self.chat_splitter)
        self.first_run = FirstRunPanel(self.settings.context_size)
        self.first_run.demo_ready.connect(self._first_run_demo)
        self.first_run.backend_build_requested.connect(self._first_run_build)
        self.first_run.models_requested.connect(self._first_run_models)
        self.chat_stack = QStackedWidget()  # the chat, or the first-run panel in its place
        self.chat_stack.addWidget(chat_page)
        self.chat_stack.addWidget(self.first_run)

        self.nav = NavRail()  # the page switcher: Chat, then the pages added with ``add_page``
        self.nav.currentRowChanged.connect(self._show_page)
        self.pages = QStackedWidget()
        outer = QWidget()
        shell = QHBoxLayout(outer)
        shell.setContentsMargins(0, 0, 0, 0)
        shell.setSpacing(0)
        shell.addWidget(self.nav)
        shell.addWidget(self.pages, 1)
        self.setCentralWidget(outer)
        self.add_page("Chat", self.chat_stack)
        self.models_page = ModelsPage(context_size=self.settings.context_size)
        self.models_page.model_installed.connect(lambda _installed: self.refresh_models())
        self.models_page.chat_requested.connect(self.chat_with)
        self.models_page.local.history_path = self.history.path  # "my chat history" as a sidecar's corpus
        self.models_page.local.models_changed.connect(lambda: self.refresh_models())
        self.add_page("Models", self.models_page)
        self.backend_page = BackendPage()
        self.add_page("Backend", self.backend_page)
        self.settings_page = SettingsPage(self.settings)
        self.settings_page.saved.connect(self.apply_settings)
        self.settings_page.machines.remote_servers_changed.connect(lambda: self.remote_servers_changed())
        self.add_page("Settings", self.settings_page)
        self._add_menus()
        # the status gets the window's full width at its bottom: the top bar has little room left at 1024 wide,
        # and a status that changes never moves the controls or re-wraps the chat (StatusLabel)
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().setSizeGripEnabled(False)

        self.bridge.loaded.connect(self._loaded)
        self.bridge.token.connect(self._token)
        self.bridge.done.connect(self._done)
        self.bridge.error.connect(self._error)
        self.bridge.busy_changed.connect(self._busy_changed)
        self.refresh_models()
        self.bench_page = BenchmarkPage(self.bench_model)  # the bench spec matrix for the chat's model (issue 14)
        self.add_page("Benchmark", self.bench_page)
        self.gguf_drop = GgufDrop(self, self.add_model_file)  # a .gguf dropped on the window joins your models

    # ------------------------------------------------------------------ your own models (issue 14)

    def add_model_file(self, path: Path) -> None:
        """A ``.gguf`` dropped on the window: add it on the Models page (which shows how that went)."""
        self.show_page("Models")
        self.models_page.local.add_path(path)

    def bench_model(self) -> BenchModel | None:
        """What the Benchmark page measures: the chat's model and its sidecars (None while there is none)."""
        files = self._model_files()
        if files is None or self.chosen_remote() is not None:
            return None
        key = str(self.model_box.currentData() or DEMO_KEY)
        name = self.model_box.currentText() if key != DEMO_KEY else "built-in demo model"
        return BenchModel(name, files[0], files[1], files[2], not local_choices.lacks_mtp_head(key))

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
        self.nav.insertItem(row, self.nav.new_item(name))
        self.nav.tooltips()  # the keys (Ctrl+1 …) follow the rows
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

    # ------------------------------------------------------------------ first run

    def needs_first_run(self) -> bool:
        """True until the first-run panel was answered, and whenever no backend is active."""
        from app.backend.registry import active

        return not self.settings.first_run_done or active() is None

    def start(self) -> None:
        """What a fresh window does: the first-run panel when it is needed, else load the model the settings name
        (the demo model when that one is no longer installed and verified)."""
        if self.needs_first_run():
            self.show_first_run()
        elif self.settings.chat_model == DEMO_KEY:
            self.load_demo()
        else:
            self.refresh_models(select=self.settings.chat_model, fallback_to_demo=True)
        self.settings_page.check_for_updates_if_due()  # only when allowed in Settings, at most once a day

    def show_first_run(self) -> None:
        self.first_run.refresh()
        self.chat_stack.setCurrentWidget(self.first_run)
        self.show_page("Chat")

    def first_run_visible(self) -> bool:
        return self.chat_stack.currentWidget() is self.first_run and self.first_run.isVisible()

    def _first_run_answered(self) -> None:
        if not self.settings.first_run_done:
            self.settings = replace(self.settings, first_run_done=True)
            app_settings.save(self.settings)
            self.settings_page.show_settings(self.settings)

    def _first_run_demo(self, demo: DemoModel) -> None:
        self._first_run_answered()
        self.chat_stack.setCurrentIndex(0)
        self.use_demo(demo)

    def _first_run_build(self, flavor: str) -> None:
        """The real model: build the proposed backend on the Backend page (its progress shows there)."""
        self._first_run_answered()
        self.show_page("Backend")
        if not self.backend_page.building:
            self.backend_page.build("cuda" if flavor == "cuda" else "cpu")

    def _first_run_models(self) -> None:
        self._first_run_answered()
        self.show_page("Models")

    # ------------------------------------------------------------------ models

    def load_demo(self) -> None:
        """Write the built-in demo model on first use (a background op), then load it."""
        self.status.setText("Preparing the demo model…")
        self._loading = True  # a message sent meanwhile waits for the model (``send``)
        run_in_background(lambda _report: ensure_demo_model(paths.demo_model_dir()), self.use_demo,
                          lambda exc: self._error({"message": f"The demo model could not be written: {exc}"}))

    def use_demo(self, demo: DemoModel) -> None:
        """Chat with the demo model: it is selected (and remembered) and loaded."""
        self.demo = demo
        self._select_model(DEMO_KEY)
        self._remember_model(DEMO_KEY)
        self.reload()

    def refresh_models(self, select: str | None = None, fallback_to_demo: bool = False) -> None:
        """List the installed models again (a background op: it checks signatures and sizes) into the selector.

        ``select``: then choose and load the model with this key (a target's path) when it is there and
        verified; else, with ``fallback_to_demo``, load the demo model."""
        self._listing += 1
        roots = model_roots(self.settings)

        def listed(models: list[InstalledModel]) -> None:
            self._listing -= 1
            self._show_models(models)
            chosen = self.installed_model(select) if select else None
            if select and select.startswith(REMOTE_PREFIX) and self.model_box.findData(select) >= 0:
                self._select_model(select)
                self._model_chosen()
            elif chosen is not None and chosen.verified:
                self._select_model(chosen.key)
                self._model_chosen()
            elif local_choices.offered(select):
                self._select_model(str(select))
                self._model_chosen()
            elif select is not None and fallback_to_demo:
                self.load_demo()

        def failed(exc: Exception) -> None:
            self._listing -= 1
            self.banner.show_error({"message": f"The models folder could not be read: {exc}",
                                    "advice": "Check the models folder on the Settings page."})

        run_in_background(lambda _report: list_installed(*roots), listed, failed)

    @property
    def listing_models(self) -> bool:
        return self._listing > 0

    def installed_model(self, key: str | None) -> InstalledModel | None:
        """The listed installed model with this key, or None (the demo model, or one no longer there)."""
        return next((m for m in self.installed if m.key == key), None)

    def chat_with(self, folder: str, quant: str) -> None:
        """"Chat with it now" on the Models page: list the models again, then load the one just downloaded."""
        self.show_page("Chat")
        self.chat_stack.setCurrentIndex(0)
        self._pending_chat = (Path(folder), quant)
        self.refresh_models()

    def _show_models(self, models: list[InstalledModel]) -> None:
        """Fill the selector: the demo model, then every installed model (unverified ones greyed, with why)."""
        self.installed = models
        current = str(self.model_box.currentData() or DEMO_KEY)
        self.model_box.blockSignals(True)
        self.model_box.clear()
        self.model_box.addItem(DEMO_LABEL, DEMO_KEY)
        several_folders = len({m.folder for m in models}) > 1
        for model in models:
            where = f" · {model.folder.name}" if several_folders else ""
            signed = " · publisher-signed" if model.verified else ""
            self.model_box.addItem(f"{model.quant} · release {model.version} · {model.size_bytes / 1e9:.1f} GB{where}"
                                   f"{signed}", model.key)
            row = self.model_box.count() - 1
            tip = f"{model.target}\nFastMTP d2t sidecar: {_name(model.sidecar_d2t)}\n" \
                  f"Full sidecar: {_name(model.sidecar_full)}"
            if not model.verified:
                tip = f"Not offered: it did not pass its checks.\n{model.problem}\n\n{tip}"
                self._set_item_enabled(self.model_box, row, False)
            self.model_box.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)
        local_choices.add_items(self.model_box, self._set_item_enabled)  # your own files (Models page)
        for server in load_servers():
            self.model_box.addItem(f"Remote: {server.name}", REMOTE_PREFIX + server.name)
            self.model_box.setItemData(self.model_box.count() - 1, server.url, Qt.ItemDataRole.ToolTipRole)
        self.model_box.addItem("Remote server…", ADD_REMOTE_KEY)
        index = self.model_box.findData(current)
        self.model_box.setCurrentIndex(index if index >= 0 else 0)
        self.model_box.blockSignals(False)
        pending, self._pending_chat = self._pending_chat, None
        if pending is not None:  # "Chat with it now" before the new model was listed
            chosen = next((m for m in models if m.folder == pending[0] and m.quant == pending[1] and m.verified),
                          None)
            if chosen is not None and chosen.key != self.model_box.currentData():
                self._select_model(chosen.key)
                self._model_chosen()
        self._update_modes()

    def _select_model(self, key: str) -> None:
        index = self.model_box.findData(key)
        if index >= 0 and index != self.model_box.currentIndex():
            self.model_box.blockSignals(True)
            self.model_box.setCurrentIndex(index)
            self.model_box.blockSignals(False)
        self._update_modes()

    def _model_chosen(self) -> None:
        """The selector picked a model: remember it, offer the drafting modes it has files for, load it."""
        key = str(self.model_box.currentData() or DEMO_KEY)
        if key == ADD_REMOTE_KEY:
            self.add_remote_server()
            return
        self._remember_model(key)
        self._update_modes()
        if key.startswith(REMOTE_PREFIX):
            self.reload()
        elif key == DEMO_KEY and self.demo is None:
            self.load_demo()
        else:
            self.reload()

    def _remember_model(self, key: str) -> None:
        if self.settings.chat_model != key:
            self.settings = replace(self.settings, chat_model=key)
            app_settings.save(self.settings)
            self.settings_page.keep_chat_model(key)

    def _model_files(self) -> tuple[Path, Path | None, Path | None] | None:
        """The chosen model's target, d2t sidecar and full sidecar; None while the demo model is not written yet."""
        key = str(self.model_box.currentData() or DEMO_KEY)
        installed = self.installed_model(key)
        if installed is not None:
            return installed.target, installed.sidecar_d2t, installed.sidecar_full
        own = local_choices.files(key)
        if own is not None:
            return own
        if self.demo is not None:
            return self.demo.target, self.demo.sidecar_d2t, self.demo.sidecar_full
        return None

    def _update_modes(self) -> None:
        """Grey out the drafting modes whose file the chosen model lacks, saying why; move off a greyed one."""
        files = self._model_files()
        key = str(self.model_box.currentData() or DEMO_KEY)
        missing = {"sidecar-d2t": files is not None and files[1] is None,
                   "sidecar-full": files is not None and files[2] is None,
                   "embedded": local_choices.lacks_mtp_head(key)}
        why = {"sidecar-d2t": local_choices.NO_SIDECAR if local_choices.find(key) else
                              "This model has no FastMTP d2t sidecar in its folder: download it on the Models page.",
               "embedded": local_choices.NO_MTP_HEAD,
               "sidecar-full": "This model has no full MTP sidecar in its folder (the release ships the d2t one; "
                               "`python -m app sidecar build --full` makes one)."}
        for row, (_label, key) in enumerate(MODES):
            self._set_item_enabled(self.mode_box, row, not missing.get(key, False))
            self.mode_box.setItemData(row, why[key] if missing.get(key, False) else None, Qt.ItemDataRole.ToolTipRole)
        if missing.get(str(self.mode_box.currentData()), False):
            first = next(row for row, (_label, key) in enumerate(MODES) if not missing.get(key, False))
            self.mode_box.blockSignals(True)
            self.mode_box.setCurrentIndex(first)
            self.mode_box.blockSignals(False)

    @staticmethod
    def _set_item_enabled(box: QComboBox, row: int, enabled: bool) -> None:
        model = box.model()
        if isinstance(model, QStandardItemModel):
            item = model.item(row)
            if item is not None:
                item.setEnabled(enabled)

    def mode_enabled(self, key: str) -> bool:
        """Whether the drafting mode ``key`` can be picked for the chosen model."""
        model = self.mode_box.model()
        item = model.item(self.mode_box.findData(key)) if isinstance(model, QStandardItemModel) else None
        return item is not None and item.isEnabled()

    def config_for(self, key: str) -> EngineConfig | None:
        """The engine configuration of the chosen model for a drafting mode, sized by the settings (context, GPU
        layers, threads, depth, adaptive, p_min); None when the model or the mode's file is not there."""
        files = self._model_files()
        if files is None:
            return None
        target, sidecar_d2t, sidecar_full = files
        sizes = app_settings.engine_fields(self.settings)
        if not _gpu_backend() and not sizes.get("rpc"):  # RPC workers take offloaded layers on a CPU backend too
            sizes["n_gpu_layers"] = 0
        if key in ("sidecar-d2t", "sidecar-full"):
            draft = sidecar_d2t if key == "sidecar-d2t" else sidecar_full
            return EngineConfig(target, mode="sidecar", draft=draft, **sizes) if draft is not None else None
        if key == "embedded":
            return EngineConfig(target, mode="embedded", **sizes)
        return EngineConfig(target, mode="off", **sizes)

    def apply_settings(self, settings: Settings) -> None:
        """New settings from the Settings page: the theme now, engine sizes at the next load."""
        folder_changed = settings.models_path() != self.settings.models_path()
        self.settings = settings
        self.models_page.set_context_size(settings.context_size)  # the fit advice sizes what the engine loads
        app = QApplication.instance()
        if isinstance(app, QApplication):
            colours = theme.apply(app, settings.theme)
            self.chat.set_palette(colours)
            self.nav.set_palette(colours)  # the rail's icons and the pin marks follow the theme
            self.sidebar.set_palette(colours)
        if folder_changed:
            self.refresh_models()

    def reload(self) -> None:
        """Load the model pair the mode selector names (or connect to the chosen remote server)."""
        remote = self.chosen_remote()
        if remote is not None:
            self.load_remote(remote)
            return
        config = self.config_for(str(self.mode_box.currentData()))
        if config is not None:
            self.load(config)

    def load(self, config: EngineConfig) -> None:
        """Load a model pair; refused while a reply or another load is under way (one engine request at a time)."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            return
        self.ready = False
        self._loading = True
        self.banner.hide()
        self.status.setText(WAITING_STATUS if self._waiting is not None else "Loading the model…")
        self.chat.hud.set_config(config)
        self.bridge.load(config)

    # ------------------------------------------------------------------ remote servers

    def chosen_remote(self) -> RemoteServer | None:
        """The remote server the selector names, or None (a local model)."""
        key = str(self.model_box.currentData() or DEMO_KEY)
        if not key.startswith(REMOTE_PREFIX) or key == ADD_REMOTE_KEY:
            return None
        return next((s for s in load_servers() if REMOTE_PREFIX + s.name == key), None)

    def add_remote_server(self) -> None:
        """"Remote server…": the dialog; a server added is listed and chosen, a cancel goes back to the model before."""
        dialog = RemoteServerDialog(self)
        accepted = dialog.exec() == QDialog.DialogCode.Accepted and dialog.server is not None
        self.remote_servers_changed(REMOTE_PREFIX + dialog.server.name if accepted and dialog.server else None)

    def remote_servers_changed(self, select: str | None = None) -> None:
        """List the remote servers again; ``select`` one (its key) and connect, else keep the current choice."""
        self.settings_page.machines.refresh_remotes()
        previous = select or self.settings.chat_model
        self._show_models(self.installed)
        if self.model_box.findData(previous) < 0:
            previous = DEMO_KEY
        self._select_model(previous)
        if select is not None:
            self._model_chosen()

    def load_remote(self, server: RemoteServer) -> None:
        """Chat through a remote server: drafting is the server's own, tokens are not tinted (the reason is shown)."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            return
        self.ready = False
        self._loading = True
        self.banner.hide()
        self.status.setText(f"Connecting to {server.name}…")
        self.chat.hud.set_config(None)
        self.chat.hud.mode.setText(f"remote · {server.name}")
        self.bridge.load_remote(server)

    def _show_tinting(self, remote: bool) -> None:
        """Per-token tint off for a remote engine, with the one-line reason where the legend was."""
        if remote:
            self._legend_text = self._legend_text or self.chat.legend.text()
            self.chat.legend.setText(NO_TINT_REASON)
        elif self._legend_text:
            self.chat.legend.setText(self._legend_text)
        self.chat.show_drafts.setEnabled(not remote)
        self.chat.show_drafts.setToolTip(NO_TINT_REASON if remote else "")

    def _mode_text(self) -> str:
        """The drafting mode in words for the HUD and a reply's footer (a remote server's name)."""
        remote = self.bridge.remote
        return f"remote · {remote.name}" if remote is not None else describe_mode(self.bridge.config)

    # ------------------------------------------------------------------ chat

    def new_chat(self) -> None:
        """An empty transcript; the next message starts a new saved conversation (with this chat's settings)."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            return
        self.conversation_id = None
        self.chat.show_conversation([])
        self.sidebar.set_current(None)
        self.remember_state()
        if self.chat.isVisible():
            self.chat.input.setFocus(Qt.FocusReason.ShortcutFocusReason)  # type the first message at once

    def _conversation_deleted(self, conversation_id: int) -> None:
        """The sidebar deleted a chat: when it was the open one, an empty new chat takes its place."""
        if conversation_id == self.conversation_id:
            self.conversation_id = None
            self.chat.show_conversation([])
            self.remember_state()
        self.status.setText("Chat deleted")

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
        """Show a saved conversation; the next message goes on with it."""
        if self.bridge.busy:
            self.status.setText("Busy: stop the reply first")
            self.sidebar.set_current(self.conversation_id)
            return
        self.conversation_id = conversation_id
        conversation = self.history.get(conversation_id)
        self.set_chat_settings(ChatSettings.from_conversation(conversation.system_prompt, conversation.settings))
        self.chat.show_conversation(self.history.messages(conversation_id))
        self.sidebar.set_current(conversation_id)
        self.remember_state()

    def send(self, text: str) -> None:
        """Save the user's message and stream the reply to the whole saved conversation.

        While the model loads, the message is shown at once, marked as waiting, and sent when the model is
        ready; one message waits: a second one sent meanwhile is added to it (a blank line between)."""
        if self._loading and not self.ready:
            self._wait(text)
            return
        if not self._can_generate():
            return
        conversation = self._current_conversation()
        if conversation is None:  # a new chat (or its conversation was deleted meanwhile)
            conversation = self.history.get(self.history.create_conversation(
                conversation_title(text), self.chat_settings.system_prompt, self.chat_settings.to_dict()))
            self.conversation_id = conversation.id
            self.remember_state()
        message_id = self.history.add_message(conversation.id, "user", text)
        self.sidebar.set_current(conversation.id)
        self.chat.add_user(text, message_id)
        self._generate(conversation)

    def regenerate(self) -> None:
        """Replace the last reply with a new one."""
        conversation = self._current_conversation()
        entries = self.chat.entries
        if not self._can_generate() or conversation is None or not entries or entries[-1].role != "assistant":
            return
        last = entries[-1]
        if last.message_id is not None:
            self.history.delete_messages_from(conversation.id, last.message_id)
        self.chat.truncate(len(entries) - 1)
        self._generate(conversation)

    def resend_edited(self, index: int, text: str) -> None:
        """A user message was edited: it and everything after it are replaced, and the reply streams again."""
        conversation = self._current_conversation()
        if not self._can_generate() or conversation is None or index >= len(self.chat.entries):
            return
        edited = self.chat.entries[index]
        if edited.message_id is not None:
            self.history.delete_messages_from(conversation.id, edited.message_id)
        self.chat.truncate(index)
        self.chat.add_user(text, self.history.add_message(conversation.id, "user", text))
        self._generate(conversation)

    def _wait(self, text: str) -> None:
        """Hold a message until the model is loaded (see ``send``)."""
        if self._waiting is None or self._waiting_entry not in self.chat.entries:
            self._waiting = text
            self._waiting_entry = self.chat.add_user(text)
        else:
            assert self._waiting_entry is not None
            self._waiting += "\n\n" + text
            self._waiting_entry.pieces = [(self._waiting, "user")]
        self._waiting_entry.footer = WAITING_NOTE
        self.chat.redraw()
        self.status.setText(WAITING_STATUS)

    def _take_waiting(self) -> str | None:
        """The waiting message's text, its transcript entry removed (``send`` shows it again, saved)."""
        text, entry = self._waiting, self._waiting_entry
        self._waiting = self._waiting_entry = None
        if text is not None and entry is not None:
            for index, shown in enumerate(self.chat.entries):
                if shown is entry:
                    self.chat.truncate(index)
                    break
        return text

    def _can_generate(self) -> bool:
        if not self.ready or self.bridge.busy:
            self._error({"message": "The model is not loaded yet.", "advice": "Wait for it, or pick a mode."})
            return False
        return True

    def _generate(self, conversation: Conversation) -> None:
        """Stream a reply to the saved conversation; the reply is saved as it grows."""
        self._reply_conversation = conversation.id
        messages = [Message("system", self.chat_settings.system_prompt or SYSTEM_PROMPT),
                    *(Message(m.role, m.content) for m in self.history.messages(conversation.id)
                      if m.role != "system")]
        if not self.chat_settings.system_prompt.strip():
            messages = messages[1:]
        self._reply_message = self.history.add_message(conversation.id, "assistant", "", complete=False)
        self._unsaved_tokens = 0
        self.chat.begin_reply(self._reply_message)
        self.drafting_banner.hide()
        self.status.setText("Generating…")
        self._save_timer.start()
        self._reply_seed = self.chat_settings.reply_seed()  # a fresh one per reply in the random mode
        sampling = replace(self.options.sampling, seed=self._reply_seed)
        self.bridge.generate(messages, replace(self.options, sampling=sampling))

    def _token(self, event: dict[str, Any]) -> None:
        self.chat.append_token(event)
        stats = event.get("stats") or {}
        warning = drafting_warning(self.bridge.config, stats)
        if warning is not None or self.drafting_banner.isVisible():
            self.drafting_banner.show_warning(warning)
        self._unsaved_tokens += 1
        if self._unsaved_tokens >= SAVE_EVERY_TOKENS:
            self._save_partial()

    def _save_partial(self) -> None:
        """Save the streaming reply as it is so far (a killed app keeps it)."""
        entry = self.chat.streaming_entry()
        if entry is None or self._reply_message is None or self._unsaved_tokens == 0:
            return
        self._unsaved_tokens = 0
        self.history.update_message(self._reply_message, entry.text, complete=False, drafts=entry.draft_ranges())

    def _current_conversation(self) -> Conversation | None:
        if self.conversation_id is None:
            return None
        try:
            return self.history.get(self.conversation_id)
        except HistoryError:
            return None

    def _busy_changed(self, busy: bool) -> None:
        self.chat.set_busy(busy)
        if busy and self._loading:  # Enter while the model loads: the message waits (``send``)
            self.chat.send_button.setEnabled(True)
        self.mode_box.setEnabled(not busy and self.bridge.remote is None)  # a remote server drafts its own way
        self.stop_action.setEnabled(busy and self.chat.streaming_entry() is not None)  # Esc: only while streaming
        self.model_box.setEnabled(not busy)
        self.sidebar.setEnabled(not busy)

    def _done(self, event: dict[str, Any]) -> None:
        # the reply's stats carry the seed it was sampled with (what reproduces it, as the fixed seed) and the
        # drafting mode that produced it (its footer names it, also when the chat is reopened)
        event["stats"] = {**(event.get("stats") or {}), "seed": self._reply_seed,
                          "mode": self._mode_text()}
        entry = self.chat.finish_reply(event)
        if entry is not None:  # a finished or stopped reply, with its stats and why it ended
            stats = {**event["stats"], "stop_reason": event.get("stop_reason")}
            self.drafting_banner.show_warning(drafting_warning(self.bridge.config, stats))
            self._save_reply(entry.text, stats, entry.draft_ranges())
        self.status.setText("Ready")

    def _save_reply(self, text: str, stats: dict[str, Any] | None,
                    drafts: list[tuple[int, int]] | None = None) -> None:
        """The reply's final text (with its accepted-draft ranges): with its stats when it finished, marked
        incomplete after an error."""
        self._save_timer.stop()
        conversation, self._reply_conversation = self._reply_conversation, None
        message, self._reply_message = self._reply_message, None
        if conversation is None or message is None:
            return
        try:
            if stats is None and not text.strip():
                self.history.delete_messages_from(conversation, message)
            else:
                self.history.update_message(message, text, stats, complete=stats is not None, drafts=drafts)
        except HistoryError:  # its conversation was deleted meanwhile (``python -m app history``)
            return
        self.sidebar.refresh()

    def _loaded(self, event: dict[str, Any]) -> None:
        self.ready = True
        self._loading = False
        self.status.setText("Ready")
        self._show_tinting(event.get("mode") == "remote")
        if event.get("mode") == "remote":
            self.chat.hud.mode.setText(f"{self._mode_text()} ({event.get('server_kind')}, {event.get('model')})")
            self.mode_box.setEnabled(False)
            self.status.setText(f"Ready: {event.get('server')}" + (f". {event['warning']}" if event.get("warning")
                                                                     else ""))
        if event.get("notice"):  # a restart after a crash dropped the sidecar: say why, loudly
            self.chat.hud.set_config(self.bridge.config)
            self.banner.show_error({"error": "SidecarDropped", "message": event["notice"]})
        waiting = self._take_waiting()
        if waiting is not None:
            self.send(waiting)

    def _error(self, event: dict[str, Any]) -> None:
        entry = self.chat.finish_reply(event)
        if entry is not None:  # keep what the reply said before the error, if anything
            self._save_reply(entry.text, None, entry.draft_ranges())
        if event.get("error") == "WorkerCrashed":
            self.ready = False
        self.status.setText("Engine error")
        if self._loading:
            self._loading = False
            waiting = self._take_waiting()
            if waiting is not None:  # the load failed: nothing is lost, the message goes back into the box
                typed = self.chat.input.toPlainText().strip()
                self.chat.input.setPlainText(waiting + ("\n\n" + typed if typed else ""))
                self.status.setText("Engine error: the model did not load; your message is back in the box")
        self.banner.show_error(event)

    def _restart(self) -> None:
        if self.bridge.remote is not None:  # "Retry" after a dropped connection: ask again
            self.banner.hide()
            self.regenerate()
            return
        self.banner.hide()
        self.status.setText("Restarting the engine…")
        self.bridge.restart()

    # ------------------------------------------------------------------ export / import

    def _action(self, label: str, slot: Any, keys: str = "", what: str = "") -> QAction:
        """A window action; with ``keys`` it answers them wherever the focus is in the window, and ``what`` is its
        line in Help → Keyboard shortcuts."""
        action = QAction(label, self)
        action.triggered.connect(slot)
        if keys:
            action.setShortcut(QKeySequence(keys))
            self.addAction(action)  # also while the menu bar is hidden or its menu disabled
        if keys and what:
            self._shortcut_rows.append((QKeySequence(keys).toString(QKeySequence.SequenceFormat.NativeText), what))
        return action

    def _add_menus(self) -> None:
        """Chats (new, search, stop, rename / pin / delete, export / import, quit) and Help (shortcuts, About)."""
        self._shortcut_rows: list[tuple[str, str]] = []
        menu = self.menuBar().addMenu("&Chats")
        menu.addAction(self._action("New chat", self.new_chat_with_keys, "Ctrl+N",
                                    "a new chat, the cursor in the message box"))
        menu.addAction(self._action("Search chats", self.search_chats, "Ctrl+F", "search the chats"))
        self.stop_action = self._action("Stop the reply", self._stop_reply, "Esc", "stop the reply as it streams")
        self.stop_action.setEnabled(False)
        menu.addAction(self.stop_action)
        menu.addSeparator()
        self.rename_action = self._action("Rename chat", self.rename_open_chat, "F2", "rename the open chat")
        self.pin_action = self._action("Pin chat to the top", self.toggle_pin_open_chat)
        self.delete_action = self._action(f"Delete chat…\t{self.sidebar.delete_action.shortcut().toString()}",
                                          lambda: self.sidebar.delete(self.conversation_id))
        self._shortcut_rows.append(("Del", "delete the chat selected in the list (it asks first)"))
        for action in (self.rename_action, self.pin_action, self.delete_action):
            menu.addAction(action)
        menu.addSeparator()
        for label, slot in (("Export this chat as Markdown…", lambda: self._export_dialog("md", current=True)),
                            ("Export this chat as JSON…", lambda: self._export_dialog("json", current=True)),
                            ("Export all chats as Markdown…", lambda: self._export_dialog("md", current=False)),
                            ("Export all chats as JSON…", lambda: self._export_dialog("json", current=False)),
                            ("Import chats from JSON…", self._import_dialog)):
            menu.addAction(self._action(label, slot))
        menu.addSeparator()
        menu.addAction(self._action("Quit", self.close, "Ctrl+Q", "quit FastMTP Chat"))
        menu.aboutToShow.connect(self._update_chat_actions)
        for row in range(1, 6):  # Ctrl+1 … Ctrl+5: the rail's pages, top to bottom
            self._action(f"Page {row}", partial(self._show_row, row - 1), f"Ctrl+{row}")
        self._shortcut_rows += [("Ctrl+1 … Ctrl+5", "the pages: Chat, Models, Backend, Benchmark, Settings"),
                                ("Enter", "send the message"), ("Shift+Enter", "a new line in the message"),
                                ("Tab, Shift+Tab", "leave the message box (to Send, or back)")]
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self._action("Keyboard shortcuts", self.show_shortcuts, "F1", "this list"))
        help_menu.addAction(self._action("About FastMTP Chat", self.show_about))
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self.about_dialog: AboutDialog | None = None

    # ------------------------------------------------------------------ keys and Help

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do), as Help → Keyboard shortcuts lists them."""
        return list(self._shortcut_rows)

    def new_chat_with_keys(self) -> None:
        """Ctrl+N: the Chat page, a new chat, the cursor in the message box."""
        self.show_page("Chat")
        self.new_chat()

    def search_chats(self) -> None:
        """Ctrl+F: the Chat page, the cursor in the sidebar's search box (its text selected, to type over)."""
        self.show_page("Chat")
        if self.chat_stack.currentIndex() == 0:
            self.sidebar.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
            self.sidebar.search.selectAll()

    def _stop_reply(self) -> None:
        if self.chat.streaming_entry() is not None:
            self.bridge.cancel()

    def rename_open_chat(self) -> None:
        """F2: the open chat's title becomes an edit box in the sidebar (Enter keeps it, Esc does not)."""
        if self.conversation_id is not None and self.sidebar.isEnabled():
            self.show_page("Chat")
            self.sidebar.begin_rename(self.conversation_id)

    def toggle_pin_open_chat(self) -> None:
        self.sidebar.toggle_pin(self.conversation_id)

    def _update_chat_actions(self) -> None:
        """The Chats menu as it opens: rename, pin and delete act on the open, saved chat, not while a reply
        streams (the sidebar is disabled then); pin reads "Unpin" for a pinned chat."""
        usable = self.sidebar.item_for(self.conversation_id) is not None and self.sidebar.isEnabled()
        for action in (self.rename_action, self.pin_action, self.delete_action):
            action.setEnabled(usable)
        self.pin_action.setText("Unpin chat" if self.sidebar.is_pinned(self.conversation_id) else
                                "Pin chat to the top")

    def _show_row(self, row: int) -> None:
        if row < self.nav.count():
            self.nav.setCurrentRow(row)

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts (F1): a small window listing the keys."""
        if self.shortcuts_dialog is None:
            self.shortcuts_dialog = ShortcutsDialog(self.shortcut_rows(), self)
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()
        return self.shortcuts_dialog

    def show_about(self) -> AboutDialog:
        """Help → About: the versions of the app, its backend, llama.cpp, CUDA and the driver."""
        if self.about_dialog is None:
            self.about_dialog = AboutDialog(app_icon(), self)
        else:
            self.about_dialog.refresh()  # a backend built or switched since
        self.about_dialog.show()
        self.about_dialog.raise_()
        return self.about_dialog

    def export_chats(self, path: Path, fmt: str, current: bool = True) -> int:
        """Write this chat (or all chats) to ``path`` as Markdown (``md``) or JSON; returns how many."""
        ids = ([self.conversation_id] if self.conversation_id is not None else []) if current else \
            [c.id for c in self.history.conversations()]
        if fmt == "json":
            path.write_text(json.dumps(self.history.export_json(ids), indent=2) + "\n", encoding="utf-8")
        else:
            path.write_text("\n\n---\n\n".join(self.history.export_markdown(i) for i in ids) + "\n",
                            encoding="utf-8")
        self.status.setText(f"Exported {len(ids)} chat{'s' if len(ids) != 1 else ''} to {path.name}")
        return len(ids)

    def import_chats(self, path: Path) -> list[int]:
        """Add the chats of a JSON export; errors are shown in the banner."""
        try:
            created = self.history.import_json(read_export(path))
        except HistoryError as exc:
            self.banner.show_error({"message": f"{path.name} could not be imported: {exc.message}",
                                    "advice": exc.advice})
            return []
        self.sidebar.refresh()
        self.status.setText(f"Imported {len(created)} chat{'s' if len(created) != 1 else ''}")
        return created

    def _export_dialog(self, fmt: str, current: bool) -> None:
        if current and self.conversation_id is None:
            self.status.setText("Nothing to export: this chat has no messages yet")
            return
        suffix = "Markdown (*.md)" if fmt == "md" else "JSON (*.json)"
        name, _ = QFileDialog.getSaveFileName(self, "Export chats", f"chats.{fmt}", suffix)
        if name:
            self.export_chats(Path(name), fmt, current)

    def _import_dialog(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import chats", "", "JSON (*.json)")
        if name:
            self.import_chats(Path(name))

    # ------------------------------------------------------------------ remembered state

    def current_state(self) -> WindowState:
        """Where the user left things: geometry, splitter, the HUD's place, drafting mode, the open chat."""
        return WindowState(geometry=_base64(self.saveGeometry()), splitter=_base64(self.chat_splitter.saveState()),
                           hud_corner=self.chat.hud_corner, hud_collapsed=self.chat.hud.collapsed,
                           drafting_mode=str(self.mode_box.currentData() or ""),
                           history=str(self.history.path.resolve()), conversation=self.conversation_id or 0)

    def remember_state(self) -> None:
        """Save the state for the next start (on each change, and on close: a killed app keeps the last)."""
        window_state.save(self.current_state())

    def restore_state(self, state: WindowState | None = None) -> None:
        """Put things back where the last session left them (``run`` does, before the window shows): geometry,
        splitter, the HUD's corner and fold, the drafting mode (loaded by ``start``), and the chat that was open
        when it is still in this history file."""
        state = state or window_state.load()
        if state.geometry:
            self.restoreGeometry(QByteArray.fromBase64(state.geometry.encode("ascii")))
        if state.splitter:
            self.chat_splitter.restoreState(QByteArray.fromBase64(state.splitter.encode("ascii")))
        self.chat.set_hud_placement(state.hud_corner, state.hud_collapsed)
        index = self.mode_box.findData(state.drafting_mode)
        if index >= 0:
            self.mode_box.blockSignals(True)  # no load yet: ``start`` loads the model in this mode
            self.mode_box.setCurrentIndex(index)
            self.mode_box.blockSignals(False)
        if state.conversation and state.history == str(self.history.path.resolve()):
            try:
                self.history.get(state.conversation)
            except HistoryError:  # deleted since (``python -m app history delete``): a new chat
                return
            self.open_conversation(state.conversation)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.remember_state()
        self.first_run.cancel()
        self.settings_page.machines.close_with_app()  # the served llama-server stops unless it should stay
        self.bridge.close()
        wait_for_all(10_000)
        if self._owns_history:
            self.history.close()
        super().closeEvent(event)


def _base64(data: QByteArray) -> str:
    return bytes(data.toBase64().data()).decode("ascii")


def _name(path: Path | None) -> str:
    return path.name if path is not None else "none"


def _gpu_backend() -> bool:
    from app.backend.registry import active

    manifest = active()
    return manifest is not None and manifest.flavor == "cuda"


# ----------------------------------------------------------------------------- can Qt start here?

PROBE_TIMEOUT_S = 30
_PROBE = ("import sys\nfrom PySide6.QtGui import QGuiApplication\n"
          "app = QGuiApplication(sys.argv[:1])\nprint(app.platformName())\n")
# sonames whose Debian package name does not follow the libfooN / libfoo1-2 rule
_DEB_NAMES = {"libglib-2.0.so.0": "libglib2.0-0", "libgobject-2.0.so.0": "libglib2.0-0",
              "libgthread-2.0.so.0": "libglib2.0-0", "libfreetype.so.6": "libfreetype6"}


def qt_platform_name() -> str:
    """The platform plugin Qt will try first: ``QT_QPA_PLATFORM``'s first name, else the session's
    (wayland on a Wayland session, xcb otherwise, as Qt 6 picks on Linux)."""
    wanted = os.environ.get("QT_QPA_PLATFORM", "").strip()
    if wanted:
        return re.split(r"[;:]", wanted, maxsplit=1)[0].strip()
    if os.environ.get("WAYLAND_DISPLAY") and os.environ.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def platform_plugin(name: str) -> Path:
    """The file of PySide6's Qt platform plugin ``name`` (``libqxcb.so``, …)."""
    from PySide6.QtCore import QLibraryInfo

    return Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / f"libq{name}.so"


def parse_ldd_missing(output: str) -> list[str]:
    """The libraries ``ldd`` reports as ``not found``, in order, each once."""
    missing: list[str] = []
    for line in output.splitlines():
        match = re.match(r"\s*(\S+)\s+=>\s+not found", line)
        if match and match.group(1) not in missing:
            missing.append(match.group(1))
    return missing


def deb_package(soname: str) -> str:
    """Debian's package name for a shared library: ``libxcb-icccm.so.4`` -> ``libxcb-icccm4``,
    ``libX11-xcb.so.1`` -> ``libx11-xcb1``, ``libxkbcommon-x11.so.0`` -> ``libxkbcommon-x11-0``."""
    if soname in _DEB_NAMES:
        return _DEB_NAMES[soname]
    match = re.fullmatch(r"(lib.+?)\.so\.(\d+)(?:\..*)?", soname)
    if match is None:
        return soname
    stem = match.group(1).lower()
    return stem + ("-" if stem[-1].isdigit() else "") + match.group(2)


def _library_installed(soname: str) -> bool:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: the child-process probe still catches it
    return any(line.split(" (", 1)[0].strip() == soname for line in listing.splitlines())


def platform_missing_libraries(name: str) -> list[str]:
    """The shared libraries the platform plugin ``name`` needs and this machine lacks (``ldd``'s
    ``not found``; for xcb also ``libxcb-cursor.so.0``, which Qt 6.5+ opens at run time)."""
    plugin = platform_plugin(name)
    ldd = shutil.which("ldd")
    if not plugin.is_file() or ldd is None:
        return []
    try:
        result = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    missing = parse_ldd_missing(result.stdout)
    if name == "xcb" and not _library_installed("libxcb-cursor.so.0"):
        missing.append("libxcb-cursor.so.0")
    return missing


def describe_missing(name: str, missing: list[str]) -> str:
    """What to tell the user: the libraries and the command that installs them."""
    packages = " ".join(dict.fromkeys(deb_package(lib) for lib in missing))
    return (f"Qt cannot open the window: its {name} platform plugin needs libraries this machine lacks: "
            f"{', '.join(missing)}.\nOn Debian/Ubuntu install them with: sudo apt-get install {packages}\n"
            "(`make run` installs them when it runs as root.)")


def qt_start_problem() -> str | None:
    """None when Qt can open its platform here; else why not, in words, and what to install.

    Linux only: ``ldd`` on the platform plugin names missing libraries; then a child process starts a
    QGuiApplication, so a failure (such as a display that cannot be reached) aborts the child, not this
    process. No ctypes."""
    if not sys.platform.startswith("linux"):
        return None
    name = qt_platform_name()
    missing = platform_missing_libraries(name)
    if missing:
        return describe_missing(name, missing)
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"Qt did not start its {name} platform within {PROBE_TIMEOUT_S} s."
    except OSError as exc:
        return f"Qt could not be checked: {exc}"
    if probe.returncode == 0:
        return None
    lines = [line for line in probe.stderr.splitlines() if line.strip()]
    detail = "\n".join("  " + line for line in lines[-4:])
    where = (f"the display {os.environ.get('DISPLAY', '')!r} (DISPLAY)" if name == "xcb"
             else f"the {name} platform")
    return (f"Qt cannot open the window on {where}; ldd finds no library of its {name} plugin missing, so "
            f"the display itself could not be used. Qt said:\n{detail}")


# ----------------------------------------------------------------------------- who the app is

APP_ID = "fastmtp-chat"  # application, organization and .desktop file name: the X11 window class
APP_TITLE = "FastMTP Chat"


def qt_argv(argv: Sequence[str]) -> list[str]:
    """The arguments for QApplication: ``argv[0]`` becomes ``fastmtp-chat``, because Qt's xcb platform names
    the window's WM_CLASS instance after it (``__main__.py`` under ``python -m app``)."""
    return [APP_ID, *list(argv)[1:]]


def app_icon() -> QIcon:
    """The app's icon from ``resources/icons/`` (the SVG and its PNG sizes); a checkout and a frozen bundle
    both find it through ``app.resources``."""
    icon = QIcon()
    folder = resources_dir() / "icons"
    for png in sorted(folder.glob(f"{APP_ID}-*.png")):
        icon.addFile(str(png))
    svg = folder / f"{APP_ID}.svg"
    if svg.is_file():
        icon.addFile(str(svg))
    return icon


def configure_application(app: QApplication) -> None:
    """Names and icon: the desktop entry (``fastmtp-chat.desktop``, StartupWMClass=fastmtp-chat) matches the
    window, and the window manager and task bar show the app's icon. Before the first window is created."""
    app.setApplicationName(APP_ID)
    app.setOrganizationName(APP_ID)
    app.setApplicationDisplayName(APP_TITLE)
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(app_icon())


def make_application(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (the running one, else a new one from ``argv``), named and with its icon."""
    app = QApplication.instance() or QApplication(qt_argv(argv if argv is not None else sys.argv))
    assert isinstance(app, QApplication)
    configure_application(app)
    return app


def run(argv: Sequence[str] | None = None, check: bool = False) -> int:
    """Open the desktop app; returns the process exit code.

    ``check``: once the window is up, print what it shows as one JSON line and close (packaging smoke tests).
    """
    app = make_application(argv)
    try:
        window = MainWindow()
    except FastMTPError as exc:  # an unusable config or data folder, a history another process holds, …
        print(f"error: {exc.message}" + (f"\nwhat to do: {exc.advice}" if exc.advice else ""), file=sys.stderr)
        QMessageBox.critical(None, f"{APP_TITLE} cannot start", str(exc))
        return exc.exit_code
    window.apply_settings(window.settings)
    window.restore_state()
    window.show()
    window.start()
    if check:
        QTimer.singleShot(0, lambda: _report_and_quit(window, app))
    return app.exec()


def _report_and_quit(window: MainWindow, app: QApplication) -> None:
    from app.backend.registry import active_id

    print(json.dumps({"window": "shown" if window.isVisible() else "hidden", "title": window.windowTitle(),
                      "first_run_panel": window.first_run_visible(), "backend": active_id()}), flush=True)
    app.quit()
