"""Auto drafting in the window (issue 26): the window's default drafting mode; a model it has not measured yet
gets its replies from off, the embedded head and the d2t sidecar in turn (the next mode is loaded before the
next message is sent), the HUD saying how far the measuring is; a model with a remembered winner loads the
winner, the HUD saying by how much it won; and once it decides, the footers, the HUD and Auto agree on the same
replies. Real windows offscreen, the real engine on the demo model."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import re
import statistics
from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from app.backend.registry import active
from app.chats.history import HistoryStore
from app.core import paths
from app.engine import depth_memory
from app.engine.auto_mode import CANDIDATES, AutoDrafting, AutoMemory, auto_key
from app.engine.config import DRAFT_DEPTH_MAX
from app.engine.depth_memory import LOAD_WINDOW_S
from app.engine.verdict import MIN_SAMPLES, Condition
from app.gguftools.demo_model import DemoModel
from app.gui.main import MainWindow
from app.gui.models.model_selector import AUTO_KEY
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)


@pytest.fixture
def window(qtbot: QtBot, store: HistoryStore) -> Iterator[MainWindow]:
    with open_window(qtbot, store) as win:
        yield win


@pytest.mark.usefixtures("patched_backend")
def test_a_new_model_in_auto_takes_turns_and_the_hud_says_how_far_it_measured(
        qtbot: QtBot, window: MainWindow, module_tmp: ModuleFolders, default_demo: DemoCopies,
        monkeypatch: pytest.MonkeyPatch) -> None:
    demo = default_demo.copy_to(module_tmp.mktemp("auto-cold-demo"))
    assert window.model_selector.mode() == AUTO_KEY  # the window's default
    windows: list[float] = []  # the windows the machine's load is read over in this (the window's) process
    read = depth_memory.machine_load

    def reading(window_s: float = LOAD_WINDOW_S) -> float | None:
        windows.append(window_s)
        return read(window_s)
    monkeypatch.setattr(depth_memory, "machine_load", reading)
    window.loading.use_demo(demo)
    assert windows == [LOAD_WINDOW_S]  # a model just chosen: the window does not wait a second for a new record
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


@pytest.mark.usefixtures("patched_backend", "steady_load")  # the window's recall right after the test's save
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


MOST_REPLIES = 20  # the walk: a warm-up and MIN_SAMPLES per mode, with room for replies a verdict could not use yet


@pytest.mark.usefixtures("patched_backend")
def test_the_footers_the_hud_and_auto_agree_on_the_same_replies(
        qtbot: QtBot, window: MainWindow, module_tmp: ModuleFolders, default_demo: DemoCopies) -> None:
    """A new user's first chat on the built-in demo in Auto (issue 36's second walk, as a test): every reply's
    footer, the HUD's speed row, Auto's line and the HUD's "vs off" row speak of the same replies with the same
    figures; what Auto then says (medians, ratio) is what the footers of those very replies said."""
    demo = default_demo.copy_to(module_tmp.mktemp("walk-demo"))
    assert window.model_selector.mode() == AUTO_KEY
    window.loading.use_demo(demo)
    hud, view = window.chat_page.chat.hud, window.loading.auto
    speeds: dict[str, list[float]] = {}  # Auto's mode -> the decode tok/s its replies' footers showed
    for turn in range(MOST_REPLIES):
        qtbot.waitUntil(lambda: window.chat_page.ready, timeout=WAIT_MS)
        auto = view.auto
        assert auto is not None
        if not auto.measuring:
            break
        mode = auto.next_mode()
        done = send_and_wait(qtbot, window, f"Question {turn}: what is FastMTP Chat?")
        stats = done["stats"]
        footer = window.chat_page.chat.entries[-1].footer
        shown = f"{stats['decode_tps']:.1f} tok/s"
        assert shown in footer and hud.tps.text() == shown, (footer, hud.tps.text())  # one figure, two places
        speeds.setdefault(mode, []).append(round(float(stats["decode_tps"]), 1))
    auto = view.auto
    assert auto is not None and not auto.measuring, auto.status()
    assert all(len(replies) >= MIN_SAMPLES for replies in speeds.values()), speeds
    line = " ".join(hud.auto.text().split())
    assert line == " ".join(auto.status().split())
    for drafting, verdict in auto.comparisons().items():
        # Auto's medians are those of the footers it was shown, the warm-up (the first off reply) left out
        assert statistics.median(verdict.b_tps) == pytest.approx(
            statistics.median(speeds[drafting][-len(verdict.b_tps):]), abs=0.05)
        assert statistics.median(verdict.a_tps) == pytest.approx(
            statistics.median(speeds["off"][1:][-len(verdict.a_tps):]), abs=0.05)
    winner = auto.winner
    if winner is not None and winner != "off":
        won = auto.verdicts[winner]
        assert f"{won.ratio:.2f}x" in line
        assert re.search(rf"median {won.b_median:.0f} against {won.a_median:.0f} tok/s", line), line
    config = window.bridge.config
    assert config is not None
    loaded = view.verdict(config)  # the mode of the last reply, still loaded: None when that was off
    if loaded is not None:  # the HUD's "vs off" row is Auto's comparison of that mode, from the same replies
        assert hud.one_line(hud.vs_off).startswith(f"{loaded.ratio:.2f}x"), hud.one_line(hud.vs_off)
    print(f"\nAuto's line: {line}\nfooter speeds by mode: {speeds}")
