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
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
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
from app.engine.config import DRAFT_DEPTH_MAX, DRAFT_DEPTH_MIN
from app.engine.modes import DRAFT_MODES, depth_series, mode_colour, mode_label
from app.engine.verdict import MIN_SAMPLES
from app.gui.shell.page_ops import OwnedOps, error_text

COLUMNS = ["variant", "prompts", "tok/s", "acceptance", "tokens / pass", "vs off"]
PROMPT_SETS = ("document", "reasoning")


def vs_off_text(verdict: dict[str, Any]) -> str:
    """The "vs off" cell: ``1.21x, faster``, ``0.99x, no clear difference``, or the ratio so far and what is missing
    (``1.04x? 1 of 3 runs``; the tooltip says why); ``–`` for off itself."""
    ratio = verdict.get("ratio")
    if not verdict or not isinstance(ratio, int | float):
        return "–"
    if verdict.get("outcome") != "not enough":
        return f"{ratio:.2f}x, {verdict.get('outcome')}"
    runs = min(verdict.get("samples") or [0])
    return f"{ratio:.2f}x? {runs} of {MIN_SAMPLES} runs" if runs < MIN_SAMPLES else f"{ratio:.2f}x? no verdict"


@dataclass(frozen=True)
class BenchModel:
    """The model the page measures: the chat's choice, with the files each mode needs."""

    name: str
    target: Path
    d2t: Path | None = None
    full: Path | None = None
    mtp_head: bool = True

    def has(self, mode: str) -> bool:
        return {"off": True, "embedded": self.mtp_head, "d2t": self.d2t is not None,
                "full": self.full is not None}[mode]


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
        top = max(t for pts in self.series.values() for _, t in pts) * 1.15 or 1.0
        lo, hi = min(depths), max(depths)

        def point(depth: float, tps: float) -> QPointF:
            x = area.left() + (0.5 if hi == lo else (depth - lo) / (hi - lo)) * area.width()
            return QPointF(x, area.bottom() - tps / top * area.height())

        painter.setPen(QPen(grid, 1))
        for i in range(5):
            y = area.bottom() - i / 4 * area.height()
            painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            painter.setPen(text)
            painter.drawText(QRectF(0, y - 8, 50, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                             f"{top * i / 4:.0f}")
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
        self.runs.setSuffix(" run(s), interleaved; figures are medians")
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
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMinimumHeight(240)
        self.chart = DepthChart()
        self.chart_set = QComboBox()
        self.chart_set.currentIndexChanged.connect(lambda _i: self._draw_chart())
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
        shown.addLayout(exports)
        side_by_side = QHBoxLayout()
        side_by_side.addWidget(self.table, 1)
        side_by_side.addWidget(self.chart, 1)
        shown.addLayout(side_by_side, 1)

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
        job = self.job = ChildJob(self.command(out))
        self.outcome, self.last_error, self.progress_seen = None, None, 0
        self.bar.setValue(0)
        self.status.setText("Starting…")
        self._set_running(True)
        self.ops.start(job.run, self._done, self._failed, self._progress)

    def cancel(self) -> None:
        if self.job is not None and self.running:
            self.status.setText("Cancelling after the variant under way…")
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
        self.status.setText(f"Measured on {result.get('device', 'this machine')}: {result.get('n_tokens')} tokens "
                            f"per prompt, greedy, {result.get('runs')} interleaved run(s); decode tok/s counts from "
                            "each reply's first token to its last.")
        self._fill_table(result["rows"])
        self.chart_set.blockSignals(True)
        self.chart_set.clear()
        self.chart_set.addItems(list(dict.fromkeys(row["prompt_set"] for row in result["rows"])))
        self.chart_set.blockSignals(False)
        self._draw_chart()
        for button in self.export_buttons.values():
            button.setEnabled(True)

    def _failed(self, exc: Exception) -> None:
        self._set_running(False)
        self.last_error = exc
        if isinstance(exc, JobCancelled):
            self.bar.setValue(0)
            self.status.setText("Cancelled: nothing was measured to the end.")
        else:
            self.status.setText("The benchmark failed: " + error_text(exc))

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
                    item.setToolTip(str(verdict.get("sentence", "")))
                self.table.setItem(r, c, item)

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
