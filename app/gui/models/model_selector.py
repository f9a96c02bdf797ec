"""The chat's model selector: which model (the built-in demo model, each installed model, your own files, each
remote server) and which drafting mode, and what that choice means for the engine (``config_for``,
``chosen_remote``, ``bench_model``). The first mode, and so a fresh window's, is Auto: the window measures the
modes the model has files for and uses the fastest (``app.engine.auto_mode``; ``auto_choices`` says which).

Listing the models folder and writing the demo model are background ops owned by the selector
(:class:`~app.gui.shell.page_ops.OwnedOps`). It decides nothing about loading: it says what the user picked
(``model_chosen``, ``mode_changed``, ``add_remote_requested``, ``demo_wanted``) and the window loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QHelpEvent, QPaintEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QToolTip,
    QWidget,
)

from app.core import paths
from app.core.units import format_bytes
from app.engine.config import DRAFT_DEPTH_MAX, EngineConfig
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.gui.models import local_choices
from app.gui.models.bench_model import BenchModel
from app.gui.shell.page_ops import OwnedOps
from app.machines.remote_servers import RemoteServer, load_servers
from app.models.context_size import largest_sidecar, resolve_context
from app.models.installed import InstalledModel, list_installed, model_roots, models_in
from app.release.catalog import load_catalog
from app.release.install import Installed
from app.settings import app_settings
from app.settings.app_settings import Settings

# (label, key): key picks the EngineConfig in ``ModelSelector.config_for``; "auto" is the window's (``auto_choices``)
AUTO_KEY = "auto"
MODES = [("Auto (measured)", AUTO_KEY), ("FastMTP d2t sidecar", "sidecar-d2t"), ("Full sidecar", "sidecar-full"),
         ("Embedded MTP head", "embedded"), ("Off (target only)", "off")]
AUTO_TIP = ("Auto: over your first replies with a model, drafting off, the embedded MTP head and the FastMTP d2t "
            "sidecar (each with adaptive depth) take turns; once each has 3 replies, the fastest is remembered for "
            "this model, backend and machine and used from then on. The HUD says which mode it uses and by how much "
            "it won, or that it is still measuring.")
DEMO_KEY = ""  # the model selector's (and the settings') key of the built-in demo model
REMOTE_PREFIX = "remote:"  # the selector's key of a remote server: "remote:NAME"
ADD_REMOTE_KEY = "remote:+"  # the selector's last item, "Remote server…": opens the dialog
DEMO_LABEL = "Demo model (built-in)"


def set_item_enabled(box: QComboBox, row: int, enabled: bool) -> None:
    """Grey out (or enable again) one item of a combo box."""
    model = box.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(row)
        if item is not None:
            item.setEnabled(enabled)


class ElidingComboBox(QComboBox):
    """A combo box that elides its current text (``target.gguf · F16 · 117.7 MiB · unver…``) instead of cutting it
    off mid-letter, and whose tooltip then starts with the whole text; its popup is as wide as its longest item.

    At 1024x700 the chat's top bar leaves the model box about 160 pixels, far less than a file's label."""

    def text_rect_width(self) -> int:
        """The width the current text is drawn in (the edit field of the style's combo box)."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        rect = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                           QStyle.SubControl.SC_ComboBoxEditField, self)
        return max(0, rect.width() - 2)  # the label is drawn 1 pixel in from each side

    def shown_text(self) -> str:
        """The current text as painted: whole, or elided to fit."""
        return self.fontMetrics().elidedText(self.currentText(), Qt.TextElideMode.ElideRight, self.text_rect_width())

    def full_tooltip(self) -> str:
        """The box's own tooltip, after the whole current text when that is elided."""
        base = self.toolTip()
        if self.shown_text() == self.currentText():
            return base
        return f"{self.currentText()}\n\n{base}" if base else self.currentText()

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            tip = self.full_tooltip()
            if tip:
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)

    def showPopup(self) -> None:
        """Widen the list to its longest item (up to the screen) so no item reads cut off there either."""
        view = self.view()
        wanted = view.sizeHintForColumn(0) + view.frameWidth() * 2 + view.verticalScrollBar().sizeHint().width()
        screen = self.screen()
        view.setMinimumWidth(min(wanted, screen.availableGeometry().width()) if screen is not None else wanted)
        super().showPopup()


def _name(path: Path | None) -> str:
    return path.name if path is not None else "none"


def _gpu_backend() -> bool:
    from app.backend.registry import active

    manifest = active()
    return manifest is not None and manifest.flavor == "cuda"


