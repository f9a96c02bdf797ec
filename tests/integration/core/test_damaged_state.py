"""Damaged local state ends in words and an exit code, never a traceback; a damaged history loses nothing.

Everything here is real: SQLite databases damaged by writing garbage below their header, JSON files of the
wrong shape, a file-backed keyring (keyrings.alt) with a damaged file, folders that are files, a history
locked by another process, signed releases with absurd versions, and the window offscreen. Commands run as
child processes (``python -m app``): none may die from a signal or print a traceback, and each exits 1, 2,
3 or 4 with a message that names the problem.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from app.chats import history as history_module
from app.chats.history import EXPORT_FORMAT, HistoryBusyError, HistoryDamagedError, HistoryStore
from app.core import secrets
from app.core.errors import TrustError
from app.gui import main as gui_main
from app.gui.main import MainWindow
from app.release import signing, trust
from app.release.catalog import load_catalog
from app.release.publish import KeyPair, keygen, sign_release
from tests.helpers.file_keyring import child_keyring_env, plaintext_keyring

ROOT = Path(__file__).resolve().parents[3]
INTEG = load_catalog().integrity
REPO = load_catalog().repo
RELEASE_FILES = {load_catalog().quant("Q4_K_P").file: b"GGUF" + bytes(range(256)) * 8,
                 load_catalog().sidecar.file: b"GGUF-sidecar" * 50, INTEG.patch: b"--- a/x\n+++ b/x\n"}
PAGE = 4096


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """This test's own data and config folders, for this process and the commands it runs."""
    made = {"data": tmp_path / "data", "config": tmp_path / "config"}
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(made["data"]))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(made["config"]))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return made


