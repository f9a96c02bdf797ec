"""The per-chat settings dialog: system prompt preset (or a written one), thinking, and sampling."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from app.engine.config import OVERFLOW_LABELS
from app.settings.chat_settings import CUSTOM, PRESETS, RANGES, REPLY_TOKENS_MAX, SEED_LIMIT, ChatSettings

SEED_MODE_LABELS = {"random": "Random for every reply", "fixed": "Fixed"}


class ChatSettingsDialog(QDialog):
    """Edits a copy of ``ChatSettings``; ``result_settings()`` gives the edited copy once accepted."""

    def __init__(self, settings: ChatSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Chat settings")
        self.setMinimumWidth(460)
        self.preset = QComboBox()
        self.preset.addItems([*PRESETS, CUSTOM])
        self.preset.setCurrentText(settings.preset if settings.preset in PRESETS else CUSTOM)
        self.system_prompt = QPlainTextEdit(settings.system_prompt)
        self.system_prompt.setFixedHeight(80)
        self.preset.currentTextChanged.connect(self._preset_picked)
        self.system_prompt.textChanged.connect(self._prompt_edited)
        self.thinking = QCheckBox("Let the model think before it answers (<think> block)")
        self.thinking.setChecked(settings.thinking)
        self.temperature = _double(*RANGES["temperature"], 0.05, settings.temperature)
        self.top_k = _int(*_ints(RANGES["top_k"]), settings.top_k)
        self.top_p = _double(*RANGES["top_p"], 0.01, settings.top_p)
        self.min_p = _double(*RANGES["min_p"], 0.01, settings.min_p)
        self.repeat_penalty = _double(*RANGES["repeat_penalty"], 0.01, settings.repeat_penalty)
        self.seed_mode = QComboBox()
        for mode, label in SEED_MODE_LABELS.items():
            self.seed_mode.addItem(label, mode)
        self.seed_mode.setCurrentIndex(max(self.seed_mode.findData(settings.seed_mode), 0))
        self.seed_mode.setToolTip("Random: every reply (and every regenerate) draws a new seed; the seed used is "
                                  "kept with the reply's stats. Fixed: the same seed, so the same reply. "
                                  "At temperature 0 the reply is the same either way.")
        self.seed = _int(0, SEED_LIMIT - 1, settings.seed)
        self.seed_mode.currentIndexChanged.connect(self._seed_mode_picked)
        self._seed_mode_picked()
        self.max_tokens = _int(0, REPLY_TOKENS_MAX, settings.max_tokens)
        self.max_tokens.setSpecialValueText("Until the model stops")  # 0: no cap, within the context
        self.max_tokens.setToolTip("A cap on each reply. A reply cut by it (or by a full context) can be continued.")
        self.thinking_budget = _int(0, REPLY_TOKENS_MAX, settings.thinking_budget)
        self.thinking_budget.setSpecialValueText("No budget")
        self.thinking_budget.setToolTip("Close the thinking after this many tokens, so the model answers: shorter "
                                        "reasoning for quicker answers.")
        self.overflow = QComboBox()
        for policy, label in OVERFLOW_LABELS.items():
            self.overflow.addItem(label, policy)
        self.overflow.setCurrentIndex(max(self.overflow.findData(settings.overflow), 0))
        self.overflow.setToolTip("When the conversation no longer fits in the context: leave out whole oldest turns "
                                 "(the system prompt always stays), or stop and offer a new chat.")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("System prompt", self.preset)
        form.addRow("", self.system_prompt)
        form.addRow("", self.thinking)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-k (0: off)", self.top_k)
        form.addRow("Top-p", self.top_p)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow("Seed", self.seed_mode)
        form.addRow("Fixed seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Thinking budget", self.thinking_budget)
        form.addRow("When the context is full", self.overflow)
        form.addRow(buttons)
        self._base = settings

    def _seed_mode_picked(self) -> None:
        self.seed.setEnabled(self.seed_mode.currentData() == "fixed")

    def _preset_picked(self, name: str) -> None:
        if name in PRESETS:
            self.system_prompt.blockSignals(True)
            self.system_prompt.setPlainText(PRESETS[name])
            self.system_prompt.blockSignals(False)

    def _prompt_edited(self) -> None:
        if PRESETS.get(self.preset.currentText()) != self.system_prompt.toPlainText():
            self.preset.blockSignals(True)
            self.preset.setCurrentText(CUSTOM)
            self.preset.blockSignals(False)

    def result_settings(self) -> ChatSettings:
        return replace(self._base, preset=self.preset.currentText(), system_prompt=self.system_prompt.toPlainText(),
                       thinking=self.thinking.isChecked(), temperature=self.temperature.value(),
                       top_k=self.top_k.value(), top_p=self.top_p.value(), min_p=self.min_p.value(),
                       repeat_penalty=self.repeat_penalty.value(),
                       seed_mode="fixed" if self.seed_mode.currentData() == "fixed" else "random",
                       seed=self.seed.value(),
                       max_tokens=self.max_tokens.value(), thinking_budget=self.thinking_budget.value(),
                       overflow=str(self.overflow.currentData()))


def _double(low: float, high: float, step: float, value: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(2)
    box.setValue(value)
    return box


def _ints(bounds: tuple[float, float]) -> tuple[int, int]:
    return int(bounds[0]), int(bounds[1])


def _int(low: int, high: int, value: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    return box
