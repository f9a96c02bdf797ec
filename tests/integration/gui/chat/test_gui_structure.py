"""The window's structure (issue 16): the Chat page and the model selector are their own modules, the main
window only navigates and wires them; and ops.py is the only GUI module that starts threads. The chat part runs
the real engine on the demo model, as the other chat tests do."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import ast
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

import app.gui
from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui import main as gui_main
from app.gui.chat.chat_page import ChatPage
from app.gui.chat.chat_transfer import ChatTransfer
from app.gui.main import MainWindow
from app.gui.models.model_selector import ModelSelector
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
GUI = Path(app.gui.__file__).parent
THREAD_NAMES = {"Thread", "QThread", "QThreadPool", "ThreadPoolExecutor", "start_new_thread"}
THREAD_MODULES = {"_thread", "concurrent.futures"}


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("structure-demo"))


def test_the_chat_page_and_the_model_selector_are_their_own_classes_in_their_own_modules() -> None:
    assert ChatPage.__module__ == "app.gui.chat.chat_page"
    assert ModelSelector.__module__ == "app.gui.models.model_selector"
    for chat_behaviour in ("send", "regenerate", "resend_edited", "new_chat", "open_conversation", "load",
                           "set_chat_settings"):
        assert hasattr(ChatPage, chat_behaviour) and not hasattr(MainWindow, chat_behaviour), chat_behaviour
    for transfer in ("export_chats", "import_chats"):  # the chat page's, in a module of their own
        assert hasattr(ChatTransfer, transfer) and not hasattr(MainWindow, transfer), transfer
    for choice in ("config_for", "mode_enabled", "bench_model", "chosen_remote", "refresh"):
        assert hasattr(ModelSelector, choice) and not hasattr(MainWindow, choice), choice
    for dead in ("SYSTEM_PROMPT", "_escape", "Banner", "DraftingBanner"):
        assert not hasattr(gui_main, dead), dead


def test_the_window_holds_one_of_each_and_a_message_through_its_chat_page_gets_a_reply(
        qtbot: QtBot, tmp_path: Path, patched_backend: object, demo: DemoModel) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    try:
        assert isinstance(win.chat_page, ChatPage) and isinstance(win.model_selector, ModelSelector)
        assert win.findChildren(ChatPage) == [win.chat_page]
        assert win.findChildren(ModelSelector) == [win.model_selector]
        assert win.chat_page.isAncestorOf(win.model_selector)  # the selector sits in the chat's top bar
        win.show()
        done: list[dict[str, Any]] = []
        win.bridge.done.connect(done.append)
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
        win.chat_page.send("Hello there")
        qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
        assert done[0]["text"].strip()
        assert [e.role for e in win.chat_page.chat.entries] == ["user", "assistant"]
        assert win.chat_page.conversation_id is not None
        saved = store.messages(win.chat_page.conversation_id)
        assert [m.role for m in saved] == ["user", "assistant"] and saved[1].content.strip()
        assert win.status.text() == "Ready"  # the page's status reaches the window's status bar
    finally:
        win.close()
        store.close()


def _thread_uses(source: str) -> list[str]:
    """The thread-making names and modules a module's source uses (``threading.Event`` and the like are fine)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in THREAD_NAMES:
            found.append(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in THREAD_NAMES:
            found.append(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found += [a.name for a in node.names if a.name in THREAD_NAMES]
            if node.module in THREAD_MODULES:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in THREAD_MODULES]
    return found


def test_no_gui_module_but_ops_starts_threads() -> None:
    assert _thread_uses((GUI / "shell" / "ops.py").read_text(encoding="utf-8"))  # the check sees the one that does
    starts = {path.name: uses for path in sorted(GUI.rglob("*.py")) if path.name != "ops.py"
              if (uses := _thread_uses(path.read_text(encoding="utf-8")))}
    assert starts == {}
