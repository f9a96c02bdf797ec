"""The Settings page: models folder, context size, GPU layers, threads, drafting depth / adaptive / p_min,
theme. Saved to the settings file in the config folder when the user presses Save."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app import settings as app_settings
from app.settings import THEMES, Settings


class SettingsPage(QWidget):
    """Emits ``saved(Settings)`` after writing the file; the window applies the theme and engine sizes."""

    saved = Signal(object)

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.models_dir = QLineEdit(settings.models_dir)
        self.models_dir.setPlaceholderText(str(paths.models_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder = QHBoxLayout()
        folder.addWidget(self.models_dir, 1)
        folder.addWidget(browse)
        self.context_size = QSpinBox()
        self.context_size.setRange(512, 262_144)
        self.context_size.setSingleStep(1024)
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("all that fit")
        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText("automatic")
        self.draft_depth = QSpinBox()
        self.draft_depth.setRange(1, 8)
        self.adaptive = QCheckBox("Adaptive depth (choose the depth from measured costs, 0 when drafting does not pay)")
        self.p_min = QDoubleSpinBox()
        self.p_min.setRange(0.0, 1.0)
        self.p_min.setSingleStep(0.05)
        self.theme = QComboBox()
        self.theme.addItems(list(THEMES))
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(self.save)
        self.note = QLabel()
        self.note.setWordWrap(True)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.models_dir.setMinimumWidth(460)
        for box in (self.context_size, self.gpu_layers, self.threads, self.draft_depth, self.p_min, self.theme):
            box.setMinimumWidth(160)
        form.addRow("Models folder", folder)
        form.addRow("Context size (tokens)", self.context_size)
        form.addRow("GPU layers (CUDA backends)", self.gpu_layers)
        form.addRow("Threads", self.threads)
        form.addRow("Draft depth", self.draft_depth)
        form.addRow("", self.adaptive)
        form.addRow("Draft confidence p_min", self.p_min)
        form.addRow("Theme", self.theme)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 18, 24, 18)
        title = QLabel("Settings")
        title.setStyleSheet("font-size: 16px; font-weight: 600;")
        layout.addWidget(title)
        layout.addLayout(form)
        row = QHBoxLayout()
        row.addWidget(self.save_button)
        row.addWidget(self.note, 1)
        layout.addLayout(row)
        layout.addStretch(1)
        self.show_settings(settings)

    def show_settings(self, settings: Settings) -> None:
        self._settings = settings  # fields this page does not show are kept as they are
        self.models_dir.setText(settings.models_dir)
        self.context_size.setValue(settings.context_size)
        self.gpu_layers.setValue(settings.gpu_layers)
        self.threads.setValue(settings.threads)
        self.draft_depth.setValue(settings.draft_depth)
        self.adaptive.setChecked(settings.adaptive_depth)
        self.p_min.setValue(settings.p_min)
        self.theme.setCurrentText(settings.theme)

    def keep_chat_model(self, key: str) -> None:
        """The chat's model was picked in the window: keep it when this page saves (the fields shown stay as edited)."""
        self._settings = replace(self._settings, chat_model=key)

    def current(self) -> Settings:
        theme = self.theme.currentText()
        return replace(self._settings, models_dir=self.models_dir.text().strip(),
                       context_size=self.context_size.value(), gpu_layers=self.gpu_layers.value(),
                       threads=self.threads.value(), draft_depth=self.draft_depth.value(),
                       adaptive_depth=self.adaptive.isChecked(), p_min=self.p_min.value(),
                       theme="dark" if theme == "dark" else "light" if theme == "light" else "system").validated()

    def save(self) -> None:
        settings = self.current()
        app_settings.save(settings)
        self.note.setText(f"Saved to {app_settings.settings_path()}. Engine sizes apply from the next model load.")
        self.saved.emit(settings)

    def _browse(self) -> None:
        start = self.models_dir.text() or str(paths.models_dir())
        folder = QFileDialog.getExistingDirectory(self, "Models folder", start)
        if folder:
            self.models_dir.setText(folder)
