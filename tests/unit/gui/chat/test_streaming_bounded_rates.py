"""While a reply streams, what floats over or sits beside the transcript changes at a bounded rate (issue 36 item 2):
the HUD at most once every ``HUD_INTERVAL_MS`` (its first numbers at once, the newest at the end), the context meter
at most once every ``STREAMING_METER_INTERVAL_S`` and its style sheet only when its warning changes. Each change
of either laid the window out or repainted the text under the HUD, per token: GUI CPU the engine needs on 2 cores.

Real widgets offscreen; the intervals are set long (monkeypatch) so that no timing decides the counts."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.gui.chat import context_strip, stream_render
from app.gui.chat.chat_view import ChatView
from app.gui.chat.context_strip import ContextMeter


def _event(i: int) -> dict[str, Any]:
    return {"kind": "token", "token": i, "piece": f" word{i}", "provenance": "target",
            "stats": {"generated": i + 1, "rolling_tps": 40.0 + i, "decode_tps": 40.0 + i}}


def test_the_hud_shows_the_first_numbers_at_once_then_at_a_bounded_rate_and_the_newest_at_the_end(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_render, "HUD_INTERVAL_MS", 10 ** 9)  # no second update within this test
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(900, 600)
    view.show()
    view.add_user("Tell me.")
    view.begin_reply()
    frames, updates = view.frames_drawn, view.hud_updates
    for i in range(6):  # six frames, each with a new token
        view.append_tokens([_event(i)])
        view.flush_render()
    assert view.frames_drawn == frames + 6  # the text is drawn every frame ...
    assert view.hud_updates == updates + 1  # ... the HUD once: its first numbers, at once
    assert view.hud.tps.text() == "40.0 tok/s"
    assert " word5" in view.transcript_text()
    # the end shows the newest numbers the frames held back, then the reply's final figure
    entry = view.finish_reply({"kind": "done", "text": "word0 word1 word2 word3 word4 word5",
                               "stats": {"decode_tps": 45.0, "generated": 6}, "stop_reason": "eos"})
    assert entry is not None
    assert view.hud.tps.text() == "45.0 tok/s"
    assert list(view.hud.sparkline.values) == [40.0, 45.0]  # the first frame's point and the held-back newest

    # a new reply's first numbers show at once again
    view.add_user("More.")
    view.begin_reply()
    view.append_tokens([_event(7)])
    view.flush_render()
    assert view.hud.tps.text() == "47.0 tok/s"


def test_the_meter_streams_at_a_bounded_rate_and_restyles_only_when_its_warning_changes(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_strip, "STREAMING_METER_INTERVAL_S", 10 ** 9)
    meter = ContextMeter()
    qtbot.addWidget(meter)
    polished: list[str] = []
    set_style = meter.setStyleSheet
    monkeypatch.setattr(meter, "setStyleSheet", lambda sheet: (polished.append(sheet), set_style(sheet)))
    meter.show_streaming({"context_used": 100, "context_size": 512})
    meter.show_streaming({"context_used": 101, "context_size": 512})  # within the interval: not shown
    assert meter.text() == "100 / 512 tokens"
    meter.show_stats({"context_used": 300, "context_size": 512})  # the reply's end: always shown
    assert meter.text() == "300 / 512 tokens"
    assert polished == []  # no warning before, none now: the style sheet was left alone
    meter.show_stats({"context_used": 500, "context_size": 512})
    assert meter.warning and len(polished) == 1 and "#b45309" in meter.styleSheet()
    meter.show_stats({"context_used": 505, "context_size": 512})
    assert len(polished) == 1  # still warning: not set again
    meter.show_stats({"context_used": 10, "context_size": 512})
    assert not meter.warning and polished[-1] == "" and meter.styleSheet() == ""
