"""The backend page: build tools and GPUs, CPU / CUDA builds with progress and the live log, installed backends.

A build is ``build_backend`` (the same as ``python -m app backend build``) in a background op owned by
this page, so it keeps running while the user looks at another page. Its progress bar follows the
build's events, whose percentages come from ninja's ``[n/N]`` lines while compiling; every log line
goes to the live log. The installed backends are read from the registry: their manifests, the
active one, "Use" (``registry.set_active``) and the self-test in a child process.

When a CUDA build lacks nvcc or cuBLAS and the NVIDIA driver reports a CUDA version, the page offers
the app's own CUDA toolkit: ``cuda_wheels.ensure`` (the same as ``python -m app backend cuda-toolkit
install``) runs as the page's background op, with the same progress, log and Cancel as a build, then
the build tools are detected again.

The other way to a backend is a prebuilt one: ``install_prebuilt`` (the same as ``python -m app backend
install``) checks a signed archive (a file or a URL) against a trusted key, asking about an unknown key
with the trust dialog, self-tests it and installs it, again as the page's background op. Or the page picks
the archive for this machine's GPU and driver from the signed backend feed (``install_from_feed``, the same as
``python -m app backend install --feed``; the catalog's feed URL by default): it says which one and why, or why
none fits, and then offers "Build here" instead. The installed
backends say where each came from: built here, or prebuilt and signed by which key.

The page watches the backends folder, so a backend built or installed anywhere (the first-run panel, a
command in a terminal) appears in the list without a restart. Its content scrolls rather than squeezing
its word-wrapped hints below the height their text needs.

The page composes one widget per group box (``ToolchainBox``, ``GetBackendBox`` with the shared ``JobStrip``,
``InstalledBackends``) and runs the jobs; the widgets' controls are also the page's attributes (``page.log``,
``page.table``, …), as the tests and the first-run panel read them.
"""


from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QEvent, QFileSystemWatcher, Qt, QTimer
from PySide6.QtWidgets import QFileDialog, QFrame, QScrollArea, QVBoxLayout, QWidget

from app.backend import cuda_wheels
from app.backend.builder import BuildOptions, Flavor
from app.backend.events import BuildEvent
from app.backend.feed import FeedInstall, Machine, NoFittingArchive, Selection, install_from_feed
from app.backend.prebuilt import InstalledPrebuilt, install_prebuilt, is_url
from app.backend.registry import BackendManifest
from app.backend.toolchain import Toolchain, detect, toolkit_mode
from app.core import paths
from app.core.cancel import CancelToken
from app.gui.backend import backend_words as words
from app.gui.backend.get_backend_box import GetBackendBox
from app.gui.backend.installed_box import InstalledBackends
from app.gui.backend.toolchain_box import ToolchainBox, ToolkitOffer, ToolkitProgress, toolkit_offer
from app.gui.shell.build_job import BuildJob
from app.gui.shell.install_questions import TrustKeyDialog, TrustQuestion, ask_trust
from app.gui.shell.ops import BackgroundOp, Report
from app.gui.shell.page_ops import OwnedOps, ShutdownWithWindow
from app.gui.shell.status_text import error_text
from app.gui.shell.worker_questions import WorkerQuestions
from app.release.trust import Confirm

REFRESH_DELAY_MS = 150  # a build or an install changes the backends folder a few times in a row: one refresh

T = TypeVar("T")


