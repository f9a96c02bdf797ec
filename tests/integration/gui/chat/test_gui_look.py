"""The look (issue 13, build 4): a navigation rail with icons in the theme's colour and tooltips, the text held to
a readable, centred measure on a wide window (and the composer under it), and the HUD's one sentence when
drafting does not pay on this machine, judged only from alternating replies under the same conditions (a real
reply with drafting off and one with the d2t sidecar are not enough).

Real windows offscreen; the last test runs the real engine on the demo model.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor, QFontMetrics, QIcon
from PySide6.QtWidgets import QApplication, QListView, QListWidget, QStyle, QStyledItemDelegate, QStyleOptionViewItem
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.breakeven import NO_GAIN_AFTER, PAYS_ABOVE, expected_plain_tps, no_gain_note
from app.engine.config import EngineConfig, Mode
from app.gguftools.demo_model import DemoModel
from app.gui.chat.hud import Hud
from app.gui.chat.stream_render import MAX_LINE_CHARS
from app.gui.main import MainWindow
from app.gui.shell import icons
from app.gui.shell.nav_rail import PAGES
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.gui_windows import open_window
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
ENGINE_WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
PARAGRAPH = ("FastMTP Chat runs a large model on your own machine and lets a small draft head guess the next few "
             "tokens, which the target model then checks in a single pass; every guess it agrees with is kept, "
             "so the reply arrives sooner and reads exactly as it would have without any drafting at all. ") * 4


def _lightness(icon: QIcon) -> float:
    """The mean lightness (0-255) of the icon's drawn pixels."""
    image = icon.pixmap(24, 24).toImage()
    values = [QColor(image.pixel(x, y)).lightness() for x in range(image.width()) for y in range(image.height())
              if QColor.fromRgba(image.pixel(x, y)).alpha() > 128]
    assert values, "the icon draws nothing"
    return sum(values) / len(values)


def _shown_whole(rail: QListWidget, row: int) -> bool:
    """Whether the item's text fits the text rectangle the style draws it in (else it is elided)."""
    index = rail.model().index(row, 0)
    option = QStyleOptionViewItem()
    rail.initViewItemOption(option)
    option.rect = rail.visualRect(index)
    delegate = rail.itemDelegate()
    assert isinstance(delegate, QStyledItemDelegate)
    delegate.initStyleOption(option, index)
    style = rail.style()
    text = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, rail)
    margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, rail) + 1
    return QFontMetrics(option.font).horizontalAdvance(option.text) <= text.width() - 2 * margin


def test_the_rail_has_an_icon_and_a_tooltip_per_page_in_the_themes_colours(qtbot: QtBot,
                                                                           store: HistoryStore) -> None:
    with open_window(qtbot, store, show=False) as win:
        assert win.nav.viewMode() == QListView.ViewMode.IconMode and win.nav.width() <= 110  # a rail, not a list
        assert win.page_names() == ["Chat", "Models", "Backend", "Benchmark", "Settings"]
        assert {"chat", "models", "backend", "benchmark", "settings", "pin"} <= set(icons.icon_names())
        for row, name in enumerate(win.page_names()):
            item = win.nav.item(row)
            assert not item.icon().isNull()
            tip = item.toolTip()
            assert name in tip and PAGES[name][1] in tip and f"Ctrl+{row + 1}" in tip
        win.show()
        qtbot.waitExposed(win)
        for row, name in enumerate(win.page_names()):  # each name shows whole under its icon, never elided
            assert _shown_whole(win.nav, row), name
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        win.apply_settings(Settings(theme="light"))
        light = _lightness(win.nav.item(0).icon())
        win.apply_settings(Settings(theme="dark"))
        dark = _lightness(win.nav.item(0).icon())
        assert light < 100 < 160 < dark  # dark strokes on the light rail, light strokes on the dark one
        win.apply_settings(Settings(theme="light"))


def _long_reply(store: HistoryStore) -> int:
    conversation = store.create_conversation("a long reply")
    store.add_message(conversation, "user", "Tell me how FastMTP drafting works.")
    store.add_message(conversation, "assistant", PARAGRAPH, {"generated": 200, "decode_tps": 50.0})
    return conversation


def _line_lengths(win: MainWindow) -> list[int]:
    """Characters per line of the reply's paragraph (its last line left out: it is what remains)."""
    block = win.chat_page.chat.transcript.document().begin()
    while block.isValid() and not block.text().startswith("FastMTP Chat runs"):
        block = block.next()
    assert block.isValid()
    layout = block.layout()
    return [layout.lineAt(i).textLength() for i in range(layout.lineCount() - 1)]


