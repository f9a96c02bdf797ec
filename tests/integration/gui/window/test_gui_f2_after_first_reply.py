"""F2 right after a chat's first reply renames it (first-hour issue: the key was sometimes ignored then). The
cause: opening the Chats menu greys Rename while no saved chat is open (a new chat), and the greyed action, F2
with it, stayed so until the menu opened again, so the first F2 after the first reply did nothing.

A real window offscreen on a real history, the demo model answering through the real engine.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QLineEdit
from pytestqt.qtbot import QtBot

from app.backend.registry import BackendManifest
from app.chats.history import HistoryStore
from app.engine.config import ChatOptions
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("f2-demo"))


def _editor(win: MainWindow) -> QLineEdit | None:
    """The sidebar's in-place title editor, while it is open."""
    return next((e for e in win.chat_page.sidebar.list.viewport().findChildren(QLineEdit) if e.isVisible()), None)


def _activate(qtbot: QtBot, win: MainWindow) -> None:
    """Make the window the active one, as a window manager does: its shortcuts need it."""
    win.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win, timeout=WAIT_MS)


def test_f2_on_the_chat_list_right_after_the_first_reply_opens_the_editor(
        qtbot: QtBot, store: HistoryStore, patched_backend: BackendManifest, demo: DemoModel,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with open_window(qtbot, store, show=False) as win:
        win.resize(1024, 700)
        win.show()
        qtbot.waitExposed(win)
        _activate(qtbot, win)
        menu = win.menuBar().actions()[0].menu()
        assert menu is not None and menu.title() == "&Chats"
        menu.popup(win.mapToGlobal(QPoint(20, 20)))  # a look at the Chats menu before the first message
        qtbot.waitUntil(menu.isVisible, timeout=WAIT_MS)
        assert not win.menus.rename_action.isEnabled()  # greyed in the menu: no saved chat to rename yet
        menu.hide()
        qtbot.waitUntil(lambda: not menu.isVisible(), timeout=WAIT_MS)
        _activate(qtbot, win)  # the window is active again once its menu closed (offscreen Qt needs telling)
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        monkeypatch.setattr(win.chat_page, "options", ChatOptions(max_tokens=24))
        send_and_wait(qtbot, win, "Name three colours.")
        conversation = win.chat_page.conversation_id
        assert conversation is not None and win.chat_page.sidebar.conversation_ids() == [conversation]
        sidebar = win.chat_page.sidebar
        qtbot.keyClick(sidebar.list, Qt.Key.Key_F2)  # at once, on the chat list
        qtbot.waitUntil(lambda: _editor(win) is not None, timeout=WAIT_MS)
        editor = _editor(win)
        assert editor is not None and editor.text() == store.get(conversation).title
        editor.selectAll()
        qtbot.keyClicks(editor, "Colours")
        qtbot.keyClick(editor, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: store.get(conversation).title == "Colours", timeout=WAIT_MS)
