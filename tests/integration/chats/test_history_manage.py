"""Chat management in the history (issue 13, build 2): pinned chats stay at the top, renaming keeps a chat's
place, a version-2 database gains the pin column and keeps its chats, exports carry the pin, and the
``history rename|pin|unpin|delete`` commands do from a terminal what the sidebar does. Real SQLite."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.chats.history import SCHEMA_VERSION, HistoryError, HistoryStore


def _old_version_2(path: Path) -> None:
    """A history as the app wrote it before pinning (schema version 2: drafts, no pinned column)."""
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL "
        "DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES "
        "conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT, "
        "created REAL NOT NULL, complete INTEGER NOT NULL DEFAULT 1, drafts TEXT);"
        "INSERT INTO conversations VALUES (1, 'older chat', '', '{}', 1.0, 1.0);"
        "INSERT INTO conversations VALUES (2, 'newer chat', '', '{}', 2.0, 2.0);"
        "INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 1.0, 1, NULL);"
        "INSERT INTO messages VALUES (2, 1, 'assistant', 'hi there', NULL, 1.0, 1, '[[0, 2]]');"
        "PRAGMA user_version = 2;")
    db.commit()
    db.close()


def test_a_version_2_history_gains_pins_and_keeps_its_chats(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    _old_version_2(path)
    store = HistoryStore(path)
    assert [(c.title, c.pinned) for c in store.conversations()] == [("newer chat", False), ("older chat", False)]
    assert [(m.content, m.drafts) for m in store.messages(1)] == [("hello", None), ("hi there", ((0, 2),))]
    store.set_pinned(1, True)
    assert [c.title for c in store.conversations()] == ["older chat", "newer chat"]
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    reopened = HistoryStore(path)  # the migration ran once: opening again changes nothing
    assert reopened.get(1).pinned and not reopened.get(2).pinned
    reopened.close()


def test_pinned_chats_stay_on_top_also_in_search_and_renaming_keeps_the_order(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    first = store.create_conversation("bread recipes")
    second = store.create_conversation("lighthouse keeper")
    third = store.create_conversation("bread again")
    store.add_message(third, "user", "sourdough starter")
    assert [c.id for c in store.conversations()] == [third, second, first]
    store.set_pinned(first, True)
    assert [c.id for c in store.conversations()] == [first, third, second]
    assert [c.id for c in store.conversations("bread")] == [first, third]
    store.add_message(second, "user", "newest message")  # the newest unpinned chat still comes after the pin
    assert [c.id for c in store.conversations()] == [first, second, third]
    store.rename(third, "Sourdough")
    assert store.get(third).title == "Sourdough"
    assert [c.id for c in store.conversations()] == [first, second, third]  # a rename does not move it
    store.set_pinned(first, False)
    assert [c.id for c in store.conversations()] == [second, third, first]
    with pytest.raises(HistoryError, match="no conversation 999"):
        store.rename(999, "nothing")
    with pytest.raises(HistoryError, match="no conversation 999"):
        store.set_pinned(999, True)
    store.close()


def test_an_export_carries_the_pin_and_an_older_export_imports_unpinned(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    pinned = store.create_conversation("keep me on top")
    store.add_message(pinned, "user", "hello")
    store.set_pinned(pinned, True)
    exported = store.export_json([pinned])
    assert exported["conversations"][0]["pinned"] is True
    other = HistoryStore(tmp_path / "other.sqlite3")
    [copy] = other.import_json(exported)
    assert other.get(copy).pinned
    older = json.loads(json.dumps(exported))
    del older["conversations"][0]["pinned"]  # an export written before pinning existed
    [plain] = other.import_json(older)
    assert not other.get(plain).pinned
    store.close()
    other.close()


def _history(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "history", *args], capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=120)


def test_history_rename_pin_unpin_and_delete_commands() -> None:
    store = HistoryStore()  # the test session's own data folder, which the commands use too
    older = store.create_conversation("an older chat")
    newer = store.create_conversation("a newer chat")
    store.close()

    renamed = _history("rename", str(older), "  Lighthouse   notes ")
    assert renamed.returncode == 0 and "Lighthouse notes" in renamed.stdout
    assert json.loads(_history("pin", str(older), "--json").stdout) == {"pinned": older}
    listed = json.loads(_history("list", "--json").stdout)
    assert [c["id"] for c in listed][:2] == [older, newer]
    assert listed[0]["title"] == "Lighthouse notes" and listed[0]["pinned"] is True
    assert "[pinned] Lighthouse notes" in _history("list").stdout
    assert _history("unpin", str(older)).returncode == 0
    assert [c["id"] for c in json.loads(_history("list", "--json").stdout)][:2] == [newer, older]

    blank = _history("rename", str(older), "   ")
    assert blank.returncode == 1 and "cannot be empty" in blank.stderr
    missing = _history("pin", "999999")
    assert missing.returncode == 1 and "no conversation 999999" in missing.stderr
    assert _history("delete", str(older)).returncode == 0
    assert older not in [c["id"] for c in json.loads(_history("list", "--json").stdout)]
    assert _history("rename", str(older), "gone").returncode == 1
