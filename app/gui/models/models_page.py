"""The models page: the release's quantizations with fit advice, downloads with per-file progress and checks,
and your own model files (``app.gui.models.local_models_panel``: add, scan, verify against the hub, make a sidecar).

Everything slow runs through :mod:`app.gui.shell.ops`: GPU detection, the download (``fetch_release``, the
same sequence as ``python -m app fetch``) and keyring access. The download belongs to this page, not
to a dialog, so it keeps running while the user looks at another page. The first-use key question
of the trust chain comes from the download's worker thread and is answered here by
:class:`~app.gui.shell.install_questions.TrustKeyDialog`; the worker waits for the answer. So does the size
question: once the signed manifest gave the real sizes, a download of ``BIG_DOWNLOAD_BYTES`` or more asks
"Download Q4_K_P: about 15.4 GiB into FOLDER (N free there). Download now?" before any model file is requested.

Each file's row shows its three checks as the core reports them: *signature* (the signed manifest
lists it, which is verified before any payload byte is requested), *size* and *sha256* (computed
while streaming, compared with the signed manifest when the file completes).

The panel's heading names the quantization being fetched and its size. The core's advice is written for
the terminal and the window alike (or names a command); ``window_advice`` chooses this page's words by the
error's ``kind`` ("press Download again", "the Hub token box below"), never by matching the core's sentences
(download_words.py).

The page composes one widget per group box (``QuantsBox``, the download's ``DownloadFiles`` table,
``LocalModelsPanel``, ``MirrorsAndToken``) and runs the download; the widgets' controls are also the page's
attributes (``page.quant_table``, ``page.mirror_list``, …).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.backend.toolchain import Gpu, detect_gpus
from app.core import secrets
from app.core.errors import FastMTPError, VerificationError
from app.core.units import format_bytes
from app.gui.models.download_files import DownloadFiles
from app.gui.models.download_words import download_error_text, human_eta, network_failure_text
from app.gui.models.local_models_panel import LocalModelsPanel
from app.gui.models.mirrors_box import MirrorsAndToken
from app.gui.models.quants_box import QuantsBox
from app.gui.shell.install_questions import SizeQuestion, TrustKeyDialog, TrustQuestion, ask_size, ask_trust
from app.gui.shell.ops import BackgroundOp, Report
from app.gui.shell.page_ops import OwnedOps, ShutdownWithWindow
from app.gui.shell.status_text import bad_colour, error_text
from app.gui.shell.worker_questions import WorkerQuestions
from app.models.fit import FitReport
from app.models.installed import default_destination
from app.release.catalog import Catalog, CatalogFile, endpoints_for, load_catalog
from app.release.download import DownloadDeclined, FetchPlan, fetch_release
from app.release.fetcher import DownloadCancelled, FetchControl, NetworkDownloadError
from app.release.install import Installed
from app.release.progress import FetchEvent
from app.settings import app_settings


@dataclass
class _Step:
    """A step of the fetch sequence (``on_step``), or a warning of the release (``on_warning``), relayed to the GUI
    thread."""

    message: str
    warning: bool = False



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
        context_size = app_settings.fit_context(app_settings.load()) if context_size is None else context_size
        self.ops = OwnedOps(self)
        self.catalog: Catalog = load_catalog()
        self.download_op: BackgroundOp[Installed] | None = None
        self.download_quant = ""
        self.control: FetchControl | None = None
        self.trust_dialog: TrustKeyDialog | None = None
        self.size_box: QMessageBox | None = None  # "Download now?" while it is open
        self.installed: Installed | None = None
        self.last_error: Exception | None = None
        self.paused = False
        self.cancel_requested = False
        ShutdownWithWindow(self, self.shutdown)

        self.quants = QuantsBox(self.catalog, context_size, self.download)
        self.gpu_label, self.vram, self.context = self.quants.gpu_label, self.quants.vram, self.quants.context
        self.quant_table, self.fit_note = self.quants.quant_table, self.quants.fit_note
        self.download_buttons = self.quants.download_buttons
        self.mirrors = MirrorsAndToken(self.ops)
        mirrors = self.mirrors
        self.mirror_list, self.mirror_kind = mirrors.mirror_list, mirrors.mirror_kind
        self.mirror_url = mirrors.mirror_url
        self.add_mirror_button, self.remove_mirror_button = mirrors.add_mirror_button, mirrors.remove_mirror_button
        self.token_edit, self.token_status = mirrors.token_edit, mirrors.token_status
        self.save_token_button, self.clear_token_button = mirrors.save_token_button, mirrors.clear_token_button
        self.settings_message = mirrors.settings_message
        content = QWidget()
        column = QVBoxLayout(content)
        column.addWidget(self.quants)
        column.addWidget(self._build_download_group(), 1)
        self.local = LocalModelsPanel()  # your own GGUF files: add, scan, verify, make their FastMTP sidecar
        column.addWidget(self.local)
        column.addWidget(self.mirrors)
        scroll = QScrollArea()  # the window may be shorter than the page: scroll, never squash
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self.quants.refresh_fit()
        mirrors.refresh_mirrors()
        mirrors.refresh_token_status()
        if detect_gpu:
            self.ops.start(lambda _report: detect_gpus(), self.quants.gpus_detected, self.quants.gpu_detection_failed)

    # ------------------------------------------------------------------ layout

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
        self.files_table = DownloadFiles()
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

    # ------------------------------------------------------------------ fit advice (QuantsBox)

    @property
    def gpus(self) -> list[Gpu]:
        return self.quants.gpus

    @property
    def report(self) -> FitReport | None:
        """The fit advice shown."""
        return self.quants.report

    def set_context_size(self, tokens: int) -> None:
        """The app settings' context size changed: the advice follows it."""
        self.quants.set_context_size(tokens)

    def refresh_fit(self) -> None:
        self.quants.refresh_fit()

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
        self.files_table.start_over()
        self.total_bar.setValue(0)
        self.total_label.setText("")
        self._set_title(f"Downloading {self._sized(quant)}…")
        self._set_step("Fetching the release's signed integrity files first.")
        self._set_running(True)

        questions = WorkerQuestions()  # a Cancel ends a question's wait (the dialog closes too)
        control.add_listener(lambda change: questions.release() if change == "cancelled" else None)

        def work(report: Report) -> Installed:
            def confirm(repo: str, fingerprint: str) -> bool:
                return questions.ask(TrustQuestion(repo, fingerprint), report).trusted and not control.cancelled

            def confirm_size(needed: int, dest: Path, free: int) -> bool:
                question = questions.ask(SizeQuestion(quant, needed, dest, free), report)
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
        self.files_table.show_event(event)

    @property
    def _rows(self) -> dict[str, int]:
        """The download's files and their rows (``DownloadFiles.rows``)."""
        return self.files_table.rows

    def file_row(self, name: str) -> dict[str, str]:
        """The texts of one file's row by column name (what a user reads; used by tests and screenshots)."""
        return self.files_table.file_row(name)

    def _download_done(self, installed: Installed) -> None:
        self.installed = installed
        self.control = None
        self._set_running(False)
        self.total_bar.setValue(1000)
        self.total_label.setText("")
        self.files_table.all_installed()
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
        files = self.files_table
        if isinstance(exc, VerificationError) and exc.file in files.rows and exc.file not in files.failed:
            files.mark_failed(exc.file, exc.message, exc.kind)  # the file the check failed on, as the core names it
        self.total_label.setText("")
        self._set_title(f"{self.download_quant}: the download failed")
        if isinstance(exc, NetworkDownloadError):  # in words; the mirror's URL and the exception in the tooltip
            self._set_step("Nothing was installed. " + network_failure_text(exc), error=True, detail=exc.detail)
            return
        self._set_step("Nothing was installed. " + download_error_text(exc), error=True)

    # ------------------------------------------------------------------ shutdown

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:  # light <-> dark: recolour the advice and the checks
            self.quants.refresh_fit()
            self.files_table.recolour()
        super().changeEvent(event)

    def shutdown(self) -> None:
        """Stop the download (its parts are kept for next time) so the window can close promptly."""
        if self.control is not None and self.downloading:
            self.cancel()
