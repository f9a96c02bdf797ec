"""The Benchmark page: the ``bench spec`` matrix for the chat's model on this machine, as a table and a chart.

Pick the drafting modes (those the model has files for) and the draft depths, run with a progress bar and
cancel, read the table (tok/s, acceptance, tokens per target pass, the verdict against off) and the chart (tok/s
against depth, a line per mode, off dashed), and export the JSON, the markdown and the PNG. The variants are
interleaved run by run, greedy; "vs off" is a verdict (``app.engine.verdict``) from 3 runs on: the ratio of the
medians, "no clear difference" when the runs' spreads overlap, and what is missing with fewer runs (its tooltip
has the medians, spreads and load). The run is the
``bench matrix`` command in a child process (``app.core.child_job``): the engine's native code never runs in the
window's process, and the page shows exactly what the command measures.
"""

from __future__ import annotations

import itertools
import math
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core import paths
from app.core.child_job import ChildJob
from app.core.errors import JobCancelled
from app.core.words import noun
from app.engine.config import DRAFT_DEPTH_MAX, DRAFT_DEPTH_MIN
from app.engine.modes import DRAFT_MODES, depth_series, mode_colour, mode_label
from app.engine.verdict import MIN_SAMPLES, PAYS, needs_words
from app.gui.models.bench_model import BenchModel
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import error_text

COLUMNS = ["variant", "prompts", "tok/s", "acceptance", "tokens / pass", "vs off"]
PROMPT_SETS = ("document", "reasoning")
# A cancelled matrix keeps nothing (the command writes its files only at the end), so the child need not finish
# the variant under way: it gets this long to stop on SIGTERM, then it is killed (ChildJob's default is 20 s).
CANCEL_GRACE_S = 1.0
CHART_MIN_WIDTH = 420  # below this beside the table, the chart goes under it
BAR_OUTLINE_DARK = "#7c8494"  # the progress bar's outline on a dark window (as the check boxes' in theme.py)


def nice_ticks(top: float, intervals: int = 5) -> list[float]:
    """Axis ticks from 0 to at least ``top`` in steps of 1, 2, 2.5 or 5 x 10^n, at most ``intervals`` of them,
    so the tok/s axis reads 0/25/50/75 rather than 0/29/58/86 (``top`` itself is rarely a round number)."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / intervals
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw * (1 - 1e-9))
    count = max(1, math.ceil(top / step - 1e-9))
    return [round(i * step, 10) for i in range(count + 1)]


def tick_text(value: float, step: float) -> str:
    """A tick's label with as many decimals as its step needs (25, 2.5, 0.25)."""
    decimals = 0
    while decimals < 6 and abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-9:
        decimals += 1
    return f"{value:.{decimals}f}"


def bar_style(palette: QPalette) -> str:
    """The progress bar drawn plainly in both themes: Fusion fills its groove with the base colour and outlines it
    in the window colour made darker, which on a dark window is all but invisible (an empty or starting bar could
    not be seen); here the groove is outlined and the chunk is the highlight, lightened on a dark window."""
    window = palette.color(QPalette.ColorRole.Window)
    dark = window.lightness() < 128
    groove = window.lighter(140) if dark else palette.color(QPalette.ColorRole.Base)
    outline = QColor(BAR_OUTLINE_DARK) if dark else window.darker(150)
    chunk = palette.color(QPalette.ColorRole.Highlight)
    if dark:
        chunk = chunk.lighter(125)
    return (f"QProgressBar {{ background: {groove.name()}; border: 1px solid {outline.name()}; border-radius: 3px; "
            f"min-height: 12px; }} QProgressBar::chunk {{ background: {chunk.name()}; border-radius: 2px; }}")


def vs_off_text(verdict: dict[str, Any]) -> str:
    """The "vs off" cell, in the words the HUD and Auto use (``verdict.PAYS``): ``1.21x, pays``, ``0.99x, no clear
    gain``, or the ratio so far and how many more runs a verdict needs (``1.04x? needs 2 more runs``; the tooltip,
    ``vs_off_tooltip``, says of which); ``–`` for off itself."""
    ratio = verdict.get("ratio")
    if not verdict or not isinstance(ratio, int | float):
        return "–"
    outcome = str(verdict.get("outcome"))
    if outcome != "not enough":
        return f"{ratio:.2f}x, {PAYS.get(outcome, outcome)}"
    needs = verdict.get("needs") or [0, 0]
    more = sum(int(n) for n in needs[:2])
    return f"{ratio:.2f}x? needs {more} more {noun(more, 'run')}" if more else f"{ratio:.2f}x? no verdict"