def test_a_wide_window_holds_the_text_to_a_readable_centred_column(qtbot: QtBot, store: HistoryStore) -> None:
    conversation = _long_reply(store)
    with open_window(qtbot, store, show=False) as win:
        win.resize(1920, 1080)
        win.show()
        qtbot.waitExposed(win)
        win.chat_page.open_conversation(conversation)
        root = win.chat_page.chat.transcript.document().rootFrame()
        qtbot.waitUntil(lambda: root.frameFormat().leftMargin() > 100, timeout=WAIT_MS)
        lines = _line_lengths(win)
        assert len(lines) >= 5 and all(75 <= n <= 100 for n in lines), lines  # about MAX_LINE_CHARS a line
        assert abs(sum(lines) / len(lines) - MAX_LINE_CHARS) <= 8
        fmt = root.frameFormat()
        assert fmt.leftMargin() == fmt.rightMargin()  # centred
        # the column passes beside the HUD
        assert fmt.topMargin() == win.chat_page.chat.transcript.document().documentMargin()
        composer = win.chat_page.chat.composer
        # the message box sits under the column, not across the window
        assert composer.width() < win.chat_page.chat.width() * 0.7
        centre = composer.mapTo(win.chat_page.chat, composer.rect().center()).x()
        assert abs(centre - win.chat_page.chat.width() / 2) < 40

        wide_margin = fmt.leftMargin()
        win.resize(1024, 700)  # the smallest window we design for: the measure, less the HUD's room
        qtbot.waitUntil(lambda: win.chat_page.chat.transcript.viewport().width() < 700, timeout=WAIT_MS)
        qtbot.waitUntil(lambda: root.frameFormat().leftMargin() < wide_margin / 4, timeout=WAIT_MS)
        # the column moves over beside the HUD (never under it), a little narrower than the measure
        assert all(55 <= n <= 100 for n in _line_lengths(win)), _line_lengths(win)
        assert root.frameFormat().rightMargin() > win.chat_page.chat.hud.sizeHint().width()
        assert composer.width() > win.chat_page.chat.width() * 0.9


def _config(mode: Mode = "sidecar") -> EngineConfig:
    return EngineConfig(Path("/models/target.gguf"), mode=mode,
                        draft=Path("/models/target-d2t.gguf") if mode == "sidecar" else None, draft_depth=3)


# a reply on the tiny demo model on a CPU, as the engine reports it: quick passes, much host time per token
CPU_DEMO = {"generated": 86, "decode_tps": 117.0, "drafted": 68, "accepted": 62, "acceptance": 0.91,
            "tokens_per_pass": 3.44, "verify_ms_per_round": 2.4, "draft_ms_per_step": 1.5,
            "python_ms_per_round": 23.9, "draft_time_share": 0.16}
# a 27B model on a GPU: a target pass costs far more than a draft step, drafting pays
GPU_27B = {"generated": 200, "decode_tps": 95.0, "drafted": 300, "accepted": 270, "acceptance": 0.9,
           "tokens_per_pass": 3.3, "verify_ms_per_round": 26.0, "draft_ms_per_step": 2.0,
           "python_ms_per_round": 1.5, "draft_time_share": 0.18}


def test_the_note_says_when_drafting_does_not_pay_and_why_in_one_sentence() -> None:
    expected = expected_plain_tps(CPU_DEMO)
    assert expected is not None and 100 < expected < 115  # 1000 / (2.4 + 23.9 / 3.44)
    note = no_gain_note(_config(), CPU_DEMO)
    assert note is not None and note.count(". ") == 0 and note.endswith(".")
    assert note.startswith("Drafting gains under 10% on this machine: 117 tok/s, and about 107 expected")
    assert "a target pass takes only 2.4 ms here, too little for drafts to save" in note
    measured = no_gain_note(_config(), CPU_DEMO, plain_tps=124.0)  # a reply with drafting off measured it
    assert measured is not None and measured.startswith("Drafting does not pay on this machine: 117 tok/s, "
                                                        "and about 124 measured with drafting Off")
    assert no_gain_note(_config(), GPU_27B) is None  # 95 tok/s against about 38 plain
    assert no_gain_note(_config(), GPU_27B, plain_tps=95.0 / PAYS_ABOVE + 1) is not None  # within the noise
    costly_drafts = {**CPU_DEMO, "python_ms_per_round": 0.5, "draft_ms_per_step": 2.0, "decode_tps": 300.0}
    costly = no_gain_note(_config(), costly_drafts, plain_tps=400.0)
    assert costly is not None and "a draft step costs 83% of a target pass here" in costly
    assert no_gain_note(_config(), {**CPU_DEMO, "generated": NO_GAIN_AFTER - 1}) is None  # too early to tell
    assert no_gain_note(_config("off"), CPU_DEMO) is None
    assert no_gain_note(None, CPU_DEMO) is None
    assert no_gain_note(_config(), {**CPU_DEMO, "drafted": 0}) is None  # the loud banner's case
    below_even = {**GPU_27B, "acceptance": 0.05, "draft_time_share": 0.5}  # break-even says no
    assert "more than 5% acceptance wins back" in (no_gain_note(_config(), below_even) or "")


