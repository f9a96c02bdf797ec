"""The window with a remote server, offscreen: "Remote server…" in the model selector adds one (key in a real
file-backed keyring), the chat streams through our real llama-server with the demo model, the HUD shows the server's
acceptance and why tokens are not tinted, and a dropped connection keeps the text and offers Retry."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox
from pytestqt.qtbot import QtBot

from app.backend.builder import BuildOptions
from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.gui.models.model_selector import ADD_REMOTE_KEY
from app.gui.settings.machines import RemoteServerDialog
from app.machines.remote_client import NO_TINT_REASON
from app.machines.remote_servers import get_server
from app.machines.upstream_server import UpstreamServer, build_server
from app.settings import app_settings
from tests.helpers.chat_server import WORDS, ChatFault, ChatServer
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.file_keyring import plaintext_keyring
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A config folder and a real file-backed keyring of this test's own."""
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    with plaintext_keyring(tmp_path / "keyring.cfg"):
        yield tmp_path / "config"


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, own_config: Path) -> Iterator[MainWindow]:
    win = MainWindow(history=HistoryStore(tmp_path / "history.sqlite3"))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: not win.model_selector.listing_models, timeout=WAIT_MS)
    yield win
    win.close()
    win.history.close()


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("gui-remote-demo"))


def _dialog_answers(monkeypatch: pytest.MonkeyPatch, name: str, url: str, key: str = "") -> None:
    """The dialog as a user fills it in and presses OK (its modal loop would wait for a person)."""
    def exec_(dialog: RemoteServerDialog) -> int:
        dialog.name.setText(name)
        dialog.url.setText(url)
        dialog.api_key.setText(key)
        dialog.accept()
        return int(QDialog.DialogCode.Accepted if dialog.result() == QDialog.DialogCode.Accepted
                   else QDialog.DialogCode.Rejected)

    monkeypatch.setattr(RemoteServerDialog, "exec", exec_)


