"""Which model the chat loads: the one owner of the model selector and Auto drafting.

The window composes pages; this decides what the chat page loads and when. A choice in the selector, the demo
written on first use, "Chat with it now" from the Models page, a remote server added, a drafting mode changed, or
engine settings saved while a reply streams: each ends in ``reload``, which loads the pair the selector names (or
connects the remote server chosen). The settings are the window's (``settings``): the models folder and the
remembered model are read from them, never from the file on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QDialog, QWidget

from app.engine.config import EngineConfig
from app.gguftools.demo_model import DemoModel
from app.gui.chat.auto_drafting import AutoDraftingView
from app.gui.chat.chat_page import ChatPage
from app.gui.models.model_selector import AUTO_KEY, DEMO_KEY, REMOTE_PREFIX, ModelSelector
from app.gui.settings.machines import RemoteServerDialog
from app.gui.shell.engine_bridge import EngineBridge
from app.models.context_size import AUTO as AUTO_CONTEXT
from app.models.context_size import check_context
from app.settings.app_settings import Settings


class ModelLoading(QObject):
    """The chat's model: the selector's choice loaded into the chat page, Auto's turns, reloads for new settings."""

    model_chosen = Signal(str)  # a model (its selector key) was chosen: the window remembers it in the settings
    context_model_changed = Signal(object, str)  # (the files Auto sizes the context for, or None; their label)
    remotes_listed = Signal()  # the remote servers were listed again (the Settings page lists them too)
    status = Signal(str)  # a line for the window's status bar

    def __init__(self, settings: Callable[[], Settings], bridge: EngineBridge, parent: QWidget) -> None:
        """The selector is made here (the chat page places it in its top bar); ``connect_chat`` then wires it to
        the chat page it loads into."""
        super().__init__(parent)
        self._settings = settings
        self._window = parent
        self.bridge = bridge
        self.selector = ModelSelector(settings)
        self.reload_due = False  # engine settings were saved while a model was loaded: load it again

    def connect_chat(self, chat_page: ChatPage) -> None:
        """Load into ``chat_page``, with Auto drafting measuring its replies."""
        self.chat_page = chat_page
        self.auto = AutoDraftingView(self.selector, chat_page, self.bridge)  # "Auto (measured)" drafting
        selector = self.selector
        selector.model_chosen.connect(self._chosen)
        selector.mode_changed.connect(self.reload)
        selector.add_remote_requested.connect(self.add_remote_server)
        selector.demo_wanted.connect(self.load_demo)
        selector.demo_ready.connect(self.use_demo)
        selector.demo_failed.connect(lambda message: chat_page.show_error({"message": message}))
        selector.listing_failed.connect(chat_page.banner.show_error)
        self.bridge.loaded.connect(self._engine_loaded)
        self.bridge.busy_changed.connect(self._busy_changed)

    # ------------------------------------------------------------------ choosing

    def load_demo(self) -> None:
        """Write the built-in demo model on first use (the selector's background op), then load it."""
        self.chat_page.expect_model("Preparing the demo model…")  # a message sent meanwhile waits for it
        self.selector.write_demo()

    def use_demo(self, demo: DemoModel) -> None:
        """Chat with the demo model: it is selected (and remembered) and loaded."""
        self.selector.demo = demo
        self.selector.select(DEMO_KEY)
        self.model_chosen.emit(DEMO_KEY)
        self.reload()

    def chat_with(self, folder: Path, quant: str) -> None:
        """"Chat with it now" on the Models page: list the models again, then load the one just downloaded."""
        self.selector.chat_with(folder, quant)

    def start(self) -> None:
        """A window's first load: the model the settings name (the demo when that one is no longer installed)."""
        chosen = self._settings().chat_model
        if chosen == DEMO_KEY:
            self.load_demo()
        else:
            self.selector.refresh(select=chosen, fallback_to_demo=True)

    def _chosen(self, key: str) -> None:
        """The selector picked a model: remember it and load it (the demo model is written first)."""
        self.model_chosen.emit(key)
        if key == DEMO_KEY and self.selector.demo is None:
            self.load_demo()
        else:
            self.reload()

    # ------------------------------------------------------------------ loading

    def reload(self) -> None:
        """Load the model pair the selector names in its drafting mode (or connect to the chosen remote server)."""
        remote = self.selector.chosen_remote()
        self.chat_page.demo_note.setVisible(remote is None and self.selector.key() == DEMO_KEY)
        self.context_model_changed.emit(self.selector.context_model(), self.selector.model_box.currentText())
        if remote is not None:
            self.auto.stop()
            self.chat_page.load_remote(remote)
            return
        mode = self.selector.mode()
        if mode == AUTO_KEY:  # the mode Auto drafting asks for (measuring in turn, or the winner)
            config = self.auto.config()
        else:
            self.auto.stop()
            config = self.selector.config_for(mode)
        if config is not None:
            self.chat_page.load(config)
            self.warn_context(config)

    def warn_context(self, config: EngineConfig) -> str | None:
        """Before the load goes far: a context that does not fit this machine (a user's own value, or even Auto's
        smallest) is said on the chat page with its arithmetic (the load goes on: the estimate is approximate, and a
        context llama.cpp cannot make fails in words). Returns the warning, if any."""
        model = self.selector.context_model()
        if self._settings().context_size == AUTO_CONTEXT and model is not None:
            fit = check_context(AUTO_CONTEXT, *model)
        else:
            fit = check_context(config.n_ctx, config.target, config.draft, config.n_gpu_layers)
        warning = fit.warning() if fit is not None else None
        if warning is not None:
            self.chat_page.banner.show_error({"message": warning, "advice": "The arithmetic is on the Settings page, "
                                              "under Context size (python -m app context shows it too)."})
        return warning

    # ------------------------------------------------------------------ new engine settings

    def settings_saved(self, engine_changed: bool, folder_changed: bool) -> str:
        """New settings were saved: a change to what the engine loads with reloads the chat's model at once when
        it is idle, else as soon as its reply or load ends; a new models folder is listed. Returns what the
        Settings page says about the reload ("" when the engine settings did not change)."""
        note = ""
        if engine_changed:
            self.reload_due = self.bridge.config is not None and self.bridge.remote is None
            note = self._reload_note()
            if self.reload_due and not self.bridge.busy:
                self._reload_for_settings()
        self.context_model_changed.emit(self.selector.context_model(), self.selector.model_box.currentText())
        if folder_changed:
            self.selector.refresh()
        return note

    def _reload_note(self) -> str:
        if not self.reload_due:
            return "The engine settings apply when a model is loaded."
        if self.bridge.busy:
            return "The model reloads with the new engine settings as soon as the reply or load under way ends."
        return "The model reloads now with the new engine settings."

    def _reload_for_settings(self) -> None:
        """Load the chat's model again with the saved engine settings (once; nothing while the engine is busy)."""
        if not self.reload_due or self.bridge.busy or self.bridge.remote is not None:
            return
        self.reload_due = False
        self.reload()
        if self.bridge.busy:
            self.status.emit("Reloading the model with the new settings…")

    # ------------------------------------------------------------------ remote servers

    def add_remote_server(self) -> None:
        """"Remote server…": the dialog; a server added is listed and chosen, a cancel goes back to the model before."""
        dialog = RemoteServerDialog(self._window)
        accepted = dialog.exec() == QDialog.DialogCode.Accepted and dialog.server is not None
        self.remote_servers_changed(REMOTE_PREFIX + dialog.server.name if accepted and dialog.server else None)

    def remote_servers_changed(self, select: str | None = None) -> None:
        """List the remote servers again; ``select`` one (its key) and connect, else keep the current choice."""
        self.remotes_listed.emit()
        selector = self.selector
        previous = select or self._settings().chat_model
        selector.show_models(selector.installed)
        selector.select(previous if selector.has(previous) else DEMO_KEY)
        if select is not None:
            selector.choose(selector.key())

    # ------------------------------------------------------------------ the engine's side

    def _engine_loaded(self, event: dict[str, Any]) -> None:
        if event.get("mode") == "remote":  # a remote server drafts its own way
            self.selector.mode_box.setEnabled(False)

    def _busy_changed(self, busy: bool) -> None:
        self.selector.set_busy(busy, self.bridge.remote is not None)
        if not busy and self.reload_due:  # saved while a reply streamed: reload before the next one
            QTimer.singleShot(0, self._reload_for_settings)
