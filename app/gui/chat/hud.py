"""The heads-up panel over the chat: live decode and prompt speed, time to first token, draft acceptance
with a bar, tokens per target pass, mode, and a sparkline of tok/s over the reply.

The panel floats over a corner of the transcript, opaque (text behind it would be unreadable through it), in
the margin beside the text column (the chat view widens that margin for it), and never in the way for good:
its "▴" button (or a double click) collapses it to a one-line pill with the headline numbers, "▾" opens it
again, and a drag moves it to another corner (it snaps to the nearest one on release; the context menu names
the corners too). The chat view places it and the window remembers where and how it was (``placement_changed``).

The words for the drafting mode live in ``app.engine.breakeven``, and whether drafting pays here is a verdict
from ``app.engine.verdict`` (Qt-free, the same rules as ``quickstart`` and ``bench matrix``): every finished reply
long enough to tell is a sample, labelled with its drafting mode, depth, sampling, model and threads; the "vs off"
row compares the mode *and depth* loaded with drafting off (``verdict.compare`` with the depth pinned: replies at
another depth, Auto's at adaptive depth say, never decide for it) only from 3 replies each under the same
conditions, after a warm-up, taken in turn, and says "measuring" until then, and "no clear gain" when the replies'
spreads overlap. The line under it names what is compared and the outcome ("d2t at depth 3 vs drafting off: 1.12x,
pays"), or what is still missing in words ("needs 2 more replies with d2t at depth 3 and 1 with drafting off"). The
note under that says so when drafting does not pay; it goes with its row (a load of another mode or depth, or a
verdict not decided, clears it). The HUD keeps one width (``_reserve_width``), so a finished reply does not
re-wrap the transcript beside it. The "measured" row states the
sampling and depth of the reply's decode speed; the "auto" line is Auto drafting's own account (set by the
window). This module only shows them.
"""

from __future__ import annotations

import textwrap
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from PySide6.QtCore import QPoint, QPointF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QPolygonF,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.breakeven import describe_mode
from app.engine.config import EngineConfig
from app.engine.stats import acceptance_words, describe_depth
from app.engine.verdict import PAYS, SampleLog, Verdict, condition_for, load_average, mode_name

_STYLE = """
#hud { background: rgb(24, 28, 36); border: 1px solid rgb(62, 67, 76); border-radius: 8px; }
#hud QLabel { color: #e8ecf2; font-size: 11px; }
#hud QLabel[role="value"] { font-weight: 600; font-family: monospace; }
#hud QProgressBar { background: rgba(255, 255, 255, 40); border: none; border-radius: 2px; max-height: 4px; }
#hud QProgressBar::chunk { background: #5ac18e; border-radius: 2px; }
#hud QLabel[role="title"] { color: #9aa4b2; font-size: 10px; }
#hud QLabel[role="note"] { color: #fcd34d; padding-top: 3px; }
#hud QToolButton { color: #e8ecf2; background: rgba(255, 255, 255, 22); border: none; border-radius: 3px;
                   padding: 0 5px; font-size: 13px; }
#hud QToolButton:hover { background: rgba(255, 255, 255, 50); }
"""
CORNERS = ("top-right", "top-left", "bottom-right", "bottom-left")  # where the HUD can sit; the first is the default
NOTE_CHARS = 36  # the HUD's notes are wrapped to lines this long (its width: at 1024 px the text beside it keeps 55+
# characters a line)


class Sparkline(QWidget):
    """tok/s over the reply, a small line."""

    def __init__(self, parent: QWidget | None = None, points: int = 120) -> None:
        super().__init__(parent)
        self.values: deque[float] = deque(maxlen=points)
        self.setFixedHeight(22)
        self.setMinimumWidth(120)

    def add(self, value: float) -> None:
        self.values.append(value)
        self.update()

    def clear(self) -> None:
        self.values.clear()
        self.update()

    def paintEvent(self, _event: QPaintEvent) -> None:
        if len(self.values) < 2:
            return
        top = max(self.values) or 1.0
        w, h = self.width() - 2, self.height() - 2
        step = w / (len(self.values) - 1)
        line = QPolygonF([QPointF(1 + i * step, 1 + h - h * v / top) for i, v in enumerate(self.values)])
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor("#5ac18e"), 1.5))
        painter.drawPolyline(line)
        painter.end()


