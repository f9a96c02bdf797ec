"""The models page: the release's quantizations with fit advice, downloads with per-file progress and checks,
and your own model files (``app.gui.models.local_models_panel``: add, scan, verify against the hub, make a sidecar).

Everything slow runs through :mod:`app.gui.shell.ops`: GPU detection, the download (``fetch_release``, the
same sequence as ``python -m app fetch``) and keyring access. The download belongs to this page, not
to a dialog, so it keeps running while the user looks at another page. The first-use key question
of the trust chain comes from the download's worker thread and is answered here by
:class:`~app.gui.models.trust_dialog.TrustKeyDialog`; the worker waits for the answer. So does the size
question: once the signed manifest gave the real sizes, a download of ``BIG_DOWNLOAD_BYTES`` or more asks
"Download Q4_K_P: about 15.4 GiB into FOLDER (N free there). Download now?" before any model file is requested.

Each file's row shows its three checks as the core reports them: *signature* (the signed manifest
lists it, which is verified before any payload byte is requested), *size* and *sha256* (computed
while streaming, compared with the signed manifest when the file completes).

The panel's heading names the quantization being fetched and its size. The core's advice is written for
the terminal and the window alike (or names a command); ``window_advice`` chooses this page's words by the
error's ``kind`` ("press Download again", "the Hub token box below"), never by matching the core's sentences.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.toolchain import Gpu, detect_gpus
from app.core import net_failures, secrets
from app.core.errors import FastMTPError, VerificationError
from app.core.units import format_bytes
from app.gui.models.local_models_panel import LocalModelsPanel
from app.gui.models.trust_dialog import SizeQuestion, TrustKeyDialog, TrustQuestion, ask_size, ask_trust
from app.gui.shell.ops import BackgroundOp, Report
from app.gui.shell.page_ops import OwnedOps, ShutdownWithWindow, bad_colour, error_text, good_colour
from app.models.fit import GIB, FitReport, fit
from app.models.installed import default_destination
from app.release.catalog import (
    Catalog,
    CatalogFile,
    EndpointKind,
    add_user_endpoint,
    endpoints_for,
    load_catalog,
    remove_user_endpoint,
    user_endpoints,
)
from app.release.download import DownloadDeclined, FetchPlan, fetch_release
from app.release.fetcher import DownloadCancelled, FetchControl, NetworkDownloadError
from app.release.install import Installed
from app.release.progress import FetchEvent
from app.settings import app_settings

OK, FAILED, PENDING = "✓", "✗", "…"

# download files table columns
(F_NAME, F_PROGRESS, F_SPEED, F_ETA, F_SIGNATURE, F_SIZE, F_SHA256, F_STATUS) = range(8)
# quantization table columns
(Q_NAME, Q_FILE, Q_NEEDED, Q_FITS, Q_STATE, Q_ACTION) = range(6)


class _Question(Protocol):
    """A question for the user from the download's worker (``TrustQuestion``, ``SizeQuestion``)."""

    answered: threading.Event


def _wait_for_answer(question: _Question, report: Report, control: FetchControl) -> None:
    """Relay ``question`` to the GUI thread and wait for its answer; a Cancel ends the wait too."""
    remove = control.add_listener(lambda change: question.answered.set() if change == "cancelled" else None)
    try:
        report(question)
        question.answered.wait()
    finally:
        remove()


@dataclass
class _Step:
    """A step of the fetch sequence (``on_step``), or a warning of the release (``on_warning``), relayed to the GUI
    thread."""

    message: str
    warning: bool = False


