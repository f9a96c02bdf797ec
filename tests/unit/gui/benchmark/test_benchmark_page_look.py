"""The Benchmark page as a new user found it at 1024x700 in the dark theme (the "first hour" issue): a progress
bar that could not be seen, chart ticks at 29/58/86/115, "1 run(s)", a "vs off" header cut to "vs", a prompt-set
picker showing "documer", and the previous run's results left up unlabelled after a cancel. Real widgets,
offscreen, read back as a user sees them (pixels, header geometry, texts); no native backend."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.core.child_job import ChildJobError
from app.core.errors import JobCancelled
from app.gui.benchmark.benchmark_page import BenchmarkPage, nice_ticks, tick_text
from app.gui.main import MainWindow
from app.gui.shell import theme
from app.settings.app_settings import Settings

CONTRAST = 40  # lightness (0..255) between the filled and the empty part of the bar, and the bar's edge and window


def _row(variant: str, mode: str, draft: str | None, depth: int, tps: float, prompt_set: str) -> dict[str, Any]:
    verdict = None if mode == "off" else {"ratio": tps / 100, "outcome": "not enough", "samples": [1, 1],
                                          "sentence": "1 of 3 runs"}
    return {"variant": variant, "prompt_set": prompt_set, "mode": mode, "draft": draft, "draft_depth": depth,
            "decode_tps_median": tps, "acceptance": None if mode == "off" else 0.8,
            "tokens_per_pass": None if mode == "off" else 1.9, "verdict": verdict}


def _result() -> dict[str, Any]:
    rows = []
    for prompt_set in ("document", "reasoning"):
        rows.append(_row("off", "off", None, 0, 100.0, prompt_set))
        rows += [_row(f"embedded k={d}", "fixed", None, d, 90.0 + d, prompt_set) for d in (1, 2, 3, 4)]
        rows += [_row(f"d2t sidecar k={d}", "fixed", "d2t", d, 110.0 + d, prompt_set) for d in (1, 2, 3, 4)]
    return {"rows": rows, "device": "CPU", "n_tokens": 8, "runs": 1, "files": {}}


@pytest.fixture
def dark(qapp: QApplication) -> Iterator[QApplication]:
    theme.apply(qapp, "dark")
    yield qapp
    theme.apply(qapp, "light")  # the rest of the session's tests expect the light theme


# ------------------------------------------------------------------ nice ticks


@pytest.mark.parametrize("top", [0.37, 1.0, 7.3, 29.0, 115.0, 120.75, 999.0, 1234.5, 40_000.0])
def test_ticks_are_round_steps_from_zero_past_the_top(top: float) -> None:
    ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5)), (top, ticks)
    assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < top
    assert 2 <= len(ticks) - 1 <= 5
    assert all(math.isclose(b - a, step) for a, b in itertools.pairwise(ticks))


def test_the_issues_axis_reads_in_round_numbers() -> None:
    ticks = nice_ticks(115.0 * 1.05)  # the chart's headroom over 115 tok/s: it was 0/29/58/86/115
    assert ticks == [0, 25, 50, 75, 100, 125]
    assert [tick_text(t, 25) for t in ticks] == ["0", "25", "50", "75", "100", "125"]
    assert [tick_text(t, 0.2) for t in nice_ticks(0.9)] == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    assert [tick_text(t, 0.25) for t in nice_ticks(1.1)] == ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25"]
    assert tick_text(2.5, 2.5) == "2.5"


def test_ticks_of_nothing_still_make_an_axis() -> None:
    assert nice_ticks(0.0) == [0.0, 1.0] and nice_ticks(float("nan")) == [0.0, 1.0]


def test_the_chart_labels_its_axis_with_the_nice_ticks(qtbot: QtBot) -> None:
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.resize(1200, 900)
    page.show()
    page._done(_result())  # the page's own handler of a finished run
    labels: list[str] = []
    from PySide6.QtGui import QPainter

    original = QPainter.drawText

    def record(painter: QPainter, *args: Any) -> None:
        labels.append(str(args[-1]))
        original(painter, *args)

    QPainter.drawText = record  # type: ignore[method-assign,assignment]
    try:
        page.chart.grab()
    finally:
        QPainter.drawText = original  # type: ignore[method-assign]
    numbers = [label for label in labels if re.fullmatch(r"\d+", label) and label not in {"1", "2", "3", "4"}]
    assert numbers == ["0", "25", "50", "75", "100", "125"], labels  # 114 tok/s at most, with headroom


# ------------------------------------------------------------------ the progress bar


def _bar_lightness(page: BenchmarkPage) -> tuple[int, int, int, int]:
    """(filled, empty, edge, window) lightness of the half-filled bar, as drawn."""
    page.bar.setValue(500)
    image = page.bar.grab().toImage()
    middle = image.height() // 2
    filled = QColor(image.pixel(image.width() // 4, middle)).lightness()
    empty = QColor(image.pixel(image.width() * 3 // 4, middle)).lightness()
    edge = QColor(image.pixel(image.width() * 3 // 4, 0)).lightness()  # the groove's top edge
    window = page.palette().color(page.backgroundRole()).lightness()
    return filled, empty, edge, window


@pytest.mark.parametrize("switched", [False, True], ids=["started-dark", "switched-to-dark"])
def test_the_progress_bar_shows_in_the_dark_theme(qtbot: QtBot, qapp: QApplication, dark: QApplication,
                                                  switched: bool) -> None:
    if switched:
        theme.apply(qapp, "light")
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.resize(800, 700)
    page.show()
    qtbot.waitExposed(page)
    if switched:
        theme.apply(qapp, "dark")  # the new palette reaches the widgets through the event loop
        qtbot.waitUntil(lambda: page.palette().color(page.backgroundRole()).lightness() < 80)
    filled, empty, edge, window = _bar_lightness(page)
    assert window < 80  # really the dark theme
    assert abs(filled - empty) >= CONTRAST, (filled, empty)  # the chunk stands out from the groove
    assert abs(edge - window) >= CONTRAST, (edge, window)  # an empty bar can be seen too


def test_the_progress_bar_shows_in_the_light_theme(qtbot: QtBot, qapp: QApplication) -> None:
    theme.apply(qapp, "light")
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.show()
    qtbot.waitExposed(page)
    filled, empty, edge, window = _bar_lightness(page)
    assert window > 180
    assert abs(filled - empty) >= CONTRAST and abs(edge - window) >= CONTRAST // 2, (filled, empty, edge, window)


# ------------------------------------------------------------------ words and labels


def test_the_runs_box_says_run_or_runs(qtbot: QtBot) -> None:
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.runs.setValue(1)
    assert page.runs.text() == "1 run, interleaved; figures are medians"
    page.runs.setValue(3)
    assert page.runs.text() == "3 runs, interleaved; figures are medians"
    page._done(dict(_result(), runs=1))
    assert "1 interleaved run;" in page.status.text() and "run(s)" not in page.status.text()


@pytest.mark.parametrize(("error", "why"), [(JobCancelled("Stopped.", ""), "the last run was cancelled"),
                                             (ChildJobError("It broke.", ""), "the last run failed")])
def test_results_left_up_after_a_cancel_or_failure_say_which_run_they_are(qtbot: QtBot, error: Exception,
                                                                          why: str) -> None:
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.show()
    page._done(_result())
    assert page.results_note.text() == f"Results of the run at {page.results_at:%H:%M}."  # type: ignore[union-attr]
    page._label_results("a new run is under way")  # what run() says as the next one starts
    page._failed(error)
    assert page.table.rowCount() == 18  # still up ...
    assert page.results_note.isVisible()  # ... and labelled as the earlier run's
    assert page.results_note.text() == f"Results of the run at {page.results_at:%H:%M} — {why}."  # type: ignore[union-attr]
    assert page.results_box.title() == f"Results (the run at {page.results_at:%H:%M})"  # type: ignore[union-attr]


def test_a_cancel_before_any_result_shows_no_results_label(qtbot: QtBot) -> None:
    page = BenchmarkPage(lambda: None)
    qtbot.addWidget(page)
    page.show()
    page._failed(JobCancelled("Stopped.", ""))
    assert not page.results_note.isVisible() and page.table.rowCount() == 0
    assert page.status.text().startswith("Cancelled")


# ------------------------------------------------------------------ 1024x700


def test_at_1024x700_no_header_or_picker_text_is_cut(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True))
    qtbot.addWidget(win)
    try:
        win.resize(1024, 700)
        win.show()
        qtbot.waitExposed(win)
        win.show_page("Benchmark")
        page = win.bench_page
        page._done(_result())
        QApplication.processEvents()
        header = page.table.horizontalHeader()
        viewport = page.table.viewport().width()
        for column in range(header.count()):
            item = page.table.horizontalHeaderItem(column)
            assert item is not None
            needed = header.fontMetrics().horizontalAdvance(item.text())
            assert header.sectionSize(column) >= needed, item.text()
            shown = header.sectionViewportPosition(column) + header.sectionSize(column)
            assert header.sectionViewportPosition(column) >= 0 and shown <= viewport, (item.text(), shown, viewport)
            for row in range(page.table.rowCount()):  # the cells too: "1.04x? 1 of 3 runs" on one line
                cell = page.table.item(row, column)
                assert cell is not None
                assert page.table.columnWidth(column) >= page.table.fontMetrics().horizontalAdvance(cell.text())
        combo = page.chart_set
        assert combo.currentText() == "document"
        text_room = combo.width() - combo.style().pixelMetric(combo.style().PixelMetric.PM_ScrollBarExtent) - 8
        assert text_room >= combo.fontMetrics().horizontalAdvance("document") or combo.toolTip() == "document"
        assert combo.toolTip() == "document"
        assert page.chart.width() >= 400  # the chart has room for its plot and legend (under the table here)
    finally:
        win.close()
        store.close()
