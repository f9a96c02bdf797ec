"""Two of the first hour's rough edges in the chat (issue 36 item 9), in the real window on a real SQLite history
with no model loaded: typed but unsent text stays with its chat (it does not follow you into another one), and a
reply saved unfinished reads "interrupted" in its footer when the chat is opened."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.messages import INTERRUPTED_STATS, STOP_WORDS, UNFINISHED_WORDS, entry_from_stored
from app.gui.main import MainWindow
from app.settings.app_settings import Settings


def test_typed_text_stays_with_its_chat(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    one, two = store.create_conversation("one"), store.create_conversation("two")
    win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
    qtbot.addWidget(win)
    try:
        page, box = win.chat_page, win.chat_page.chat.input
        page.open_conversation(one)
        box.setPlainText("half a question for chat one")
        page.open_conversation(two)
        assert box.toPlainText() == ""  # it did not follow into chat two
        box.setPlainText("for two")
        page.new_chat()
        assert box.toPlainText() == ""
        box.setPlainText("a new chat's first words")
        page.open_conversation(one)
        assert box.toPlainText() == "half a question for chat one"
        page.open_conversation(two)
        assert box.toPlainText() == "for two"
        page.new_chat()
        assert box.toPlainText() == "a new chat's first words"
        box.clear()  # emptied: nothing kept
        page.open_conversation(one)
        assert page.draft_of(None) == ""

        store.add_message(two, "user", "sent before")
        page.open_conversation(two)
        page.chat.start_edit(0)  # an edit of a sent message is that message's, not a draft
        assert box.toPlainText() == "sent before"
        page.open_conversation(one)
        assert page.draft_of(two) == ""  # not kept as chat two's draft
        assert box.toPlainText() == "half a question for chat one"
    finally:
        win.close()
        store.close()


def test_an_unfinished_reply_says_interrupted(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        chat = store.create_conversation("cut")
        store.add_message(chat, "user", "Tell me a long story.")
        quit_cut = store.add_message(chat, "assistant", "Once upon a time", dict(INTERRUPTED_STATS), complete=False)
        killed = store.add_message(chat, "assistant", "There was", complete=False)
        done = store.add_message(chat, "assistant", "The end.", {"generated": 3, "decode_tps": 9.0,
                                                                 "stop_reason": "eos"})
        by_id = {m.id: m for m in store.messages(chat)}
        assert entry_from_stored(by_id[quit_cut]).footer == STOP_WORDS["interrupted"]
        assert "closed before the reply ended" in STOP_WORDS["interrupted"]
        assert entry_from_stored(by_id[killed]).footer == UNFINISHED_WORDS
        assert "interrupted" not in entry_from_stored(by_id[done]).footer
        win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
        qtbot.addWidget(win)
        try:
            win.chat_page.open_conversation(chat)
            assert "interrupted: the app was closed before the reply ended" in win.chat_page.chat.transcript_text()
        finally:
            win.close()
    finally:
        store.close()