def _send(qtbot: QtBot, win: MainWindow, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    done: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.bridge.error.connect(errors.append)
    win.chat_page.send(text)
    qtbot.waitUntil(lambda: bool(done or errors), timeout=WAIT_MS)
    return done, errors


@pytest.mark.usefixtures("patched_backend")
def test_adding_a_remote_server_and_chatting_through_our_llama_server(
        qtbot: QtBot, window: MainWindow, demo: DemoModel, own_config: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    binary = build_server(BuildOptions(flavor="cpu"))
    with UpstreamServer(binary, demo.target, draft=demo.sidecar_d2t, ctx_size=1024, threads=2,
                        api_key="gui-key") as server:
        _dialog_answers(monkeypatch, "peer", server.url, "gui-key")
        model_box = window.model_selector.model_box
        model_box.setCurrentIndex(model_box.findData(ADD_REMOTE_KEY))  # "Remote server…"
        qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
        assert window.model_selector.model_box.currentText() == "Remote: peer"
        assert get_server("peer").api_key() == "gui-key"
        assert "gui-key" not in (own_config / "remote-servers.json").read_text()
        assert window.chat_page.chat.hud.mode.text() == "remote · peer (llama-server, target.gguf)"
        chat = window.chat_page.chat
        assert chat.legend.text() == NO_TINT_REASON and not chat.show_drafts.isEnabled()
        assert not window.model_selector.mode_box.isEnabled()  # drafting is the server's own
        assert "nothing leaves it" in window.status.text()

        done, errors = _send(qtbot, window, "Hello there")
    assert not errors and done
    stats = done[0]["stats"]
    timings = stats["server_timings"]
    assert stats["mode"] == "remote · peer" and timings["draft_n"] > 0
    shown = f"{timings['draft_n_accepted'] / timings['draft_n'] * 100:.0f}%"
    chat = window.chat_page.chat
    assert chat.hud.acceptance.text() == f"{shown}  ({timings['draft_n_accepted']}/{timings['draft_n']})"
    assert done[0]["text"].strip() and done[0]["text"].strip()[:20] in " ".join(chat.transcript_text().split())
    saved = window.history.messages(window.chat_page.conversation_id or 0)[-1]
    assert saved.role == "assistant" and saved.complete and saved.content == window.chat_page.chat.entries[-1].text


def test_a_dropped_connection_keeps_the_reply_and_retry_asks_again(qtbot: QtBot, window: MainWindow,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with ChatServer("openai") as server:
        _dialog_answers(monkeypatch, "flaky", server.url)
        window.settings_page.machines.add_remote()  # the Settings page's "Remote server…" button
        assert window.settings_page.machines.remote_names() == ["flaky"]
        window.model_selector.model_box.setCurrentIndex(window.model_selector.model_box.findData("remote:flaky"))
        qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)

        server.queue_fault(ChatFault(drop_after=5))
        done, errors = _send(qtbot, window, "Tell me something")
        assert not done and errors[0]["error"] == "RemoteConnectionLost"
        assert window.chat_page.banner.isVisible() and window.chat_page.banner.restart_button.text() == "Retry"
        assert "dropped after 5 tokens" in window.chat_page.banner.text.text()
        kept = window.history.messages(window.chat_page.conversation_id or 0)[-1]
        assert kept.role == "assistant" and not kept.complete and kept.content == "".join(WORDS[:5])

        again: list[dict[str, Any]] = []
        window.bridge.done.connect(again.append)
        qtbot.mouseClick(window.chat_page.banner.restart_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(again), timeout=WAIT_MS)
    assert not window.chat_page.banner.isVisible()
    replies = [m for m in window.history.messages(window.chat_page.conversation_id or 0) if m.role == "assistant"]
    assert len(replies) == 1 and replies[0].complete and replies[0].content == "".join(WORDS)


def test_the_settings_page_says_rpc_has_no_authentication_and_checks_workers(window: MainWindow) -> None:
    machines = window.settings_page.machines
    assert "no password and no encryption" in machines.rpc_note.text()
    machines.rpc_workers.setText("192.168.1.20:50052, not-a-worker")
    window.settings_page.save()
    assert "is not host:port" in window.settings_page.note.text()
    machines.rpc_workers.setText("192.168.1.20:50052, 192.168.1.21:50052")
    window.settings_page.save()
    assert window.settings.rpc_workers == "192.168.1.20:50052,192.168.1.21:50052"
    assert app_settings.engine_fields(window.settings)["rpc"] == ("192.168.1.20:50052", "192.168.1.21:50052")


@pytest.mark.usefixtures("patched_backend")
def test_serve_this_machine_from_settings_stops_with_the_window_unless_kept(qtbot: QtBot, window: MainWindow) -> None:
    from app.engine.chat_template import Message
    from app.engine.config import ChatOptions
    from app.machines import serve
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import RemoteServer
    from app.machines.upstream_server import free_port

    machines = window.settings_page.machines
    machines.serve_port.setValue(free_port())
    machines.serve_box.setChecked(True)  # the chat's model: the built-in demo, with its d2t sidecar
    qtbot.waitUntil(lambda: machines.serving, timeout=WAIT_MS)
    note = machines.serve_note.text()
    assert "Serving at http://127.0.0.1:" in note and "shown this once" in note
    key = note.split("kept in the keyring): ", 1)[1].split("<", 1)[0]
    assert machines.server is not None
    url = machines.server.url
    with RemoteClient(RemoteServer("here", url), api_key=key) as client:
        assert client.load()["kind"] == "loaded"
        done = list(client.generate([Message("user", "Hi")], ChatOptions(max_tokens=8)))[-1]
    assert done["kind"] == "done" and done["stats"]["timings_from"] == "llama-server"
    pid = machines.server.proc.pid if machines.server.proc else 0

    machines.close_with_app()  # the window closes, "keep running" not ticked: the server goes with it
    assert not machines.serving and not serve.running()
    assert not Path(f"/proc/{pid}").exists() or b"llama-server" not in Path(f"/proc/{pid}/cmdline").read_bytes()

    machines.keep_running.setChecked(True)
    machines.serve_box.setChecked(False)
    machines.serve_box.setChecked(True)
    qtbot.waitUntil(lambda: machines.serving, timeout=WAIT_MS)
    assert "API key: the one in the keyring" in machines.serve_note.text()  # shown once: not again
    machines.close_with_app()
    state = serve.running()
    assert state is not None  # kept: `serve --stop` ends it
    assert serve.stop_detached() is not None and serve.running() is None


def _click_in_next_dialog(button: str, texts: list[str]) -> QTimer:
    """Press ``button`` in the next modal message box once it is up (its own loop runs meanwhile)."""
    timer = QTimer()
    timer.setInterval(10)

    def poll() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox) and box.isVisible():
            timer.stop()
            texts.append(box.text())
            next(b for b in box.buttons() if b.text() == button).click()

    timer.timeout.connect(poll)
    timer.start()
    return timer


def test_a_remote_server_is_edited_and_removed_in_the_settings(qtbot: QtBot, window: MainWindow,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    machines = window.settings_page.machines
    _dialog_answers(monkeypatch, "box", "http://127.0.0.1:18080", key="first-key")
    machines.add_remote()
    assert machines.remote_names() == ["box"] and window.model_selector.has("remote:box")
    assert get_server("box").api_key() == "first-key"
    assert not machines.edit_remote_button.isEnabled()  # nothing selected yet
    machines.remotes.setCurrentRow(0)
    assert machines.edit_remote_button.isEnabled() and machines.remove_remote_button.isEnabled()

    seen: dict[str, Any] = {}

    def edit(dialog: RemoteServerDialog) -> int:  # as a user changes the address and presses OK
        seen.update(name=dialog.name.text(), fixed=dialog.name.isReadOnly(), url=dialog.url.text(),
                    title=dialog.windowTitle())
        dialog.url.setText("http://127.0.0.1:18081")
        dialog.accept()
        return int(dialog.result())

    monkeypatch.setattr(RemoteServerDialog, "exec", edit)
    assert machines.edit_remote() is not None
    assert seen == {"name": "box", "fixed": True, "url": "http://127.0.0.1:18080",
                    "title": "Edit remote server box"}
    edited = get_server("box")
    assert edited.url == "http://127.0.0.1:18081" and machines.remote_names() == ["box"]
    assert edited.api_key() is None  # the key belonged to the old address: it does not follow the name

    asked: list[str] = []
    timer = _click_in_next_dialog("Cancel", asked)
    assert not machines.remove_remote()  # Cancel keeps it
    timer.stop()
    assert asked == ["Remove the remote server \u201cbox\u201d (http://127.0.0.1:18081)?"]
    assert machines.remote_names() == ["box"]

    timer = _click_in_next_dialog("Remove", asked)
    assert machines.remove_remote()
    timer.stop()
    assert machines.remote_names() == [] and not window.model_selector.has("remote:box")
    assert not machines.edit_remote_button.isEnabled()
    assert "box" not in (Path(os.environ["FASTMTP_CONFIG_DIR"]) / "remote-servers.json").read_text()