def _final(hud: Hud, config: EngineConfig, tps: float, sampling: str = "temperature 0.7") -> None:
    """A finished reply of ``config`` as the engine reports it, at ``tps``."""
    hud.set_config(config)
    hud.show_stats({**CPU_DEMO, "generated": 86, "decode_tps": tps, "sampling": sampling,
                    "depth_setting": "depth 3"}, final=True)


def test_the_hud_judges_drafting_only_from_alternating_same_condition_replies(qtbot: QtBot) -> None:
    hud = Hud()
    qtbot.addWidget(hud)
    hud.show()
    off, d2t = _config("off"), _config()
    _final(hud, off, 27.0)  # the model's first reply: the warm-up, not counted
    _final(hud, d2t, 21.0)  # one reply each way: what the HUD used to call "does not pay"
    assert hud.one_line(hud.vs_off) == "measuring" and hud.note_text() == ""
    assert hud.compared_text() == ("d2t at depth 3 vs drafting off: needs 2 more replies with d2t at depth 3 and 3 "
                                   "with drafting off, in turn")
    assert hud.vs_off.toolTip().startswith("Not enough comparable samples yet to compare d2t (depth 3) with off")
    assert hud.one_line(hud.measured) == "temperature 0.7 · depth 3"  # what the speed was measured at
    for plain, drafted in ((36.0, 30.0), (37.0, 31.0), (35.5, 29.0)):
        _final(hud, off, plain)
        assert hud.one_line(hud.vs_off) == "—"  # drafting off: nothing to compare
        _final(hud, d2t, drafted)
    assert hud.one_line(hud.vs_off) == "0.82x · does not pay"  # d2t 21-31 (median 29.5) against off 35.5-37: apart
    assert hud.compared_text() == "d2t at depth 3 vs drafting off: 0.82x, does not pay"
    assert hud.note.isVisible() and hud.note_text() == ("Drafting does not pay here: 0.82x, median 30 against 36 "
                                                        "tok/s with drafting off over 4 and 3 replies, "
                                                        "temperature 0.7.")
    assert all(len(line) <= 46 for line in hud.note.text().splitlines())  # wrapped to the HUD's width
    hud.reset()  # the next reply starts: the note stays
    assert hud.note.isVisible()
    hud.set_collapsed(True)
    assert hud.pill_text().endswith("no gain here")
    hud.set_collapsed(False)
    # greedy replies now: the chat's earlier temperature-0.7 replies are not compared with them
    _final(hud, off, 100.0, "greedy")
    _final(hud, d2t, 120.0, "greedy")
    assert hud.one_line(hud.vs_off) == "measuring"
    assert "8 samples at other sampling than greedy" in hud.vs_off.toolTip()  # the warm-up too
    assert hud.note_text() == ""  # that verdict was about other replies


def test_the_hud_says_no_clear_difference_when_the_replies_overlap_and_pays_when_apart(qtbot: QtBot) -> None:
    hud = Hud()
    qtbot.addWidget(hud)
    off, d2t = _config("off"), _config()
    _final(hud, off, 30.0)  # warm-up
    for plain, drafted in ((36.0, 37.0), (38.0, 35.5), (37.0, 38.5)):
        _final(hud, off, plain)
        _final(hud, d2t, drafted)
    assert hud.one_line(hud.vs_off) == "1.00x · no clear gain"
    assert hud.note_text().startswith("Drafting gains nothing clear here (the replies' speeds overlap): 1.00x")
    for plain, drafted in ((36.0, 48.0), (37.0, 47.0), (35.0, 49.0)):  # three more rounds, clearly apart
        _final(hud, off, plain)
        _final(hud, d2t, drafted)
    # the six rounds' spreads: off 35-38, d2t 35.5-49: still overlapping
    assert hud.one_line(hud.vs_off).endswith("no clear gain")
    hud = Hud()
    qtbot.addWidget(hud)
    _final(hud, off, 30.0)
    for plain, drafted in ((36.0, 48.0), (37.0, 47.0), (35.0, 49.0)):
        _final(hud, off, plain)
        _final(hud, d2t, drafted)
    assert hud.one_line(hud.vs_off) == "1.33x · pays" and hud.note_text() == ""
    assert hud.vs_off.toolTip().startswith("d2t (depth 3) is faster than off: 1.33x")
    hud.set_config(_config("embedded"))  # another mode: its own replies decide
    assert hud.one_line(hud.vs_off) == "measuring"
    assert hud.compared_text() == (
        "embedded at depth 3 vs drafting off: needs 3 more replies with embedded at depth 3 and 2 with drafting off, "
        "in turn")  # the replies with drafting off so far came before any of embedded: not in turn with them


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("look-demo"))