def app(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m app ARGS`` in a child process; it must end by itself, with an exit code of ours."""
    result = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, input=stdin,
                            env={**os.environ, **(env or {})}, cwd=ROOT, check=False, timeout=180)
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def failed(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The error message of a command that had to fail with ``code``; it names the problem in ``words``."""
    assert result.returncode == code, (result.returncode, result.stdout[-1000:], result.stderr[-2000:])
    message = result.stderr + result.stdout
    for word in words:
        assert word in message, (word, message)
    return message


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_history(path: Path, chats: int = 30) -> None:
    store = HistoryStore(path)
    for n in range(chats):
        conv = store.create_conversation(f"chat {n}", "Be brief.", {"thinking": False, "temperature": 0.5})
        for _ in range(4):
            store.add_message(conv, "user", f"question {n} " * 40)
            store.add_message(conv, "assistant", f"answer {n} " * 40, {"decode_tps": 10.0})
    store.close()
    assert not Path(f"{path}-wal").exists()  # checkpointed: the main file holds everything


def damage(path: Path, offset: int, length: int | None = None) -> None:
    """Overwrite ``length`` bytes (default: the rest of the file) from ``offset`` with garbage."""
    size = path.stat().st_size
    length = size - offset if length is None else length
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(bytes((n * 37 + 11) % 256 for n in range(length)))


# ----------------------------------------------------------------------------- the history database


@pytest.mark.parametrize("offset", [100, PAGE, PAGE * 2], ids=["schema-page", "second-page", "third-page-on"])
def test_a_damaged_history_fails_each_command_in_words_and_is_left_as_it_is(folders: dict[str, Path],
                                                                            offset: int) -> None:
    path = folders["data"] / "history.sqlite3"
    make_history(path)
    damage(path, offset)
    before = digest(path)
    export = folders["data"].parent / "good.json"
    export.write_text(json.dumps({"format": EXPORT_FORMAT, "conversations": [{"title": "t", "messages": []}]}))

    for args in (["show", "3"], ["list", "--search", "answer"], ["list"], ["export", "--format", "md"],
                 ["import", str(export)], ["delete", "2"]):
        result = app("history", *args)
        if offset > 100 and args == ["list"] and result.returncode == 0:
            continue  # the conversations' own pages may be whole: listing them is fine
        message = failed(result, 1, "is damaged", str(path))
        assert "Open FastMTP Chat" in message  # what to do: the window copies it aside
    as_json = app("history", "show", "3", "--json")
    assert json.loads(as_json.stdout.strip().splitlines()[-1])["error"] == "HistoryDamagedError"
    assert digest(path) == before  # the commands changed nothing
    assert sorted(p.name for p in folders["data"].iterdir() if not p.name.endswith("-shm")) == ["history.sqlite3"]


def test_the_window_copies_a_damaged_history_aside_starts_a_new_one_and_says_so(
        qtbot: QtBot, folders: dict[str, Path]) -> None:
    path = folders["data"] / "history.sqlite3"
    make_history(path)
    damage(path, PAGE * 2)  # the messages' pages: opening still works, reading does not
    damaged = path.read_bytes()
    with pytest.raises(HistoryDamagedError):  # what the CLI gets (the file opens; the check finds it)
        HistoryStore(path).messages(3)

    window = MainWindow()  # the window owns its history: the default path, with recovery
    qtbot.addWidget(window)
    window.show()
    copy = window.history.damaged_copy
    assert copy is not None and re.fullmatch(r"history\.sqlite3\.damaged-\d{8}-\d{6}", copy.name)
    assert copy.read_bytes() == damaged  # nothing lost: every byte of the damaged file is kept
    banner = window.chat_page.history_banner
    assert banner.isVisible()
    assert "damaged" in banner.text.text() and copy.name in banner.text.text() and "nothing was deleted" in \
        banner.text.text()
    assert window.chat_page.sidebar.conversation_ids() == []  # a new, empty history …
    conv = window.history.create_conversation("fresh")  # … that works
    window.history.add_message(conv, "user", "hello again")
    window.chat_page.sidebar.refresh()
    assert window.chat_page.sidebar.conversation_ids() == [conv]
    names = sorted(p.name for p in folders["data"].iterdir() if p.name.startswith("history"))
    assert copy.name in names and "history.sqlite3" in names
    assert banner is not window.chat_page.banner
    window.chat_page.banner.hide()  # what an engine load does: the history's notice stays
    assert banner.isVisible()
    qtbot.mouseClick(banner.restart_button, Qt.MouseButton.LeftButton)  # "Close"
    assert not banner.isVisible()
    window.close()
    with sqlite3.connect(copy) as old:  # the copy is the damaged database itself, for recovery tools
        assert old.execute("SELECT count(*) FROM conversations").fetchone()[0] == 30


def test_a_history_that_is_not_a_database_is_copied_aside_with_its_companions(folders: dict[str, Path]) -> None:
    path = folders["data"] / "history.sqlite3"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not SQLite" * 500)
    failed(app("history", "list"), 1, "is damaged", str(path))
    store = HistoryStore(recover=True)
    assert store.damaged_copy is not None and store.damaged_copy.read_bytes() == b"this is not SQLite" * 500
    assert store.conversations() == []
    store.close()


def test_damaged_json_columns_are_read_with_defaults_and_named(qtbot: QtBot, folders: dict[str, Path]) -> None:
    path = folders["data"] / "history.sqlite3"
    store = HistoryStore(path)
    broken = store.create_conversation("broken settings", "Be brief.", {"thinking": False})
    store.add_message(broken, "user", "hello")
    store.add_message(broken, "assistant", "hi there", {"decode_tps": 9.5})
    listed = store.create_conversation("settings are a list")
    store.close()
    with sqlite3.connect(path) as raw:  # the damage: not JSON, JSON that is not an object, nested too deep
        raw.execute("UPDATE conversations SET settings = '{not json' WHERE id = ?", (broken,))
        raw.execute("UPDATE conversations SET settings = '[1, 2]' WHERE id = ?", (listed,))
        raw.execute("UPDATE messages SET stats = ? WHERE role = 'assistant'", ("[" * 100000 + "]" * 100000,))

    shown = app("history", "show", str(broken))
    assert shown.returncode == 0 and "hi there" in shown.stdout
    assert f"settings of conversation {broken}" in shown.stderr and "damaged" in shown.stderr
    assert "stats of message" in shown.stderr
    for args in (["list"], ["list", "--search", "hi"], ["export", "--format", "json"], ["export", "--format", "md"]):
        result = app("history", *args)
        assert result.returncode == 0, result.stderr
    exported = json.loads(app("history", "export", "--format", "json").stdout)
    assert {c["title"]: c["settings"] for c in exported["conversations"]} == {"broken settings": {},
                                                                              "settings are a list": {}}

    window = MainWindow(history=HistoryStore(path))
    qtbot.addWidget(window)
    window.chat_page.sidebar.list.setCurrentRow(window.chat_page.sidebar.conversation_ids().index(broken))
    assert window.chat_page.conversation_id == broken and "hi there" in window.chat_page.chat.transcript_text()
    assert window.chat_page.chat_settings.system_prompt == "Be brief."  # the rest of the chat's settings: defaults
    window.close()


def test_a_200000_deep_import_is_refused_in_words(qtbot: QtBot, folders: dict[str, Path]) -> None:
    deep = folders["data"].parent / "deep.json"
    deep.write_text("[" * 200000 + "]" * 200000)
    nested = folders["data"].parent / "nested.json"
    deep_settings = '{"a":' * 200000 + "1" + "}" * 200000
    nested.write_text(f'{{"format": "{EXPORT_FORMAT}", "conversations": [{{"title": "x", '
                      f'"settings": {deep_settings}}}]}}')
    make_history(folders["data"] / "history.sqlite3", chats=2)
    for file in (deep, nested):
        failed(app("history", "import", str(file)), 1, str(file), "nests its JSON")
    other_shapes = {"list.json": [], "conversations.json": {"format": EXPORT_FORMAT, "conversations": {"a": 1}},
                    "message.json": {"format": EXPORT_FORMAT, "conversations": [{"title": "t", "messages": [7]}]},
                    "stats.json": {"format": EXPORT_FORMAT, "conversations": [{"title": "t", "messages": [
                        {"role": "user", "content": "c", "stats": "fast"}]}]}}
    for name, data in other_shapes.items():
        (folders["data"].parent / name).write_text(json.dumps(data))
        failed(app("history", "import", str(folders["data"].parent / name)), 1)
    (folders["data"].parent / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    failed(app("history", "import", str(folders["data"].parent / "binary.json")), 1, "not UTF-8")
    assert len(json.loads(app("history", "list", "--json").stdout)) == 2  # nothing was imported

    window = MainWindow(history=HistoryStore(folders["data"] / "history.sqlite3"))
    qtbot.addWidget(window)
    window.show()
    assert window.chat_page.transfer.import_chats(deep) == []
    assert window.chat_page.banner.isVisible() and "nests its JSON" in window.chat_page.banner.text.text()
    assert len(window.chat_page.sidebar.conversation_ids()) == 2
    window.close()


HOLDER = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")  # what another FastMTP Chat holds while it writes
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def locked_history(folders: dict[str, Path]) -> Iterator[Path]:
    path = folders["data"] / "history.sqlite3"
    make_history(path, chats=2)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    yield path
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=30)


def test_a_history_locked_by_another_process_is_in_use_not_damaged(
        locked_history: Path, monkeypatch: pytest.MonkeyPatch, qtbot: QtBot) -> None:
    before = digest(locked_history)
    message = failed(app("history", "list"), 1, "in use by another FastMTP Chat", str(locked_history))
    assert "damaged" not in message and "Move the file" not in message

    monkeypatch.setattr(history_module, "BUSY_TIMEOUT_S", 0.2)
    with pytest.raises(HistoryBusyError, match="in use by another FastMTP Chat"):
        HistoryStore(recover=True)  # the window's way: a lock is never taken for damage

    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical", lambda _parent, _title, text: shown.append(text))
    assert gui_main.run() == 1  # the window cannot start: it says why
    assert len(shown) == 1 and "in use by another FastMTP Chat" in shown[0]
    assert digest(locked_history) == before
    assert not [p for p in locked_history.parent.iterdir() if "damaged" in p.name]


# ----------------------------------------------------------------------------- folders


@pytest.mark.parametrize("which", ["config", "data"])
def test_an_unusable_config_or_data_folder_is_named(qapp: Any, tmp_path: Path, folders: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    blocker = tmp_path / f"{which}-is-a-file"
    messages: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical", lambda _parent, _title, text: messages.append(text))
    blocker.write_text("not a folder")
    for folder in (blocker, blocker / "inside"):
        env = {f"FASTMTP_{which.upper()}_DIR": str(folder)}
        for args in (["history", "list"], ["trust", "list"], ["models"], ["backend", "list"]):
            result = app(*args, env=env)
            if result.returncode == 0:
                continue  # this command does not need that folder
            failed(result, 1, f"The {which} folder {folder} cannot be used", f"{blocker} is a file",
                   f"FASTMTP_{which.upper()}_DIR")
        monkeypatch.setenv(f"FASTMTP_{which.upper()}_DIR", str(folder))
        messages.clear()
        assert gui_main.run() == 1
        assert len(messages) == 1 and f"{blocker} is a file" in messages[0]
    failed(app("history", "list", env={"FASTMTP_DATA_DIR": str(blocker)}), 1)
    failed(app("trust", "list", env={"FASTMTP_CONFIG_DIR": str(blocker)}), 1)
    assert blocker.read_text() == "not a folder"


# ----------------------------------------------------------------------------- trust state


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


def make_release(folder: Path, key: KeyPair, version: str = "1") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in RELEASE_FILES.items():
        (folder / name).write_bytes(data)
    sign_release(folder, key.private, version=version)
    return folder


def resign_manifest(folder: Path, key: KeyPair, raw: bytes) -> None:
    (folder / INTEG.manifest).write_bytes(raw)
    (folder / (INTEG.manifest + ".sig")).write_bytes(signing.sign(signing.load_private_key(key.private), raw))


TRUSTED_KEYS_SHAPES: dict[str, Any] = {
    "a list": [], "keys not a list": {"keys": "abc"}, "a key not an object": {"keys": [1]},
    "a key without its public key": {"keys": [{"repo": REPO}]},
    "a public key that is not hex": {"keys": [{"repo": REPO, "public_key": "zz"}]},
    "a public key of the wrong length": {"keys": [{"repo": REPO, "public_key": "abcd"}]},
}


@pytest.mark.parametrize("shape", list(TRUSTED_KEYS_SHAPES))
def test_a_trusted_keys_file_of_the_wrong_shape_is_named(tmp_path: Path, folders: dict[str, Path], key: KeyPair,
                                                         shape: str) -> None:
    file = folders["config"] / "trusted-keys.json"
    file.parent.mkdir(parents=True)
    file.write_text(json.dumps(TRUSTED_KEYS_SHAPES[shape]))
    release = make_release(tmp_path / "release", key)
    failed(app("trust", "list"), 4, str(file), "damaged")
    failed(app("verify", str(release), "--trust-fingerprint", key.fingerprint), 4, str(file), "damaged")
    failed(app("trust", "add", str(key.public)), 4, str(file))
    failed(app("trust", "remove", key.fingerprint), 4)  # a damaged entry can still be removed by its fingerprint
    assert json.loads(file.read_text()) == TRUSTED_KEYS_SHAPES[shape]  # left for the user to repair


RELEASE_STATE_SHAPES: dict[str, Any] = {
    "a list": [1, 2], "an entry that is a list": {REPO: [1, 2]},
    "a version key that is text": {REPO: {"version": "1", "version_key": "1"}},
    "a version key with text in it": {REPO: {"version": "1", "version_key": [1, "a"]}},
    "nested too deep": None,
}


@pytest.mark.parametrize("shape", list(RELEASE_STATE_SHAPES))
def test_a_release_state_file_of_the_wrong_shape_is_named(tmp_path: Path, folders: dict[str, Path], key: KeyPair,
                                                          shape: str) -> None:
    file = folders["config"] / "release-state.json"
    file.parent.mkdir(parents=True)
    data = RELEASE_STATE_SHAPES[shape]
    text = json.dumps(data) if data is not None else '{"x":' * 200000 + "1" + "}" * 200000
    file.write_text(text)
    release = make_release(tmp_path / "release", key)
    failed(app("verify", str(release), "--trust-fingerprint", key.fingerprint), 4, str(file), "damaged")
    assert file.read_text() == text
    with pytest.raises(TrustError, match="damaged"):
        trust.last_verified(REPO)


def test_a_version_longer_than_pythons_int_limit_fails_verification(tmp_path: Path, folders: dict[str, Path],
                                                                   key: KeyPair) -> None:
    release = make_release(tmp_path / "release", key)
    manifest = json.loads((release / INTEG.manifest).read_text())
    for version in ("1." + "9" * 5000, "9" * 5000):
        resign_manifest(release, key, json.dumps(dict(manifest, version=version)).encode())
        message = failed(app("verify", str(release), "--trust-fingerprint", key.fingerprint), 4,
                         INTEG.manifest, "longer than 100 digits")
        assert len(message) < 2000  # the version is not printed whole
    resign_manifest(release, key, b'{"version": ' + b"9" * 5000 + b"}")  # a number JSON itself refuses
    failed(app("verify", str(release), "--trust-fingerprint", key.fingerprint), 4, INTEG.manifest)
    resign_manifest(release, key, b"[" * 200000 + b"]" * 200000)  # 400 kB, 200000 deep
    failed(app("verify", str(release), "--trust-fingerprint", key.fingerprint), 4, "nests its JSON too deeply")
    failed(app("release", "sign", "--dir", str(release), "--key", str(key.private), "--version", "9" * 5000), 4,
           "longer than 100 digits")


# ----------------------------------------------------------------------------- the keyring


KEYRING_DAMAGE = {
    "no section": b"hf_secret_in_a_broken_line\n",
    "a broken line": b"[fastmtp-chat]\nhuggingface-hub-token\n= hf_secret_in_a_broken_line\n",
    "not text": b"\xff\xfe\x00hf_secret_in_a_broken_line",
    "a value that is not base64": b"[fastmtp_2Dchat]\nhuggingface_2dhub_2dtoken = %%hf_secret_in_a_broken_line%%\n",
}


@pytest.mark.parametrize("damage_kind", list(KEYRING_DAMAGE))
def test_a_damaged_keyring_file_is_named_and_never_quoted(tmp_path: Path, folders: dict[str, Path],
                                                          damage_kind: str) -> None:
    env = {**child_keyring_env(tmp_path)}
    file = tmp_path / "xdg" / "python_keyring" / "keyring_pass.cfg"
    file.parent.mkdir(parents=True)
    file.write_bytes(KEYRING_DAMAGE[damage_kind])
    unreadable = damage_kind != "a value that is not base64"  # that file parses: only the value is bad
    for args, stdin in ((["token", "status"], ""), (["token", "clear"], ""), (["token", "set"], "hf_new_token\n")):
        result = app(*args, env=env, stdin=stdin)
        if not unreadable and args[1] != "status":
            assert result.returncode == 0, result.stderr  # clearing or storing a token replaces the bad value
            continue
        message = failed(result, 1, "keyring", str(file), "cannot be read")
        assert "hf_secret_in_a_broken_line" not in message  # the file's lines are never echoed
    if unreadable:
        assert file.read_bytes() == KEYRING_DAMAGE[damage_kind]  # the damaged file is kept as it was
        backend_file = file
    else:
        assert app("token", "status", env=env).stdout.strip() == "Hub token: stored in the keyring."
        backend_file = tmp_path / "damaged-again.cfg"
        backend_file.write_bytes(KEYRING_DAMAGE[damage_kind])
    status = app("token", "status", env={**env, "HF_TOKEN": "hf_from_env"})  # the variable still works
    assert status.returncode == 0 and "HF_TOKEN" in status.stdout

    with plaintext_keyring(backend_file):  # the same through the API, on a real file-backed keyring
        with pytest.raises(secrets.SecretsError, match="cannot be read"):
            secrets.status()
        with pytest.raises(secrets.SecretsError, match="cannot be read"):
            secrets.get_token()
