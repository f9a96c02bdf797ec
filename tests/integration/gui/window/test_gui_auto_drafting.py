"""Auto drafting in the window (issue 26): the window's default drafting mode; a model it has not measured yet
gets its replies from off, the embedded head and the d2t sidecar in turn (the next mode is loaded before the
next message is sent), the HUD saying how far the measuring is; a model with a remembered winner loads the
winner, the HUD saying by how much it won. Real windows offscreen, the real engine on the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from app.backend.registry import active
from app.chats.history import HistoryStore
from app.core import paths
from app.engine.auto_mode import CANDIDATES, AutoDrafting, AutoMemory, auto_key
from app.engine.config import DRAFT_DEPTH_MAX
from app.engine.verdict import Condition
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.gui.models.model_selector import AUTO_KEY
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders

WAIT_MS = 60_000


@pytest.fixture
def window(qtbot: QtBot, store: HistoryStore) -> Iterator[MainWindow]:
    with open_window(qtbot, store) as win:
        yield win


@pytest.mark.usefixtures("patched_backend")
def test_a_new_model_in_auto_takes_turns_and_the_hud_says_how_far_it_measured(
        qtbot: QtBot, window: MainWindow, module_tmp: ModuleFolders, default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(module_tmp.mktemp("auto-cold-demo"))
    assert window.model_selector.mode() == AUTO_KEY  # the window's default
    window.loading.use_demo(demo)
    hud = window.chat_page.chat.hud
    config = window.bridge.config
    assert config is not None and config.mode == "off"  # the warm-up reply's mode, first in turn
    assert hud.auto.text().replace("\n", " ") == ("Auto is measuring (off 0/3, embedded 0/3, d2t 0/3); next reply: "
                                                  "off.")
    qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
    first = send_and_wait(qtbot, window, "Tell me about lighthouses")
    assert first["stats"]["generated"] >= 32  # long enough to count
    assert "next reply: embedded" in hud.auto.text().replace("\n", " ")
    assert window.bridge.config == config and window.chat_page.ready  # no reload until a message is sent

    # the embedded head is loaded first, then it replies
    second = send_and_wait(qtbot, window, "And about their keepers?")
    config = window.bridge.config
    assert config is not None and config.mode == "embedded" and config.adaptive
    assert config.draft_depth == DRAFT_DEPTH_MAX and second["stats"]["drafted"] > 0
    assert "embedded 1/3" in hud.auto.text().replace("\n", " ")
    assert [e.role for e in window.chat_page.chat.entries] == ["user", "assistant"] * 2  # nothing lost or doubled
    records = AutoMemory(paths.depth_memory_dir()).entries()
    mine = [r for r in records if r.get("target") == str(demo.target.resolve())]
    assert len(mine) == 1 and mine[0]["winner"] is None and mine[0]["samples"] == 1  # the warm-up is not counted

    window.model_selector.mode_box.setCurrentIndex(window.model_selector.mode_box.findData("off"))
    assert hud.auto.isHidden()  # another mode chosen: Auto has no say


@pytest.mark.usefixtures("patched_backend")
def test_a_remembered_winner_is_loaded_and_the_hud_says_by_how_much_it_won(
        qtbot: QtBot, window: MainWindow, module_tmp: ModuleFolders, default_demo: DemoCopies) -> None:
    demo: DemoModel = default_demo.copy_to(module_tmp.mktemp("auto-decided-demo"))
    manifest = active()
    assert manifest is not None
    decided = AutoDrafting(CANDIDATES)
    speeds = {"off": iter([20.0, 36.0, 37.0, 35.5]), "embedded": iter([30.0, 31.0, 29.5]),
              "d2t": iter([47.0, 49.0, 48.5])}
    while decided.measuring:
        mode = decided.next_mode()
        decided.observe(mode, Condition(mode, "", "temperature 0.7", str(demo.target)), next(speeds[mode]), 96)
    AutoMemory(paths.depth_memory_dir()).remember(auto_key(demo.target, demo.sidecar_d2t, manifest.id), decided)

    window.loading.use_demo(demo)
    config = window.bridge.config
    assert config is not None and config.mode == "sidecar" and config.draft == demo.sidecar_d2t and config.adaptive
    assert window.chat_page.chat.hud.auto.text().replace("\n", " ") == (
        "Auto uses d2t: 1.35x drafting off's speed (median 48 against 36 tok/s, 3 replies each, temperature 0.7).")
    qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
    reply = send_and_wait(qtbot, window, "Hello")
    assert window.bridge.config == config and reply["stats"]["drafted"] > 0  # the winner stays
