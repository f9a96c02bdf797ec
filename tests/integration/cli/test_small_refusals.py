"""Issue 27's smaller holes: each gets words that name what is wrong, not another error's message."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.chats.history import HistoryError, HistoryStore
from app.gguftools.builtin_demo import ensure_demo_model
from tests.helpers.module_folders import ModuleFolders


def _app(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300)


def test_verify_names_a_pipe_and_a_folder_that_is_no_release(tmp_path: Path) -> None:
    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    done = _app("verify", str(pipe))
    assert done.returncode == 4 and "not a regular file or a folder" in done.stderr, done.stderr
    assert "manifest" not in done.stderr
    folder = tmp_path / "somewhere"
    folder.mkdir()
    done = _app("verify", str(folder))
    assert done.returncode == 4 and "is not a release folder" in done.stderr, done.stderr
    done = _app("verify", str(tmp_path / "gone.gguf"))
    assert done.returncode == 4 and "There is nothing at" in done.stderr, done.stderr


def test_a_message_over_sqlites_limit_is_named_too_long_not_a_disk_problem(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    conversation = store.create_conversation("chat", "Be brief.", {})  # its id
    store._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000)  # SQLite's 1 GB limit, scaled down for the test
    with pytest.raises(HistoryError) as caught:
        store.add_message(conversation, "user", "x" * 20_000)
    assert "too long" in caught.value.message and "disk" not in caught.value.message
    assert store.add_message(conversation, "user", "short") > 0  # the store goes on working
    assert [m.content for m in store.messages(conversation)] == ["short"]


def test_sidecar_check_says_in_words_when_a_pair_drafts_nothing(patched_backend: BackendManifest,
                                                               module_tmp: ModuleFolders) -> None:
    ours = ensure_demo_model(module_tmp.mktemp("pair-ours"), size="tiny", acceptance=0.9, seed=31, language="words")
    other = ensure_demo_model(module_tmp.mktemp("pair-other"), size="tiny", acceptance=0.9, seed=32,
                             language="english")  # the same shapes, another table: its drafts follow the passage
    done = _app("sidecar", "check", "--target", str(ours.target), "--draft", str(other.sidecar_d2t), "--demo-table",
                "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["acceptance_depth1"] < 0.1
    assert "another model" in result["warning"]
    good = json.loads(_app("sidecar", "check", "--target", str(ours.target), "--draft", str(ours.sidecar_d2t),
                           "--demo-table", "--json").stdout)
    assert good["acceptance_depth1"] > 0.8 and good["warning"] is None