class BackendPage(QWidget):
    """Build tools, builds, and the installed backends."""

    def __init__(self, build_job: BuildJob | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ops = OwnedOps(self)
        # the window's one build (a page on its own gets one of its own): a build started on the first-run
        # panel shows here too, and none can start beside it
        self.build_job = build_job if build_job is not None else BuildJob(self)
        self._job_lines = 0  # the build job's log lines already in this page's log
        self.toolchain: Toolchain | None = None
        self.toolkit_op: BackgroundOp[cuda_wheels.AppToolkit] | None = None
        self.offer: ToolkitOffer | None = None  # the app's CUDA toolkit, when the page offers it
        self.toolkit: cuda_wheels.AppToolkit | None = None  # the one this page got
        self.cancel_token: CancelToken | None = None
        self.built: BackendManifest | None = None
        self.last_error: Exception | None = None
        self.install_op: BackgroundOp[InstalledPrebuilt] | None = None
        self.installed_prebuilt: InstalledPrebuilt | None = None  # the last prebuilt backend this page installed
        self.trust_dialog: TrustKeyDialog | None = None
        self.feed_op: BackgroundOp[FeedInstall] | None = None
        self.feed_install: FeedInstall | None = None  # the last install from the feed
        self.feed_selection: Selection | None = None  # the last choice the feed made (or why none fits)
        self.feed_machine: Machine | None = None  # None: detect the GPUs and driver (a test or a user may say)
        ShutdownWithWindow(self, self.shutdown)

        self.tools_box = ToolchainBox()
        tools = self.tools_box
        self.tool_labels, self.problems_label = tools.tool_labels, tools.problems_label
        self.toolkit_button, self.toolkit_label = tools.toolkit_button, tools.toolkit_label
        self.toolkit_button.clicked.connect(self.get_cuda_toolkit)
        self.get_box = GetBackendBox()
        box = self.get_box
        self.build_cpu_button, self.build_cuda_button = box.build_cpu_button, box.build_cuda_button
        self.prebuilt_source, self.browse_button, self.install_button = (box.prebuilt_source, box.browse_button,
                                                                         box.install_button)
        self.feed_url, self.feed_button = box.feed_url, box.feed_button
        self.feed_label, self.feed_build_button = box.feed_label, box.feed_build_button
        self.strip = box.strip
        self.step_label, self.progress, self.log = self.strip.step_label, self.strip.progress, self.strip.log
        self.cancel_build_button = self.strip.cancel_button
        self.build_cpu_button.clicked.connect(lambda: self.build("cpu"))
        self.build_cuda_button.clicked.connect(lambda: self.build("cuda"))
        self.cancel_build_button.clicked.connect(self.cancel_build)
        self.prebuilt_source.returnPressed.connect(lambda: self.install_prebuilt())
        self.browse_button.clicked.connect(self.browse_prebuilt)
        self.install_button.clicked.connect(lambda: self.install_prebuilt())
        self.feed_url.returnPressed.connect(lambda: self.install_from_feed())
        self.feed_button.clicked.connect(lambda: self.install_from_feed())
        self.feed_build_button.clicked.connect(lambda: self.build_instead())
        self.installed_box = InstalledBackends(self.ops, lambda: self.building)
        installed = self.installed_box
        self.table, self.details, self.use_button = installed.table, installed.details, installed.use_button
        self.selftest_button, self.selftest_label = installed.selftest_button, installed.selftest_label
        self.copy_json_button = installed.copy_json_button

        content = QWidget()
        # the scroll area sizes the content by heightForWidth at the viewport's width; without an explicit
        # minimum it would also honour the wrapped labels' minimum hints, laid out narrow and far too tall
        content.setMinimumHeight(1)
        layout = QVBoxLayout(content)
        layout.addWidget(self.tools_box)
        layout.addWidget(self.get_box, 1)
        layout.addWidget(self.installed_box)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # wrap, never clip
        self.scroll_area.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll_area)
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(REFRESH_DELAY_MS)
        self._refresh_timer.timeout.connect(lambda: self.refresh_backends())
        self.watcher = QFileSystemWatcher([str(paths.backends_dir())], self)
        self.watcher.directoryChanged.connect(lambda _path: self._refresh_timer.start())
        self.build_job.changed.connect(self._job_changed)
        self.build_job.finished.connect(self._build_done)
        self.build_job.failed.connect(self._build_failed)
        self.refresh_backends()
        self.refresh_toolchain()
        self._job_changed()

    # ------------------------------------------------------------------ toolchain

    def refresh_toolchain(self) -> None:
        """Detect the build tools off the GUI thread (it runs each tool's --version and nvidia-smi)."""
        self.tools_box.detecting()

        def work(_report: Report) -> tuple[Toolchain, ToolkitOffer | None]:
            tools = detect()
            return tools, toolkit_offer(tools, cuda_wheels.driver_cuda_version(), toolkit_mode())

        self.ops.start(work, self._toolchain_detected, lambda exc: self.problems_label.setText(error_text(exc)))

    def _toolchain_detected(self, detected: tuple[Toolchain, ToolkitOffer | None]) -> None:
        tools, self.offer = detected
        self.toolchain = tools
        self.tools_box.show_toolchain(tools, self.offer)
        self._set_building(self.building)

    # ------------------------------------------------------------------ building

    @property
    def building(self) -> bool:
        """A build, getting the CUDA toolkit or installing a prebuilt backend is running (one at a time: they
        share progress, log and Cancel)."""
        return self.build_job.running or any(op is not None and op.running
                                             for op in (self.toolkit_op, self.install_op, self.feed_op))

    def build(self, flavor: Flavor) -> None:
        """Build, self-test, install and activate a backend, as ``python -m app backend build --<flavor>``."""
        if self.building:
            return
        self.built = None
        self.last_error = None
        self.build_job.start(BuildOptions(flavor=flavor))  # _job_changed shows it, here and on every page

    def _job_changed(self) -> None:
        """Show the window's build: its step, elapsed time and estimate, progress, new log lines and Cancel."""
        job = self.build_job
        if not job.running and not job.outcome:
            return
        if job.log_count < self._job_lines or self._job_lines == 0:  # a new build: its log starts afresh
            self.log.clear()
        for line in job.lines_since(self._job_lines):
            self.log.appendPlainText(line.rstrip())
        self._job_lines = job.log_count
        if job.running:
            self.progress.setValue(round(job.percent))
            self.strip.say(words.build_running(job))
            self.cancel_build_button.setText("Cancel build")
            self.cancel_token = None
        elif job.outcome != "built":  # cancelled or failed: nothing was installed, the bar starts again at 0
            self.progress.setValue(0)
        self._set_building(self.building)

    def cancel_build(self) -> None:
        """Cancel the running build, the CUDA toolkit's download and install, or a prebuilt backend's install."""
        if self.build_job.running:
            self.step_label.setText("Cancelling the build…")
            self.cancel_build_button.setEnabled(False)
            self.build_job.cancel()
            return
        if self.cancel_token is not None and self.building:
            getting = self.toolkit_op is not None and self.toolkit_op.running
            installing = any(op is not None and op.running for op in (self.install_op, self.feed_op))
            self.step_label.setText(words.cancelling(getting, installing))
            self.cancel_build_button.setEnabled(False)
            self.cancel_token.cancel()
            if self.trust_dialog is not None:
                self.trust_dialog.reject()  # a pending key question ends as a refusal

    def _set_building(self, building: bool) -> None:
        tools = self.toolchain
        self.build_cpu_button.setEnabled(not building and (tools is None or tools.can_build_cpu))
        self.build_cuda_button.setEnabled(not building and tools is not None and tools.can_build_cuda
                                          and bool(tools.gpus))
        self.cancel_build_button.setEnabled(building)
        self.tools_box.set_offered(self.offer, building)
        self.get_box.set_busy(building)

    # ------------------------------------------------------------------ the app's CUDA toolkit

    def get_cuda_toolkit(self) -> None:
        """Fetch and install the offered CUDA toolkit, as ``python -m app backend cuda-toolkit install``."""
        offer = self.offer
        if self.building or offer is None:
            return
        cancel = self.cancel_token = CancelToken()
        self.toolkit = None
        self.last_error = None
        self.strip.begin(f"Getting the CUDA {offer.cuda} build tools…")
        wheels = len(cuda_wheels.requirements(offer.cuda))

        def work(report: Report) -> cuda_wheels.AppToolkit:
            return cuda_wheels.ensure(offer.cuda, log=ToolkitProgress(report, wheels), cancel=cancel)

        self.toolkit_op = self.ops.start(work, self._toolkit_done, self._toolkit_failed, self._event)
        self.destroyed.connect(lambda *_args: cancel.cancel())  # nothing half-installed is kept
        self.cancel_build_button.setText("Cancel download")
        self._set_building(True)

    def _toolkit_done(self, toolkit: cuda_wheels.AppToolkit) -> None:
        self.toolkit = toolkit
        self.offer = None  # installed: detection decides what is offered next
        self._job_ended(100)
        self.step_label.setText(words.toolkit_ready(toolkit))
        self.log.appendPlainText(f"==> CUDA toolkit {toolkit.nvcc_version} ready in {toolkit.root}")
        self.refresh_toolchain()

    def _toolkit_failed(self, exc: Exception) -> None:
        self._job_ended(0, exc)
        text, bad = words.toolkit_failed(exc)
        self.strip.say(text, bad=bad)

    def _job_ended(self, percent: int | None, error: Exception | None = None) -> None:
        """The toolkit's download or a signed install ended: nothing left to cancel, the other jobs can start, the
        bar at ``percent`` (None: as it is), and ``error`` kept as the page's last one."""
        if error is not None:
            self.last_error = error
        self.cancel_token = None
        self._set_building(False)
        if percent is not None:
            self.progress.setValue(percent)

    def _event(self, value: Any) -> None:
        if not isinstance(value, BuildEvent):
            return
        if value.percent is not None:
            self.progress.setValue(round(value.percent))
        if value.kind in ("step", "done") or (value.kind == "progress" and value.message):
            self.step_label.setText(value.message[:1].upper() + value.message[1:])
        if value.kind in ("step", "log", "done", "error") and value.message.strip():
            prefix = "==> " if value.kind == "step" else ""
            self.log.appendPlainText(prefix + value.message.rstrip())

    def _build_done(self, manifest: BackendManifest) -> None:
        self.built = manifest
        self._set_building(self.building)
        self.progress.setValue(100)
        self.step_label.setText(words.build_done(manifest, self.build_job.elapsed()))
        self.refresh_backends(select=manifest.id)

    def _build_failed(self, exc: Exception) -> None:
        self.last_error = exc
        self._set_building(self.building)
        self.progress.setValue(0)  # never a bar left at 94% by a build that installed nothing (issue 36 item 9)
        text, bad = words.build_failed(exc)
        self.strip.say(text, bad=bad)
        self.refresh_backends()

    # ------------------------------------------------------------------ prebuilt backends

    def browse_prebuilt(self) -> bool:
        """Pick the archive with the file picker; False when the user closed it."""
        path, _filter = QFileDialog.getOpenFileName(self, "Install a prebuilt backend", "",
                                                    "Backend archives (*.tar.xz);;All files (*)")
        if path:
            self.prebuilt_source.setText(path)
        return bool(path)

    def install_prebuilt(self, source: str | None = None) -> None:
        """Check, self-test, install and activate a signed prebuilt backend, as ``python -m app backend install``.

        ``source`` is a file or an http(s) URL; by default the page's field, and the file picker when it is empty.
        """
        if self.building:
            return
        if source is None and not self.prebuilt_source.text().strip() and not self.browse_prebuilt():
            return
        source = (source if source is not None else self.prebuilt_source.text()).strip()
        if not source:
            return
        if not is_url(source) and not Path(source).is_file():
            self.strip.say(words.no_such_file(source), bad=True)
            return
        self.install_op = self._checked_install(
            f"Checking the prebuilt backend {source}…",
            lambda confirm, report, cancel: install_prebuilt(source, confirm=confirm, on_event=report, cancel=cancel),
            self._install_done, self._install_failed)

    def _checked_install(self, message: str, install: Callable[[Confirm, Report, CancelToken], T],
                         on_done: Callable[[T], None], on_failed: Callable[[Exception], None]) -> BackgroundOp[T]:
        """Run a signed install in the background: its key questions are asked here (the worker waits for the
        answer), its progress shows in the page's bar and log, and Cancel (or the page going away) stops it."""
        cancel = self.cancel_token = CancelToken()
        self.installed_prebuilt = None
        self.last_error = None
        self.strip.begin(message)
        questions = WorkerQuestions()

        def work(report: Report) -> T:
            def confirm(repo: str, fingerprint: str) -> bool:
                return questions.ask(TrustQuestion(repo, fingerprint), report).trusted and not cancel.cancelled

            return install(confirm, report, cancel)

        def stop(*_args: object) -> None:
            """The page is gone: nothing half-checked is installed, and a key question cannot be answered."""
            cancel.cancel()
            questions.release()

        op = self.ops.start(work, on_done, on_failed, self._install_progress)
        self.destroyed.connect(stop)
        self.cancel_build_button.setText("Cancel install")
        self._set_building(True)
        return op

    def _install_progress(self, value: Any) -> None:
        if isinstance(value, TrustQuestion):
            self._ask_trust(value)
        elif isinstance(value, Selection):
            self._show_selection(value)
        else:
            self._event(value)

    # ------------------------------------------------------------------ the backend feed

    def install_from_feed(self, url: str | None = None) -> None:
        """Pick the archive for this machine from the signed feed, say which and why, then check, self-test,
        install and activate it, as ``python -m app backend install --feed``; none fits: why, and "Build here"."""
        if self.building:
            return
        url = (url if url is not None else self.feed_url.text()).strip()
        if not url:
            self.get_box.show_feed_text("No backend feed is known. Give the URL of the publisher's signed backend "
                                        "feed.", bad=True)
            return
        machine = self.feed_machine
        self.feed_install = None
        self.feed_selection = None
        self.feed_build_button.hide()
        self.feed_label.hide()
        self.feed_op = self._checked_install(
            f"Reading the backend feed {url}…",
            lambda confirm, report, cancel: install_from_feed(url, machine=machine, confirm=confirm, on_event=report,
                                                              on_selection=report, cancel=cancel),
            self._feed_done, self._feed_failed)

    def _show_selection(self, selection: Selection) -> None:
        """Which archive the feed gave this machine and why; or why none fits, with "Build here" offered."""
        self.feed_selection = selection
        self.get_box.show_selection(selection)

    def build_instead(self) -> None:
        """No prebuilt archive fits: build here, CUDA when this machine can build it, else CPU."""
        tools = self.toolchain
        self.build("cuda" if tools is not None and tools.can_build_cuda and tools.gpus else "cpu")

    def _feed_done(self, got: FeedInstall) -> None:
        self.feed_install = got
        self._show_selection(got.selection)
        self._install_done(got.installed)

    def _feed_failed(self, exc: Exception) -> None:
        if isinstance(exc, NoFittingArchive):
            self._job_ended(None, exc)
            self._show_selection(exc.selection)
            self.step_label.setText(words.nothing_fits(exc.selection))
            return
        self._install_failed(exc)

    def _ask_trust(self, question: TrustQuestion) -> None:
        """The trust dialog for a key seen for the first time; closing it, or Cancel, refuses the key."""
        if self.cancel_token is not None and self.cancel_token.cancelled:
            question.answered.set()
            return
        self.trust_dialog = ask_trust(question, self, self._trust_closed)

    def _trust_closed(self) -> None:
        self.trust_dialog = None

    def _install_done(self, got: InstalledPrebuilt) -> None:
        self.installed_prebuilt = got
        self._job_ended(100)
        self.step_label.setText(words.installed(got))
        self.refresh_backends(select=got.manifest.id)

    def _install_failed(self, exc: Exception) -> None:
        self._job_ended(0, exc)
        text, bad = words.install_failed(exc)
        self.strip.say(text, bad=bad)
        if bad:
            self.log.appendPlainText("error: " + error_text(exc))

    # ------------------------------------------------------------------ installed backends (InstalledBackends)

    @property
    def manifests(self) -> dict[str, BackendManifest]:
        return self.installed_box.manifests

    @property
    def selftest_result(self) -> dict[str, Any] | None:
        """The last self-test run from this page (None: none, or one running)."""
        return self.installed_box.selftest_result

    def refresh_backends(self, select: str | None = None) -> None:
        """Re-read the registry and show every backend, the active one marked (``select``: the row selected)."""
        self.installed_box.refresh_backends(select)

    def selected_id(self) -> str | None:
        return self.installed_box.selected_id()

    def row_texts(self, backend_id: str) -> dict[str, str]:
        """The texts of one backend's row by column name (what a user reads; used by tests)."""
        return self.installed_box.row_texts(backend_id)

    # ------------------------------------------------------------------ shutdown

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:  # light <-> dark: recolour the table
            self.refresh_backends()
        super().changeEvent(event)

    def shutdown(self) -> None:
        """Cancel a running build or install (nothing half-done is ever installed) so the window can close
        promptly; a pending key question ends as a refusal."""
        if self.cancel_token is not None:
            self.cancel_token.cancel()
        if self.trust_dialog is not None:
            self.trust_dialog.reject()
