"""A new user's first chat on the built-in demo in Auto (issue 36's second walk, as a test): every reply's footer,
the HUD's speed row, Auto's line and the HUD's "vs off" row speak of the same replies with the same figures. Auto
measures off, the embedded head and the d2t sidecar in turn from a fresh record, the replies' own speeds decide,
and what it then says (medians, ratio) is what the footers of those very replies said. Real window offscreen, the
real engine on the scaled demo (the chat's default: the real model's proportions)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import re
import statistics
from collections.abc import Iterator

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.verdict import MIN_SAMPLES
from app.gui.main import MainWindow
from app.gui.models.model_selector import AUTO_KEY
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import WAIT_MS, open_window, send_and_wait
from tests.helpers.module_folders import ModuleFolders

MOST_REPLIES = 20  # a warm-up and MIN_SAMPLES per mode, with room for replies a verdict could not use yet


@pytest.fixture
def window(qtbot: QtBot, store: HistoryStore) -> Iterator[MainWindow]:
    with open_window(qtbot, store) as win:
        yield win


@pytest.mark.usefixtures("patched_backend")
def test_the_footers_the_hud_and_auto_agree_on_the_same_replies(
        qtbot: QtBot, window: MainWindow, module_tmp: ModuleFolders, default_demo: DemoCopies) -> None:
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
