"""The heads-up panel over the chat: live decode speed, draft acceptance, tokens per target pass, mode."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QProgressBar, QWidget

from app.engine.speculative import EngineConfig

_STYLE = """
#hud { background: rgba(24, 28, 36, 215); border-radius: 8px; }
#hud QLabel { color: #e8ecf2; font-size: 11px; }
#hud QLabel[role="value"] { font-weight: 600; font-family: monospace; }
#hud QProgressBar { background: rgba(255, 255, 255, 40); border: none; border-radius: 2px; max-height: 4px; }
#hud QProgressBar::chunk { background: #5ac18e; border-radius: 2px; }
"""


def describe_mode(config: EngineConfig | None) -> str:
    """The drafting mode in words, e.g. ``FastMTP d2t · depth 3``."""
    if config is None:
        return "no model"
    if config.mode == "off":
        return "off (target only)"
    if config.mode == "embedded":
        kind = "embedded MTP"
    else:
        name = config.draft.name if config.draft else ""
        kind = "FastMTP d2t" if "d2t" in name else "full sidecar"
    depth = f"depth ≤{config.n_max} adaptive" if config.adaptive else f"depth {config.n_max}"
    return f"{kind} · {depth}"


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
        self.acceptance = self._row(grid, 1, "acceptance")
        self.acceptance_bar = QProgressBar()
        self.acceptance_bar.setRange(0, 100)
        self.acceptance_bar.setTextVisible(False)
        grid.addWidget(self.acceptance_bar, 2, 0, 1, 2)
        self.per_pass = self._row(grid, 3, "tokens / pass")
        self.mode = self._row(grid, 4, "mode")
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
        self.acceptance.setText("—")
        self.acceptance_bar.setValue(0)
        self.per_pass.setText("—")

    def set_config(self, config: EngineConfig | None) -> None:
        self.mode.setText(describe_mode(config))

    def show_stats(self, stats: dict[str, Any], final: bool = False) -> None:
        """Update from an event's ``stats``: rolling speed while streaming, the reply's mean when final."""
        tps = stats.get("decode_tps") if final else stats.get("rolling_tps")
        if isinstance(tps, int | float) and tps > 0:
            self.tps.setText(f"{tps:.1f} tok/s")
        acceptance = stats.get("acceptance")
        if isinstance(acceptance, int | float):
            self.acceptance.setText(f"{acceptance * 100:.0f}%  ({stats.get('accepted', 0)}/{stats.get('drafted', 0)})")
            self.acceptance_bar.setValue(round(acceptance * 100))
        per_pass = stats.get("tokens_per_pass")
        if isinstance(per_pass, int | float):
            self.per_pass.setText(f"{per_pass:.2f}")
