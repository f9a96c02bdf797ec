"""The main window: the rail of pages (Chat, Models, Backend, Benchmark, Settings), the first-run panel in the
Chat page's place, the menus, the status bar, the remembered window state, and the wiring between the pages;
and ``run()``, the entry point.

The chat itself is ``ChatPage`` (app/gui/chat/chat_page.py), the model and drafting-mode choice ``ModelSelector``
(app/gui/models/model_selector.py); whether Qt can open a window here at all, ``qt_start_problem``
(app/gui/shell/startup.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSizePolicy,
    QStackedWidget,
    QWidget,
)

from app.chats.history import HistoryError, HistoryStore
from app.core.errors import FastMTPError
from app.core.resources import resources_dir
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
from app.gui.shell.about_dialog import AboutDialog, ShortcutsDialog
from app.gui.shell.build_job import BuildJob
from app.gui.shell.engine_bridge import EngineBridge
from app.gui.shell.nav_rail import NavRail
from app.gui.shell.ops import wait_for_all
from app.gui.shell.window_state import WindowState
from app.settings import app_settings
from app.settings.app_settings import Settings

NOTICE_MS = 5_000  # how long a status notice (an event, not a state) stays in the status bar


class StatusLabel(QLabel):
    """The window's one-line status (in the status bar). Its text never changes the layout: the label takes
    the room it is given (it asks for none), elides what does not fit, and keeps the whole text in ``text()``
    and the tooltip. A plain QLabel asked for its text's width, so "Loading the model…" re-laid out the
    window and re-wrapped the chat."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._lasting = ""  # the state a notice covers for a while ("Ready", "Generating…")
        self.notice_timer = QTimer(self)  # a notice's time: then the lasting text is back
        self.notice_timer.setSingleShot(True)
        self.notice_timer.timeout.connect(lambda: self._show(self._lasting))
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def setText(self, text: str) -> None:
        """A lasting state: shown until the next one (it also ends a notice shown now, being newer)."""
        self.notice_timer.stop()
        self._lasting = text
        self._show(text)

    def show_notice(self, text: str, msecs: int | None = None) -> None:
        """Something that happened ("Chat deleted", "Exported 2 chats"): shown for ``msecs`` (``NOTICE_MS``),
        then the lasting state is back, as QStatusBar's temporary messages do; it must not stay for good."""
        self._show(text)
        self.notice_timer.start(NOTICE_MS if msecs is None else msecs)

    def _show(self, text: str) -> None:
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
        self._add_menus()
        # the status gets the window's full width at its bottom: the top bar has little room left at 1024 wide,
        # and a status that changes never moves the controls or re-wraps the chat (StatusLabel)
        self.statusBar().addWidget(self.status, 1)
        self.statusBar().setSizeGripEnabled(False)

        self.bridge.busy_changed.connect(self._busy_changed)
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

    def _busy_changed(self, busy: bool) -> None:
        # Esc: only while streaming
        self.stop_action.setEnabled(busy and self.chat_page.chat.streaming_entry() is not None)

    # ------------------------------------------------------------------ menus

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
        chat = self.chat_page
        menu = self.menuBar().addMenu("&Chats")
        menu.addAction(self._action("New chat", self.new_chat_with_keys, "Ctrl+N",
                                    "a new chat, the cursor in the message box"))
        menu.addAction(self._action("Search chats", self.search_chats, "Ctrl+F", "search the chats"))
        self.stop_action = self._action("Stop the reply", chat.stop_reply, "Esc", "stop the reply as it streams")
        self.stop_action.setEnabled(False)
        menu.addAction(self.stop_action)
        menu.addSeparator()
        self.rename_action = self._action("Rename chat", self.rename_open_chat, "F2", "rename the open chat")
        self.pin_action = self._action("Pin chat to the top", self.toggle_pin_open_chat)
        self.delete_action = self._action(f"Delete chat…\t{chat.sidebar.delete_action.shortcut().toString()}",
                                          lambda: chat.sidebar.delete(chat.conversation_id))
        self._shortcut_rows.append(("Del", "delete the chat selected in the list (it asks first)"))
        for action in (self.rename_action, self.pin_action, self.delete_action):
            menu.addAction(action)
        menu.addSeparator()
        for label, slot in (("Export this chat as Markdown…", lambda: chat.export_dialog("md", current=True)),
                            ("Export this chat as JSON…", lambda: chat.export_dialog("json", current=True)),
                            ("Export all chats as Markdown…", lambda: chat.export_dialog("md", current=False)),
                            ("Export all chats as JSON…", lambda: chat.export_dialog("json", current=False)),
                            ("Import chats from JSON…", chat.import_dialog)):
            menu.addAction(self._action(label, slot))
        menu.addSeparator()
        menu.addAction(self._action("Quit", self.close, "Ctrl+Q", "quit FastMTP Chat"))
        menu.aboutToShow.connect(self._update_chat_actions)
        menu.aboutToHide.connect(self._chat_keys_live)
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
        self.chat_page.new_chat()

    def search_chats(self) -> None:
        """Ctrl+F: the Chat page, the cursor in the sidebar's search box (its text selected, to type over)."""
        self.show_page("Chat")
        if self.chat_stack.currentIndex() == 0:
            self.chat_page.focus_search()

    def rename_open_chat(self) -> None:
        """F2: the open chat's title becomes an edit box in the sidebar (Enter keeps it, Esc does not)."""
        chat = self.chat_page
        if chat.conversation_id is not None and chat.sidebar.isEnabled():
            self.show_page("Chat")
            chat.sidebar.begin_rename(chat.conversation_id)

    def toggle_pin_open_chat(self) -> None:
        self.chat_page.sidebar.toggle_pin(self.chat_page.conversation_id)

    def _update_chat_actions(self) -> None:
        """The Chats menu as it opens: rename, pin and delete act on the open, saved chat, not while a reply
        streams (the sidebar is disabled then); pin reads "Unpin" for a pinned chat."""
        sidebar, open_chat = self.chat_page.sidebar, self.chat_page.conversation_id
        usable = sidebar.item_for(open_chat) is not None and sidebar.isEnabled()
        for action in (self.rename_action, self.pin_action, self.delete_action):
            action.setEnabled(usable)
        self.pin_action.setText("Unpin chat" if sidebar.is_pinned(open_chat) else "Pin chat to the top")

    def _chat_keys_live(self) -> None:
        """The Chats menu closed: its greyed items work again, F2 with them. Greyed for good, a look at the menu
        in a new chat left F2 dead after the first reply until the menu opened again; each action checks for
        itself whether it can act (``rename_open_chat``, the sidebar's ``toggle_pin`` and ``delete``)."""
        for action in (self.rename_action, self.pin_action, self.delete_action):
            action.setEnabled(True)

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


# ----------------------------------------------------------------------------- who the app is

APP_ID = "fastmtp-chat"  # application, organization and .desktop file name: the X11 window class
APP_TITLE = "FastMTP Chat"


def qt_argv(argv: Sequence[str]) -> list[str]:
    """The arguments for QApplication: ``argv[0]`` becomes ``fastmtp-chat``, because Qt's xcb platform names
    the window's WM_CLASS instance after it (``__main__.py`` under ``python -m app``)."""
    return [APP_ID, *list(argv)[1:]]


def app_icon() -> QIcon:
    """The app's icon from ``resources/icons/`` (the SVG and its PNG sizes); a checkout and a frozen bundle
    both find it through ``app.core.resources``."""
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
