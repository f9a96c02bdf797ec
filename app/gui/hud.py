"""The heads-up panel over the chat: live decode and prompt speed, time to first token, draft acceptance
with a bar, tokens per target pass, mode, and a sparkline of tok/s over the reply.

``drafting_warning`` decides when the loud drafting banner shows: a sidecar is configured but nothing is
drafted, its drafts are almost never accepted (a sidecar from another model), or acceptance is below
break-even for this machine.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QProgressBar, QWidget

from app.engine.speculative import EngineConfig
from app.engine.stats import wrong_pair_warning
from app.release.installed import sidecar_kind

_STYLE = """
#hud { background: rgba(24, 28, 36, 215); border: 1px solid rgba(255, 255, 255, 40); border-radius: 8px; }
#hud QLabel { color: #e8ecf2; font-size: 11px; }
#hud QLabel[role="value"] { font-weight: 600; font-family: monospace; }
#hud QProgressBar { background: rgba(255, 255, 255, 40); border: none; border-radius: 2px; max-height: 4px; }
#hud QProgressBar::chunk { background: #5ac18e; border-radius: 2px; }
"""


def describe_mode(config: EngineConfig | None, depth_now: int | None = None) -> str:
    """The drafting mode in words, e.g. ``FastMTP d2t · depth 3``; with adaptive depth, the depth of the
    latest round when known (``depth 5 of ≤8 adaptive``)."""
    if config is None:
        return "no model"
    if config.mode == "off":
        return "off (target only)"
    if config.mode == "embedded":
        kind = "embedded MTP"
    else:
        d2t = config.draft is not None and sidecar_kind(config.draft.name) == "d2t"
        kind = "FastMTP d2t" if d2t else "full sidecar"
    depth = f"depth {config.n_max}"
    if config.adaptive:
        depth = f"depth ≤{config.n_max} adaptive"
        if depth_now is not None:
            depth = f"depth {depth_now} of ≤{config.n_max} adaptive"
    return f"{kind} · {depth}"


NO_DRAFT_AFTER = 16  # tokens into a reply with no draft at all: drafting is not running
BREAK_EVEN_AFTER = 32  # tokens before acceptance is judged against break-even


def break_even_acceptance(draft_time_share: float, depth: int) -> float | None:
    """The acceptance at which drafting stops paying, from this reply's measured costs.

    A target pass verifies up to ``depth`` drafts at about the cost of a plain decoding step (the
    assumption), and drafting takes ``draft_time_share`` of the time, so a pass must yield
    ``1 / (1 - share)`` tokens to break even; with acceptance ``a`` a pass yields
    ``(1 - a^(depth+1)) / (1 - a)``. Solved by bisection; None when no acceptance can pay."""
    needed = 1.0 / max(1.0 - draft_time_share, 1e-6)
    if needed >= depth + 1:
        return None

    def tokens(a: float) -> float:
        return float(depth + 1) if a >= 1.0 else (1.0 - a ** (depth + 1)) / (1.0 - a)

    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if tokens(mid) < needed else (low, mid)
    return high


def drafting_warning(config: EngineConfig | None, stats: dict[str, Any]) -> str | None:
    """A plain-words warning when drafting is configured but not helping, else None."""
    if config is None or config.mode == "off":
        return None
    generated = int(stats.get("generated") or 0)
    drafted = int(stats.get("drafted") or 0)
    mode = describe_mode(config).split(" · ")[0]
    if drafted == 0 and generated >= NO_DRAFT_AFTER:
        why = (" Adaptive depth found that drafting does not pay here and switched it off."
               if config.adaptive else " Check that the sidecar belongs to this model.")
        return (f"Drafting is configured ({mode}) but no tokens were drafted in {generated} tokens: this reply "
                f"runs at plain decoding speed.{why}")
    if config.mode == "sidecar":
        wrong = wrong_pair_warning(stats, config.draft.name if config.draft is not None else None)
        if wrong is not None:
            return wrong
    acceptance = stats.get("acceptance")
    share = stats.get("draft_time_share")
    if generated < BREAK_EVEN_AFTER or not isinstance(acceptance, int | float) or not isinstance(share, int | float):
        return None
    depth = max(config.n_max, 1)
    even = break_even_acceptance(float(share), depth)
    if even is not None and acceptance >= even:
        return None
    target = f"break-even ({even * 100:.0f}% at depth {depth})" if even is not None else "what could ever pay off"
    return (f"Drafting is slowing this machine down: acceptance {acceptance * 100:.0f}% is below {target}. "
            f"Drafting takes {share * 100:.0f}% of the time, so each target pass must yield "
            f"{1 / max(1 - share, 1e-6):.2f} tokens to gain anything, and it yields "
            f"{stats.get('tokens_per_pass') or 0:.2f}. Turn drafting off or lower the depth.")


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


class Hud(QFrame):
    """Shows the statistics of the latest ``token`` / ``done`` event; ``—`` until drafting has numbers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hud")
        self.setStyleSheet(_STYLE)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        grid = QGridLayout(self)
        grid.setContentsMargins(10, 8, 10, 8)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(2)
        self.tps = self._row(grid, 0, "decode")
        self.sparkline = Sparkline()
        grid.addWidget(self.sparkline, 1, 0, 1, 2)
        self.prompt_tps = self._row(grid, 2, "prompt")
        self.first_token = self._row(grid, 3, "first token")
        self.acceptance = self._row(grid, 4, "acceptance")
        self.acceptance_bar = QProgressBar()
        self.acceptance_bar.setRange(0, 100)
        self.acceptance_bar.setTextVisible(False)
        grid.addWidget(self.acceptance_bar, 5, 0, 1, 2)
        self.per_pass = self._row(grid, 6, "tokens / pass")
        self.mode = self._row(grid, 7, "mode")
        self._config: EngineConfig | None = None
        self.reset()

    @staticmethod
    def _row(grid: QGridLayout, row: int, name: str) -> QLabel:
        grid.addWidget(QLabel(name), row, 0)
        value = QLabel()
        value.setProperty("role", "value")
        value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        grid.addWidget(value, row, 1)
        return value

    def reset(self) -> None:
        """Blank the live numbers (a new reply starts)."""
        self.tps.setText("— tok/s")
        self.sparkline.clear()
        self.prompt_tps.setText("— tok/s")
        self.first_token.setText("—")
        self.acceptance.setText("—")
        self.acceptance_bar.setValue(0)
        self.per_pass.setText("—")

    def set_config(self, config: EngineConfig | None) -> None:
        self._config = config
        self.mode.setText(describe_mode(config))

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
        acceptance = stats.get("acceptance")
        if isinstance(acceptance, int | float):
            self.acceptance.setText(f"{acceptance * 100:.0f}%  ({stats.get('accepted', 0)}/{stats.get('drafted', 0)})")
            self.acceptance_bar.setValue(round(acceptance * 100))
        per_pass = stats.get("tokens_per_pass")
        if isinstance(per_pass, int | float):
            self.per_pass.setText(f"{per_pass:.2f}")
        depth = stats.get("depth")
        if self._config is not None and self._config.adaptive and isinstance(depth, int):
            self.mode.setText(describe_mode(self._config, depth))
