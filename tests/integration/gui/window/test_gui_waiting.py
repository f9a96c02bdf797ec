"""Enter while "Loading the model…" (issue 13, defect 3): the message shows at once, marked as waiting, and is
sent by itself once the model is ready; a second message meanwhile joins the waiting one. The real engine on
the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.chat.waiting_message import WAITING_NOTE
from app.gui.main import MainWindow
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("waiting-demo"))


def _enter(qtbot: QtBot, win: MainWindow, text: str) -> None:
    win.chat_page.chat.input.setPlainText(text)
    qtbot.keyClick(win.chat_page.chat.input, Qt.Key.Key_Return)


def test_enter_while_loading_waits_then_sends_without_another_key(qtbot: QtBot, tmp_path: Path,
                                                                   patched_backend: object, demo: DemoModel) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.show()
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.loading.use_demo(demo)
    assert not win.chat_page.ready and win.status.text() == "Loading the model…"

    _enter(qtbot, win, "hello while loading")
    assert not win.chat_page.ready  # still loading: the message was not dropped, it waits
    shown = win.chat_page.chat.transcript_text()
    assert "hello while loading" in shown and WAITING_NOTE in shown
    assert "waits and is sent when it is ready" in win.status.text()
    assert win.chat_page.chat.input.toPlainText() == ""
    _enter(qtbot, win, "and one more line")  # a second Enter joins the waiting message
    assert [e.role for e in win.chat_page.chat.entries] == ["user"]
    assert win.chat_page.chat.entries[0].text == "hello while loading\n\nand one more line"
    assert not win.chat_page.banner.isVisible()

    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)  # no other key press
    assert done[0]["stop_reason"] in ("eos", "stop", "length") and done[0]["text"].strip()  # eos: the demo stops
    assert [e.role for e in win.chat_page.chat.entries] == ["user", "assistant"]
    assert WAITING_NOTE not in win.chat_page.chat.transcript_text()
    assert win.chat_page.conversation_id is not None
    saved = [(m.role, m.content) for m in store.messages(win.chat_page.conversation_id)]
    assert saved[0] == ("user", "hello while loading\n\nand one more line")
    assert saved[1][0] == "assistant" and saved[1][1].strip()
    assert win.status.text() == "Ready" and not win.chat_page.banner.isVisible()
    win.close()
    store.close()


def test_a_load_that_fails_puts_the_waiting_message_back_in_the_box(qtbot: QtBot, tmp_path: Path,
                                                                     patched_backend: object,
                                                                     demo: DemoModel) -> None:
    from dataclasses import replace

    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.show()
    win.model_selector.demo = demo
    config = win.model_selector.config_for("off")
    assert config is not None
    win.chat_page.load(replace(config, target=tmp_path / "no-such-model.gguf"))
    _enter(qtbot, win, "are you there?")
    assert "are you there?" in win.chat_page.chat.transcript_text()
    qtbot.waitUntil(lambda: win.chat_page.banner.isVisible(), timeout=WAIT_MS)
    assert win.chat_page.chat.entries == [] and win.chat_page.chat.input.toPlainText() == "are you there?"
    assert "back in the box" in win.status.text()
    win.close()
    store.close()
