"""The HUD's verdict belongs to the mode and depth loaded (issue 36 item 1), and the HUD keeps one width (item 9).

A real ``Hud`` offscreen, fed the events the engine sends: Auto measured d2t at adaptive depth (slower than off), then
d2t is loaded at fixed depth 3. The old "0.57x · does not pay" must not show under depth 3, before or after its first
reply; the note goes with its row; what is missing is said in words. And a finished reply does not widen the HUD.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

from app.engine.config import EngineConfig
from app.gui.chat.hud import Hud

TARGET, SIDECAR = Path("/models/target.gguf"), Path("/models/target-d2t.gguf")
OFF = EngineConfig(TARGET, mode="off", draft_depth=3)
ADAPTIVE = EngineConfig(TARGET, mode="sidecar", draft=SIDECAR, draft_depth=8, adaptive=True)
DEPTH3 = EngineConfig(TARGET, mode="sidecar", draft=SIDECAR, draft_depth=3)


def _streaming(tps: float) -> dict[str, Any]:
    return {"generated": 20, "rolling_tps": tps, "time_to_first_token": 0.05, "prompt_tps": 900.0}


def _reply(hud: Hud, config: EngineConfig, tps: float, long_figures: bool = False) -> None:
    """One reply of ``config`` at ``tps``: a token event, then the finished reply's stats."""
    if hud._config != config:
        hud.set_config(config)
    hud.show_stats(_streaming(tps))
    depth = "adaptive depth ≤8" if config.adaptive else ("depth 3" if config.mode != "off" else "no drafting")
    final = {"generated": 120, "decode_tps": tps, "sampling": "temperature 0.7", "depth_setting": depth,
             "time_to_first_token": 0.05, "prompt_tps": 900.0}
    if config.mode != "off":
        final.update(drafted=300, accepted=270 if not long_figures else 2999, acceptance=0.9, tokens_per_pass=3.4,
                     depth=3)
    hud.show_stats(final, final=True)


def test_a_verdict_at_adaptive_depth_is_not_shown_for_fixed_depth_3(qtbot: QtBot) -> None:
    hud = Hud()
    qtbot.addWidget(hud)
    hud.show()
    _reply(hud, OFF, 300.0)  # the warm-up
    for plain, drafted in ((350.0, 200.0), (352.0, 204.0), (349.0, 199.0)):  # Auto's alternating replies
        _reply(hud, OFF, plain)
        _reply(hud, ADAPTIVE, drafted)
    assert hud.one_line(hud.vs_off) == "0.57x · does not pay"
    assert hud.compared_text() == "d2t at adaptive depth ≤8 vs drafting off: 0.57x, does not pay"
    assert hud.note_text().startswith("Drafting does not pay here: 0.57x")

    hud.set_config(DEPTH3)  # loaded at fixed depth 3: nothing measured there yet
    assert hud.one_line(hud.vs_off) == "measuring" and hud.note_text() == "" and not hud.note.isVisible()
    assert hud.compared_text() == ("d2t at depth 3 vs drafting off: needs 3 more replies with d2t at depth 3 and 2 "
                                   "with drafting off, in turn")
    _reply(hud, DEPTH3, 380.0)  # its first reply: still no verdict, and no note left over from adaptive depth
    assert hud.one_line(hud.vs_off) == "measuring" and hud.note_text() == ""
    assert "0.57x" not in hud.compared_text() and "does not pay" not in hud.pill_text()
    assert hud.compared_text().endswith("needs 2 more replies with d2t at depth 3 and 2 with drafting off, in turn")
    assert "3 samples of d2t at another depth than depth 3" in hud.vs_off.toolTip()

    for plain, drafted in ((350.0, 390.0), (351.0, 385.0)):  # in turn: off, depth 3, off, depth 3
        _reply(hud, OFF, plain)
        assert hud.one_line(hud.vs_off) == "—" and hud.compared_text() == "" and hud.note_text() == ""
        _reply(hud, DEPTH3, drafted)
    assert hud.compared_text() == "d2t at depth 3 vs drafting off: 1.10x, pays"
    assert hud.one_line(hud.vs_off) == "1.10x · pays" and hud.note_text() == ""

    hud.set_config(ADAPTIVE)  # back to adaptive depth: its own verdict, not depth 3's
    assert hud.compared_text().startswith("d2t at adaptive depth ≤8 vs drafting off: ")
    assert "1.10x" not in hud.compared_text()


def test_a_finished_reply_does_not_widen_the_hud(qtbot: QtBot) -> None:
    hud = Hud()
    qtbot.addWidget(hud)
    hud.show()
    hud.set_config(ADAPTIVE)
    qtbot.waitExposed(hud)
    hud.adjustSize()
    before = hud.width()
    hud.show_stats(_streaming(95.0))
    hud.adjustSize()
    assert hud.width() == before
    _reply(hud, ADAPTIVE, 1234.5, long_figures=True)  # the widest figures: "temperature 0.7 · adaptive depth ≤8"
    hud.adjustSize()
    assert hud.one_line(hud.measured) == "temperature 0.7 · adaptive depth ≤8"
    assert hud.width() == before
    hud.set_note("Drafting does not pay here: 0.57x, median 200 against 350 tok/s with drafting off over 3 and 3 "
                 "replies, temperature 0.7.")
    hud.adjustSize()
    assert hud.width() == before


def test_in_auto_the_hud_judges_from_autos_own_replies(qtbot: QtBot) -> None:
    """Auto's line and the HUD's "vs off" row come from the same replies (Auto's record), so they agree."""
    from app.engine.auto_mode import AutoDrafting
    from app.engine.verdict import Condition

    auto = AutoDrafting(("off", "d2t"))
    speeds = {"off": iter([300.0, 350.0, 352.0, 349.0]), "d2t": iter([380.0, 390.0, 385.0])}
    while auto.measuring:
        mode = auto.next_mode()
        depth = "" if mode == "off" else "adaptive depth ≤8"
        auto.observe(mode, Condition(mode, depth, "temperature 0.7", str(TARGET)), next(speeds[mode]), 96)
    hud = Hud()
    qtbot.addWidget(hud)
    hud.verdict_source = lambda config: auto.verdicts.get("d2t") if config.mode != "off" else None
    hud.set_config(ADAPTIVE)  # a new window: none of its own replies yet
    assert auto.status().startswith("Auto uses d2t: 1.10x")
    assert hud.one_line(hud.vs_off) == "1.10x · pays"
    assert hud.compared_text() == "d2t at adaptive depth ≤8 vs drafting off: 1.10x, pays"
    hud.verdict_source = None  # Auto stopped: the window's own replies again
    hud.refresh_verdict()
    assert hud.one_line(hud.vs_off) == "measuring"