def vs_off_tooltip(verdict: dict[str, Any]) -> str:
    """What the row compares and what it still needs in runs (``verdict.needs_words``), then the whole verdict."""
    sentence = str(verdict.get("sentence", ""))
    a, b, needs = verdict.get("a_words"), verdict.get("b_words"), verdict.get("needs")
    if verdict.get("outcome") != "not enough" or not a or not b or not isinstance(needs, list):
        return sentence
    return f"{b} vs {a}: needs {needs_words(str(a), str(b), needs, 'run')}. {sentence}"


class DepthChart(QWidget):
    """Decode tok/s against draft depth: a line per drafting mode, off as a dashed level, drawn with QPainter."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series: dict[str, list[tuple[int, float]]] = {}
        self.setMinimumHeight(240)

    def sizeHint(self) -> QSize:
        return QSize(560, 280)

    def set_series(self, series: dict[str, list[tuple[int, float]]]) -> None:
        self.series = series
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        grid = QColor(text)
        grid.setAlpha(40)
        area = QRectF(self.rect()).adjusted(56, 16, -175, -40)
        if not self.series or area.width() < 40 or area.height() < 40:
            painter.setPen(text)
            painter.drawText(QRectF(self.rect()), Qt.AlignmentFlag.AlignCenter,
                             "Run the benchmark to see tok/s by depth")
            painter.end()
            return
        depths = sorted({d for mode, pts in self.series.items() if mode != "off" for d, _ in pts}) or [1]
        ticks = nice_ticks(max(t for pts in self.series.values() for _, t in pts) * 1.05)
        top, step = ticks[-1], ticks[1] - ticks[0]
        lo, hi = min(depths), max(depths)

        def point(depth: float, tps: float) -> QPointF:
            x = area.left() + (0.5 if hi == lo else (depth - lo) / (hi - lo)) * area.width()
            return QPointF(x, area.bottom() - tps / top * area.height())

        painter.setPen(QPen(grid, 1))
        for tick in ticks:
            y = area.bottom() - tick / top * area.height()
            painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            painter.setPen(text)
            painter.drawText(QRectF(0, y - 8, 50, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                             tick_text(tick, step))
            painter.setPen(QPen(grid, 1))
        painter.setPen(text)
        for depth in depths:
            x = point(depth, 0).x()
            painter.drawText(QRectF(x - 20, area.bottom() + 4, 40, 16), Qt.AlignmentFlag.AlignCenter, str(depth))
        painter.drawText(QRectF(area.left(), area.bottom() + 20, area.width(), 16), Qt.AlignmentFlag.AlignCenter,
                         "draft depth")
        painter.save()
        painter.translate(12, area.center().y())
        painter.rotate(-90)
        painter.drawText(QRectF(-80, -10, 160, 20), Qt.AlignmentFlag.AlignCenter, "decode tok/s")
        painter.restore()
        legend_y = area.top()
        for mode, points in self.series.items():
            ink = QColor(mode_colour(mode))
            pen = QPen(ink, 2.2)
            if mode == "off":
                pen.setStyle(Qt.PenStyle.DashLine)
                painter.setPen(pen)
                y = point(lo, points[0][1]).y()
                painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            else:
                painter.setPen(pen)
                drawn = [point(d, t) for d, t in points]
                for a, b in itertools.pairwise(drawn):
                    painter.drawLine(a, b)
                painter.setBrush(ink)
                for p in drawn:
                    painter.drawEllipse(p, 3.5, 3.5)
                painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(pen)
            painter.drawLine(QPointF(area.right() + 14, legend_y + 8), QPointF(area.right() + 34, legend_y + 8))
            painter.setPen(text)
            painter.drawText(QRectF(area.right() + 40, legend_y, 135, 16), Qt.AlignmentFlag.AlignVCenter,
                             mode_label(mode))
            legend_y += 20
        painter.end()


class BenchmarkPage(QWidget):
    """Run the matrix for ``model_source()`` (the chat's model; None while there is none)."""

    def __init__(self, model_source: Callable[[], BenchModel | None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model_source = model_source
        self.model: BenchModel | None = None
        self.ops = OwnedOps(self)
        self.job: ChildJob | None = None
        self.outcome: dict[str, Any] | None = None
        self.last_error: Exception | None = None
        self.progress_seen = 0
        self.results_at: datetime | None = None  # when the results shown were measured

        self.model_label = QLabel()
        self.model_label.setWordWrap(True)
        self.mode_boxes: dict[str, QCheckBox] = {}
        modes = QHBoxLayout()
        for mode in DRAFT_MODES:
            box = QCheckBox(mode_label(mode))
            box.setChecked(mode != "full")
            self.mode_boxes[mode] = box
            modes.addWidget(box)
        modes.addStretch(1)
        self.depth_boxes: dict[int, QCheckBox] = {}
        depths = QHBoxLayout()
        for depth in range(DRAFT_DEPTH_MIN, DRAFT_DEPTH_MAX + 1):
            box = QCheckBox(str(depth))
            box.setChecked(depth <= 4)
            self.depth_boxes[depth] = box
            depths.addWidget(box)
        depths.addStretch(1)
        self.tokens = QSpinBox()
        self.tokens.setRange(4, 4096)
        self.tokens.setValue(64)
        self.tokens.setSuffix(" tokens per prompt")
        self.runs = QSpinBox()
        self.runs.setRange(1, 20)
        self.runs.setValue(MIN_SAMPLES)
        self.runs.valueChanged.connect(self._runs_suffix)
        self._runs_suffix(self.runs.value())
        self.runs.setToolTip(f"Each run measures every variant once, in an order that rotates from run to run. A "
                             f"verdict against off needs {MIN_SAMPLES} runs.")
        self.set_boxes: dict[str, QCheckBox] = {}
        sets = QHBoxLayout()
        for name in PROMPT_SETS:
            box = QCheckBox(name)
            box.setChecked(name == "document")
            self.set_boxes[name] = box
            sets.addWidget(box)
        sets.addStretch(1)
        form = QFormLayout()
        form.addRow("Model", self.model_label)
        form.addRow("Modes", modes)
        form.addRow("Draft depths", depths)
        form.addRow("Length", self.tokens)
        form.addRow("Runs", self.runs)
        form.addRow("Prompt sets", sets)
        setup = QGroupBox("What to measure")
        setup.setLayout(form)

        self.run_button = QPushButton("Run benchmark")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setStyleSheet(bar_style(self.palette()))
        self.status = QLabel("Measures decode speed with each drafting mode and depth, on this machine.")
        self.status.setWordWrap(True)
        controls = QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        controls.addWidget(self.bar, 1)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setWordWrap(False)
        self.table.setMinimumHeight(240)
        self.chart = DepthChart()
        self.chart_set = QComboBox()
        self.chart_set.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.chart_set.setMinimumContentsLength(max(len(name) for name in PROMPT_SETS))
        self.chart_set.currentIndexChanged.connect(lambda _i: self._draw_chart())
        self.results_note = QLabel()
        self.results_note.setWordWrap(True)
        self.results_note.setVisible(False)
        self.export_buttons: dict[str, QPushButton] = {}
        exports = QHBoxLayout()
        exports.addWidget(QLabel("Chart of"))
        exports.addWidget(self.chart_set)
        exports.addStretch(1)
        for kind, label in (("json", "Export JSON…"), ("markdown", "Export markdown…"), ("png", "Export PNG…")):
            button = QPushButton(label)
            button.setEnabled(False)
            button.clicked.connect(lambda _c=False, k=kind: self.pick_export(k))
            self.export_buttons[kind] = button
            exports.addWidget(button)
        results = QGroupBox("Results")
        shown = QVBoxLayout(results)
        shown.addWidget(self.results_note)
        shown.addLayout(exports)
        self.side_by_side = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.side_by_side.addWidget(self.table, 1)
        self.side_by_side.addWidget(self.chart, 1)
        shown.addLayout(self.side_by_side, 1)
        self.results_box = results
        results.installEventFilter(self)

        content = QWidget()
        column = QVBoxLayout(content)
        column.addWidget(setup)
        column.addLayout(controls)
        column.addWidget(self.status)
        column.addWidget(results, 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self.refresh_model()

    # ------------------------------------------------------------------ the model

    def showEvent(self, event: QShowEvent) -> None:
        if not self.running:
            self.refresh_model()
        super().showEvent(event)

    def refresh_model(self) -> None:
        """Follow the chat's model: its name, and which modes it has files for."""
        self.model = self.model_source()
        if self.model is None:
            self.model_label.setText("No model yet: pick one in the chat (the demo model is written on first use).")
        else:
            files = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", self.model.d2t),
                                                                         ("full", self.model.full)) if path)
            self.model_label.setText(f"{self.model.name} (the chat's model) — sidecars: {files or 'none'}")
        for mode, box in self.mode_boxes.items():
            has = self.model is not None and self.model.has(mode)
            box.setEnabled(has)
            box.setToolTip("" if has else "This model has no file for this mode")
        self.run_button.setEnabled(self.model is not None and not self.running)

    # ------------------------------------------------------------------ running

    @property
    def running(self) -> bool:
        return not self.ops.idle

    def chosen_modes(self) -> list[str]:
        return [m for m, box in self.mode_boxes.items() if box.isChecked() and box.isEnabled()]

    def command(self, out: Path) -> list[str]:
        """The ``bench matrix`` command this page runs (also what a user can run headless)."""
        model = self.model
        assert model is not None
        depths = [str(d) for d, box in self.depth_boxes.items() if box.isChecked()]
        sets = [n for n, box in self.set_boxes.items() if box.isChecked()] or ["document"]
        args = ["bench", "matrix", "--target", str(model.target), "--modes", ",".join(self.chosen_modes()),
                "--depths", ",".join(depths), "--tokens", str(self.tokens.value()), "--runs", str(self.runs.value()),
                "--prompt-sets", ",".join(sets), "--name", model.name, "--out", str(out)]
        if model.d2t is not None:
            args += ["--d2t", str(model.d2t)]
        if model.full is not None:
            args += ["--full", str(model.full)]
        return args

    def run(self) -> None:
        self.refresh_model()
        if self.running or self.model is None:
            return
        if not self.chosen_modes():
            self.status.setText("Tick at least one mode.")
            return
        out = paths.cache_dir() / "bench-matrix" / datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        job = self.job = ChildJob(self.command(out), grace_s=CANCEL_GRACE_S,
                                  leftovers=[out / "matrix.json", out / "matrix.md", out / "matrix.png"])
        self.outcome, self.last_error, self.progress_seen = None, None, 0
        self.bar.setValue(0)
        self.status.setText("Starting…")
        self._set_running(True)
        self._label_results("a new run is under way")
        self.ops.start(job.run, self._done, self._failed, self._progress)

    def cancel(self) -> None:
        if self.job is not None and self.running:
            self.status.setText("Cancelling…")
            self.cancel_button.setEnabled(False)
            self.job.cancel()

    def _set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running and self.model is not None)
        self.cancel_button.setEnabled(running)

    def _progress(self, event: object) -> None:
        if isinstance(event, dict) and event.get("kind") == "progress":
            self.progress_seen += 1
            total = max(int(event.get("total", 1)), 1)
            self.bar.setValue(round(1000 * int(event.get("done", 0)) / total))
            self.status.setText(f"{event.get('done')}/{total} · {event.get('message', '')}")

    def _done(self, result: dict[str, Any]) -> None:
        self._set_running(False)
        self.outcome = result
        self.bar.setValue(1000)
        runs = int(result.get("runs") or 0)
        self.status.setText(f"Measured on {result.get('device', 'this machine')}: {result.get('n_tokens')} tokens "
                            f"per prompt, greedy, {runs} interleaved {noun(runs, 'run')}; decode tok/s counts from "
                            "each reply's first token to its last.")
        self.results_at = datetime.now()
        self._label_results("")
        self._fill_table(result["rows"])
        self.chart_set.blockSignals(True)
        self.chart_set.clear()
        self.chart_set.addItems(list(dict.fromkeys(row["prompt_set"] for row in result["rows"])))
        self.chart_set.blockSignals(False)
        self.chart_set.setToolTip(self.chart_set.currentText())
        self._draw_chart()
        for button in self.export_buttons.values():
            button.setEnabled(True)

    def _failed(self, exc: Exception) -> None:
        self._set_running(False)
        self.last_error = exc
        if isinstance(exc, JobCancelled):
            self.bar.setValue(0)
            self.status.setText("Cancelled: nothing was measured to the end.")
            self._label_results("the last run was cancelled")
        else:
            self.status.setText("The benchmark failed: " + error_text(exc))
            self._label_results("the last run failed")

    def _label_results(self, why_older: str) -> None:
        """Say which run the results shown come from: after a cancel or a failure they are the run before, and
        must not read as the last one's (``why_older`` empty: they are the last run's)."""
        if self.results_at is None:
            self.results_note.setVisible(False)
            return
        when = self.results_at.strftime("%H:%M")
        self.results_note.setText(f"Results of the run at {when} — {why_older}." if why_older
                                  else f"Results of the run at {when}.")
        self.results_note.setVisible(True)
        self.results_box.setTitle(f"Results (the run at {when})" if why_older else "Results")

    def _runs_suffix(self, runs: int) -> None:
        self.runs.setSuffix(f" {noun(runs, 'run')}, interleaved; figures are medians")

    # ------------------------------------------------------------------ layout

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:  # the theme changed: the bar's colours follow
            style = bar_style(self.palette())
            if self.bar.styleSheet() != style:
                self.bar.setStyleSheet(style)
        super().changeEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.results_box and event.type() == QEvent.Type.Resize:
            self._fit_results()
        return super().eventFilter(watched, event)

    def _fit_results(self) -> None:
        """The table as wide as its columns (no header cut to "vs"), the chart beside it when there is room for
        both, under it when not (a 1024-pixel window)."""
        header = self.table.horizontalHeader()
        needed = header.length() + self.table.verticalScrollBar().sizeHint().width() + 2 * self.table.frameWidth()
        self.table.setMinimumWidth(needed)
        room = self.results_box.contentsRect().width()
        beside = room >= needed + CHART_MIN_WIDTH + self.side_by_side.spacing()
        direction = QBoxLayout.Direction.LeftToRight if beside else QBoxLayout.Direction.TopToBottom
        if self.side_by_side.direction() != direction:
            self.side_by_side.setDirection(direction)

    # ------------------------------------------------------------------ results

    def _fill_table(self, rows: list[dict[str, Any]]) -> None:
        self.table.setRowCount(len(rows))

        def fmt(value: Any, spec: str, suffix: str = "") -> str:
            return "–" if value is None else f"{value:{spec}}{suffix}"

        for r, row in enumerate(rows):
            verdict = row.get("verdict") or {}
            cells = [row["variant"], row["prompt_set"], fmt(row["decode_tps_median"], ".1f"),
                     fmt(row["acceptance"], ".1%"), fmt(row["tokens_per_pass"], ".2f"), vs_off_text(verdict)]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == len(cells) - 1 and verdict:
                    item.setToolTip(vs_off_tooltip(verdict))
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        self._fit_results()

    def table_rows(self) -> list[dict[str, str]]:
        """The table's texts by column (what a user reads; for tests and screenshots)."""
        def text(r: int, c: int) -> str:
            item = self.table.item(r, c)
            return item.text() if item is not None else ""

        return [{name: text(r, c) for c, name in enumerate(COLUMNS)} for r in range(self.table.rowCount())]

    def _draw_chart(self) -> None:
        if self.outcome is None:
            return
        self.chart.set_series(depth_series(self.outcome["rows"], self.chart_set.currentText() or "document"))

    def pick_export(self, kind: str) -> QFileDialog | None:
        if self.outcome is None:
            return None
        suffix = {"json": ".json", "markdown": ".md", "png": ".png"}[kind]
        dialog = QFileDialog(self, f"Export the results as {kind}", str(Path.home() / f"fastmtp-bench{suffix}"))
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.fileSelected.connect(lambda chosen: self.export(kind, Path(chosen)))
        dialog.finished.connect(lambda _r: dialog.deleteLater())
        dialog.open()
        return dialog

    def export(self, kind: str, path: Path) -> Path:
        """Copy the run's ``matrix.json`` / ``matrix.md`` / ``matrix.png`` (written by the command) to ``path``."""
        if self.outcome is None:
            raise ValueError("nothing to export yet")
        source = Path(self.outcome["files"][kind])
        try:
            shutil.copyfile(source, path)
        except OSError as exc:
            self.status.setText(f"Could not write {path}: {exc.strerror or exc}.")
            raise
        self.status.setText(f"Exported the {kind} to {path}.")
        return path
