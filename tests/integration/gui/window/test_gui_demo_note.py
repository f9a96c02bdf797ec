"""The demo's nature is said where it is met (issue 29 item 10): the first-run card and, while the demo model is
the chat's model, a note above the chat say that it answers every question with the same passage. The real
engine on the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("demo-note"))


def test_the_first_run_card_and_the_chat_say_the_demo_repeats_one_passage(
        qtbot: QtBot, tmp_path: Path, patched_backend: object, demo: DemoModel) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings())
    qtbot.addWidget(win)
    win.model_selector.restore_mode("sidecar-d2t")
    win.show()
    try:
        win.show_first_run()
        assert "answers with the same short passage" in win.first_run.demo_text.text()
        assert not win.chat_page.demo_note.isVisibleTo(win.chat_page)  # no model chosen yet

        win.first_run.demo_ready.emit(demo)  # what "Try the demo model" ends with
        assert win.chat_stack.currentWidget() is win.chat_page
        note = win.chat_page.demo_note
        assert note.isVisible() and "same short passage" in note.text.text()
        qtbot.waitUntil(lambda: win.chat_page.ready and not win.bridge.busy, timeout=WAIT_MS)
        done: list[dict[str, Any]] = []
        win.bridge.done.connect(done.append)
        win.chat_page.send("What is the capital of France?")
        qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
        assert "FastMTP Chat" in done[0]["text"] and "Paris" not in done[0]["text"]  # as the note says
        assert note.isVisible()
    finally:
        win.close()
        store.close()
