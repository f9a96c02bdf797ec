"""Chat history in SQLite (WAL): conversations, messages with their final stats, search, export, import.

Every write commits at once, so a killed app loses at most the message being written. Qt-free: the GUI
and ``python -m app history`` share it.

A reply keeps its provenance next to its text: ``drafts``, the ``[start, end)`` character ranges of the
content that came from accepted drafts (a JSON array of pairs), so a reopened chat tints them again.

Damage never ends in a traceback: a file SQLite calls corrupt raises :class:`HistoryDamagedError` (the
window, which opens the store with ``recover=True``, copies the file aside with a timestamp and starts a
new one), a lock held by another process raises :class:`HistoryBusyError`, and a row whose JSON columns
are damaged is read with defaults (``warnings`` says which). The Markdown export escapes raw HTML.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from app.core import paths
from app.core.errors import FastMTPError
from app.core.regular_files import kind_of
from app.engine.stats import acceptance_words

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
# 2: ``messages.drafts``: the accepted-draft ranges of the content (JSON), NULL where unknown (older rows).
# 3: ``conversations.pinned``: 1 keeps a chat at the top of the list (the sidebar's "Pin"), 0 for older rows.
# 4: ``messages.version_of``: a regenerated reply's versions share the id of the first (NULL: one version only).
# 5: ``messages.shown``: 1 for the version the conversation goes on from (every older row), 0 for the others.
# 6: ``messages.branch_of``: the version of an edited user message this message follows (its branch), NULL for the
#    messages of every branch (every older row): editing a message keeps the old one and what followed as a version.
MIGRATIONS: list[tuple[int, str]] = [
    (1, "ALTER TABLE messages ADD COLUMN complete INTEGER NOT NULL DEFAULT 1"),
    (2, "ALTER TABLE messages ADD COLUMN drafts TEXT"),
    (3, "ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0"),
    (4, "ALTER TABLE messages ADD COLUMN version_of INTEGER"),
    (5, "ALTER TABLE messages ADD COLUMN shown INTEGER NOT NULL DEFAULT 1"),
    (6, "ALTER TABLE messages ADD COLUMN branch_of INTEGER"),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
EXPORT_FORMAT = "fastmtp-chat-history/1"
BUSY_TIMEOUT_S = 5.0  # how long a write waits for another process's lock before it gives up
EXPORT_MAX_CONTAINERS = 4_000_000  # lists and objects in an import file: ~10 per message, so 400,000 messages
EXPORT_MAX_VALUES = 16_000_000  # values in all; both keep json.loads' peak to a few hundred MiB
EXPORT_MAX_BYTES = 256 << 20  # an import file is refused beyond this, unread (an export of years of chats is MiBs)
_CONVERSATION_COLUMNS = "id, title, system_prompt, settings, created, updated, pinned"  # ``_conversation``'s order
# a message's version group as stored, read only where it is a message id: a damaged ``version_of`` (text, a real;
# an imported or hand-edited row) counts as no group, so the message is a reply with one version, never a lockout
_VERSION_OF = "(CASE WHEN typeof(version_of) = 'integer' THEN version_of END)"
_BRANCH_OF = "(CASE WHEN typeof(branch_of) = 'integer' THEN branch_of END)"  # likewise: damaged reads as none
_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's companions of a database file, kept with it
_DAMAGED_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
_TOO_BIG = 18  # SQLITE_TOOBIG: a string or blob over SQLite's length limit (1e9 bytes by default)
Spans = Sequence[tuple[int, int]] | Sequence[Sequence[int]]  # [start, end) character ranges


class HistoryError(FastMTPError):
    """The history database or an import file is not usable."""

    kind = "history"


class HistoryDamagedError(HistoryError):
    """The history file is damaged: SQLite cannot read it as a database."""

    kind = "history-damaged"


class HistoryBusyError(HistoryError):
    """Another process (another FastMTP Chat) holds the history's lock."""

    kind = "history-busy"


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    settings: dict[str, Any]
    created: float
    updated: float
    pinned: bool = False  # kept at the top of the list, above newer chats


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: dict[str, Any] | None
    created: float
    complete: bool = True  # False: a reply saved while it streamed that never finished (the app was killed)
    drafts: tuple[tuple[int, int], ...] | None = None  # accepted-draft character ranges; None: not recorded


