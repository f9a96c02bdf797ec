"""Issue 37: history rows and history files from outside. Rows of the right column and the wrong type or size
(SQLite keeps whatever was written), a FIFO, a device or a folder where the history file belongs, a reply whose
versions are all hidden, and imports of hostile exports: every command ends in words with exit 0-4."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.chats.history import HistoryDamagedError, HistoryStore, default_path
from tests.helpers.cli_in_process import run_cli

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a failure is reported as found: no minutes of shrinking


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    yield tmp_path / "data"




def a_chat() -> tuple[int, int, int]:
    """A chat with a user message and a reply regenerated once: (chat, first version, second version)."""
    store = HistoryStore()
    try:
        chat = store.create_conversation("a chat")
        store.add_message(chat, "user", "hello")
        first = store.add_message(chat, "assistant", "version one")
        second = store.add_version(first)
        store.update_message(second, "version two")
        return chat, first, second
    finally:
        store.close()


def raw(sql: str, params: tuple[Any, ...] = ()) -> None:
    db = sqlite3.connect(default_path())
    try:
        with db:  # committed, or rolled back on SQLite's own refusal (NOT NULL)
            db.execute(sql, params)
    finally:
        db.close()


def test_a_reply_whose_versions_are_all_hidden_still_shows(capsys: pytest.CaptureFixture[str]) -> None:
    chat, _first, _second = a_chat()
    raw("UPDATE messages SET shown = 0 WHERE role = 'assistant'")
    code, text = run_cli(capsys, "history", "show", str(chat))
    assert code == 0 and "version two" in text and "version one" not in text, text
    raw("UPDATE messages SET shown = 0")  # every row hidden, the user's too
    code, text = run_cli(capsys, "history", "show", str(chat))
    assert code == 0 and "hello" in text and "version two" in text, text
    raw("UPDATE messages SET shown = 1 WHERE content = 'version one'")  # one shown again: only that one
    code, text = run_cli(capsys, "history", "show", str(chat))
    assert "version one" in text and "version two" not in text, text


@pytest.mark.parametrize("what", ["fifo", "device", "folder"])
def test_a_history_file_that_is_not_a_file_is_named_as_what_it_is(data_dir: Path, what: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = default_path()
    if what == "fifo":
        os.mkfifo(path)
        words = "is a pipe (FIFO), not a file"
    elif what == "device":
        path.symlink_to("/dev/zero")
        words = "is a device, not a file"
    else:
        path.mkdir()
        words = "is a folder, not a file"
    code, text = run_cli(capsys, "history", "list")
    assert code == 1 and words in text and "disk" not in text, text
    with pytest.raises(HistoryDamagedError):
        HistoryStore(check=True)
    store = HistoryStore(recover=True)  # the window: the thing is moved aside (never copied), a new history starts
    try:
        assert store.damaged_copy is not None and store.conversations() == []
        assert os.path.lexists(store.damaged_copy) and path.is_file()
    finally:
        store.close()
    assert Path("/dev/zero").exists()


ODD = st.one_of(
    st.sampled_from([2**63 - 1, -(2**63), 0, -1, 1e308, -1e308, "abc", "", b"\xff\xfe", "[" * 5000, "{}", "null",
                     '{"temperature": 1e999}', '{"temperature": ' + "9" * 401 + "}", "[[1, 2]]", '"x"', None]),
    st.text(max_size=30), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False))
COLUMNS = st.sampled_from([("messages", "version_of"), ("messages", "shown"), ("messages", "stats"),
                           ("messages", "drafts"), ("messages", "created"), ("messages", "complete"),
                           ("messages", "content"), ("conversations", "settings"), ("conversations", "title"),
                           ("conversations", "created"), ("conversations", "updated"), ("conversations", "pinned"),
                           ("conversations", "system_prompt")])


def test_chat_ids_of_any_size_are_refused_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    a_chat()
    for argv in (["show"], ["delete"], ["pin"], ["rename"], ["export"]):
        for number in ("99999999999999999999999", "9223372036854775808", "-1", "0", "77"):
            code, text = run_cli(capsys, "history", *argv, number, *(["t"] if argv == ["rename"] else []))
            assert code in (1, 2) and text.strip(), (argv, number)


@settings(max_examples=20, derandomize=True, deadline=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(COLUMNS, ODD), min_size=1, max_size=4))
def test_rows_of_any_type_and_size_are_read_in_words(capsys: pytest.CaptureFixture[str], data_dir: Path,
                                                    edits: list[tuple[tuple[str, str], Any]]) -> None:
    if default_path().exists():
        default_path().unlink()
    chat, _first, _second = a_chat()
    for (table, column), value in edits:
        with contextlib.suppress(sqlite3.IntegrityError):  # NOT NULL: SQLite itself refuses, nothing to read
            raw(f"UPDATE {table} SET {column} = ?", (value,))
    run_cli(capsys, "history", "list")
    run_cli(capsys, "history", "show", str(chat))
    run_cli(capsys, "history", "export", "--format", "md", "--out", str(data_dir / "out.md"))
    run_cli(capsys, "history", "export", "--format", "json", "--out", str(data_dir / "out.json"))


MESSAGE = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "assistant", "system", "tool", 7, None]),
    "content": st.one_of(st.text(max_size=20), st.integers(), st.none(), st.lists(st.integers(), max_size=3)),
    "stats": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers() | st.floats(), max_size=3),
                       st.integers()),
    "created": st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    "complete": st.one_of(st.booleans(), st.integers(), st.text(max_size=3)),
    "drafts": st.one_of(st.none(), st.lists(st.lists(st.integers(), max_size=3), max_size=3), st.text(max_size=5)),
})
CONVERSATION = st.fixed_dictionaries({}, optional={
    "title": st.one_of(st.text(max_size=20), st.integers(), st.none()),
    "system_prompt": st.one_of(st.text(max_size=20), st.integers()),
    "settings": st.one_of(st.dictionaries(st.sampled_from(["temperature", "top_k", "max_tokens", "seed"]),
                                          st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
                                          max_size=4), st.lists(st.integers(), max_size=2), st.integers()),
    "created": st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    "pinned": st.one_of(st.booleans(), st.integers()),
    "messages": st.one_of(st.lists(MESSAGE, max_size=4), st.integers(), st.text(max_size=3)),
})


@settings(max_examples=30, derandomize=True, deadline=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(CONVERSATION, max_size=3), st.sampled_from(["fastmtp-chat-history-1", "other", 1]))
def test_hostile_exports_import_or_are_refused_in_words(capsys: pytest.CaptureFixture[str], data_dir: Path,
                                                        conversations: list[dict[str, Any]], form: Any) -> None:
    from app.chats.history import EXPORT_FORMAT

    data_dir.mkdir(parents=True, exist_ok=True)
    export = data_dir / "export.json"
    export.write_text(json.dumps({"format": EXPORT_FORMAT if form == "fastmtp-chat-history-1" else form,
                                  "conversations": conversations}))
    run_cli(capsys, "history", "import", str(export))
    run_cli(capsys, "history", "list")


def test_deeply_nested_exports_are_refused_in_words(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    from app.chats.history import EXPORT_FORMAT

    data_dir.mkdir(parents=True, exist_ok=True)
    export = data_dir / "export.json"
    for deep in ("[" * 100_000, '{"format": "' + EXPORT_FORMAT + '", "conversations": ' + "[" * 100_000):
        export.write_text(deep)
        code, text = run_cli(capsys, "history", "import", str(export))
        assert code == 1 and text.strip(), text