class ModelSelector(QWidget):
    """"Model:" and "Drafting:" for the chat's top bar.

    ``settings()`` gives the window's current settings (the models folder, the engine's sizes).
    Signals: ``model_chosen(key)`` a model to load was picked; ``mode_changed`` the user picked a drafting mode;
    ``add_remote_requested`` "Remote server…" was picked; ``demo_wanted`` a listing asked for the demo model
    instead of one no longer there; ``demo_ready(DemoModel)`` / ``demo_failed(message)`` end ``write_demo``;
    ``listing_failed(event)`` the models folder could not be read (an error event for the banner).
    """

    model_chosen = Signal(str)
    mode_changed = Signal()
    add_remote_requested = Signal()
    demo_wanted = Signal()
    demo_ready = Signal(object)
    demo_failed = Signal(str)
    listing_failed = Signal(object)

    def __init__(self, settings: Callable[[], Settings], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._settings = settings
        self.ops = OwnedOps(self)  # writing the demo model
        self._listings = OwnedOps(self)  # listing the models folder (``listing_models``)
        self.demo: DemoModel | None = None
        self.installed: list[InstalledModel] = []  # the models folder's models, as last listed
        self._pending_chat: tuple[Path, str] | None = None  # "Chat with it now": folder and quantization

        self.model_box = ElidingComboBox()  # the demo model, then each installed model (``refresh``)
        self.model_box.setToolTip("The model the chat uses; downloads from the Models page appear here")
        self.model_box.setMinimumWidth(120)  # it elides: in a tight top bar it gives way first (1024-wide screens)
        self.model_box.addItem(DEMO_LABEL, DEMO_KEY)
        self.model_box.currentIndexChanged.connect(lambda _i: self._chosen())
        self.mode_box = QComboBox()
        for label, key in MODES:
            self.mode_box.addItem(label, key)
        self.mode_box.setItemData(0, AUTO_TIP, Qt.ItemDataRole.ToolTipRole)
        self.mode_box.currentIndexChanged.connect(lambda _i: self.mode_changed.emit())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Model:"))
        layout.addWidget(self.model_box)
        layout.addSpacing(10)
        layout.addWidget(QLabel("Drafting:"))
        layout.addWidget(self.mode_box)

    # ------------------------------------------------------------------ the choice

    def key(self) -> str:
        """The chosen model's key (``DEMO_KEY``, an installed target's path, ``remote:NAME``, …)."""
        return str(self.model_box.currentData() or DEMO_KEY)

    def has(self, key: str) -> bool:
        return self.model_box.findData(key) >= 0

    def mode(self) -> str:
        """The chosen drafting mode's key (a ``MODES`` key)."""
        return str(self.mode_box.currentData() or "")

    def restore_mode(self, key: str) -> None:
        """Pick a remembered drafting mode without loading anything (the window loads at its start)."""
        index = self.mode_box.findData(key)
        if index >= 0:
            self.mode_box.blockSignals(True)
            self.mode_box.setCurrentIndex(index)
            self.mode_box.blockSignals(False)

    def select(self, key: str) -> None:
        """Show ``key`` as chosen, loading nothing."""
        index = self.model_box.findData(key)
        if index >= 0 and index != self.model_box.currentIndex():
            self.model_box.blockSignals(True)
            self.model_box.setCurrentIndex(index)
            self.model_box.blockSignals(False)
        self.update_modes()

    def choose(self, key: str) -> None:
        """Select ``key`` as if the user had picked it."""
        self.select(key)
        self._chosen()

    def _chosen(self) -> None:
        """A model was picked: offer the drafting modes it has files for, and say so (or open "Remote server…")."""
        key = self.key()
        if key == ADD_REMOTE_KEY:
            self.add_remote_requested.emit()
            return
        self.update_modes()
        self.model_chosen.emit(key)

    def set_busy(self, busy: bool, remote: bool) -> None:
        """No other choice while a load or a reply is under way; no drafting mode for a remote server (it
        drafts its own way)."""
        self.mode_box.setEnabled(not busy and not remote)
        self.model_box.setEnabled(not busy)

    # ------------------------------------------------------------------ listing

    def write_demo(self) -> None:
        """Write the built-in demo model on first use (a background op): ``demo_ready`` or ``demo_failed``."""
        self.ops.start(lambda _report: ensure_demo_model(paths.demo_model_dir()), self.demo_ready.emit,
                       lambda exc: self.demo_failed.emit(f"The demo model could not be written: {exc}"))

    def refresh(self, select: str | None = None, fallback_to_demo: bool = False) -> None:
        """List the installed models again (a background op: it checks signatures and sizes).

        ``select``: then choose the model with this key (a target's path) when it is there and verified; else,
        with ``fallback_to_demo``, ask for the demo model (``demo_wanted``)."""
        roots = model_roots(self._settings())

        def listed(models: list[InstalledModel]) -> None:
            self.show_models(models)
            chosen = self.installed_model(select) if select else None
            if select and select.startswith(REMOTE_PREFIX) and self.has(select):
                self.choose(select)
            elif chosen is not None and chosen.verified:
                self.choose(chosen.key)
            elif local_choices.offered(select):
                self.choose(str(select))
            elif select is not None and fallback_to_demo:
                self.demo_wanted.emit()

        def failed(exc: Exception) -> None:
            self.listing_failed.emit({"message": f"The models folder could not be read: {exc}",
                                      "advice": "Check the models folder on the Settings page."})

        self._listings.start(lambda _report: list_installed(*roots), listed, failed)

    @property
    def listing_models(self) -> bool:
        """A listing is under way (tests wait for it; the selector fills when it ends)."""
        return not self._listings.idle

    def installed_model(self, key: str | None) -> InstalledModel | None:
        """The listed installed model with this key, or None (the demo model, or one no longer there)."""
        return next((m for m in self.installed if m.key == key), None)

    def add_installed(self, installed: Installed) -> None:
        """A download finished: read its one release folder (not the whole models folder, which may hold many
        releases) and list what it installed. The chat's model stays what it was (a long download must not swap
        the model under a conversation); the Models page's "Chat with it now" picks the new one. A background op,
        like ``refresh``."""
        folder = installed.folder

        def listed(models: list[InstalledModel]) -> None:
            others = [m for m in self.installed if m.folder != folder]
            at = next((i for i, m in enumerate(self.installed) if m.folder == folder), len(others))
            self.show_models(others[:at] + models + others[at:])  # the folder keeps its place when listed before

        def failed(exc: Exception) -> None:
            self.listing_failed.emit({"message": f"The downloaded model in {folder} could not be read: {exc}",
                                      "advice": "Check the models folder on the Settings page."})

        self._listings.start(lambda _report: models_in(folder, load_catalog()), listed, failed)

    def chat_with(self, folder: Path, quant: str) -> None:
        """List the models again, then choose the one in ``folder`` at ``quant`` ("Chat with it now")."""
        self._pending_chat = (folder, quant)
        self.refresh()

    def show_models(self, models: list[InstalledModel]) -> None:
        """Fill the selector: the demo model, then every installed model (unverified ones greyed, with why)."""
        self.installed = models
        current = self.key()
        box = self.model_box
        box.blockSignals(True)
        box.clear()
        box.addItem(DEMO_LABEL, DEMO_KEY)
        several_folders = len({m.folder for m in models}) > 1
        for model in models:
            where = f" · {model.folder.name}" if several_folders else ""
            signed = " · publisher-signed" if model.verified else ""
            box.addItem(f"{model.quant} · release {model.version} · {format_bytes(model.size_bytes)}{where}"
                        f"{signed}", model.key)
            row = box.count() - 1
            tip = f"{model.target}\nFastMTP d2t sidecar: {_name(model.sidecar_d2t)}\n" \
                  f"Full sidecar: {_name(model.sidecar_full)}"
            if not model.verified:
                tip = f"Not offered: it did not pass its checks.\n{model.problem}\n\n{tip}"
                set_item_enabled(box, row, False)
            box.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)
        local_choices.add_items(box, set_item_enabled)  # your own files (Models page)
        for server in load_servers():
            box.addItem(f"Remote: {server.name}", REMOTE_PREFIX + server.name)
            box.setItemData(box.count() - 1, server.url, Qt.ItemDataRole.ToolTipRole)
        box.addItem("Remote server…", ADD_REMOTE_KEY)
        index = box.findData(current)
        box.setCurrentIndex(index if index >= 0 else 0)
        box.blockSignals(False)
        pending, self._pending_chat = self._pending_chat, None
        if pending is not None:  # "Chat with it now" before the new model was listed
            chosen = next((m for m in models if m.folder == pending[0] and m.quant == pending[1] and m.verified),
                          None)
            if chosen is not None and chosen.key != box.currentData():
                self.choose(chosen.key)
        self.update_modes()

    # ------------------------------------------------------------------ what the choice means

    def model_files(self) -> tuple[Path, Path | None, Path | None] | None:
        """The chosen model's target, d2t sidecar and full sidecar; None while the demo model is not written yet."""
        key = self.key()
        installed = self.installed_model(key)
        if installed is not None:
            return installed.target, installed.sidecar_d2t, installed.sidecar_full
        own = local_choices.files(key)
        if own is not None:
            return own
        if self.demo is not None:
            return self.demo.target, self.demo.sidecar_d2t, self.demo.sidecar_full
        return None

    def update_modes(self) -> None:
        """Grey out the drafting modes whose file the chosen model lacks, saying why; move off a greyed one."""
        files = self.model_files()
        key = self.key()
        missing = {"sidecar-d2t": files is not None and files[1] is None,
                   "sidecar-full": files is not None and files[2] is None,
                   "embedded": local_choices.lacks_mtp_head(key)}
        why = {"sidecar-d2t": local_choices.NO_SIDECAR if local_choices.find(key) else
                              "This model has no FastMTP d2t sidecar in its folder: download it on the Models page.",
               "embedded": local_choices.NO_MTP_HEAD,
               "sidecar-full": "This model has no full MTP sidecar in its folder (the release ships the d2t one; "
                               "`python -m app sidecar build --full` makes one)."}
        for row, (_label, mode) in enumerate(MODES):
            if mode == AUTO_KEY:  # always there: it measures what the model has files for
                continue
            set_item_enabled(self.mode_box, row, not missing.get(mode, False))
            self.mode_box.setItemData(row, why[mode] if missing.get(mode, False) else None,
                                      Qt.ItemDataRole.ToolTipRole)
        if missing.get(self.mode(), False):
            first = next(row for row, (_label, mode) in enumerate(MODES) if not missing.get(mode, False))
            self.mode_box.blockSignals(True)
            self.mode_box.setCurrentIndex(first)
            self.mode_box.blockSignals(False)

    def mode_enabled(self, key: str) -> bool:
        """Whether the drafting mode ``key`` can be picked for the chosen model."""
        model = self.mode_box.model()
        item = model.item(self.mode_box.findData(key)) if isinstance(model, QStandardItemModel) else None
        return item is not None and item.isEnabled()

    def auto_choices(self) -> dict[str, str]:
        """What Auto measures for the chosen model: its mode names (``auto_mode.CANDIDATES``) that the model has
        files for, each with the selector's key that loads it."""
        keys = {"off": "off", "embedded": "embedded", "d2t": "sidecar-d2t"}
        return {name: key for name, key in keys.items() if self.mode_enabled(key)}

    def config_for(self, key: str, auto: bool = False) -> EngineConfig | None:
        """The engine configuration of the chosen model for a drafting mode, sized by the settings (context, GPU
        layers, threads, depth, adaptive, p_min); None when the model or the mode's file is not there (and for
        ``auto``, which the window resolves to a mode). ``auto``: as Auto drafting loads it, with adaptive depth up
        to the deepest (remembered between loads)."""
        files = self.model_files()
        if files is None or key == AUTO_KEY:
            return None
        target, sidecar_d2t, sidecar_full = files
        sizes = self._engine_sizes()
        # Auto (0): the largest context that fits, one figure per model whatever the mode (its largest sidecar)
        sizes["n_ctx"] = resolve_context(sizes["n_ctx"], target, largest_sidecar(sidecar_d2t, sidecar_full),
                                         sizes["n_gpu_layers"])
        if auto:
            sizes.update(adaptive=True, draft_depth=DRAFT_DEPTH_MAX, depth_memory=paths.depth_memory_dir())
        if key in ("sidecar-d2t", "sidecar-full"):
            draft = sidecar_d2t if key == "sidecar-d2t" else sidecar_full
            return EngineConfig(target, mode="sidecar", draft=draft, **sizes) if draft is not None else None
        if key == "embedded":
            return EngineConfig(target, mode="embedded", **sizes)
        return EngineConfig(target, mode="off", **sizes)

    def context_model(self) -> tuple[Path, Path | None, int] | None:
        """What the context is sized for: the chosen local model's target, the sidecar Auto counts (its largest) and
        the GPU layers the engine gets (0 on a CPU backend); None for a remote server or while there is no model."""
        files = self.model_files()
        if files is None or self.chosen_remote() is not None:
            return None
        return files[0], largest_sidecar(files[1], files[2]), int(self._engine_sizes()["n_gpu_layers"])

    def _engine_sizes(self) -> dict[str, Any]:
        """The settings' ``EngineConfig`` fields, with no GPU layers on a CPU backend."""
        sizes = app_settings.engine_fields(self._settings())
        if not _gpu_backend() and not sizes.get("rpc"):  # RPC workers take offloaded layers on a CPU backend too
            sizes["n_gpu_layers"] = 0
        return sizes

    def chosen_remote(self) -> RemoteServer | None:
        """The remote server the selector names, or None (a local model)."""
        key = self.key()
        if not key.startswith(REMOTE_PREFIX) or key == ADD_REMOTE_KEY:
            return None
        return next((s for s in load_servers() if REMOTE_PREFIX + s.name == key), None)

    def bench_model(self) -> BenchModel | None:
        """What the Benchmark page measures: the chat's model and its sidecars (None while there is none)."""
        files = self.model_files()
        if files is None or self.chosen_remote() is not None:
            return None
        key = self.key()
        name = self.model_box.currentText() if key != DEMO_KEY else "built-in demo model"
        return BenchModel(name, files[0], files[1], files[2], not local_choices.lacks_mtp_head(key))
