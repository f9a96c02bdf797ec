"""Replies reopened from the history keep their accepted-draft tint and name the drafting mode that made them
(issue 13, defect 11 and "each reply's footer names the drafting mode"): the real engine on the demo model, a
real SQLite history, and a window reopened on it; an older history file (no provenance column) still opens."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import SCHEMA_VERSION, HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.chat.chat_view import DRAFT_TINT, ChatView
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("tint-demo"))


def tinted_text(view: ChatView) -> str:
    """The transcript's characters drawn on the accepted-draft tint, in order."""
    out: list[str] = []
    block = view.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().background().color() == DRAFT_TINT:
                out.append(fragment.text())
            it += 1
        block = block.next()
    return "".join(out)


def test_a_reopened_reply_keeps_its_draft_tint_and_its_drafting_mode(qtbot: QtBot, tmp_path: Path,
                                                                     patched_backend: object,
                                                                     demo: DemoModel) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.model_selector.restore_mode("sidecar-d2t")  # a drafted reply (Auto, the default, starts measuring off)
    win.show()
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.loading.use_demo(demo)
    qtbot.waitUntil(lambda: win.chat_page.ready, timeout=WAIT_MS)
    win.chat_page.send("Tell me how FastMTP drafting works.")
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    assert "draft" in done[0]["provenance"]
    live_tint = tinted_text(win.chat_page.chat)
    live_footer = win.chat_page.chat.entries[-1].footer
    assert live_tint.strip()
    assert "FastMTP d2t" in live_footer and "depth 3" in live_footer  # the mode that produced the reply
    conversation = win.chat_page.conversation_id
    assert conversation is not None
    saved = store.messages(conversation)[-1]
    assert saved.drafts and all(saved.content[a:b] for a, b in saved.drafts)
    win.close()
    store.close()

    reopened_store = HistoryStore(path)  # a restart: a new window on the same history file
    reopened = MainWindow(history=reopened_store)
    qtbot.addWidget(reopened)
    try:
        reopened.chat_page.open_conversation(conversation)
        assert tinted_text(reopened.chat_page.chat) == live_tint
        assert reopened.chat_page.chat.entries[-1].footer == live_footer
        assert "FastMTP d2t" in reopened.chat_page.chat.transcript_text()
        reopened.chat_page.chat.show_drafts.setChecked(False)  # the overlay toggle still works on a reopened reply
        assert tinted_text(reopened.chat_page.chat) == ""
    finally:
        reopened.close()
        reopened_store.close()


def test_an_older_history_without_provenance_opens_untinted_and_is_migrated(qtbot: QtBot, tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)  # the schema of migration 1: a ``complete`` column, no provenance
    old.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL "
        "DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES "
        "conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT, "
        "created REAL NOT NULL, complete INTEGER NOT NULL DEFAULT 1);"
        "INSERT INTO conversations VALUES (1, 'old chat', '', '{}', 1.0, 1.0);"
        "INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 1.0, 1);"
        "INSERT INTO messages VALUES (2, 1, 'assistant', 'An old reply.', "
        "'{\"generated\": 4, \"decode_tps\": 12.5}', 1.0, 1);"
        "PRAGMA user_version = 1;")
    old.commit()
    old.close()
    store = HistoryStore(path)
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    try:
        win.chat_page.open_conversation(1)
        assert [e.text for e in win.chat_page.chat.entries] == ["hello", "An old reply."]
        assert tinted_text(win.chat_page.chat) == "" and "12.5 tok/s" in win.chat_page.chat.entries[-1].footer
        assert store.messages(1)[-1].drafts is None
        reply = store.add_message(1, "assistant", "drafted words", {"generated": 2}, drafts=[(0, 7)])
        assert store.messages(1)[-1].drafts == ((0, 7),)
        exported = store.export_json([1])
        assert json.loads(json.dumps(exported))["conversations"][0]["messages"][-1]["drafts"] == [[0, 7]]
        (copy,) = store.import_json(json.loads(json.dumps(exported)))
        assert store.messages(copy)[-1].drafts == ((0, 7),)
        store.update_message(reply, "drafted words", drafts=[(0, 7), (8, 99)])  # out of range: dropped
        assert store.messages(1)[-1].drafts == ((0, 7),)
    finally:
        win.close()
        store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2


def test_a_reply_whose_final_text_drops_the_end_of_turn_piece_keeps_its_tint(qtbot: QtBot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show()
    view.begin_reply()
    pieces = [("Hello", "target"), (" there", "draft"), (" friend", "draft"), ("!", "target"), ("<|im_end|>", "target")]
    for piece, provenance in pieces:
        view.append_token({"kind": "token", "piece": piece, "provenance": provenance, "stats": {}})
    entry = view.finish_reply({"kind": "done", "text": "Hello there friend!", "stats": {"generated": 5}})
    assert entry is not None and entry.text == "Hello there friend!" and entry.final is None
    assert entry.draft_ranges() == [(5, 18)]
    assert tinted_text(view).replace("\u00a0", " ") == " there friend"
    assert "<|im_end|>" not in view.transcript_text()
    view.begin_reply()  # a final text that is not the streamed one replaces it, untinted
    view.append_token({"kind": "token", "piece": "Draft words", "provenance": "draft", "stats": {}})
    other = view.finish_reply({"kind": "done", "text": "Other words", "stats": {"generated": 2}})
    assert other is not None and other.text == "Other words" and other.draft_ranges() is None
