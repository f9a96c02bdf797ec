"""Chat history on real SQLite: round trip, search, export/import, and surviving a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.chats.history import SCHEMA_VERSION, HistoryError, HistoryStore

STATS = {"decode_tps": 97.5, "acceptance": 0.9, "tokens_per_pass": 3.3}


def _chat(store: HistoryStore) -> int:
    conv = store.create_conversation("FastMTP questions", "You are terse.", {"mode": "sidecar", "n_max": 3})
    store.add_message(conv, "user", "What is d2t?")
    reply = store.add_message(conv, "assistant", "A draft-to")
    store.update_message(reply, "A draft-to-target id map.", STATS)
    return conv


def test_conversations_round_trip_with_stats_and_search(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    conv = _chat(store)
    other = store.create_conversation("Groceries")
    store.add_message(other, "user", "milk and eggs")
    store.close()
    store = HistoryStore(tmp_path / "h.sqlite3")  # a restart
    msgs = store.messages(conv)
    assert [(m.role, m.content) for m in msgs] == [("user", "What is d2t?"), ("assistant", "A draft-to-target id map.")]
    assert msgs[1].stats == STATS
    assert store.get(conv).settings == {"mode": "sidecar", "n_max": 3}
    assert [c.title for c in store.conversations("TARGET id")] == ["FastMTP questions"]
    assert [c.title for c in store.conversations("eggs")] == ["Groceries"]
    assert [c.id for c in store.conversations()] == [other, conv]  # newest first
    store.delete(other)
    assert store.messages(other) == []  # its messages went with it
    with pytest.raises(HistoryError, match=f"no conversation {other}"):
        store.get(other)


def test_export_markdown_and_json_then_import(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "a.sqlite3")
    conv = _chat(store)
    markdown = store.export_markdown(conv)
    assert markdown.startswith("# FastMTP questions") and "**Assistant:**" in markdown
    assert "97.5 tok/s · acceptance 90%" in markdown
    exported = store.export_json()
    other = HistoryStore(tmp_path / "b.sqlite3")
    (new_id,) = other.import_json(json.loads(json.dumps(exported)))
    assert [(m.role, m.content, m.stats) for m in other.messages(new_id)] == \
        [(m.role, m.content, m.stats) for m in store.messages(conv)]
    broken = json.loads(json.dumps(exported))
    broken["conversations"][0]["messages"].append({"role": "robot", "content": "x"})
    with pytest.raises(HistoryError, match="unknown role"):
        other.import_json(broken)
    assert len(other.conversations()) == 1  # all or nothing
    with pytest.raises(HistoryError, match="not a FastMTP Chat history export"):
        other.import_json({"conversations": []})


def test_history_survives_a_sigkill_mid_writing(tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite3"
    writer = (
        "import sys\n"
        "from pathlib import Path\n"
        "from app.chats.history import HistoryStore\n"
        f"s = HistoryStore(Path({str(db)!r}))\n"
        "c = s.create_conversation('long chat')\n"
        "i = 0\n"
        "while True:\n"
        "    s.add_message(c, 'user', f'message {i}')\n"
        "    if i == 200:\n"
        "        print('200 written', flush=True)\n"
        "    i += 1\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "200 written"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = HistoryStore(db)
    (conv,) = store.conversations()
    contents = [m.content for m in store.messages(conv.id)]
    assert len(contents) >= 201 and contents == [f"message {i}" for i in range(len(contents))]
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_history_cli_export_import_and_errors(tmp_path: Path) -> None:
    store = HistoryStore()
    conv = _chat(store)
    out = tmp_path / "all.json"

    def app(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app", "history", *args], capture_output=True, text=True,
                              env=dict(os.environ), check=False, timeout=120)

    assert app("export", "--format", "json", "--out", str(out)).returncode == 0
    listed = json.loads(app("list", "--search", "d2t", "--json").stdout)
    assert [c["id"] for c in listed] == [conv]
    assert "A draft-to-target id map." in app("show", str(conv)).stdout
    imported = json.loads(app("import", str(out), "--json").stdout)["imported"]
    assert len(imported) == len(json.loads(out.read_text())["conversations"])
    missing = app("show", "999999")
    assert missing.returncode == 1 and "no conversation 999999" in missing.stderr


def test_an_old_database_is_migrated_and_partial_replies_are_marked(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)  # the schema before migration 1: no ``complete`` column, user_version 0
    old.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, system_prompt TEXT NOT NULL "
        "DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL REFERENCES "
        "conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT, "
        "created REAL NOT NULL);"
        "INSERT INTO conversations VALUES (1, 'old chat', '', '{}', 1.0, 1.0);"
        "INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 1.0);")
    old.commit()
    old.close()
    store = HistoryStore(path)
    assert [(m.content, m.complete) for m in store.messages(1)] == [("hello", True)]
    reply = store.add_message(1, "assistant", "Hal", complete=False)
    store.update_message(reply, "Half a rep")
    assert store.messages(1)[-1].complete is False
    store.update_message(reply, "Half a reply.", {"generated": 3}, complete=True)
    assert store.messages(1)[-1].complete is True
    store.update_conversation(1, system_prompt="Be brief.", settings={"thinking": False})
    assert (store.get(1).system_prompt, store.get(1).settings) == ("Be brief.", {"thinking": False})
    second = store.add_message(1, "user", "again")
    store.add_message(1, "assistant", "again and again")
    store.delete_messages_from(1, second)
    assert [m.content for m in store.messages(1)] == ["hello", "Half a reply."]
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
