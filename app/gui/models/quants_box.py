"""The Models page's "Quantizations" group: the release's quantizations from the catalog with what each needs
(file, FastMTP sidecar, KV cache and recurrent state for the Settings page's context), whether it fits this
machine's GPU memory (detected, or entered by hand for another machine), whether it is installed, and its Download
button (the page's to act on)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.toolchain import Gpu
from app.core.units import format_bytes
from app.gui.shell.status_text import bad_colour, error_text, good_colour
from app.models.fit import GIB, FitReport, fit
from app.models.installed import default_destination
from app.release.catalog import Catalog

# quantization table columns
(Q_NAME, Q_FILE, Q_NEEDED, Q_FITS, Q_STATE, Q_ACTION) = range(6)


class QuantsBox(QGroupBox):
    """The GPUs found, GPU memory and context, the quantization table with one Download button a row
    (``download(name)`` is called), and the note on how "Needed" adds up; ``report`` the advice shown."""

    def __init__(self, catalog: Catalog, context_size: int, download: Callable[[str], None],
                 parent: QWidget | None = None) -> None:
        super().__init__("Quantizations", parent)
        self.catalog = catalog
        self._context_size = context_size
        self.gpus: list[Gpu] = []
        self.report: FitReport | None = None
        self.gpu_label = QLabel("Looking for NVIDIA GPUs…")
        self.gpu_label.setWordWrap(True)
        self.vram = QDoubleSpinBox()
        self.vram.setRange(1, 1024)
        self.vram.setDecimals(0)
        self.vram.setSuffix(" GiB")
        self.vram.setValue(24)
        self.vram.valueChanged.connect(self.refresh_fit)
        self.context = QSpinBox()
        self.context.setRange(512, 262_144)
        self.context.setValue(self._context_size)
        self.context.setSuffix(" tokens")
        self.context.setReadOnly(True)  # one value: the Settings page's, which the engine is loaded with
        self.context.setButtonSymbols(QSpinBox.ButtonSymbols.NoButtons)
        self.context.setToolTip("The context size from the Settings page (what the engine is loaded with); "
                                "change it there.")
        self.context.valueChanged.connect(self.refresh_fit)
        inputs = QHBoxLayout()
        inputs.addWidget(QLabel("GPU memory"))
        inputs.addWidget(self.vram)
        inputs.addWidget(QLabel("context (from Settings)"))
        inputs.addWidget(self.context)
        inputs.addStretch(1)
        self.quant_table = QTableWidget(len(self.catalog.quants), 6)
        self.quant_table.setHorizontalHeaderLabels(["Quantization", "File", "Needed", "Fits", "", ""])
        self.quant_table.verticalHeader().setVisible(False)
        self.quant_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.quant_table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.quant_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(Q_STATE, QHeaderView.ResizeMode.Stretch)
        self.download_buttons: dict[str, QPushButton] = {}
        for row, quant in enumerate(self.catalog.quants):
            button = QPushButton("Download")
            button.clicked.connect(lambda _checked=False, name=quant.name: download(name))
            self.download_buttons[quant.name] = button
            self.quant_table.setCellWidget(row, Q_ACTION, button)
        rows = sum(self.quant_table.rowHeight(row) for row in range(self.quant_table.rowCount()))
        self.quant_table.setMinimumHeight(rows + header.height() + 2 * self.quant_table.frameWidth() + 2)
        self.fit_note = QLabel()
        self.fit_note.setWordWrap(True)
        self.fit_note.setStyleSheet("color: palette(mid);")
        box = QVBoxLayout(self)
        box.addWidget(self.gpu_label)
        box.addLayout(inputs)
        box.addWidget(self.quant_table)
        box.addWidget(self.fit_note)

    def gpus_detected(self, gpus: list[Gpu]) -> None:
        self.gpus = gpus
        if gpus:
            names = " + ".join(f"{g.name} ({g.memory_mib / 1024:.0f} GiB)" for g in gpus)
            self.gpu_label.setText(f"Detected: {names}. The advice adds the model file, the FastMTP sidecar and "
                                   "the memory the context needs.")
            self.vram.setValue(sum(g.memory_mib for g in gpus) / 1024)
        else:
            self.gpu_label.setText("No NVIDIA GPU was found (nvidia-smi). Set the GPU memory to get advice for "
                                   "another machine.")
        self.refresh_fit()

    def gpu_detection_failed(self, exc: Exception) -> None:
        self.gpu_label.setText(f"Could not look for GPUs: {error_text(exc)}")

    def set_context_size(self, tokens: int) -> None:
        """The app settings' context size changed: the advice follows it."""
        self._context_size = tokens
        self.context.setValue(tokens)  # refreshes the advice (valueChanged)

    def refresh_fit(self) -> None:
        """Recompute the table from the GPU memory and context shown (catalog sizes are estimates)."""
        source = " + ".join(g.name for g in self.gpus) if self.gpus else "entered by hand"
        self.report = fit(round(self.vram.value() * GIB), self.context.value(), source, self.catalog)
        recommended = self.report.recommended
        for row, (quant, advice) in enumerate(zip(self.catalog.quants, self.report.quants, strict=True)):
            fits = "recommended" if quant.name == recommended else ("yes" if advice.fits else "no")
            installed = (default_destination(self.catalog.repo) / quant.file).is_file()
            cells = [quant.name, "~" + format_bytes(advice.file_bytes), "~" + format_bytes(advice.total_bytes), fits,
                     "installed" if installed else ""]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == Q_FITS:
                    item.setForeground(good_colour(self) if advice.fits else bad_colour(self))
                self.quant_table.setItem(row, column, item)
        cost = self.report.cost
        self.fit_note.setText(f"Needed = file + sidecar (~{format_bytes(self.report.sidecar_bytes)}) + KV cache "
                              f"for {self.report.context} tokens ({format_bytes(cost.kv_bytes)}) + recurrent state "
                              f"({format_bytes(cost.recurrent_bytes)})"
                              f" + overhead ({format_bytes(cost.overhead_bytes)}). Sizes are the catalog's "
                              "estimates; downloads are checked against the exact signed ones.")