def corner_alignment(corner: str) -> Qt.AlignmentFlag:
    """The layout alignment that puts a widget in ``corner`` (one of ``CORNERS``)."""
    vertical = Qt.AlignmentFlag.AlignBottom if corner.startswith("bottom") else Qt.AlignmentFlag.AlignTop
    horizontal = Qt.AlignmentFlag.AlignLeft if corner.endswith("left") else Qt.AlignmentFlag.AlignRight
    return vertical | horizontal


def nearest_corner(x: float, y: float, width: float, height: float) -> str:
    """The corner of a ``width`` x ``height`` area nearest to the point (x, y)."""
    return f"{'top' if y < height / 2 else 'bottom'}-{'left' if x < width / 2 else 'right'}"


class Hud(QFrame):
    """Shows the statistics of the latest ``token`` / ``done`` event; ``—`` until drafting has numbers.

    Collapsible to a one-line pill and draggable: ``dragged(offset)`` while the mouse moves it (the offset
    from where the drag began, for the widget that carries it), then ``dropped()``; ``placement_changed``
    after the user collapsed, expanded or moved it (``move_to`` from the context menu, or a drop)."""

    collapsed_changed = Signal(bool)
    dragged = Signal(QPoint)
    dropped = Signal()
    corner_requested = Signal(str)
    note_changed = Signal()  # the "does not pay" line appeared or went: the HUD's height changed
    resized = Signal()  # the chat view keeps the text column clear of the HUD's width

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hud")
        self.setStyleSheet(_STYLE)
        self.setCursor(Qt.CursorShape.OpenHandCursor)
        self.setToolTip("Live figures of the reply. Drag it to another corner; ▴ folds it to one line.")
        self.collapsed = False
        self._press: QPoint | None = None  # where a left-button press began (global), until release
        self._dragging = False

        self.collapse_button = QToolButton()
        self.collapse_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.collapse_button.clicked.connect(lambda: self.set_collapsed(not self.collapsed, by_user=True))
        self.pill = QLabel()  # the collapsed HUD: the headline numbers on one line
        self.pill.setProperty("role", "value")
        self.full = QWidget()  # the expanded HUD: every figure, one row each
        title = QLabel("live figures")
        title.setProperty("role", "title")
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(6)
        header.addWidget(title)
        header.addWidget(self.pill)
        header.addStretch(1)
        header.addWidget(self.collapse_button)
        self._title = title
        column = QVBoxLayout(self)
        column.setContentsMargins(10, 4, 4, 8)
        column.setSpacing(2)
        column.addLayout(header)
        column.addWidget(self.full)
        grid = QGridLayout(self.full)
        grid.setContentsMargins(0, 0, 6, 0)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(2)
        self.tps = self._row(grid, 0, "decode")
        self.sparkline = Sparkline()
        grid.addWidget(self.sparkline, 1, 0, 1, 2)
        self.prompt_tps = self._row(grid, 2, "prompt")
        self.first_token = self._row(grid, 3, "first token")
        self.acceptance_name = QLabel("acceptance")  # "drafts kept" for a server's count (``acceptance_words``)
        self.acceptance = self._row(grid, 4, self.acceptance_name)
        self.acceptance_bar = QProgressBar()
        self.acceptance_bar.setRange(0, 100)
        self.acceptance_bar.setTextVisible(False)
        grid.addWidget(self.acceptance_bar, 5, 0, 1, 2)
        self.per_pass = self._row(grid, 6, "tokens / pass")
        self.mode = self._row(grid, 7, "mode")
        self.measured = self._row(grid, 8, "measured")  # the sampling and depth the decode speed was measured at
        self.vs_off = self._row(grid, 9, "vs off")  # the verdict against drafting off (``app.engine.verdict``)
        # what the verdict compares and its outcome, or what it still needs, in words (``Verdict.headline``)
        self.compared = QLabel()
        self.compared.setProperty("role", "title")
        self.compared.setWordWrap(True)
        self.compared.hide()
        grid.addWidget(self.compared, 10, 0, 1, 2)
        self.auto = QLabel()  # Auto drafting: which mode it uses and by how much it won, or that it is measuring
        self.auto.setProperty("role", "title")
        self.auto.setWordWrap(True)
        self.auto.hide()
        grid.addWidget(self.auto, 11, 0, 1, 2)
        self.note = QLabel()  # drafting does not pay here, when the verdict says so
        self.note.setProperty("role", "note")
        self.note.hide()
        grid.addWidget(self.note, 12, 0, 1, 2)
        self.samples = SampleLog()  # every finished reply of this window, labelled with its conditions
        # where the verdict comes from instead, for a configuration (Auto drafting: its own record's replies, so the
        # HUD and Auto's line agree); None from it, or no source: this window's replies
        self.verdict_source: Callable[[EngineConfig], Verdict | None] | None = None
        self._config: EngineConfig | None = None
        self._value_width = 1 << 16
        self._reserve_width()
        self._set_value(self.mode, describe_mode(None))
        self.reset()
        self.set_collapsed(False)

    def _reserve_width(self) -> None:
        """Give the HUD one width from the start, that of its widest usual state (the figures a finished reply
        brings, the wrapped note), so that it does not widen when a reply ends and the transcript beside it never
        re-wraps (issue 36 item 9); a longer value (``temperature 0.7 · adaptive depth ≤8``) wraps in its row
        instead. The widest texts are put in, measured with the HUD's own style, and taken out."""
        self.ensurePolished()
        widest = {self.acceptance: "100%  (999/999)",
                  self.note: textwrap.fill("Drafting gains nothing clear here (the replies' speeds overlap): 9.99x, "
                                           "median 9999 against 9999 tok/s with drafting off over 99 and 99 "
                                           "replies, temperature 0.7.", NOTE_CHARS)}
        for label, text in widest.items():
            label.ensurePolished()
            label.setText(text)
        probe = QLabel("tokens / pass", self.full)  # the widest name, in the HUD's style
        probe.ensurePolished()
        names = probe.sizeHint().width()
        probe.hide()
        probe.setParent(None)
        layout = self.full.layout()
        spacing = layout.horizontalSpacing() if isinstance(layout, QGridLayout) else 12
        values = self.acceptance.sizeHint().width()
        margins = layout.contentsMargins() if layout is not None else None
        extra = margins.left() + margins.right() if margins is not None else 0
        width = max(names + spacing + values, self.note.sizeHint().width())
        self.full.setFixedWidth(width + extra)
        self._value_width = width - names - spacing
        for label in widest:
            label.setText("")

    def _set_value(self, label: QLabel, text: str) -> None:
        """A row's value; one wider than the HUD's value column breaks at its " · " onto further lines, so the HUD
        keeps its width (``_reserve_width``)."""
        if label.fontMetrics().horizontalAdvance(text) > self._value_width and " · " in text:
            text = text.replace(" · ", "\n")
        label.setText(text)

    @staticmethod
    def _row(grid: QGridLayout, row: int, name: str | QLabel) -> QLabel:
        grid.addWidget(QLabel(name) if isinstance(name, str) else name, row, 0)
        value = QLabel()
        value.setProperty("role", "value")
        value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        grid.addWidget(value, row, 1)
        return value

    def reset(self) -> None:
        """Blank the live numbers (a new reply starts, or another mode is loaded)."""
        self.tps.setText("— tok/s")
        self.sparkline.clear()
        self.prompt_tps.setText("— tok/s")
        self.first_token.setText("—")
        self.acceptance.setText("—")
        self.acceptance.setToolTip("")
        self.acceptance_name.setText("acceptance")
        self.acceptance_bar.setValue(0)
        self.per_pass.setText("—")
        self.measured.setText("—")
        self._update_pill()

    def set_config(self, config: EngineConfig | None) -> None:
        """The engine's configuration being loaded: the numbers shown so far belong to the previous one, so
        they are blanked until this one's first reply brings its own."""
        self._config = config
        self._set_value(self.mode, describe_mode(config))
        self.reset()
        self.set_note(None)
        self._show_verdict()

    # ------------------------------------------------------------------ collapsed pill, moving

    def pill_text(self) -> str:
        """The one line the collapsed HUD shows: speed, acceptance when known, and the drafting mode."""
        parts = [self.tps.text()]
        if self.acceptance.text() != "—":
            kept = self.acceptance_name.text() != "acceptance"  # a server's count of drafts made
            parts.append(self.acceptance.text().split()[0] + (" of drafts kept" if kept else " accepted"))
        if self.per_pass.text() != "—":
            parts.append(f"{self.per_pass.text()}/pass")
        parts.append(self.mode.text().replace("\n", " · ").split(" · ")[0])
        if self.note_text():
            parts.append("no gain here")
        return " · ".join(parts)

    def note_text(self) -> str:
        """The "does not pay" sentence shown, on one line; empty when there is none."""
        return " ".join(self.note.text().split())

    def set_note(self, note: str | None) -> None:
        """Show (wrapped to the HUD's width) or hide the "does not pay" sentence; it stays from reply to reply
        with the same configuration, so the HUD does not jump each time a reply starts."""
        text = textwrap.fill(note, NOTE_CHARS) if note else ""
        if text == self.note.text():
            return
        self.note.setText(text)
        self.note.setToolTip(note or "")
        self.note.setVisible(bool(text))
        self._update_pill()
        self.adjustSize()
        self.note_changed.emit()

    def _update_pill(self) -> None:
        if self.collapsed:
            self.pill.setText(self.pill_text())

    def set_collapsed(self, collapsed: bool, by_user: bool = False) -> None:
        """Fold to the one-line pill, or show every figure; ``by_user`` tells the window to remember it."""
        self.collapsed = collapsed
        self.full.setVisible(not collapsed)
        self._title.setVisible(not collapsed)
        self.pill.setVisible(collapsed)
        self.collapse_button.setText("▾" if collapsed else "▴")
        self.collapse_button.setToolTip("Show every figure" if collapsed else "Fold the HUD to one line")
        self._update_pill()
        self.adjustSize()
        if by_user:
            self.collapsed_changed.emit(collapsed)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.resized.emit()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.set_collapsed(not self.collapsed, by_user=True)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.globalPosition().toPoint()
            self._dragging = False
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._press is None:
            return
        offset = event.globalPosition().toPoint() - self._press
        if not self._dragging and offset.manhattanLength() >= QApplication.startDragDistance():
            self._dragging = True
            self.setCursor(Qt.CursorShape.ClosedHandCursor)
        if self._dragging:
            self.dragged.emit(offset)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self._press is not None:
            self._press = None
            if self._dragging:
                self._dragging = False
                self.setCursor(Qt.CursorShape.OpenHandCursor)
                self.dropped.emit()
        super().mouseReleaseEvent(event)

    def placement_menu(self) -> QMenu:
        """Fold or open, and the four corners by name (the context menu; the keyboard's way to move it)."""
        menu = QMenu(self)
        menu.addAction("Show every figure" if self.collapsed else "Fold to one line",
                       lambda: self.set_collapsed(not self.collapsed, by_user=True))
        menu.addSeparator()
        for corner in CORNERS:
            menu.addAction(f"Move to the {corner.replace('-', ' ')} corner",
                           partial(self.corner_requested.emit, corner))
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        menu = self.placement_menu()
        menu.exec(event.globalPos())
        menu.deleteLater()

    def show_stats(self, stats: dict[str, Any], final: bool = False) -> None:
        """Update from an event's ``stats``: rolling speed while streaming, the reply's mean when final."""
        tps = stats.get("decode_tps") if final else stats.get("rolling_tps")
        if isinstance(tps, int | float) and tps > 0:
            self.tps.setText(f"{tps:.1f} tok/s")
            if not final:
                self.sparkline.add(float(tps))
        prompt_tps = stats.get("prompt_tps")
        if isinstance(prompt_tps, int | float) and prompt_tps > 0:
            self.prompt_tps.setText(f"{prompt_tps:.0f} tok/s")
        first = stats.get("time_to_first_token")
        if isinstance(first, int | float):
            self.first_token.setText(f"{first * 1000:.0f} ms")
        acceptance = acceptance_words(stats)
        if acceptance is not None:
            self.acceptance.setText(f"{acceptance.figure}  ({acceptance.counts})")
            self.acceptance.setToolTip(acceptance.detail)
            self.acceptance_name.setText(acceptance.name)
            self.acceptance_bar.setValue(round(acceptance.share * 100))
        per_pass = stats.get("tokens_per_pass")
        if isinstance(per_pass, int | float):
            self.per_pass.setText(f"{per_pass:.2f}")
        depth = stats.get("depth")
        if self._config is not None and self._config.adaptive and isinstance(depth, int):
            self._set_value(self.mode, describe_mode(self._config, depth))
        if final:
            measured = [str(stats[key]) for key in ("sampling", "depth_setting") if stats.get(key)]
            if measured:
                self._set_value(self.measured, " · ".join(measured))
            self._log_reply(stats)
        self._update_pill()

    def _log_reply(self, stats: dict[str, Any]) -> None:
        """A finished reply is a sample of its mode under its conditions (when it says how it was sampled: a
        remote server's reply does not); then the verdict against off is shown again."""
        config, tps, sampling = self._config, stats.get("decode_tps"), stats.get("sampling")
        if config is None or not isinstance(tps, int | float) or not isinstance(sampling, str) or not sampling:
            return
        self.samples.add(condition_for(config, sampling), float(tps), int(stats.get("generated") or 0),
                         load_average())
        self._show_verdict()

    def verdict(self) -> Verdict | None:
        """The loaded drafting mode against off, from the replies so far (None with drafting off or no model)."""
        config = self._config
        if config is None or config.mode == "off":
            return None
        found = self.verdict_source(config) if self.verdict_source is not None else None
        return found if found is not None else self.samples.compare("off", mode_name(config), describe_depth(config))

    def refresh_verdict(self) -> None:
        """Show the verdict again (its source changed: Auto took a reply, or stopped)."""
        self._show_verdict()

    def _show_verdict(self) -> None:
        """The "vs off" row (its tooltip the whole verdict) and, when drafting does not pay, the note."""
        verdict = self.verdict()
        if verdict is None:
            self.vs_off.setText("—")
            self.vs_off.setToolTip("With drafting off there is nothing to compare.")
            self._set_compared(None)
            self.set_note(None)
            return
        self.vs_off.setToolTip(verdict.sentence())
        self._set_compared(verdict.headline())
        if not verdict.decided:  # the row and its note go together: no note from another mode or depth stays
            self.vs_off.setText("measuring")
            self.set_note(None)
            return
        self._set_value(self.vs_off, f"{verdict.ratio:.2f}x · {PAYS[verdict.outcome]}")
        self.set_note(None if verdict.outcome == "faster" else gain_note(verdict))

    @staticmethod
    def one_line(label: QLabel) -> str:
        """A row's value on one line, as it reads (a long one is shown broken at its " · ", ``_set_value``)."""
        return label.text().replace("\n", " · ")

    def compared_text(self) -> str:
        """What the verdict compares and its outcome (or what it needs), on one line; empty with none."""
        return " ".join(self.compared.text().split())

    def _set_compared(self, text: str | None) -> None:
        wrapped = textwrap.fill(text, NOTE_CHARS) if text else ""
        if wrapped == self.compared.text():
            return
        self.compared.setText(wrapped)
        self.compared.setToolTip(text or "")
        self.compared.setVisible(bool(wrapped))
        self.adjustSize()
        self.note_changed.emit()

    def set_auto(self, text: str | None) -> None:
        """Auto drafting's line (which mode it uses and by how much it won, or that it is measuring); None hides it."""
        self.auto.setText(textwrap.fill(text, NOTE_CHARS) if text else "")
        self.auto.setToolTip(text or "")
        self.auto.setVisible(bool(text))
        self.adjustSize()
        self.note_changed.emit()


def gain_note(verdict: Verdict) -> str:
    """The HUD's note when drafting is not clearly faster than off, in one sentence with the numbers behind it."""
    head = ("Drafting does not pay here" if verdict.outcome == "slower" else
            "Drafting gains nothing clear here (the replies' speeds overlap)")
    return (f"{head}: {verdict.ratio:.2f}x, median {verdict.b_median:.0f} against {verdict.a_median:.0f} tok/s "
            f"with drafting off over {len(verdict.b_tps)} and {len(verdict.a_tps)} replies, {verdict.sampling}.")
