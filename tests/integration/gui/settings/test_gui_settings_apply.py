"""A saved change to the engine settings takes effect (issue 29 item 3): the chat's model reloads with the new
configuration at once when the engine is idle, or as soon as the reply under way ends, and the page says which.
The real engine on the demo model; the depth a reply ran at is in its stats (``depth``, ``depth_setting``)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("settings-apply-demo"))


def _idle_and_ready(win: MainWindow) -> bool:
    return win.chat_page.ready and not win.bridge.busy


def test_a_saved_draft_depth_is_the_next_replys_depth(qtbot: QtBot, store: HistoryStore, patched_backend: object,
                                                       demo: DemoModel) -> None:
    settings = Settings(draft_depth=3, first_run_done=True)
    with open_window(qtbot, store, mode="sidecar-d2t", settings=settings) as win:  # a fixed depth (Auto: its own)
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: _idle_and_ready(win), timeout=WAIT_MS)
        stats = send_and_wait(qtbot, win, "How does drafting work?")["stats"]
        assert stats["depth_setting"] == "depth 3" and stats["depth"] == 3

        # saved while idle: the model reloads at once, and the page says so
        page = win.settings_page
        win.show_page("Settings")
        page.draft_depth.setValue(2)
        page.save_button.click()
        assert "reloads now" in page.note.text()
        assert win.bridge.busy and win.bridge.config is not None and win.bridge.config.draft_depth == 2
        qtbot.waitUntil(lambda: _idle_and_ready(win), timeout=WAIT_MS)
        stats = send_and_wait(qtbot, win, "And at depth two?")["stats"]
        assert stats["depth_setting"] == "depth 2" and stats["depth"] == 2

        # saved while a reply streams: the reply ends at its depth, the next one runs at the new depth
        done: list[dict[str, Any]] = []
        win.bridge.done.connect(done.append)
        win.chat_page.send("Once more, please.")
        assert win.bridge.busy
        page.draft_depth.setValue(4)
        page.save_button.click()
        assert "as soon as" in page.note.text()
        qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
        assert done[0]["stats"]["depth_setting"] == "depth 2"
        qtbot.waitUntil(lambda: _idle_and_ready(win) and win.bridge.config is not None
                        and win.bridge.config.draft_depth == 4, timeout=WAIT_MS)
        stats = send_and_wait(qtbot, win, "And at depth four?")["stats"]
        assert stats["depth_setting"] == "depth 4" and stats["depth"] == 4

        # a theme change alone does not reload anything
        loads: list[object] = []
        win.bridge.loaded.connect(loads.append)
        page.theme.setCurrentText("dark")
        page.save_button.click()
        assert not win.bridge.busy and loads == [] and "reload" not in page.note.text()