def _reply(qtbot: QtBot, win: MainWindow, text: str) -> dict[str, Any]:
    done: list[dict[str, Any]] = []
    win.bridge.done.connect(done.append)
    win.chat_page.send(text)
    qtbot.waitUntil(lambda: bool(done), timeout=ENGINE_WAIT_MS)
    win.bridge.done.disconnect(done.append)
    return done[0]


def test_on_the_cpu_demo_the_hud_refuses_to_judge_drafting_from_one_reply_each_way(qtbot: QtBot, store: HistoryStore,
                                                                             patched_backend: object,
                                                                             demo: DemoModel) -> None:
    with open_window(qtbot, store, show=False) as win:
        win.show()
        win.model_selector.mode_box.blockSignals(True)
        win.model_selector.mode_box.setCurrentIndex(win.model_selector.mode_box.findData("off"))
        win.model_selector.mode_box.blockSignals(False)
        win.loading.use_demo(demo)
        qtbot.waitUntil(lambda: win.chat_page.ready, timeout=ENGINE_WAIT_MS)
        plain = _reply(qtbot, win, "Hello without drafting")
        hud = win.chat_page.chat.hud
        assert hud.note_text() == "" and hud.one_line(hud.vs_off) == "—"  # nothing to judge with drafting off
        assert win.chat_page.chat.entries[-1].footer.startswith("off (target only), temperature 0.7 · ")
        assert hud.one_line(hud.measured) == "temperature 0.7 · no drafting"

        win.model_selector.mode_box.setCurrentIndex(win.model_selector.mode_box.findData("sidecar-d2t"))
        qtbot.waitUntil(lambda: win.chat_page.ready and not win.bridge.busy, timeout=ENGINE_WAIT_MS)
        win.chat_page.new_chat()
        drafted = _reply(qtbot, win, "Hello with the d2t sidecar")
        assert win.chat_page.chat.entries[-1].footer.startswith("FastMTP d2t, depth 3, temperature 0.7 · ")
        for event in (plain, drafted):  # the engine's one definition, with what it was measured at
            stats = event["stats"]
            assert stats["decode_tps"] == pytest.approx((stats["generated"] - 1) / stats["decode_span_seconds"])
            assert stats["sampling"] == "temperature 0.7"
        # one reply each way (the first of the model being the warm-up) is no verdict, whatever the numbers
        assert hud.one_line(hud.vs_off) == "measuring" and hud.note_text() == ""
        assert hud.compared_text().startswith("d2t at depth 3 vs drafting off: needs ")
        assert hud.one_line(hud.measured) == "temperature 0.7 · depth 3"


def test_the_hud_names_which_acceptance_it_shows(qtbot: QtBot) -> None:
    """Ours: accepted of the drafts tested, with the share of every draft made in its tooltip; a server's count
    (of drafts made) under that name, not as ours; and nothing of either left after a reset."""
    hud = Hud()
    qtbot.addWidget(hud)
    hud.show()
    hud.set_config(_config())
    hud.show_stats({**GPU_27B, "proposed": 330, "accepted_of_drafted": 270 / 330}, final=True)
    assert hud.acceptance.text() == "90%  (270/300)" and hud.acceptance_bar.value() == 90
    assert "270 of the 300 drafts tested" in hud.acceptance.toolTip()
    assert "of all 330 drafts made, 82%" in hud.acceptance.toolTip()
    hud.reset()
    assert hud.acceptance.text() == "—" and hud.acceptance.toolTip() == ""
    assert hud.acceptance_name.text() == "acceptance"
    hud.show_stats({"decode_tps": 40.0, "generated": 64, "acceptance": None, "accepted_of_drafted": 0.64,
                    "accepted": 164, "drafted": 258, "proposed": 258}, final=True)
    assert hud.acceptance_name.text() == "drafts kept"  # not under our figure's name
    assert hud.acceptance.text() == "64%  (164/258)" and hud.acceptance_bar.value() == 64
    assert hud.acceptance.toolTip().startswith("164 of the 258 drafts the server made")
    assert "64% of drafts kept" in hud.pill_text()