def human_eta(seconds: float | None) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 20 min``; a dash while the speed is unknown."""
    if seconds is None:
        return "—"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# which check a failed file's row marks, chosen by the error's kind, and the plain sentence for its row
_FAILED_CHECK: dict[str, str] = {"size-mismatch": "size", "sha256-mismatch": "sha256"}
_FAILED_WORDS: dict[str, str] = {
    "size": "Wrong size: the mirror sent a different file. It was deleted; nothing was installed.",
    "sha256": "Failed the sha256 check: the bytes differ from what the publisher signed. "
              "The file was deleted; nothing was installed.",
}


def plain_failure(kind: str, message: str) -> tuple[str | None, str]:
    """Which check a file failed (``"size"``, ``"sha256"`` or None), from the error's ``kind``, and one plain
    sentence for its row (the message's first line when the kind names no check)."""
    check = _FAILED_CHECK.get(kind)
    if check is None:
        return None, message.splitlines()[0] if message else ""
    return check, _FAILED_WORDS[check]


# This page's advice for each kind of download error: the core's advice suits the terminal (or names a command);
# the window says "press Download again" and points at its own boxes. Chosen by kind, never by the core's words.
WINDOW_ADVICE: dict[str, str] = {
    "download-denied": "The repository may be gated or private: accept its terms on the hub, then save your hub "
                       "token in the Hub token box below (or set HF_TOKEN) and press Download again. A token "
                       "that lacks access gives the same error.",
    "download-network": "Check the network connection or try another mirror. Press Download again to resume: it "
                        "goes on where it stopped.",
    "download-cancelled": "Press Download again to resume: it goes on where it stopped.",
    "disk-full": "Free some space, then press Download again: the part already downloaded is kept and the download "
                 "resumes.",
    "no-room": "Free some space on that disk, then press Download again; parts already downloaded are kept.",
    "install-no-room": "Free some space on the models folder's disk, then press Download again.",
    "download-cancelled-start-over": "Press Download again to start over.",
    "download-cancelled-kept": "Press Download again to resume: model files already downloaded are kept.",
    "quant-missing": "Pick another quantization in the table above: the release's signed manifest lists the ones "
                     "it has.",
}


def window_advice(exc: FastMTPError) -> str:
    """The advice this page shows for ``exc``: its own words for the kinds it knows, else the core's advice."""
    return WINDOW_ADVICE.get(exc.kind, exc.advice)


def network_failure_text(exc: NetworkDownloadError) -> str:
    """A network failure in words, from the one place that words them (:mod:`app.core.net_failures`): every
    endpoint tried and what failed there, what to do, then retry or resume: "resume" only when the download's
    ``.part`` files hold bytes, since with nothing kept there is nothing to resume."""
    words = f"{net_failures.joined(exc.failures)} {net_failures.advice(exc.failures)}"
    if exc.kept_bytes > 0:
        return (f"{words}\nPress Download again to resume: {format_bytes(exc.kept_bytes)} already downloaded is "
                "kept and it goes on from there.")
    return f"{words}\nPress Download again to retry."


def download_error_text(exc: Exception) -> str:
    """What went wrong with a download and what to do about it in this window."""
    return error_text(exc, WINDOW_ADVICE)


class ModelsPage(QWidget):
    """Quantizations, fit advice, downloads, mirrors and the hub token.

    ``model_installed`` (an :class:`Installed`) fires when a download is verified and in place;
    ``chat_requested`` (folder, quantization) when the user asks to chat with it now.
    """

    model_installed = Signal(object)
    chat_requested = Signal(str, str)

    def __init__(self, parent: QWidget | None = None, *, detect_gpu: bool = True,
                 context_size: int | None = None) -> None:
        """``context_size``: the app settings' context (the one the engine is loaded with; with Auto, the `fit`
        command's usual one: ``app_settings.fit_context``); None reads the saved settings. The window passes it and
        calls :meth:`set_context_size` when Settings changes it."""
        super().__init__(parent)
        self._context_size = app_settings.fit_context(app_settings.load()) if context_size is None else context_size
        self.ops = OwnedOps(self)
        self.catalog: Catalog = load_catalog()
        self.gpus: list[Gpu] = []
        self.report: FitReport | None = None
        self.download_op: BackgroundOp[Installed] | None = None
        self.download_quant = ""
        self.control: FetchControl | None = None
        self.trust_dialog: TrustKeyDialog | None = None
        self.size_box: QMessageBox | None = None  # "Download now?" while it is open
        self.installed: Installed | None = None
        self.last_error: Exception | None = None
        self.paused = False
        self.cancel_requested = False
        self._rows: dict[str, int] = {}
        self._failed: set[str] = set()
        ShutdownWithWindow(self, self.shutdown)

        content = QWidget()
        column = QVBoxLayout(content)
        column.addWidget(self._build_quant_group())
        column.addWidget(self._build_download_group(), 1)
        self.local = LocalModelsPanel()  # your own GGUF files: add, scan, verify, make their FastMTP sidecar
        column.addWidget(self.local)
        column.addWidget(self._build_settings_group())
        scroll = QScrollArea()  # the window may be shorter than the page: scroll, never squash
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self.refresh_fit()
        self.refresh_mirrors()
        self.refresh_token_status()
        if detect_gpu:
            self.ops.start(lambda _report: detect_gpus(), self._gpus_detected, self._gpu_detection_failed)

    # ------------------------------------------------------------------ layout

    def _build_quant_group(self) -> QGroupBox:
        group = QGroupBox("Quantizations")
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
            button.clicked.connect(lambda _checked=False, name=quant.name: self.download(name))
            self.download_buttons[quant.name] = button
            self.quant_table.setCellWidget(row, Q_ACTION, button)
        rows = sum(self.quant_table.rowHeight(row) for row in range(self.quant_table.rowCount()))
        self.quant_table.setMinimumHeight(rows + header.height() + 2 * self.quant_table.frameWidth() + 2)
        self.fit_note = QLabel()
        self.fit_note.setWordWrap(True)
        self.fit_note.setStyleSheet("color: palette(mid);")
        box = QVBoxLayout(group)
        box.addWidget(self.gpu_label)
        box.addLayout(inputs)
        box.addWidget(self.quant_table)
        box.addWidget(self.fit_note)
        return group

    def _build_download_group(self) -> QGroupBox:
        group = QGroupBox("Download")
        self.download_title = QLabel()  # which quantization, and its size; the steps change below it
        self.download_title.setStyleSheet("font-weight: 600;")
        self.download_title.setWordWrap(True)
        self.download_title.hide()
        self.step_label = QLabel("Pick a quantization to download; the FastMTP sidecar comes with it.")
        self.step_label.setWordWrap(True)
        self.step_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.total_bar = QProgressBar()
        self.total_bar.setRange(0, 1000)
        self.total_bar.setTextVisible(False)
        self.total_bar.setFixedHeight(8)
        self.total_label = QLabel()
        self.files_table = QTableWidget(0, 8)
        self.files_table.setHorizontalHeaderLabels(["File", "Progress", "Speed", "ETA", "Signature", "Size",
                                                    "sha256", "Status"])
        self.files_table.verticalHeader().setVisible(False)
        self.files_table.setMinimumHeight(130)
        self.files_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.files_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(F_PROGRESS, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(True)
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self.pause)
        self.resume_button = QPushButton("Resume")
        self.resume_button.clicked.connect(self.resume)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.chat_button = QPushButton("Chat with it now")
        self.chat_button.setToolTip("Load the model just downloaded in the chat, with its FastMTP sidecar")
        self.chat_button.clicked.connect(self._chat_now)
        self.chat_button.hide()
        buttons = QHBoxLayout()
        buttons.addWidget(self.total_label, 1)
        buttons.addWidget(self.chat_button)
        buttons.addWidget(self.pause_button)
        buttons.addWidget(self.resume_button)
        buttons.addWidget(self.cancel_button)
        box = QVBoxLayout(group)
        box.addWidget(self.download_title)
        box.addWidget(self.step_label)
        box.addWidget(self.total_bar)
        box.addWidget(self.files_table, 1)
        box.addLayout(buttons)
        self._set_running(False)
        return group

    def _build_settings_group(self) -> QGroupBox:
        group = QGroupBox("Mirrors and hub token")
        self.mirror_list = QListWidget()
        self.mirror_list.setFixedHeight(64)
        self.mirror_kind = QComboBox()
        self.mirror_kind.addItem("plain base URL", "plain")
        self.mirror_kind.addItem("HF-compatible host", "hf")
        self.mirror_url = QLineEdit()
        self.mirror_url.setPlaceholderText("https://mirror.example.org/models")
        self.add_mirror_button = QPushButton("Add mirror")
        self.add_mirror_button.clicked.connect(self.add_mirror)
        self.remove_mirror_button = QPushButton("Remove")
        self.remove_mirror_button.clicked.connect(self.remove_mirror)
        mirror_row = QHBoxLayout()
        mirror_row.addWidget(self.mirror_kind)
        mirror_row.addWidget(self.mirror_url, 1)
        mirror_row.addWidget(self.add_mirror_button)
        mirror_row.addWidget(self.remove_mirror_button)
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_… (stored in the system keyring, sent only to the hub)")
        self.save_token_button = QPushButton("Save token")
        self.save_token_button.clicked.connect(self.save_token)
        self.clear_token_button = QPushButton("Forget token")
        self.clear_token_button.clicked.connect(self.clear_token)
        token_row = QHBoxLayout()
        token_row.addWidget(self.token_edit, 1)
        token_row.addWidget(self.save_token_button)
        token_row.addWidget(self.clear_token_button)
        self.token_status = QLabel()
        self.token_status.setWordWrap(True)
        self.settings_message = QLabel()
        self.settings_message.setWordWrap(True)
        form = QFormLayout(group)
        form.addRow("Mirrors (tried before the hub)", self.mirror_list)
        form.addRow("", mirror_row)
        form.addRow("Hub token", token_row)
        form.addRow("", self.token_status)
        form.addRow("", self.settings_message)
        return group

    # ------------------------------------------------------------------ fit advice

    def _gpus_detected(self, gpus: list[Gpu]) -> None:
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

    def _gpu_detection_failed(self, exc: Exception) -> None:
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

    # ------------------------------------------------------------------ downloading

    @property
    def downloading(self) -> bool:
        return self.download_op is not None and self.download_op.running

    def download(self, quant: str) -> None:
        """Fetch, verify and install ``quant`` with its sidecar, as ``python -m app fetch --quant`` does."""
        if self.downloading:
            return
        try:
            endpoints = endpoints_for()  # the mirror list may have been edited by hand: checked here
        except FastMTPError as exc:
            self.last_error = exc
            self._set_step("Nothing was downloaded. " + error_text(exc), error=True)
            return
        plan = FetchPlan(quant=quant, repo=self.catalog.repo, revision=self.catalog.revision, endpoints=endpoints,
                         dest=default_destination(self.catalog.repo))
        control = self.control = FetchControl()
        self.download_quant = quant
        self.chat_button.hide()
        self.installed = None
        self.last_error = None
        self.paused = False
        self.cancel_requested = False
        self._rows.clear()
        self._failed.clear()
        self.files_table.setRowCount(0)
        self.total_bar.setValue(0)
        self.total_label.setText("")
        self._set_title(f"Downloading {self._sized(quant)}…")
        self._set_step("Fetching the release's signed integrity files first.")
        self._set_running(True)

        def work(report: Report) -> Installed:
            def confirm(repo: str, fingerprint: str) -> bool:
                question = TrustQuestion(repo, fingerprint)
                _wait_for_answer(question, report, control)
                return question.trusted and not control.cancelled

            def confirm_size(needed: int, dest: Path, free: int) -> bool:
                question = SizeQuestion(quant, needed, dest, free)
                _wait_for_answer(question, report, control)
                return question.accepted and not control.cancelled

            return fetch_release(plan, token=secrets.get_token(), on_event=report,
                                 on_step=lambda message: report(_Step(message)),
                                 on_warning=lambda message: report(_Step(message, warning=True)),
                                 control=control, confirm=confirm, confirm_size=confirm_size)

        self.download_op = self.ops.start(work, self._download_done, self._download_failed, self._on_progress)
        # a page deleted mid-download cannot answer the key question or show the end: stop the worker
        self.destroyed.connect(lambda *_args: control.cancel())

    def pause(self) -> None:
        if self.control is not None and self.downloading:
            # before pause(): its "paused" event may be delivered right inside that call, on this thread
            self.paused = True
            self.total_label.setText("Pausing…")
            self.pause_button.setEnabled(False)
            self.resume_button.setEnabled(True)
            self.control.pause()

    def resume(self) -> None:
        if self.control is not None and self.downloading:
            self.paused = False
            self.total_label.setText("Resuming…")
            self.pause_button.setEnabled(True)
            self.resume_button.setEnabled(False)
            self.control.resume()

    def cancel(self) -> None:
        if self.control is not None and self.downloading:
            self.cancel_requested = True  # also when the key question was pending: that ends as a refusal
            self.cancel_button.setEnabled(False)
            self.total_label.setText("Cancelling…")
            self.control.cancel()
            if self.trust_dialog is not None:
                self.trust_dialog.reject()
            if self.size_box is not None:
                self.size_box.reject()

    def _set_running(self, running: bool) -> None:
        self.pause_button.setEnabled(running)
        self.resume_button.setEnabled(False)
        self.cancel_button.setEnabled(running)
        for button in self.download_buttons.values():
            button.setEnabled(not running)

    def _sized(self, quant: str) -> str:
        """``Q4_K_P (~16.5 GB) and its FastMTP sidecar (~903.0 MB)``: the catalog's sizes (``~`` where they are
        estimates; the signed manifest has the exact ones)."""
        def size(entry: CatalogFile) -> str:
            if entry.size is None:
                return ""
            return f" ({'~' if entry.approximate else ''}{format_bytes(entry.size)})"

        return f"{quant}{size(self.catalog.quant(quant))} and its FastMTP sidecar{size(self.catalog.sidecar)}"

    def _set_title(self, text: str) -> None:
        self.download_title.setText(text)
        self.download_title.setVisible(bool(text))

    def _set_step(self, text: str, error: bool = False, detail: str = "") -> None:
        """The step line; ``detail`` (a failure's technical words) goes to its tooltip, not the line."""
        self.step_label.setText(text)
        self.step_label.setToolTip(detail)
        self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};" if error else "")

    def _on_progress(self, value: Any) -> None:
        if isinstance(value, FetchEvent):
            self._on_fetch_event(value)
        elif isinstance(value, _Step):
            text = ("Warning: " if value.warning else "") + value.message[:1].upper() + value.message[1:]
            self._set_step(text, error=value.warning)
        elif isinstance(value, TrustQuestion):
            self._ask_trust(value)
        elif isinstance(value, SizeQuestion):
            self._set_step(f"The signed manifest says {value.quant} needs about {format_bytes(value.needed)}: "
                           "asking before it is downloaded.")
            ask_size(value, self, self._size_box_opened)

    def _size_box_opened(self, box: QMessageBox | None) -> None:
        self.size_box = box

    def _ask_trust(self, question: TrustQuestion) -> None:
        self.trust_dialog = ask_trust(question, self, self._trust_closed)

    def _trust_closed(self) -> None:
        self.trust_dialog = None

    def _on_fetch_event(self, event: FetchEvent) -> None:
        if not event.file:
            if event.total_bytes:
                self.total_bar.setValue(round(1000 * event.total_done / event.total_bytes))
            if event.kind == "paused":
                self.total_label.setText("Paused; the partial files are kept.")
            elif event.kind in ("progress", "resumed") and not self.paused:
                total = f" of {format_bytes(event.total_bytes)}" if event.total_bytes else ""
                self.total_label.setText(f"{format_bytes(event.total_done)}{total} · "
                                         f"{format_bytes(event.speed_bps)}/s · ETA {human_eta(event.eta_s)}")
            return
        row = self._row(event.file)
        bar = self.files_table.cellWidget(row, F_PROGRESS)
        if isinstance(bar, QProgressBar) and event.bytes_total:
            bar.setValue(round(1000 * event.bytes_done / event.bytes_total))
            bar.setFormat(f"{format_bytes(event.bytes_done)} / {format_bytes(event.bytes_total)}")
        if event.kind == "progress":
            self._cell(row, F_SPEED, f"{format_bytes(event.speed_bps)}/s")
            self._cell(row, F_ETA, human_eta(event.eta_s))
            self._cell(row, F_STATUS, "downloading")
        elif event.kind == "start":
            self._cell(row, F_STATUS, event.message or "downloading")
        elif event.kind == "retry":  # "… retrying in 2.0 s": no speed or ETA while it waits
            self._cell(row, F_SPEED, "")
            self._cell(row, F_ETA, human_eta(None))
            self._cell(row, F_STATUS, event.message)
        elif event.kind == "done":
            if isinstance(bar, QProgressBar):
                bar.setValue(1000)
            self._cell(row, F_SPEED, "")
            self._cell(row, F_ETA, "")
            self._cell(row, F_SIZE, OK, good_colour(self))
            self._cell(row, F_SHA256, OK, good_colour(self))
            self._cell(row, F_STATUS, "verified")
        elif event.kind == "error":
            self._mark_failed(event.file, event.message, event.error_kind)

    def _row(self, name: str) -> int:
        """The file's row, added on its first event: payload files are only fetched once the signed
        manifest that lists them verified, so a row's signature check has passed by then."""
        if name in self._rows:
            return self._rows[name]
        row = self.files_table.rowCount()
        self.files_table.insertRow(row)
        self._rows[name] = row
        self._cell(row, F_NAME, name)
        bar = QProgressBar()
        bar.setRange(0, 1000)
        bar.setValue(0)
        self.files_table.setCellWidget(row, F_PROGRESS, bar)
        self._cell(row, F_SIGNATURE, OK, good_colour(self)).setToolTip("Listed in the release's signed manifest; the "
                                                           "signature verified with the trusted publisher key.")
        self._cell(row, F_SIZE, PENDING)
        self._cell(row, F_SHA256, PENDING)
        return row

    def _cell(self, row: int, column: int, text: str, colour: QColor | None = None) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        if colour is not None:
            item.setForeground(colour)
        self.files_table.setItem(row, column, item)
        return item

    def _mark_failed(self, name: str, message: str, kind: str) -> None:
        row = self._rows[name]
        self._failed.add(name)
        check, text = plain_failure(kind, message)
        if check == "size":
            self._cell(row, F_SIZE, FAILED, bad_colour(self))
        elif check == "sha256":
            self._cell(row, F_SIZE, OK, good_colour(self))
            self._cell(row, F_SHA256, FAILED, bad_colour(self))
        self._cell(row, F_SPEED, "")
        self._cell(row, F_ETA, "")
        self._cell(row, F_STATUS, text, bad_colour(self)).setToolTip(message)

    def file_row(self, name: str) -> dict[str, str]:
        """The texts of one file's row by column name (what a user reads; used by tests and screenshots)."""
        row = self._rows[name]
        columns = ["file", "progress", "speed", "eta", "signature", "size", "sha256", "status"]
        values = {}
        for column, key in enumerate(columns):
            item = self.files_table.item(row, column)
            widget = self.files_table.cellWidget(row, column)
            values[key] = widget.text() if isinstance(widget, QProgressBar) else (item.text() if item else "")
        return values

    def _download_done(self, installed: Installed) -> None:
        self.installed = installed
        self.control = None
        self._set_running(False)
        self.total_bar.setValue(1000)
        self.total_label.setText("")
        for row in self._rows.values():
            self._cell(row, F_STATUS, "installed", good_colour(self))
        self._set_title(f"{self.download_quant} is installed")
        warnings = "".join(f"\nWarning: {w}" for w in installed.warnings)
        self._set_step(f"Installed version {installed.version} in {installed.folder} "
                       f"(publisher key {installed.fingerprint[:19]}…).{warnings}")
        self.refresh_fit()
        self.chat_button.show()
        self.model_installed.emit(installed)

    def _chat_now(self) -> None:
        if self.installed is not None:
            self.chat_requested.emit(str(self.installed.folder), self.download_quant)

    def _download_failed(self, exc: Exception) -> None:
        self.last_error = exc
        self.control = None
        self._set_running(False)
        if self.trust_dialog is not None:
            self.trust_dialog.reject()
        if self.size_box is not None:
            self.size_box.reject()
        if isinstance(exc, DownloadDeclined) and not self.cancel_requested:
            self._set_title(f"{self.download_quant}: not downloaded")
            self.total_label.setText("")
            self._set_step("Nothing was downloaded: you chose not to download it now. Press Download again when "
                           "you want it.")
            return
        if isinstance(exc, DownloadCancelled) or self.cancel_requested:
            self._set_title(f"{self.download_quant}: download cancelled")
            self.total_label.setText("")
            # payload rows appear with the model files' first events: before them, nothing was kept
            self._set_step("Download cancelled. The partial files are kept: Download again resumes them."
                           if self._rows else "Download cancelled before any model file was requested; "
                           "nothing was kept.")
            return
        if isinstance(exc, VerificationError) and exc.file in self._rows and exc.file not in self._failed:
            self._mark_failed(exc.file, exc.message, exc.kind)  # the file the check failed on, as the core names it
        self.total_label.setText("")
        self._set_title(f"{self.download_quant}: the download failed")
        if isinstance(exc, NetworkDownloadError):  # in words; the mirror's URL and the exception in the tooltip
            self._set_step("Nothing was installed. " + network_failure_text(exc), error=True, detail=exc.detail)
            return
        self._set_step("Nothing was installed. " + download_error_text(exc), error=True)

    # ------------------------------------------------------------------ mirrors and token

    def refresh_mirrors(self) -> None:
        self.mirror_list.clear()
        try:
            for endpoint in user_endpoints(checked=False):  # a bad entry is listed too, so it can be removed
                self.mirror_list.addItem(f"{endpoint.url}  ({endpoint.kind})")
            user_endpoints()  # and named here when one is not an http(s) URL
        except FastMTPError as exc:
            self.settings_message.setText(error_text(exc))

    def add_mirror(self) -> None:
        kind: EndpointKind = "hf" if self.mirror_kind.currentData() == "hf" else "plain"
        try:
            endpoint = add_user_endpoint(kind, self.mirror_url.text().strip())
        except FastMTPError as exc:
            self.settings_message.setText(error_text(exc))
            return
        self.mirror_url.clear()
        self.settings_message.setText(f"Added the mirror {endpoint.url}; downloads try it before the hub.")
        self.refresh_mirrors()

    def remove_mirror(self) -> None:
        item = self.mirror_list.currentItem()
        if item is None:
            self.settings_message.setText("Select a mirror to remove.")
            return
        url = item.text().split("  (")[0]
        remove_user_endpoint(url)
        self.settings_message.setText(f"Removed the mirror {url}.")
        self.refresh_mirrors()

    def save_token(self) -> None:
        token = self.token_edit.text()
        self.token_edit.clear()
        self._keyring_op(lambda _report: secrets.set_token(token), "The token is stored in the system keyring.")

    def clear_token(self) -> None:
        def work(_report: Report) -> None:
            if not secrets.clear_token():
                raise secrets.SecretsError("No token was stored.")

        self._keyring_op(work, "The token was removed from the keyring.")

    def _keyring_op(self, work: Any, done: str) -> None:
        """The keyring may block (an unlock prompt): run it off the GUI thread."""
        self.save_token_button.setEnabled(False)
        self.clear_token_button.setEnabled(False)

        def succeeded(_result: None) -> None:
            self.settings_message.setText(done)
            self.refresh_token_status()

        def failed(exc: Exception) -> None:
            self.settings_message.setText(error_text(exc))
            self.refresh_token_status()

        self.ops.start(work, succeeded, failed)

    def refresh_token_status(self) -> None:
        def shown(status: secrets.TokenStatus) -> None:
            self.save_token_button.setEnabled(status.keyring_available)
            self.clear_token_button.setEnabled(status.keyring_available)
            if status.source == "env":
                text = f"A token is set in {secrets.ENV_VAR}; it wins over the keyring."
            elif status.source == "keyring":
                text = "A token is stored in the keyring."
            elif status.keyring_available:
                text = "No token stored: public repositories need none."
            else:
                text = (f"No keyring is available, so a token cannot be stored safely; set {secrets.ENV_VAR} "
                        "for the app instead.")
            self.token_status.setText(text)

        self.ops.start(lambda _report: secrets.status(), shown, lambda exc: self.token_status.setText(error_text(exc)))

    # ------------------------------------------------------------------ shutdown

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:  # light <-> dark: recolour the advice and the checks
            self.refresh_fit()
            self._recolour_files()
        super().changeEvent(event)

    def _recolour_files(self) -> None:
        for name, row in self._rows.items():
            for column in (F_SIGNATURE, F_SIZE, F_SHA256, F_STATUS):
                item = self.files_table.item(row, column)
                if item is None:
                    continue
                if item.text() == FAILED or (column == F_STATUS and name in self._failed):
                    item.setForeground(bad_colour(self))
                elif item.text() in (OK, "installed"):
                    item.setForeground(good_colour(self))

    def shutdown(self) -> None:
        """Stop the download (its parts are kept for next time) so the window can close promptly."""
        if self.control is not None and self.downloading:
            self.cancel()
