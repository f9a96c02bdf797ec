"""The main window: it composes the pages (Chat, Models, Backend, Benchmark, Settings) on the rail
(``shell/page_switcher.py``), the first-run panel in the Chat page's place, the menus and keys
(``window_menus.py``), the status bar (``shell/status_label.py``) and the remembered window state, and wires the
pages to each other; and ``run()``, the entry point (the app's name and icon: ``shell/application.py``).

The chat itself is ``ChatPage`` (app/gui/chat/chat_page.py), which model it loads ``ModelLoading``
(app/gui/chat/model_loading.py); whether Qt can open a window here at all, ``qt_start_problem``
(app/gui/shell/startup.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QByteArray, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QApplication, QMainWindow, QMessageBox, QStackedWidget, QWidget

from app.chats.history import HistoryError, HistoryStore
from app.core.errors import FastMTPError
from app.gguftools.demo_model import DemoModel
from app.gui.backend.backend_page import BackendPage
from app.gui.benchmark.benchmark_page import BenchmarkPage
from app.gui.chat.chat_page import ChatPage
from app.gui.chat.first_run import FirstRunPanel
from app.gui.chat.model_loading import ModelLoading
from app.gui.models.local_models_panel import GgufDrop
from app.gui.models.models_page import ModelsPage
from app.gui.settings.settings_page import SettingsPage
from app.gui.shell import theme, window_state
from app.gui.shell.application import APP_TITLE, app_icon, make_application
from app.gui.shell.build_job import BuildJob
from app.gui.shell.engine_bridge import EngineBridge
from app.gui.shell.ops import wait_for_all
from app.gui.shell.page_switcher import PageSwitcher
from app.gui.shell.status_label import StatusLabel
from app.gui.shell.window_state import WindowState
from app.gui.window_menus import WindowMenus
from app.settings import app_settings
from app.settings.app_settings import Settings


class MainWindow(QMainWindow):
    """Chat with the built-in demo model (or any target / draft pair) and watch the drafting work.

    Conversations are saved in ``history`` (default: the user's history file) as they happen. The window owns
    the engine (``bridge``), the history and the settings, and wires the pages to each other.
    """

    def __init__(self, bridge: EngineBridge | None = None, history: HistoryStore | None = None,
                 settings: Settings | None = None, *, remembers: bool = True) -> None:
        """``remembers`` False: a window of a benchmark or a script, which never writes the user's remembered state
        (the mode and the open chat would point at its temporary history afterwards)."""
        super().__init__()
        self.remembers = remembers
        self.setWindowTitle(APP_TITLE)
        self.setWindowIcon(app_icon())
        self.resize(1180, 700)
        self.bridge = bridge or EngineBridge(self)
        self._owns_history = history is None
        self.history = history or HistoryStore(recover=True)  # a damaged file is copied aside, a new one started
        self.settings = settings or app_settings.load()

        self.status = StatusLabel()
        self.status.setStyleSheet("color: #6b7280;")
        self.loading = ModelLoading(lambda: self.settings, self.bridge, self)  # which model the chat loads
        self.model_selector = self.loading.selector
        self.chat_page = ChatPage(self.bridge, self.history, self.model_selector)
        self.chat_page.default_overflow = self.settings.overflow_policy  # new chats' policy (Settings)
        self.chat_page.set_chat_settings(replace(self.chat_page.chat_settings, overflow=self.settings.overflow_policy))
        self.loading.connect_chat(self.chat_page)
        self.auto = self.loading.auto
        self.loading.model_chosen.connect(self._remember_model)
        self.loading.status.connect(self.status.setText)
        self.model_selector.mode_changed.connect(self.remember_state)
        self.chat_page.status_changed.connect(self.status.setText)
        self.chat_page.notice.connect(self.status.show_notice)
        self.chat_page.state_changed.connect(self.remember_state)
        self.build_job = BuildJob(self)  # the one backend build, whichever page started it
        self.first_run = FirstRunPanel(app_settings.fit_context(self.settings), self.build_job)
        self.first_run.demo_ready.connect(self._first_run_demo)
        self.first_run.backend_build_requested.connect(self._first_run_build)
        self.first_run.models_requested.connect(self._first_run_models)
        self.chat_stack = QStackedWidget()  # the chat, or the first-run panel in its place
        self.chat_stack.addWidget(self.chat_page)
        self.chat_stack.addWidget(self.first_run)

        self.switcher = PageSwitcher()  # the rail on the left (Chat, then the pages added) and the page it shows
        self.nav, self.pages = self.switcher.nav, self.switcher.pages
        self.setCentralWidget(self.switcher)
        self.add_page("Chat", self.chat_stack)
        self.models_page = ModelsPage(context_size=app_settings.fit_context(self.settings))
        self.models_page.model_installed.connect(self.model_selector.add_installed)  # its one folder, no rescan
        self.models_page.chat_requested.connect(self.chat_with)
        self.models_page.local.history_path = self.history.path  # "my chat history" as a sidecar's corpus
        self.models_page.local.models_changed.connect(lambda: self.model_selector.refresh())
        self.add_page("Models", self.models_page)
        self.backend_page = BackendPage(self.build_job)
        self.add_page("Backend", self.backend_page)
        self.settings_page = SettingsPage(self.settings)
        self.settings_page.saved.connect(self.apply_settings)
        self.settings_page.machines.remote_servers_changed.connect(lambda: self.loading.remote_servers_changed())
        self.loading.remotes_listed.connect(self.settings_page.machines.refresh_remotes)
        self.loading.context_model_changed.connect(self.settings_page.set_context_model)
        self.add_page("Settings", self.settings_page)
        self.menus = WindowMenus(self, self.chat_page, self.chat_stack, self.switcher)  # and keys
        # the status gets the window's full width at its bottom: the top bar has little room left at 1024 wide,
        # and a status that changes never moves the controls or re-wraps the chat (StatusLabel)
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().setSizeGripEnabled(False)

        self.bridge.busy_changed.connect(self.menus.busy_changed)
        self.model_selector.refresh()
        # the bench spec matrix for the chat's model (issue 14)
        self.bench_page = BenchmarkPage(self.model_selector.bench_model)
        self.add_page("Benchmark", self.bench_page)
        self.gguf_drop = GgufDrop(self, self.add_model_file)  # a .gguf dropped on the window joins your models
        self.gguf_drop.watch(self.chat_page.chat.input)  # also one dropped on the message box

    # ------------------------------------------------------------------ your own models (issue 14)

    def add_model_file(self, path: Path) -> None:
        """A ``.gguf`` dropped on the window: add it on the Models page (which shows how that went)."""
        self.show_page("Models")
        self.models_page.local.add_path(path)

    # ------------------------------------------------------------------ pages

    def add_page(self, name: str, widget: QWidget) -> None:
        """Add a page to the rail (``PageSwitcher.add_page``); hidden pages keep running."""
        self.switcher.add_page(name, widget)

    def show_page(self, name: str) -> None:
        self.switcher.show_page(name)

    def page_names(self) -> list[str]:
        return self.switcher.page_names()

    def current_page(self) -> str:
        return self.switcher.current_page()

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
        else:
            self.loading.start()
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
        self.loading.use_demo(demo)

    def _first_run_build(self, flavor: str) -> None:
        """The real model: build the proposed backend on the Backend page (its progress shows there)."""
        self._first_run_answered()
        self.show_page("Backend")
        if not self.backend_page.building:
            self.backend_page.build("cuda" if flavor == "cuda" else "cpu")

    def _first_run_models(self) -> None:
        self._first_run_answered()
        self.show_page("Models")

    # ------------------------------------------------------------------ the chat's model (ModelLoading)

    def chat_with(self, folder: str, quant: str) -> None:
        """"Chat with it now" on the Models page: the Chat page, then the model just downloaded is loaded."""
        self.show_page("Chat")
        self.chat_stack.setCurrentIndex(0)
        self.loading.chat_with(Path(folder), quant)

    def _remember_model(self, key: str) -> None:
        """The chat's model was chosen: kept in the settings for the next start."""
        if self.settings.chat_model != key:
            self.settings = replace(self.settings, chat_model=key)
            app_settings.save(self.settings)
            self.settings_page.keep_chat_model(key)

    def apply_settings(self, settings: Settings) -> None:
        """New settings from the Settings page: the theme now; a change to what the engine loads with (depth,
        context, threads, GPU layers, …) reloads the chat's model (``ModelLoading.settings_saved`` says when), and
        the page says which."""
        folder_changed = settings.models_path() != self.settings.models_path()
        engine_changed = app_settings.engine_fields(settings) != app_settings.engine_fields(self.settings)
        self.settings = settings
        self.chat_page.default_overflow = settings.overflow_policy  # new chats start with it
        self.models_page.set_context_size(app_settings.fit_context(settings))  # the fit advice sizes what it loads
        note = self.loading.settings_saved(engine_changed, folder_changed)
        if note:
            self.settings_page.note.setText(self.settings_page.note.text() + " " + note)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            colours = theme.apply(app, settings.theme)
            self.chat_page.set_palette(colours)
            self.nav.set_palette(colours)  # the rail's icons and the pin marks follow the theme

    # ------------------------------------------------------------------ remembered state

    def current_state(self) -> WindowState:
        """Where the user left things: geometry, splitter, the HUD's place, drafting mode, the open chat."""
        chat = self.chat_page
        return WindowState(geometry=_base64(self.saveGeometry()), splitter=_base64(chat.chat_splitter.saveState()),
                           hud_corner=chat.chat.hud_corner, hud_collapsed=chat.chat.hud.collapsed,
                           drafting_mode=self.model_selector.mode(),
                           history=str(self.history.path.resolve()), conversation=chat.conversation_id or 0)

    def remember_state(self) -> None:
        """Save the state for the next start (on each change, and on close: a killed app keeps the last)."""
        if self.remembers:
            window_state.save(self.current_state())

    def restore_state(self, state: WindowState | None = None) -> None:
        """Put things back where the last session left them (``run`` does, before the window shows): geometry,
        splitter, the HUD's corner and fold, the drafting mode (loaded by ``start``), and the chat that was open
        when it is still in this history file."""
        state = state or window_state.load()
        if state.geometry:
            self.restoreGeometry(QByteArray.fromBase64(state.geometry.encode("ascii")))
            window_state.clamp_to_screen(self)  # never larger than the screen it opens on
        if state.splitter:
            self.chat_page.chat_splitter.restoreState(QByteArray.fromBase64(state.splitter.encode("ascii")))
        self.chat_page.chat.set_hud_placement(state.hud_corner, state.hud_collapsed)
        self.model_selector.restore_mode(state.drafting_mode)  # no load yet: ``start`` loads in this mode
        if state.conversation and state.history == str(self.history.path.resolve()):
            try:
                self.history.get(state.conversation)
            except HistoryError:  # deleted since (``python -m app history delete``): a new chat
                return
            self.chat_page.open_conversation(state.conversation)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.remember_state()
        self.build_job.cancel()  # nothing half-built is installed
        self.settings_page.machines.close_with_app()  # the served llama-server stops unless it should stay
        self.chat_page.close_with_app()  # a reply cut by quitting is saved marked "interrupted"
        self.bridge.close()
        wait_for_all(10_000)
        if self._owns_history:
            self.history.close()
        super().closeEvent(event)


def _base64(data: QByteArray) -> str:
    return bytes(data.toBase64().data()).decode("ascii")


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