def default_path() -> Path:
    return paths.data_dir() / "history.sqlite3"


class HistoryStore:
    """The chat history in one SQLite file.

    ``check=True`` (the CLI) reads the whole file once when it opens (``PRAGMA quick_check``), so a damaged
    file raises :class:`HistoryDamagedError` before anything is read from or written into it; nothing is
    changed. ``recover=True`` (the window) checks too, and copies a damaged file aside as
    ``<name>.damaged-<YYYYmmdd-HHMMSS>`` (with its ``-wal``/``-shm``/``-journal`` files) before a new, empty
    history is started in its place; ``damaged_copy`` names the copy. Damage found later (neither) raises
    :class:`HistoryDamagedError` from the call that met it."""

    def __init__(self, path: Path | None = None, *, check: bool = False, recover: bool = False) -> None:
        self.path = path or default_path()
        self.damaged_copy: Path | None = None
        self.warnings: list[str] = []  # rows read with defaults because their JSON was damaged
        paths.ensure_dir(self.path.parent, "history")
        try:
            self._db = self._connect(check=check or recover)
        except HistoryDamagedError:
            if not recover:
                raise
            self.damaged_copy = self._set_aside()
            self._db = self._connect(check=False)

    def _connect(self, check: bool) -> sqlite3.Connection:
        self._refuse_non_file()
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            db.text_factory = lambda raw: raw.decode("utf-8", "replace")  # damaged text is shown, not fatal
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
            self._migrate(db)
            if check:
                result = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
                if result != ["ok"]:
                    raise HistoryDamagedError(*self._damaged_words("; ".join(result[:3])))
            return db
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            raise self._problem(exc) from None
        except HistoryError:
            if db is not None:
                db.close()
            raise

    def _refuse_non_file(self) -> None:
        """A FIFO, a device (a link to /dev/zero) or a folder where the history file belongs is named as what it
        is (SQLite would call it a disk I/O error, or wait on the pipe); the window moves it aside like a damaged
        file and starts a new history."""
        try:
            mode = self.path.stat().st_mode
        except OSError:  # missing: SQLite creates it; unreadable: SQLite's own error says so
            return
        if not stat.S_ISREG(mode):
            raise HistoryDamagedError(
                f"The chat history {self.path} is {kind_of(mode)}, not a file, so it cannot hold chats.",
                "Move it aside (or remove it) and start FastMTP Chat again; the window moves it aside itself "
                f"({self.path.name}.damaged-<date>) and starts a new history.", kind="history-not-a-file")

    def _damaged_words(self, detail: str) -> tuple[str, str]:
        return (f"The chat history {self.path} is damaged ({detail}).",
                "Open FastMTP Chat: it copies the damaged file aside (history.sqlite3.damaged-<date>) and starts a "
                "new history. Or move the file aside yourself; `sqlite3 FILE .recover` may save what is left.")

    def _problem(self, exc: sqlite3.DatabaseError) -> HistoryError:
        """The words for an SQLite error: damaged file, another process's lock, or a file that cannot be used."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if code in _DAMAGED_CODES:
            return HistoryDamagedError(*self._damaged_words(str(exc)))
        if code == _TOO_BIG:
            return HistoryError(
                "The message is too long to keep in the chat history: SQLite stores at most about 1 GB in one "
                "message, and nothing of it was saved.",
                "Shorten the message, or put the text in a file and give the model the part it needs.")
        if code in _BUSY_CODES:
            return HistoryBusyError(
                f"The chat history {self.path} is in use by another FastMTP Chat (it holds the database's lock).",
                "Close the other FastMTP Chat window, or wait for its command to finish, then try again.")
        return HistoryError(f"The chat history {self.path} cannot be read or written ({exc}).",
                            "Check that its folder is writable and the disk is not full, then try again.")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise self._problem(exc) from None

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self._guard():
            return self._db.execute(sql, params)

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self._guard():
            return self._db.execute(sql, params).fetchall()

    def _set_aside(self) -> Path:
        """Copy the damaged file (and its companions) to ``<name>.damaged-<time>``, then remove the original.

        Nothing is removed until every copy is complete and on disk."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        copy = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        n = 1
        while any(Path(f"{copy}{suffix}").exists() for suffix in ("", *_SIDE_FILES)):
            n += 1
            copy = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
        sources = [(Path(f"{self.path}{suffix}"), Path(f"{copy}{suffix}")) for suffix in ("", *_SIDE_FILES)]
        try:
            if not stat.S_ISREG(self.path.stat().st_mode):  # a FIFO, a link to a device, a folder: moved, never
                os.rename(self.path, copy)                    # copied (a copy of /dev/zero would never end)
                return copy
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HistoryError(f"The chat history {self.path} is not a file, and it cannot be moved aside to {copy} "
                               f"({exc.strerror or type(exc).__name__}).",
                               "Move it aside yourself, then start again.") from None
        try:
            for source, target in sources:
                if source.exists():
                    shutil.copy2(source, target)
                    with open(target, "rb+") as handle:
                        os.fsync(handle.fileno())
            for source, _target in sources:
                source.unlink(missing_ok=True)
        except OSError as exc:
            raise HistoryError(f"The chat history {self.path} is damaged, and it cannot be copied aside to {copy} "
                               f"({exc.strerror or type(exc).__name__}).",
                               "Free some disk space or move the file aside yourself, then start again.") from None
        return copy

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        """Bring an older database up to ``SCHEMA_VERSION``, one step per transaction (another process
        opening the same file at once waits for the write lock, then sees the new version)."""
        for number, statement in MIGRATIONS:
            db.execute("BEGIN IMMEDIATE")
            try:
                if int(db.execute("PRAGMA user_version").fetchone()[0]) < number:
                    db.execute(statement)
                    db.execute(f"PRAGMA user_version = {number}")
                db.execute("COMMIT")
            except sqlite3.DatabaseError:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise

    # ------------------------------------------------------------------ writing

    def create_conversation(self, title: str, system_prompt: str = "",
                            settings: dict[str, Any] | None = None) -> int:
        now = time.time()
        cur = self._run(
            "INSERT INTO conversations (title, system_prompt, settings, created, updated) VALUES (?, ?, ?, ?, ?)",
            (title, system_prompt, json.dumps(settings or {}), now, now))
        return int(cur.lastrowid or 0)

    def add_message(self, conversation_id: int, role: str, content: str,
                    stats: dict[str, Any] | None = None, complete: bool = True, drafts: Spans | None = None) -> int:
        """Add a message; ``drafts`` are the accepted-draft ranges of a reply's ``content``."""
        self.get(conversation_id)
        now = time.time()
        cur = self._run(
            "INSERT INTO messages (conversation_id, role, content, stats, created, complete, drafts, branch_of) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (conversation_id, role, content, json.dumps(stats) if stats is not None else None, now, int(complete),
             _drafts_json(drafts, content), self._branch_for_new(conversation_id)))
        self._run("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return int(cur.lastrowid or 0)

    def update_message(self, message_id: int, content: str, stats: dict[str, Any] | None = None,
                       complete: bool | None = None, drafts: Spans | None = None) -> None:
        """Save a streamed reply as it grows (``complete=False``), and its final stats at the end.

        ``drafts`` replaces the provenance with the new content's (None clears it: the old ranges would not
        fit the new text)."""
        self._run("UPDATE messages SET content = ?, stats = COALESCE(?, stats), "
                  "complete = COALESCE(?, complete), drafts = ? WHERE id = ?",
                  (content, json.dumps(stats) if stats is not None else None,
                   None if complete is None else int(complete), _drafts_json(drafts, content), message_id))

    def add_version(self, message_id: int) -> int:
        """Regenerate keeps the reply ``message_id``: it becomes one of its versions, hidden, and a new empty
        version (shown, incomplete) is added after it, whose id is returned (fill it with ``update_message``)."""
        rows = self._rows(f"SELECT conversation_id, role, COALESCE({_VERSION_OF}, id) FROM messages WHERE id = ?",
                          (message_id,))
        if not rows:
            raise HistoryError(f"There is no message {message_id} in the history.",
                               "List the chat's messages with: python -m app history show ID")
        conversation_id, role, first = int(rows[0][0]), _text(rows[0][1]), int(rows[0][2])
        self._run(f"UPDATE messages SET version_of = ?, shown = 0 WHERE COALESCE({_VERSION_OF}, id) = ?",
                  (first, first))
        new = self.add_message(conversation_id, role, "", complete=False)
        self._run("UPDATE messages SET version_of = ? WHERE id = ?", (first, new))
        return new

    def edit_branch(self, message_id: int, content: str) -> int:
        """Edit-and-resend keeps what it replaces (issue 36 item 9), as regenerate does: the user message
        ``message_id`` becomes one version of it, hidden with everything that followed it (they stay its branch,
        shown again with it by its ‹ › arrows), and the edited text is added as the shown version, whose id is
        returned; the new reply follows it."""
        rows = self._rows(f"SELECT conversation_id, role, COALESCE({_VERSION_OF}, id), {_BRANCH_OF} FROM messages "
                          "WHERE id = ?", (message_id,))
        if not rows or _text(rows[0][1]) != "user":
            raise HistoryError(f"There is no user message {message_id} in the history to edit.",
                               "List the chat's messages with: python -m app history show ID")
        conversation_id, first, branch = int(rows[0][0]), int(rows[0][2]), rows[0][3]
        self._run("BEGIN")
        try:
            # what followed the edited message in its branch becomes its branch (a version that was edited before
            # has its own followers already)
            self._run(f"UPDATE messages SET branch_of = ? WHERE conversation_id = ? AND id > ? AND {_BRANCH_OF} IS ? "
                      f"AND COALESCE({_VERSION_OF}, id) != ?", (message_id, conversation_id, message_id, branch, first))
            self._run(f"UPDATE messages SET version_of = ?, shown = 0 WHERE COALESCE({_VERSION_OF}, id) = ? AND "
                      "conversation_id = ?", (first, first, conversation_id))
            now = time.time()
            cur = self._run("INSERT INTO messages (conversation_id, role, content, stats, created, complete, "
                            "version_of, shown, branch_of) VALUES (?, 'user', ?, NULL, ?, 1, ?, 1, ?)",
                            (conversation_id, content, now, first, branch))
            self._run("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
            self._run("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        return int(cur.lastrowid or 0)

    def _branch_for_new(self, conversation_id: int) -> int | None:
        """The branch a message added now belongs to: that of the last message shown (a shown edited version is
        a branch of its own); None in a conversation that was never edited."""
        edited = self._rows(f"SELECT 1 FROM messages WHERE conversation_id = ? AND role = 'user' AND "
                            f"{_VERSION_OF} IS NOT NULL LIMIT 1", (conversation_id,))
        if not edited:
            return None
        shown = self.messages(conversation_id)
        if not shown:
            return None
        rows = self._rows(f"SELECT role, {_VERSION_OF}, {_BRANCH_OF} FROM messages WHERE id = ?", (shown[-1].id,))
        role, version_of, branch = rows[0]
        return shown[-1].id if role == "user" and version_of is not None else branch

    def versions(self, message_id: int) -> list[StoredMessage]:
        """Every version of the message (oldest first; the message alone when it has one version)."""
        rows = self._rows(f"SELECT COALESCE({_VERSION_OF}, id), conversation_id FROM messages WHERE id = ?",
                          (message_id,))
        if not rows:
            return []
        return self._messages(f"WHERE conversation_id = ? AND COALESCE({_VERSION_OF}, id) = ?",
                              (int(rows[0][1]), int(rows[0][0])))

    def version_ids(self, conversation_id: int) -> dict[int, tuple[int, ...]]:
        """Each regenerated reply's versions (oldest first) by the id of every one of them: what a reopened chat
        needs to draw its arrows, in one query (replies with one version are not listed)."""
        groups: dict[int, list[int]] = {}
        for row in self._rows("SELECT id, version_of FROM messages WHERE conversation_id = ? AND version_of IS NOT "
                              "NULL ORDER BY id", (conversation_id,)):
            if not isinstance(row[1], int):  # damaged (an imported or hand-edited row): read as one version
                warning = (f"Message {row[0]} in {self.path} names a version group that is not a message id "
                           f"({str(row[1])[:40]!r}); it is shown as a reply with one version.")
                if warning not in self.warnings:
                    self.warnings.append(warning)
                continue
            groups.setdefault(row[1], []).append(int(row[0]))
        return {member: tuple(ids) for ids in groups.values() if len(ids) > 1 for member in ids}

    def show_version(self, message_id: int) -> None:
        """Make this version the shown one: what the chat shows and goes on from; its other versions hide."""
        rows = self._rows(f"SELECT COALESCE({_VERSION_OF}, id) FROM messages WHERE id = ?", (message_id,))
        if rows:
            self._run(f"UPDATE messages SET shown = (id = ?) WHERE COALESCE({_VERSION_OF}, id) = ?",
                      (message_id, int(rows[0][0])))

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and everything after it in its conversation (edit-and-resend, regenerate)."""
        self._run("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (conversation_id, message_id))

    def update_conversation(self, conversation_id: int, *, system_prompt: str | None = None,
                            settings: dict[str, Any] | None = None) -> None:
        """Change a conversation's system prompt and/or its settings (sampling, thinking, preset)."""
        self.get(conversation_id)
        if system_prompt is not None:
            self._run("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))
        if settings is not None:
            self._run("UPDATE conversations SET settings = ? WHERE id = ?", (json.dumps(settings), conversation_id))

    def rename(self, conversation_id: int, title: str) -> None:
        """A new title; ``updated`` stays, so renaming does not move the chat up the list."""
        self.get(conversation_id)
        self._run("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        """Pin a chat (listed above the unpinned ones, whatever their age) or unpin it."""
        self.get(conversation_id)
        self._run("UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._run("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # ------------------------------------------------------------------ reading

    def get(self, conversation_id: int) -> Conversation:
        rows = self._rows(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,))
        if not rows:
            raise HistoryError(f"There is no conversation {conversation_id}.",
                               "List them with `python -m app history list`.")
        return self._conversation(rows[0])

    def conversations(self, query: str = "") -> list[Conversation]:
        """Pinned first, then newest first; ``query`` matches titles and message text (case-insensitive)."""
        order = "ORDER BY pinned DESC, updated DESC, id DESC"
        if not query:
            rows = self._rows(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations {order}")
        else:
            like = f"%{query}%"
            rows = self._rows(
                f"SELECT {_CONVERSATION_COLUMNS} FROM conversations c "
                "WHERE title LIKE ? OR EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id "
                f"AND m.content LIKE ?) {order}", (like, like))
        return [self._conversation(r) for r in rows]

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """The conversation as shown: of a regenerated reply only its shown version (``versions`` has all)."""
        # a version group none of whose versions is shown (damaged, or hand-edited) shows its newest: a reply never
        # vanishes (issue 37)
        inner = f"COALESCE({_VERSION_OF.replace('version_of', 'o.version_of')}, o.id)"
        outer = f"COALESCE({_VERSION_OF.replace('version_of', 'messages.version_of')}, messages.id)"
        shown = self._messages(
            "WHERE conversation_id = ? AND (shown = 1 OR NOT EXISTS (SELECT 1 FROM messages o WHERE "
            f"o.conversation_id = messages.conversation_id AND {inner} = {outer} AND "
            "(o.shown = 1 OR o.id > messages.id)))", (conversation_id,))
        branches = {int(r[0]): r[1] for r in self._rows(
            f"SELECT id, {_BRANCH_OF} FROM messages WHERE conversation_id = ? AND {_BRANCH_OF} IS NOT NULL",
            (conversation_id,))}
        if not branches:
            return shown
        kept: list[StoredMessage] = []
        kept_ids: set[int] = set()
        for message in shown:  # in id order: a branch's version comes before what follows it
            branch = branches.get(message.id)
            if branch is None or branch in kept_ids:  # a branch shows only while its edited version does
                kept.append(message)
                kept_ids.add(message.id)
        return kept

    def _messages(self, where: str, params: tuple[Any, ...]) -> list[StoredMessage]:
        rows = self._rows("SELECT id, conversation_id, role, content, stats, created, complete, drafts "
                          f"FROM messages {where} ORDER BY id", params)
        return [StoredMessage(int(r[0]), int(r[1]), _text(r[2]), _text(r[3]),
                              self._json_object(r[4], f"the stats of message {r[0]}") if r[4] else None,
                              _number(r[5]), bool(r[6]), self._drafts(r[7], _text(r[3]), r[0])) for r in rows]

    def _drafts(self, value: Any, content: str, message_id: Any) -> tuple[tuple[int, int], ...] | None:
        """The ``drafts`` column: None where not recorded; damaged JSON reads as None with a warning."""
        if value is None:
            return None
        try:
            data = json.loads(value) if isinstance(value, str | bytes) else None
        except (ValueError, RecursionError):
            data = None
        spans = clean_spans(data, len(content)) if isinstance(data, list) else None
        if spans is None:
            warning = (f"The draft provenance of message {message_id} in {self.path} is damaged; "
                       "it is shown untinted.")
            if warning not in self.warnings:
                self.warnings.append(warning)
        return spans

    def _conversation(self, row: tuple[Any, ...]) -> Conversation:
        settings = self._json_object(row[3], f"the settings of conversation {row[0]}")
        return Conversation(int(row[0]), _text(row[1]), _text(row[2]), settings or {}, _number(row[4]),
                            _number(row[5]), bool(row[6]))

    def _json_object(self, value: Any, what: str) -> dict[str, Any] | None:
        """A JSON object column; damaged (not JSON, not an object, nested too deep): None and a warning."""
        try:
            data = json.loads(value) if isinstance(value, str | bytes) else None
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            return data
        warning = f"{what.capitalize()} in {self.path} are damaged (not a JSON object); defaults are used."
        if warning not in self.warnings:
            self.warnings.append(warning)
        return None

    # ------------------------------------------------------------------ export / import

    def export_markdown(self, conversation_id: int) -> str:
        """One conversation as Markdown. Raw HTML in its text is escaped (shown as text, never obeyed), and a
        code fence a message leaves open is closed, so no message changes how the next one reads."""
        conv = self.get(conversation_id)
        nonce = os.urandom(8).hex()  # marks the export's own footers, which stay HTML
        footers: dict[str, str] = {}
        lines = [f"# {' '.join(conv.title.split())}", ""]
        if conv.system_prompt:
            lines += [f"_System: {close_fences(conv.system_prompt)}_", ""]
        for m in self.messages(conversation_id):
            lines += [f"**{m.role.capitalize()}:**", "", close_fences(m.content), ""]
            if m.stats:
                tps = m.stats.get("decode_tps")
                acc = acceptance_words(m.stats)
                parts = [f"{tps:.1f} tok/s" if isinstance(tps, float) else "",
                         acc.text if acc is not None else ""]
                footer = " · ".join(p for p in parts if p)
                if footer:
                    mark = f"footer-{nonce}-{len(footers)}"
                    footers[mark] = f"<sub>{footer}</sub>"
                    lines += [mark, ""]
        text = escape_html("\n".join(lines))
        for mark, footer in footers.items():
            text = text.replace(mark, footer)
        return text

    def export_json(self, conversation_ids: list[int] | None = None) -> dict[str, Any]:
        ids = conversation_ids if conversation_ids is not None else [c.id for c in self.conversations()]
        return {"format": EXPORT_FORMAT, "conversations": [
            {**asdict(self.get(i)), "messages": [asdict(m) for m in self.messages(i)]} for i in ids]}

    def import_json(self, data: dict[str, Any]) -> list[int]:
        """Add the conversations of an export as new ones; all or nothing."""
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise HistoryError("This file is not a FastMTP Chat history export.",
                               f"Export files carry \"format\": \"{EXPORT_FORMAT}\".")
        conversations = data.get("conversations", [])
        if not isinstance(conversations, list):
            raise HistoryError("The history export is damaged (\"conversations\" is not a list); nothing was imported.")
        created: list[int] = []
        self._run("BEGIN")
        try:
            for number, conv in enumerate(conversations, 1):
                messages = conv.get("messages", []) if isinstance(conv, dict) else None
                settings = conv.get("settings", {}) if isinstance(conv, dict) else None
                if not isinstance(messages, list) or not isinstance(settings, dict):
                    raise HistoryError(f"Conversation {number} of the export is damaged (expected an object with "
                                       "a list of messages and a settings object); nothing was imported.")
                new_id = self.create_conversation(str(conv["title"]), str(conv.get("system_prompt", "")), settings)
                if conv.get("pinned") is True:  # exports before pinning have no such field: unpinned
                    self.set_pinned(new_id, True)
                for m in messages:
                    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
                        role = m.get("role") if isinstance(m, dict) else m
                        raise HistoryError(f"A message of conversation {number} has the unknown role "
                                           f"{str(role)[:40]!r}; nothing was imported.")
                    stats = m.get("stats")
                    if stats is not None and not isinstance(stats, dict):
                        raise HistoryError(f"A message of conversation {number} has stats that are not an "
                                           "object; nothing was imported.")
                    drafts = m.get("drafts")  # cosmetic: a damaged value is dropped, not fatal
                    content = str(m["content"])
                    self.add_message(new_id, m["role"], content, stats, bool(m.get("complete", True)),
                                     clean_spans(drafts, len(content)) if isinstance(drafts, list) else None)
                created.append(new_id)
            self._run("COMMIT")
        except (KeyError, TypeError, ValueError, RecursionError, HistoryError) as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            if isinstance(exc, HistoryError):
                raise
            if isinstance(exc, RecursionError):
                raise HistoryError("The history export nests its data too deeply; nothing was imported.") from None
            raise HistoryError(f"The history export is damaged ({exc!r}); nothing was imported.") from exc
        return created


def read_export(path: Path) -> Any:
    """The parsed JSON of an export file, or a :class:`HistoryError` that says why it cannot be read."""
    from app.core.regular_files import NotRegularFile, json_shape_problem, open_regular

    advice = "Pick a JSON file exported by FastMTP Chat (`python -m app history export`)."
    try:
        handle, size = open_regular(path)
        with handle:
            if size > EXPORT_MAX_BYTES:
                raise HistoryError(f"{path} is larger than {EXPORT_MAX_BYTES >> 20} MiB, far more than a history "
                                   "export holds; it was not read, nothing was imported.", advice)
            raw = handle.read(EXPORT_MAX_BYTES + 1)
        if len(raw) > EXPORT_MAX_BYTES:  # grew since its size was read
            raise HistoryError(f"{path} is larger than {EXPORT_MAX_BYTES >> 20} MiB; nothing was imported.", advice)
        shape = json_shape_problem(raw, EXPORT_MAX_CONTAINERS, EXPORT_MAX_VALUES)
        if shape is not None:  # parsed, it would take gigabytes (250 MiB of `[],` is 80 million lists)
            raise HistoryError(f"{path} is not a history export: {shape}, far more than any export holds; it was "
                               "not parsed, nothing was imported.", advice)
        text = raw.decode("utf-8")
    except NotRegularFile as exc:
        raise HistoryError(f"{path} is not a regular file ({exc.strerror}), so it is not a history export; it was "
                           "not read, nothing was imported.", advice) from None
    except OSError as exc:
        raise HistoryError(f"{path} cannot be read ({exc.strerror or type(exc).__name__}).", advice) from None
    except UnicodeDecodeError:
        raise HistoryError(f"{path} is not UTF-8 text, so it is not a history export.", advice) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise HistoryError(f"{path} nests its JSON deeper than any history export does; nothing was imported.",
                           advice) from None
    except ValueError as exc:
        raise HistoryError(f"{path} is not readable JSON ({exc}).", advice) from None


def clean_spans(spans: Any, length: int) -> tuple[tuple[int, int], ...]:
    """The well-formed ``[start, end)`` ranges of ``spans`` inside a text of ``length`` characters, sorted and
    without overlaps; anything else (not a pair of integers, out of range, empty) is left out."""
    pairs: list[tuple[int, int]] = []
    for span in spans if isinstance(spans, list | tuple) else ():
        if (isinstance(span, list | tuple) and len(span) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
                and 0 <= span[0] < span[1] <= length):
            pairs.append((int(span[0]), int(span[1])))
    pairs.sort()
    kept: list[tuple[int, int]] = []
    for start, end in pairs:
        if kept and start < kept[-1][1]:
            continue  # overlaps the range before: a damaged list, keep the first reading
        kept.append((start, end))
    return tuple(kept)


def _drafts_json(drafts: Spans | None, content: str) -> str | None:
    return None if drafts is None else json.dumps(clean_spans(drafts, len(content)))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return number if number == number and abs(number) < 1e11 else 0.0  # NaN or beyond year 5000: unknown


# ----------------------------------------------------------------------------- Markdown export

_COMMONMARK = MarkdownIt("commonmark")  # raw HTML recognised exactly as CommonMark renderers do


def close_fences(text: str) -> str:
    """``text`` with a code fence it leaves open at its top level closed (an open fence would swallow, and
    then be closed by, what follows it in the export)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    fences = [t for t in _COMMONMARK.parse(text) if t.type == "fence" and t.level == 0 and t.map]
    if not fences:
        return text
    fence = fences[-1]
    assert fence.map is not None
    start, end = fence.map
    last = text.split("\n")[end - 1].strip() if end - 1 > start else ""
    closed = last[:1] == fence.markup[:1] and len(last) >= len(fence.markup) and set(last) == {fence.markup[0]}
    return text if closed else f"{text.rstrip()}\n{fence.markup}"


def escape_html(text: str) -> str:
    """Markdown ``text`` with its raw HTML (blocks, inline tags, comments) escaped, so a renderer shows it as
    text; code blocks and code spans keep their text as it is."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    for _ in range(200):  # each pass escapes at least one "<": a message with many tags takes a few passes
        lines = text.split("\n")
        targets: list[tuple[int, int, str | None]] = []
        for token in _COMMONMARK.parse(text):
            if token.type == "html_block" and token.map:
                targets.append((token.map[0], token.map[1], None))
            elif token.type == "inline" and token.map:
                targets += [(token.map[0], token.map[1], child.content) for child in token.children or []
                            if child.type == "html_inline"]
        if not targets:
            return text
        for start, end, tag in targets:
            block = "\n".join(lines[start:end])
            if tag is not None and tag in block:
                block = block.replace(tag, "&lt;" + tag[1:])
            else:  # a tag split by a container's prefix ("> "), or a block: every "<" of it
                block = block.replace("<", "&lt;")
            lines[start:end] = block.split("\n")
        text = "\n".join(lines)
    code = {i for t in _COMMONMARK.parse(text) if t.type in ("fence", "code_block") and t.map
            for i in range(*t.map)}
    return "\n".join(line if i in code else line.replace("<", "&lt;") for i, line in enumerate(text.split("\n")))
