"""Editing a message branches like regenerate keeps versions, and a reply cut by quitting is marked (issue 36
item 9). The real window offscreen on a real SQLite history, the real engine on the demo model: an edited
message shows ‹ 2/2 ›, its ‹ brings back the old message with the reply and the turns that followed it (nothing
destroyed), › the new branch; the engine is sent the branch shown; closing the window while a reply streams saves
it marked "interrupted", which its footer says when the chat is opened again."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from dataclasses import replace
from typing import Any

import pytest
from PySide6.QtCore import QUrl
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.chat_template import Message
from app.engine.config import ChatOptions
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("branches-demo"))


def _edit_and_wait(qtbot: QtBot, win: MainWindow, index: int, text: str) -> dict[str, Any]:
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.chat_page.chat.activate_link(QUrl(f"edit:{index}"))
    win.chat_page.chat.input.setPlainText(text)
    win.chat_page.chat._submit()
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    win.bridge.done.disconnect(done.append)
    return done[0]


def test_an_edit_keeps_the_old_turns_as_a_version(qtbot: QtBot, store: HistoryStore, patched_backend: object,
                                                  demo: DemoModel) -> None:
    with open_window(qtbot, store) as win:
        page, view = win.chat_page, win.chat_page.chat
        sent: list[list[Message]] = []
        generate = win.bridge.generate

        def recording(messages: list[Message], options: ChatOptions, conversation: str | None = None) -> None:
            sent.append(list(messages))
            generate(messages, options, conversation)

        win.bridge.generate = recording  # type: ignore[method-assign]
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: page.ready, timeout=WAIT_MS)
        page.set_chat_settings(replace(page.chat_settings, max_tokens=12))
        send_and_wait(qtbot, win, "About lighthouses?")
        send_and_wait(qtbot, win, "And their keepers?")
        chat = page.conversation_id
        assert chat is not None
        old_turns = [e.text for e in view.entries]
        assert len(old_turns) == 4

        _edit_and_wait(qtbot, win, 0, "About ships?")
        assert [e.role for e in view.entries] == ["user", "assistant"] and view.entries[0].text == "About ships?"
        assert sent[-1][-1] == Message("user", "About ships?") and len([m for m in sent[-1] if m.role == "user"]) == 1
        assert view.entries[0].versions == 2 and view.entries[0].version == 2
        assert "2/2" in view.transcript_text()

        view.activate_link(QUrl("older:0"))  # ‹: the old question and everything that followed it, intact
        assert [e.text for e in view.entries] == old_turns
        assert "1/2" in view.transcript_text()
        view.activate_link(QUrl("newer:0"))
        assert view.entries[0].text == "About ships?" and len(view.entries) == 2
        assert store.messages(chat)[0].content == "About ships?"

        view.activate_link(QUrl("older:0"))  # going on from the old branch sends the old turns
        send_and_wait(qtbot, win, "Thanks!")
        assert [m.content for m in sent[-1] if m.role == "user"] == ["About lighthouses?", "And their keepers?",
                                                                     "Thanks!"]


def test_a_reply_cut_by_quitting_is_saved_and_shown_interrupted(qtbot: QtBot, store: HistoryStore,
                                                                 patched_backend: object, demo: DemoModel) -> None:
    win = MainWindow(history=store, remembers=False)
    qtbot.addWidget(win)
    win.show()
    page = win.chat_page
    win.loading.use_demo(demo)
    qtbot.waitUntil(lambda: page.ready, timeout=WAIT_MS)
    page.set_chat_settings(replace(page.chat_settings, max_tokens=100_000))
    page.send("Tell me everything about lighthouses.")
    qtbot.waitUntil(lambda: bool((entry := page.chat.streaming_entry()) is not None and entry.text.strip()),
                    timeout=WAIT_MS)
    chat = page.conversation_id
    assert chat is not None
    win.close()  # while the reply streams
    reply = store.messages(chat)[-1]
    assert reply.role == "assistant" and not reply.complete and reply.content.strip()
    assert reply.stats is not None and reply.stats["stop_reason"] == "interrupted"

    with open_window(qtbot, store) as again:
        again.chat_page.open_conversation(chat)
        assert again.chat_page.chat.entries[-1].footer.startswith("interrupted")
        assert "interrupted: the app was closed before the reply ended" in again.chat_page.chat.transcript_text()
