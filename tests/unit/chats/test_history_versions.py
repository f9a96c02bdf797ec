"""A regenerated reply keeps its earlier versions in the history (first-hour issue, item 1): ``add_version`` hides
the reply and adds a new version, ``versions`` lists them, ``show_version`` picks the one the conversation shows
and goes on from (``messages``), and a history written before versions (schema 3) opens with its chats intact.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.chats.history import SCHEMA_VERSION, HistoryStore


def _old_version_3(path: Path) -> None:
    """A history as the app wrote it before reply versions (schema version 3: pinned, no version columns)."""
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL "
        "DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL, "
        "pinned INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES "
        "conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT, "
        "created REAL NOT NULL, complete INTEGER NOT NULL DEFAULT 1, drafts TEXT);"
        "INSERT INTO conversations VALUES (1, 'a chat', '', '{}', 1.0, 1.0, 0);"
        "INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 1.0, 1, NULL);"
        "INSERT INTO messages VALUES (2, 1, 'assistant', 'hi there', NULL, 1.0, 1, NULL);"
        "PRAGMA user_version = 3;")
    db.commit()
    db.close()


def test_a_version_3_history_opens_with_every_message_shown(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _old_version_3(path)
    store = HistoryStore(path, check=True)
    assert [m.content for m in store.messages(1)] == ["hello", "hi there"]
    assert [m.content for m in store.versions(2)] == ["hi there"]  # one version: itself
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6


def test_regenerate_keeps_the_earlier_reply_as_a_version(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    chat = store.create_conversation("colours")
    store.add_message(chat, "user", "Name a colour.")
    first = store.add_message(chat, "assistant", "Red.")
    second = store.add_version(first)
    store.update_message(second, "Blue.", {"generated": 2}, complete=True)
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Blue."]  # the new one is shown
    assert [m.content for m in store.versions(first)] == ["Red.", "Blue."] == \
        [m.content for m in store.versions(second)]
    third = store.add_version(second)
    store.update_message(third, "Green.", complete=True)
    assert [m.content for m in store.versions(first)] == ["Red.", "Blue.", "Green."]
    store.show_version(first)  # the user picked version 1 of 3: the conversation goes on from it
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Red."]
    store.add_message(chat, "user", "Another?")
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Red.", "Another?"]
    store.close()
    reopened = HistoryStore(path)  # a reopened chat still has them, and the one picked
    assert [m.content for m in reopened.messages(chat)] == ["Name a colour.", "Red.", "Another?"]
    assert [m.content for m in reopened.versions(third)] == ["Red.", "Blue.", "Green."]
    reopened.close()
