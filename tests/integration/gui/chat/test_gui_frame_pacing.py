"""Frame-paced streaming: token events queue and a frame draws them (a bounded number of renders whatever the
token rate), the text and tint come out as per-token rendering draws them, the engine's events never wait on a
busy GUI thread, and ``bench window`` runs end to end.

Renders are counted (``ChatView.frames_drawn``), never timed.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.engine import protocol
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.gui.chat.chat_view import DRAFT_TINT, RENDER_INTERVAL_MS, ChatView
from app.gui.shell.engine_bridge import EngineBridge
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
PIPE_BUFFER = 64 * 1024  # a Linux pipe's buffer: a worker whose reader stopped blocks once this much is unread

REPLY = ("<think>\nThe user wants the plan, keep it short.\n</think>\n\n"
         "# Plan\n\nFirst some **bold** words and `inline()` code, then a list.\n\n"
         "1. one item\n2. two items\n\n- a bullet\n- another bullet\n\n"
         "```python\ndef square(x):\n    return x * x\n```\n\n"
         "Then a paragraph that goes on for a while, about drafting tokens ahead and checking them.\n\n"
         "Done.")


def _events(text: str, size: int = 3) -> list[dict[str, Any]]:
    """Token events shaped like the engine's, every other one an accepted draft."""
    return [{"kind": "token", "piece": text[i:i + size], "provenance": "draft" if (i // size) % 3 else "target",
             "stats": {"generated": i // size + 1, "rolling_tps": 40.0 + i % 7}}
            for i in range(0, len(text), size)]


def _fragments(view: ChatView) -> list[tuple[str, bool]]:
    """The transcript as (text, tinted) runs, neighbours with the same tint joined."""
    runs: list[tuple[str, bool]] = []
    block = view.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            tinted = fragment.charFormat().background().color() == DRAFT_TINT
            if runs and runs[-1][1] == tinted:
                runs[-1] = (runs[-1][0] + fragment.text(), tinted)
            else:
                runs.append((fragment.text(), tinted))
            it += 1
        runs.append(("\n", False))
        block = block.next()
    return runs


def _view(qtbot: QtBot) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    view.add_user("Make a plan.")
    view.begin_reply()
    return view


def test_a_burst_of_tokens_is_one_frame(qtbot: QtBot) -> None:
    view = _view(qtbot)
    events = _events(REPLY * 20, size=2)  # over 3000 token events arrive at once
    assert len(events) > 3000
    before = view.frames_drawn
    view.append_tokens(events)
    qtbot.waitUntil(lambda: view.frames_drawn > before, timeout=WAIT_MS)
    assert view.frames_drawn == before + 1  # one frame drew them all
    assert view.transcript_text().count("Then a paragraph that goes on for a while") == 20
    assert view.hud.tps.text() == f"{events[-1]['stats']['rolling_tps']:.1f} tok/s"  # the HUD: the newest stats

    # the same when the events come one call at a time, faster than frames: they queue for the next frame
    more = _events("\n\nAnd a closing line of many small tokens.", size=1)
    for event in more:
        view.append_token(event)
    assert view.frames_drawn == before + 1  # nothing is drawn per token
    qtbot.waitUntil(lambda: "And a closing line of many small tokens." in view.transcript_text(), timeout=WAIT_MS)
    assert view.frames_drawn == before + 2


def test_the_next_frame_waits_a_frame_interval_after_the_last(qtbot: QtBot) -> None:
    view = _view(qtbot)
    view.append_token(_events("First words.")[0])
    view.flush_render()  # a frame was just drawn
    drawn = view.frames_drawn
    view.append_token({"kind": "token", "piece": " More", "provenance": "target", "stats": {}})
    assert view._live.pacer.timer.isActive()
    assert 0 < view._live.pacer.timer.remainingTime() <= RENDER_INTERVAL_MS  # not at once: one frame after the last
    assert view.frames_drawn == drawn
    qtbot.waitUntil(lambda: view.frames_drawn == drawn + 1, timeout=WAIT_MS)
    assert "More" in view.transcript_text()


def test_frames_draw_the_same_text_and_tint_as_rendering_every_token(qtbot: QtBot) -> None:
    events = _events(REPLY)
    per_token = _view(qtbot)
    for event in events:
        per_token.append_token(event)
        per_token.flush_render()  # the worst case: a frame after every token
    paced = _view(qtbot)
    cut = len(events) // 3
    paced.append_tokens(events[:cut])  # two batches, then the frames
    paced.append_tokens(events[cut:])
    qtbot.waitUntil(lambda: not paced._live.pacer.timer.isActive() and paced.frames_drawn > 0, timeout=WAIT_MS)
    assert paced.frames_drawn < per_token.frames_drawn / 10
    assert paced.transcript_text() == per_token.transcript_text()
    assert _fragments(paced) == _fragments(per_token)
    assert any(tinted for _text, tinted in _fragments(paced))  # drafted text is tinted while it streams
    done = {"kind": "done", "text": REPLY, "stop_reason": "stop", "stats": {"generated": len(events)}}
    for view in (per_token, paced):
        view.finish_reply(done)
    assert paced.transcript_text() == per_token.transcript_text()
    assert _fragments(paced) == _fragments(per_token)
    assert any(tinted for _text, tinted in _fragments(paced))


# ----------------------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def words_demo(module_tmp: ModuleFolders) -> DemoModel:
    """The tiny demo model in its ``words`` language: it never stops, so a reply runs to ``max_tokens``."""
    return ensure_demo_model(module_tmp.mktemp("words-demo"), size="tiny", language="words")


def test_the_engine_finishes_its_reply_while_the_gui_thread_is_blocked(qtbot: QtBot, patched_backend: object,
                                                                       words_demo: DemoModel) -> None:
    bridge = EngineBridge()
    try:
        with qtbot.waitSignal(bridge.loaded, timeout=WAIT_MS):
            bridge.load(EngineConfig(words_demo.target))
        batches: list[list[dict[str, Any]]] = []
        finished_while_blocked: list[bool] = []

        def take(batch: list[dict[str, Any]]) -> None:
            batches.append(batch)
            if len(batches) == 1:  # the GUI thread stops here until the engine's side of the reply is over
                finished_while_blocked.append(bridge.reply_received.wait(WAIT_MS / 1000))

        bridge.tokens.connect(take)
        with qtbot.waitSignal(bridge.done, timeout=WAIT_MS) as done:
            bridge.generate([Message("user", "Tell me about drafting.")],
                            ChatOptions(max_tokens=256, sampling=SamplingParams(temperature=0.0)))
        assert finished_while_blocked == [True]
        event = done.args[0]
        streamed = [e for batch in batches for e in batch]
        assert [e["token"] for e in streamed] == event["tokens"]  # every token, in order, none lost
        assert len(event["tokens"]) == 256
        unread = sum(len(protocol.encode("token", **{k: v for k, v in e.items() if k != "kind"}))
                     for e in streamed[len(batches[0]):])
        assert unread > PIPE_BUFFER  # more than a pipe holds: something kept reading while the GUI thread waited
        assert len(batches) <= 3  # the rest came as one batch (or two: one may have been queued at the wake-up)
    finally:
        bridge.close()


def test_bench_window_runs_end_to_end_and_reports_its_fields(patched_backend: object, tmp_path: Path) -> None:
    out = tmp_path / "window.json"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-m", "app", "bench", "window", "--size", "tiny", "--runs", "1",
                           "--turns", "2", "--tokens", "24", "--json", "--out", str(out)],
                          capture_output=True, text=True, env=env, check=False, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == result
    assert set(result["variants"]) == {"window_chat", "window_greedy", "headless_greedy", "headless_chat",
                                       "generate"}
    assert result["turns"] == 2
    for name, variant in result["variants"].items():
        # one conversation of two turns each: the window's chat, the same one headless, each prompt alone
        assert variant["samples"] == 2 and variant["tokens"] == [24, 24] and variant["turns"] == [1, 2], name
        assert variant["median"] > 0 and variant["min"] <= variant["median"] <= variant["max"]
        assert variant["sampling"] == ("greedy" if name.endswith("greedy") else result["chat_sampling"])
        assert variant["worker_cpu_ms_per_token_median"] > 0, name  # the engine worker's CPU, read from /proc
    assert result["chat_sampling"] != "greedy"
    assert result["ratio_window_chat_to_headless_greedy"] == pytest.approx(
        result["variants"]["window_chat"]["median"] / result["variants"]["headless_greedy"]["median"], rel=0.01)
    # the headline: the HUD's figure (the engine's own decode_tps of the window's replies) over generate's
    assert result["ratio_hud_to_generate"] == pytest.approx(
        result["variants"]["window_chat"]["engine_tps_median"] / result["variants"]["generate"]["engine_tps_median"],
        rel=0.01)
    assert all(cpu > 0 for cpu in result["gui_cpu_ms_per_token"].values())
    assert set(result["gui_cpu_ms_per_token"]) == {"window_chat", "window_greedy"}
    chat = result["variants"]["window_chat"]
    assert 0 < chat["frames_per_token"] <= 1 and 0 < chat["hud_updates_per_token"] <= chat["frames_per_token"]
    assert set(result["load_average"]) == {"start", "end", "median"}
    assert result["warmup"] == 1 and result["device"]
