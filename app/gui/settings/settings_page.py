"""The Settings page: models folder, context size (Auto's figure and its arithmetic for the chat's model, or
whether your own fits), GPU layers, threads, drafting depth / adaptive / p_min, theme, more than one machine (remote
servers, RPC workers, serving this machine: ``machines.py``) and the daily
update check (``updates_box.py``). Saved to the settings file in the config folder when the user presses Save.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core import defaults, paths
from app.core.errors import FastMTPError
from app.core.units import format_bytes
from app.engine import state_cache
from app.engine.config import DRAFT_DEPTH_MAX, DRAFT_DEPTH_MIN, OVERFLOW_LABELS
from app.engine.depth_memory import DepthMemory
from app.gui.settings.machines import MachinesGroup
from app.gui.settings.updates_box import UpdatesBox
from app.gui.shell.page_ops import OwnedOps
from app.gui.shell.status_text import bad_colour, error_text
from app.models.context_size import ContextFit, ContextPlan, plan_context
from app.release.updates import UpdateSource
from app.settings import app_settings
from app.settings.app_settings import THEMES, Settings, Theme

AUTO_TEXT = "Auto"  # the context box at 0: the largest that fits the chat's model here


class SettingsPage(QWidget):
    """Emits ``saved(Settings)`` after writing the file; the window applies the theme and engine sizes. Picking
    a theme saves it (alone) and emits ``saved`` at once.

    ``update_source`` is the feed the update checks ask (default: the catalog's); ``clock`` gives the time
    of a check (tests pass a fixed one).
    """

    saved = Signal(object)

    def __init__(self, settings: Settings, parent: QWidget | None = None, *,
                 update_source: UpdateSource | None = None, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(parent)
        self.updates = UpdatesBox(update_source, clock)  # whether a newer FastMTP Chat is out
        self.ops = self.updates.ops  # the page's background work besides the context's: the update check
        self.check_updates, self.check_now_button = self.updates.check_updates, self.updates.check_now_button
        self.update_label, self.update_checked = self.updates.update_label, self.updates.update_checked
        self.models_dir = QLineEdit(settings.models_dir)
        self.models_dir.setPlaceholderText(str(paths.models_dir()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder = QHBoxLayout()
        folder.addWidget(self.models_dir, 1)
        folder.addWidget(browse)
        self.context_size = QSpinBox()  # 0 reads "Auto": the largest that fits; else the user's own tokens
        self.context_size.setRange(defaults.CONTEXT_AUTO, defaults.CONTEXT_MAX)
        self.context_size.setSingleStep(1024)
        self.context_size.setSpecialValueText(AUTO_TEXT)
        self.context_size.setToolTip("Auto: the largest context the chat's model fits on this machine (GPU memory, or "
                                     "RAM on the CPU), at most what the model was trained on. Or type your own.")
        self.context_note = QLabel()  # Auto's figure and its arithmetic for the chat's model, or whether yours fits
        self.context_note.setWordWrap(True)
        self.context_note.setFixedWidth(640)  # the form keeps fields at their size hint: one width, whole lines
        self.context_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.context_ops = OwnedOps(self)  # apart from ``ops``: ``update_checking`` asks that one alone
        self.context_plan: ContextPlan | None = None
        self._context_model: tuple[Path, Path | None, int] | None = None
        self._context_name = ""
        self._context_problem = ""
        self.context_size.valueChanged.connect(lambda _value: self.show_context_fit())
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, app_settings.GPU_LAYERS_MAX)
        self.gpu_layers.setSpecialValueText("all that fit")
        self.threads = QSpinBox()
        self.threads.setRange(0, app_settings.THREADS_MAX)
        self.threads.setSpecialValueText("automatic")
        self.draft_depth = QSpinBox()
        self.draft_depth.setRange(DRAFT_DEPTH_MIN, DRAFT_DEPTH_MAX)
        self.adaptive = QCheckBox("Adaptive depth (choose the depth from measured costs, 0 when drafting does not pay)")
        self.forget_depths = QPushButton("Forget learned depths")
        self.forget_depths.setToolTip("Adaptive depth remembers what it measured for each model on this machine, so "
                                      "that the next load starts there; forget it all (each next load starts cold)")
        self.forget_depths.clicked.connect(self.forget_learned_depths)
        adaptive_row = QHBoxLayout()
        adaptive_row.addWidget(self.adaptive)
        adaptive_row.addWidget(self.forget_depths)
        adaptive_row.addStretch(1)
        self.p_min = QDoubleSpinBox()
        self.p_min.setRange(0.0, 1.0)
        self.p_min.setSingleStep(0.05)
        self.overflow = QComboBox()  # new chats' overflow policy (each chat can change its own)
        for policy, label in OVERFLOW_LABELS.items():
            self.overflow.addItem(label, policy)
        self.overflow.setToolTip("When a chat no longer fits in the context: leave out whole oldest turns (the "
                                 "system prompt always stays), or stop and offer a new chat carrying the last "
                                 "exchange. The default of new chats; each chat's settings can change its own.")
        self.theme = QComboBox()
        self.theme.addItems(list(THEMES))
        self.theme.currentTextChanged.connect(self._theme_picked)
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(self.save)
        self.save_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Put the fields back as they were last saved")
        self.cancel_button.clicked.connect(self.revert)
        self.dirty_label = QLabel("Unsaved changes")  # an edit not saved yet is marked (issue 36 item 9)
        self.dirty_label.setStyleSheet("font-weight: 600;")
        self.note = QLabel()
        self.note.setWordWrap(True)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.models_dir.setMinimumWidth(320)
        for box in (self.context_size, self.gpu_layers, self.threads, self.draft_depth, self.p_min, self.theme):
            box.setMinimumWidth(160)
        form.addRow("Models folder", folder)
        form.addRow("Context size (tokens)", self.context_size)
        form.addRow("", self.context_note)
        form.addRow("GPU layers (CUDA backends)", self.gpu_layers)
        form.addRow("Threads", self.threads)
        form.addRow("Draft depth", self.draft_depth)
        form.addRow("", adaptive_row)
        form.addRow("Draft confidence p_min", self.p_min)
        form.addRow("When a chat's context is full", self.overflow)
        form.addRow("Saved chat states", self._build_chat_states_row())
        form.addRow("Theme", self.theme)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(24, 18, 24, 18)
        title = QLabel("Settings")
        title.setStyleSheet("font-size: 16px; font-weight: 600;")
        layout.addWidget(title)
        layout.addLayout(form)
        self.machines = MachinesGroup(settings)  # remote servers, RPC workers, serving this machine
        layout.addWidget(self.machines)
        layout.addWidget(self.updates)
        layout.addStretch(1)
        self.scroll_area = QScrollArea()  # the window may be shorter (or narrower) than the page: scroll, never squash
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(content)
        # Save and Cancel sit in a bar below the scrolling fields: reachable at any height (issue 36 item 9: Save
        # was below the fold at 700 px)
        self.save_bar = QFrame()
        self.save_bar.setFrameShape(QFrame.Shape.NoFrame)
        self.save_bar.setObjectName("settings-save-bar")
        row = QHBoxLayout(self.save_bar)
        row.setContentsMargins(24, 8, 24, 10)
        row.addWidget(self.note, 1)
        row.addWidget(self.dirty_label)
        row.addWidget(self.cancel_button)
        row.addWidget(self.save_button)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        outer.addWidget(self.scroll_area, 1)
        outer.addWidget(line)
        outer.addWidget(self.save_bar)
        self.show_settings(settings)
        self.show_context_fit()
        self._watch_edits(content)
        self.refresh_dirty()

    def _watch_edits(self, content: QWidget) -> None:
        """Every field that Save writes marks the page dirty when it changes."""
        for edit in content.findChildren(QLineEdit):
            edit.textChanged.connect(lambda _t: self.refresh_dirty())
        for spin in content.findChildren(QSpinBox):
            spin.valueChanged.connect(lambda _v: self.refresh_dirty())
        for double in content.findChildren(QDoubleSpinBox):
            double.valueChanged.connect(lambda _v: self.refresh_dirty())
        for box in content.findChildren(QCheckBox):
            box.toggled.connect(lambda _on: self.refresh_dirty())
        for combo in content.findChildren(QComboBox):
            combo.currentIndexChanged.connect(lambda _i: self.refresh_dirty())

    @property
    def dirty(self) -> bool:
        """The fields differ from what was last saved (fields that cannot be saved as typed count as a change)."""
        try:
            return self.current() != self._settings.validated()
        except FastMTPError:
            return True

    def refresh_dirty(self) -> None:
        """"Unsaved changes" and an enabled Save only while the fields differ from the saved settings."""
        if not hasattr(self, "save_bar"):
            return  # still building the page
        dirty = self.dirty
        self.dirty_label.setVisible(dirty)
        self.save_button.setEnabled(dirty)
        self.cancel_button.setEnabled(dirty)

    def revert(self) -> None:
        """Cancel: the fields as last saved."""
        self.show_settings(self._settings)
        self.note.setText("Changes undone: the fields show the saved settings.")
        self.refresh_dirty()

    def show_settings(self, settings: Settings) -> None:
        self._settings = settings  # fields this page does not show are kept as they are
        self.models_dir.setText(settings.models_dir)
        self.context_size.setValue(settings.context_size)
        self.gpu_layers.setValue(settings.gpu_layers)
        self.threads.setValue(settings.threads)
        self.draft_depth.setValue(settings.draft_depth)
        self.adaptive.setChecked(settings.adaptive_depth)
        self.p_min.setValue(settings.p_min)
        self.state_cache_mb.setValue(settings.state_cache_mb)
        self.overflow.setCurrentIndex(max(self.overflow.findData(settings.overflow_policy), 0))
        self.show_chat_states()
        self.theme.setCurrentText(settings.theme)
        self.check_updates.setChecked(settings.check_for_updates)
        self.machines.show_settings(settings)
        self.refresh_dirty()

    def keep_chat_model(self, key: str) -> None:
        """The chat's model was picked in the window: keep it when this page saves (the fields shown stay as edited)."""
        self._settings = replace(self._settings, chat_model=key)
        self.machines.keep_chat_model(key)
        self.refresh_dirty()

    def current(self) -> Settings:
        theme = self.theme.currentText()
        settings = replace(self._settings, models_dir=self.models_dir.text().strip(),
                           context_size=self.context_size.value(), gpu_layers=self.gpu_layers.value(),
                           threads=self.threads.value(), draft_depth=self.draft_depth.value(),
                           adaptive_depth=self.adaptive.isChecked(), p_min=self.p_min.value(),
                           theme="dark" if theme == "dark" else "light" if theme == "light" else "system",
                           check_for_updates=self.check_updates.isChecked())
        settings = replace(settings, state_cache_mb=self.state_cache_mb.value(),
                           overflow_policy=str(self.overflow.currentData()))
        return self.machines.apply_to(settings).validated()

    def save(self) -> None:
        try:
            settings = self.current()
        except FastMTPError as exc:  # RPC workers that are not host:port
            self.note.setText(error_text(exc))
            return
        app_settings.save(settings)
        self._settings = settings
        self.refresh_dirty()
        self.note.setText(f"Saved to {app_settings.settings_path()}.")  # the window adds when the engine reloads
        self.saved.emit(settings)

    def _theme_picked(self, picked: str) -> None:
        """A theme takes effect the moment it is picked and is saved at once, as in most desktop apps: a preview
        that waits for Save (or is lost by leaving the page) surprises. Only the theme is saved; the other fields
        keep what was last saved until Save."""
        theme: Theme = "dark" if picked == "dark" else "light" if picked == "light" else "system"
        if theme == self._settings.theme:
            return  # shown from the saved settings, or picked back
        settings = replace(self._settings, theme=theme)
        app_settings.save(settings)
        self._settings = settings
        self.refresh_dirty()
        self.note.setText(f"Theme saved to {app_settings.settings_path()}.")
        self.saved.emit(settings)

    def forget_learned_depths(self) -> None:
        """What ``depth-memory forget`` does: a few small files, deleted at once."""
        try:
            forgotten = DepthMemory(paths.depth_memory_dir()).forget()
        except (OSError, FastMTPError) as exc:
            self.note.setText(f"The learned depths could not be forgotten: {exc}")
            return
        self.note.setText(f"Forgot what adaptive depth learned about {forgotten} model setup(s): "
                          "each model's next load starts it cold." if forgotten else
                          "Adaptive depth had nothing remembered to forget.")

    # ------------------------------------------------------------------ the context sized to the machine

    def set_context_model(self, model: tuple[Path, Path | None, int] | None, name: str = "") -> None:
        """The chat's model (target, the sidecar Auto counts, GPU layers), or None (a remote server, none yet):
        its header and this machine's memory are read in the background, then the figure follows the box."""
        if model == self._context_model and (self.context_plan is not None or not self.context_ops.idle):
            self._context_name = name or self._context_name
            return
        self._context_model, self._context_name = model, name
        self.context_plan, self._context_problem = None, ""
        self.show_context_fit()
        if model is None:
            return

        def work(_report: object) -> ContextPlan:
            return plan_context(*model)

        def done(plan: ContextPlan) -> None:
            if model == self._context_model:  # not a model chosen since
                self.context_plan = plan
                self.show_context_fit()

        def failed(exc: Exception) -> None:
            if model == self._context_model:
                self._context_problem = error_text(exc)
                self.show_context_fit()

        self.context_ops.start(work, done, failed)

    def context_fit(self) -> ContextFit | None:
        """The arithmetic for the value in the box (Auto's, at 0) and the chat's model; None until it is known."""
        return self.context_plan.fit(self.context_size.value()) if self.context_plan is not None else None

    def show_context_fit(self) -> None:
        """The line under the box: Auto's figure with its arithmetic, whether your own value fits (warned about
        in red when it does not, before anything is loaded), or why it cannot be told yet."""
        fit, name = self.context_fit(), self._context_name or "the chat's model"
        bad = False
        if fit is not None:
            warning = fit.warning()
            bad = warning is not None
            text = warning or (f"Auto for {name}: {fit.summary}." if fit.auto else
                               f"Yours for {name}: {fit.summary}. Auto would use {self.context_plan_auto():,}.")
            self.context_note.setToolTip("\n".join(fit.formula))
        else:
            self.context_note.setToolTip("")
            if self._context_problem:
                text, bad = f"The context for {name} cannot be worked out: {self._context_problem}", True
            elif self._context_model is not None:
                text = f"Working out the largest context {name} fits on this machine…"
            else:
                text = ("Auto: the largest context the chat's model fits on this machine, worked out when a model "
                        "on this machine is chosen.")
        self.context_note.setText(text)
        self.context_note.setStyleSheet(f"color: {bad_colour(self).name()};" if bad else "color: #6b7280;")

    def context_plan_auto(self) -> int:
        return self.context_plan.auto()[0] if self.context_plan is not None else 0

    @property
    def update_checking(self) -> bool:
        return self.updates.checking

    def check_for_updates_if_due(self) -> bool:
        """The automatic check at start, when the saved settings allow it (``UpdatesBox.check_if_due``)."""
        return self.updates.check_if_due(self._settings.check_for_updates)

    def _browse(self) -> None:
        start = self.models_dir.text() or str(paths.models_dir())
        folder = QFileDialog.getExistingDirectory(self, "Models folder", start)
        if folder:
            self.models_dir.setText(folder)

    # ------------------------------------------------------------------ the chats' kept states

    def _build_chat_states_row(self) -> QHBoxLayout:
        """The cap of the chats' kept states on disk, how much they take now, and "Clear saved chat states"."""
        self.state_cache_mb = QSpinBox()
        self.state_cache_mb.setRange(0, app_settings.STATE_CACHE_MB_MAX)
        self.state_cache_mb.setSingleStep(512)
        self.state_cache_mb.setSuffix(" MiB")
        self.state_cache_mb.setSpecialValueText("memory only")
        self.state_cache_mb.setMinimumWidth(160)
        self.state_cache_mb.setToolTip("A chat you leave keeps what the model read of it, so that coming back to it "
                                       "does not read it again: the last few in memory, all of them on disk in the "
                                       "cache folder up to this size (the least recently used go first). 0: memory "
                                       "only.")
        self.clear_states_button = QPushButton("Clear saved chat states")
        self.clear_states_button.setToolTip("Delete the kept states on disk: each chat is read again on its next turn")
        self.clear_states_button.clicked.connect(self.clear_chat_states)
        self.chat_states_label = QLabel()
        self.chat_states_label.setStyleSheet("color: #6b7280;")
        row = QHBoxLayout()
        row.addWidget(self.state_cache_mb)
        row.addWidget(self.clear_states_button)
        row.addWidget(self.chat_states_label, 1)
        return row

    def show_chat_states(self) -> None:
        """How many chats keep a state on disk and their size (a look at the folder: no file is read)."""
        try:
            files = state_cache.folder_files(paths.chat_states_dir())
        except (OSError, FastMTPError) as exc:
            self.chat_states_label.setText(f"The saved chat states cannot be looked at: {exc}")
            return
        total = sum(size for _, size, _ in files)
        self.chat_states_label.setText(f"{len(files)} saved, {format_bytes(total)}" if files else "none saved")

    def clear_chat_states(self) -> None:
        """What ``state-cache clear`` does: the files go; each chat is read again on its next turn."""
        try:
            count, removed = state_cache.clear(paths.chat_states_dir())
        except (OSError, FastMTPError) as exc:
            self.note.setText(f"The saved chat states could not be cleared: {exc}")
            return
        self.show_chat_states()
        self.note.setText(f"Cleared {count} saved chat state(s) ({format_bytes(removed)}): each chat is read again "
                          "on its next turn." if count else "There were no saved chat states to clear.")
