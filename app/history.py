"""Chat history in SQLite (WAL): conversations, messages with their final stats, search, export, import.

Every write commits at once, so a killed app loses at most the message being written. Qt-free: the GUI
and ``python -m app history`` share it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import paths
from app.errors import FastMTPError

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""
# Schema migrations, applied in order to databases whose ``PRAGMA user_version`` is below their number.
# 1: ``messages.complete``: 0 while a reply streams (saved as it grows), 1 once it finished.
MIGRATIONS: list[tuple[int, str]] = [
    (1, "ALTER TABLE messages ADD COLUMN complete INTEGER NOT NULL DEFAULT 1"),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
EXPORT_FORMAT = "fastmtp-chat-history/1"


class HistoryError(FastMTPError):
    """The history database or an import file is not usable."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    settings: dict[str, Any]
    created: float
    updated: float


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: dict[str, Any] | None
    created: float
    complete: bool = True  # False: a reply saved while it streamed that never finished (the app was killed)


def default_path() -> Path:
    return paths.data_dir() / "history.sqlite3"


class HistoryStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"The chat history {self.path} cannot be opened ({exc}).",
                               "Move the file aside; the app starts a new history.") from exc

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        """Bring an older database up to ``SCHEMA_VERSION``, one step per transaction (another process
        opening the same file at once waits for the write lock, then sees the new version)."""
        for number, statement in MIGRATIONS:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if int(self._db.execute("PRAGMA user_version").fetchone()[0]) < number:
                    self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {number}")
                self._db.execute("COMMIT")
            except sqlite3.DatabaseError:
                self._db.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------ writing

    def create_conversation(self, title: str, system_prompt: str = "",
                            settings: dict[str, Any] | None = None) -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations (title, system_prompt, settings, created, updated) VALUES (?, ?, ?, ?, ?)",
            (title, system_prompt, json.dumps(settings or {}), now, now))
        return int(cur.lastrowid or 0)

    def add_message(self, conversation_id: int, role: str, content: str,
                    stats: dict[str, Any] | None = None, complete: bool = True) -> int:
        self.get(conversation_id)
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO messages (conversation_id, role, content, stats, created, complete) VALUES (?, ?, ?, ?, ?, ?)",
            (conversation_id, role, content, json.dumps(stats) if stats is not None else None, now, int(complete)))
        self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return int(cur.lastrowid or 0)

    def update_message(self, message_id: int, content: str, stats: dict[str, Any] | None = None,
                       complete: bool | None = None) -> None:
        """Save a streamed reply as it grows (``complete=False``), and its final stats at the end."""
        self._db.execute("UPDATE messages SET content = ?, stats = COALESCE(?, stats), "
                         "complete = COALESCE(?, complete) WHERE id = ?",
                         (content, json.dumps(stats) if stats is not None else None,
                          None if complete is None else int(complete), message_id))

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and everything after it in its conversation (edit-and-resend, regenerate)."""
        self._db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (conversation_id, message_id))

    def update_conversation(self, conversation_id: int, *, system_prompt: str | None = None,
                            settings: dict[str, Any] | None = None) -> None:
        """Change a conversation's system prompt and/or its settings (sampling, thinking, preset)."""
        self.get(conversation_id)
        if system_prompt is not None:
            self._db.execute("UPDATE conversations SET system_prompt = ? WHERE id = ?",
                             (system_prompt, conversation_id))
        if settings is not None:
            self._db.execute("UPDATE conversations SET settings = ? WHERE id = ?",
                             (json.dumps(settings), conversation_id))

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # ------------------------------------------------------------------ reading

    def get(self, conversation_id: int) -> Conversation:
        row = self._db.execute("SELECT id, title, system_prompt, settings, created, updated FROM conversations "
                               "WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise HistoryError(f"There is no conversation {conversation_id}.",
                               "List them with `python -m app history list`.")
        return _conversation(row)

    def conversations(self, query: str = "") -> list[Conversation]:
        """Newest first; ``query`` matches titles and message text (case-insensitive)."""
        if not query:
            rows = self._db.execute("SELECT id, title, system_prompt, settings, created, updated "
                                    "FROM conversations ORDER BY updated DESC, id DESC").fetchall()
        else:
            like = f"%{query}%"
            rows = self._db.execute(
                "SELECT id, title, system_prompt, settings, created, updated FROM conversations c "
                "WHERE title LIKE ? OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                "AND m.content LIKE ?) ORDER BY updated DESC, id DESC", (like, like)).fetchall()
        return [_conversation(r) for r in rows]

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute("SELECT id, conversation_id, role, content, stats, created, complete FROM messages "
                                "WHERE conversation_id = ? ORDER BY id", (conversation_id,)).fetchall()
        return [StoredMessage(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None, r[5], bool(r[6]))
                for r in rows]

    # ------------------------------------------------------------------ export / import

    def export_markdown(self, conversation_id: int) -> str:
        conv = self.get(conversation_id)
        lines = [f"# {conv.title}", ""]
        if conv.system_prompt:
            lines += [f"_System: {conv.system_prompt}_", ""]
        for m in self.messages(conversation_id):
            lines += [f"**{m.role.capitalize()}:**", "", m.content, ""]
            if m.stats:
                tps = m.stats.get("decode_tps")
                acc = m.stats.get("acceptance")
                parts = [f"{tps:.1f} tok/s" if isinstance(tps, float) else "",
                         f"acceptance {acc:.0%}" if isinstance(acc, float) else ""]
                footer = " · ".join(p for p in parts if p)
                if footer:
                    lines += [f"<sub>{footer}</sub>", ""]
        return "\n".join(lines)

    def export_json(self, conversation_ids: list[int] | None = None) -> dict[str, Any]:
        ids = conversation_ids if conversation_ids is not None else [c.id for c in self.conversations()]
        return {"format": EXPORT_FORMAT, "conversations": [
            {**asdict(self.get(i)), "messages": [asdict(m) for m in self.messages(i)]} for i in ids]}

    def import_json(self, data: dict[str, Any]) -> list[int]:
        """Add the conversations of an export as new ones; all or nothing."""
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise HistoryError("This file is not a FastMTP Chat history export.",
                               f"Export files carry \"format\": \"{EXPORT_FORMAT}\".")
        created: list[int] = []
        try:
            self._db.execute("BEGIN")
            for conv in data.get("conversations", []):
                new_id = self.create_conversation(str(conv["title"]), str(conv.get("system_prompt", "")),
                                                  dict(conv.get("settings", {})))
                for m in conv.get("messages", []):
                    if m["role"] not in ("system", "user", "assistant"):
                        raise HistoryError(f"A message has the unknown role {m['role']!r}.")
                    self.add_message(new_id, m["role"], str(m["content"]), m.get("stats"),
                                     bool(m.get("complete", True)))
                created.append(new_id)
            self._db.execute("COMMIT")
        except (KeyError, TypeError, ValueError, HistoryError) as exc:
            self._db.execute("ROLLBACK")
            if isinstance(exc, HistoryError):
                raise
            raise HistoryError(f"The history export is damaged ({exc!r}); nothing was imported.") from exc
        return created


def _conversation(row: tuple[Any, ...]) -> Conversation:
    return Conversation(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5])
