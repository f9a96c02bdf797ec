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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCore import QEvent, QFileSystemWatcher, Qt, QTimer
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend import archive, cuda_wheels, feed, registry
from app.backend.build_estimate import duration_words
from app.backend.builder import BuildOptions, Flavor, run_selftest_subprocess
from app.backend.events import BuildEvent, EventKind
from app.backend.feed import FeedInstall, Machine, NoFittingArchive, Selection, install_from_feed
from app.backend.prebuilt import InstalledPrebuilt, install_prebuilt, is_url
from app.backend.registry import BackendManifest
from app.backend.toolchain import Tool, Toolchain, ToolkitMode, detect, toolkit_mode
from app.core import paths
from app.core.cancel import CancelToken
from app.core.errors import BuildCancelled, FastMTPError, ToolchainError, VerificationError
from app.gui.models.trust_dialog import TrustKeyDialog, TrustQuestion, ask_trust
from app.gui.shell.build_job import BuildJob
from app.gui.shell.ops import BackgroundOp, Report
from app.gui.shell.page_ops import OwnedOps, ShutdownWithWindow, bad_colour, error_text, good_colour
from app.release.catalog import CatalogError, backend_feed_url
from app.release.trust import Confirm

LOG_LINES = 5000  # the live log keeps this many lines; the build's own log stays in the build tree

# installed backends table columns
(B_ID, B_FLAVOR, B_PATCH, B_SELFTEST, B_ORIGIN, B_BUILT, B_ACTIVE) = range(7)
COLUMNS = ["id", "flavor", "patch", "selftest", "origin", "built", "active"]
REFRESH_DELAY_MS = 150  # a build or an install changes the backends folder a few times in a row: one refresh

TOOLKIT_BUTTON = "Get the CUDA build tools (about 530 MB download)"
# FASTMTP_CUDA_TOOLKIT=app on a machine without a driver: build for another machine with CUDA 13.0, the
# oldest CUDA 13 (a backend built with it runs on every CUDA 13 driver)
OTHER_MACHINE_CUDA = "13.0"


def _tool_text(tool: Tool | None, missing: str = "not found") -> str:
    return f"{tool.version}  ({tool.path})" if tool is not None else missing


def wrapping_label(text: str = "") -> QLabel:
    """A label that wraps and asks its layout for the height its wrapped text needs at the given width."""
    label = QLabel(text)
    label.setWordWrap(True)
    policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    policy.setHeightForWidth(True)
    label.setSizePolicy(policy)
    return label


T = TypeVar("T")


@dataclass(frozen=True)
class ToolkitOffer:
    """The app's own CUDA toolkit, offered on the page: for which CUDA version, and why that one."""

    cuda: str  # the CUDA version to fetch the wheels for ("13.0")
    from_driver: bool  # the driver's version; False: FASTMTP_CUDA_TOOLKIT=app without a driver

    def text(self) -> str:
        """The one line under the button: what it does."""
        major = self.cuda.split(".")[0]
        target = (f"for the driver's CUDA {self.cuda}" if self.from_driver else
                  f"for CUDA {self.cuda} (no NVIDIA driver found here: {cuda_wheels.TOOLKIT_ENV}=app, "
                  "to build for another machine)")
        return (f"Downloads NVIDIA's CUDA {major} compiler (nvcc) and cuBLAS as pip wheels into the app's cache, "
                f"{target}; nothing is installed system-wide.")


def toolkit_offer(tools: Toolchain, driver_cuda: str | None, mode: ToolkitMode) -> ToolkitOffer | None:
    """Whether the page offers to get the app's CUDA toolkit (None: not offered).

    Offered when the toolchain lacks nvcc or cuBLAS, the app's toolkit for that CUDA version is not
    installed, and there is something to build for: the driver reports a CUDA version, or
    ``FASTMTP_CUDA_TOOLKIT=app`` asks for the app's toolkit anyway (then for CUDA 13.0). Never with
    ``FASTMTP_CUDA_TOOLKIT=system`` (the app's toolkit would not be used), nor for a CUDA version the
    app knows no wheels for (the problems line says to install the toolkit). Reads the cache folder.
    """
    if (tools.nvcc is not None and tools.cublas is not None) or mode == "system":
        return None
    cuda = driver_cuda if driver_cuda is not None else OTHER_MACHINE_CUDA if mode == "app" else None
    if cuda is None:
        return None  # no driver, no GPU: nothing to build CUDA for
    try:
        cuda_wheels.requirements(cuda)
    except ToolchainError:
        return None
    if cuda_wheels.read_toolkit(cuda_wheels.toolkit_dir(cuda)) is not None:
        return None
    return ToolkitOffer(cuda, from_driver=driver_cuda is not None)


def _short_wheel(name: str) -> str:
    """``nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl`` -> ``nvidia_cublas-13.0.2.14``."""
    parts = name.split("-")
    return "-".join(parts[:2]) if name.endswith(".whl") and len(parts) >= 5 else name


class ToolkitProgress:
    """Turns ``cuda_wheels.ensure``'s log lines into the page's build events: every line for the log, and
    the step text and the bar from the lines that mark progress (ours, and pip's Downloading, Processing and
    Installing lines)."""

    def __init__(self, report: Report, wheels: int) -> None:
        self._report = report
        self._wheels = max(wheels, 1)
        self._started = 0  # wheel downloads pip has begun
        self._installing = False

    def _emit(self, kind: EventKind, message: str, percent: float | None = None) -> None:
        self._report(BuildEvent(kind, message, percent, "cuda-toolkit"))

    def __call__(self, line: str) -> None:
        text = line.strip()
        if line.startswith("downloading "):  # ours, one per pip run: the requirements it downloads
            self._emit("step", line, 2.0 + 78.0 * self._started / self._wheels)
        elif "already holds every" in line or line.startswith("installing "):
            self._installing = True
            self._emit("step", line, 80.0)
        elif not self._installing and (text.startswith("Downloading ") or text.startswith("Processing ")):
            # pip: "Downloading <wheel> (420.9 MB)" from an index; "Processing <path>" from a file:// one
            self._emit("log", line)
            wheel, _, size = text.split(" ", 1)[1].partition(" (")
            name = _short_wheel(wheel.rsplit("/", 1)[-1])
            self._emit("progress", f"Downloading {name} ({size}…" if size else f"Downloading {name}…",
                       2.0 + 78.0 * self._started / self._wheels)
            self._started += 1
        elif text.startswith("Installing collected packages"):
            self._emit("log", line)
            self._emit("progress", "Unpacking the wheels (about 840 MB)…", 85.0)
        elif text.startswith("Successfully installed"):
            self._emit("log", line)
            self._emit("progress", "Checking that the toolkit is complete and nvcc runs…", 95.0)
        else:
            self._emit("log", line)


def selftest_summary(result: dict[str, Any]) -> str:
    """One plain sentence about a self-test result (the manifest's or a fresh one)."""
    if not result:
        return "not run"
    if not result.get("ok"):
        return f"FAILED: {result.get('error', 'no result')}"
    parts = [f"passed in {result.get('seconds', '?')} s"]
    agreement = result.get("greedy_table_agreement")
    if isinstance(agreement, int | float):
        parts.append(f"greedy decoding follows the demo table on {agreement:.0%} of steps")
    d2t = result.get("d2t")
    if isinstance(d2t, dict):
        parts.append("d2t sidecar loads, draft logits match the full sidecar" if d2t.get("loaded")
                     else "d2t sidecar refused, as an unpatched build must")
    parts.append("GPU offload" if result.get("gpu_offload") else "CPU only")
    return "; ".join(parts)


def manifest_text(manifest: BackendManifest, origin: str) -> str:
    """A backend's manifest as labelled lines a person reads (the JSON stays one click away: "Copy as JSON")."""
    flavor = "CPU" if manifest.flavor != "cuda" else (
        f"CUDA {manifest.cuda_version or '?'} for " + (feed.sm(manifest.cuda_archs) or "?"))
    built = manifest.built_at.replace("T", " ").split("+")[0] if manifest.built_at else "?"
    rows = [("Backend", manifest.id), ("Origin", origin), ("Flavour", flavor),
            ("Source", f"llama-cpp-python {manifest.llama_cpp_python_version} (llama.cpp "
                       f"{manifest.llama_cpp_commit}), sha256 {manifest.sdist_sha256}"),
            ("d2t patch", f"{manifest.patch_name} (sha256 {manifest.patch_sha256})" if manifest.patch_name
             else "none: this build refuses the d2t sidecar"),
            ("Built", f"{built} UTC in {manifest.build_seconds:.0f} s with {manifest.compiler}"),
            ("Self-test", selftest_summary(manifest.selftest)),
            ("CMake", " ".join(manifest.cmake_args))]
    if manifest.cpu_variants:
        rows.append(("CPU modules", ", ".join(manifest.cpu_variants)))
    width = max(len(label) for label, _value in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


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
        self.selftest_op: BackgroundOp[dict[str, Any]] | None = None
        self.cancel_token: CancelToken | None = None
        self.built: BackendManifest | None = None
        self.last_error: Exception | None = None
        self.selftest_result: dict[str, Any] | None = None  # the last self-test run from this page ...
        self.selftest_of: str | None = None  # ... and the backend it tested
        self.install_op: BackgroundOp[InstalledPrebuilt] | None = None
        self.installed_prebuilt: InstalledPrebuilt | None = None  # the last prebuilt backend this page installed
        self.trust_dialog: TrustKeyDialog | None = None
        self.feed_op: BackgroundOp[FeedInstall] | None = None
        self.feed_install: FeedInstall | None = None  # the last install from the feed
        self.feed_selection: Selection | None = None  # the last choice the feed made (or why none fits)
        self.feed_machine: Machine | None = None  # None: detect the GPUs and driver (a test or a user may say)
        ShutdownWithWindow(self, self.shutdown)
        self.manifests: dict[str, BackendManifest] = {}

        content = QWidget()
        # the scroll area sizes the content by heightForWidth at the viewport's width; without an explicit
        # minimum it would also honour the wrapped labels' minimum hints, laid out narrow and far too tall
        content.setMinimumHeight(1)
        layout = QVBoxLayout(content)
        layout.addWidget(self._build_toolchain_group())
        layout.addWidget(self._build_build_group(), 1)
        layout.addWidget(self._build_installed_group())
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

    # ------------------------------------------------------------------ layout

    def _build_toolchain_group(self) -> QGroupBox:
        group = QGroupBox("Build tools and GPUs")
        self.tool_labels: dict[str, QLabel] = {}
        form = QFormLayout(group)
        for key, title in (("cmake", "CMake"), ("ninja", "Ninja"), ("c_compiler", "C compiler"),
                           ("cxx_compiler", "C++ compiler"), ("nvcc", "CUDA compiler"), ("cublas", "cuBLAS"),
                           ("ccache", "ccache"), ("gpus", "NVIDIA GPUs")):
            label = wrapping_label("…")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.tool_labels[key] = label
            form.addRow(title, label)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self.problems_label = wrapping_label()  # why a build is not possible (e.g. no nvcc or cuBLAS for CUDA)
        form.addRow(self.problems_label)
        self.toolkit_button = QPushButton(TOOLKIT_BUTTON)
        self.toolkit_button.clicked.connect(self.get_cuda_toolkit)
        self.toolkit_label = wrapping_label()  # under the button, the full width: it never squeezes beside it
        offer = QHBoxLayout()
        offer.addWidget(self.toolkit_button)
        offer.addStretch(1)
        form.addRow(offer)
        form.addRow(self.toolkit_label)
        self.toolkit_button.hide()  # until the toolchain says it is wanted
        self.toolkit_label.hide()
        return group

    @staticmethod
    def _heading(text: str) -> QLabel:
        label = QLabel(text)
        font = label.font()
        font.setWeight(QFont.Weight.DemiBold)
        label.setFont(font)
        return label

    def _build_build_group(self) -> QGroupBox:
        group = QGroupBox("Get a backend")
        self.build_cpu_button = QPushButton("Build CPU backend")
        self.build_cpu_button.clicked.connect(lambda: self.build("cpu"))
        self.build_cuda_button = QPushButton("Build CUDA backend")
        self.build_cuda_button.clicked.connect(lambda: self.build("cuda"))
        self.cancel_build_button = QPushButton("Cancel build")
        self.cancel_build_button.clicked.connect(self.cancel_build)
        buttons = QHBoxLayout()
        buttons.addWidget(self.build_cpu_button)
        buttons.addWidget(self.build_cuda_button)
        buttons.addStretch(1)
        self.prebuilt_source = QLineEdit()
        self.prebuilt_source.setPlaceholderText("a backend archive (.tar.xz) or its https:// URL")
        self.prebuilt_source.returnPressed.connect(lambda: self.install_prebuilt())
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self.browse_prebuilt)
        self.install_button = QPushButton("Install a prebuilt backend…")
        self.install_button.clicked.connect(lambda: self.install_prebuilt())
        prebuilt = QHBoxLayout()
        prebuilt.addWidget(self.prebuilt_source, 1)
        prebuilt.addWidget(self.browse_button)
        prebuilt.addWidget(self.install_button)
        self.feed_url = QLineEdit(self._default_feed_url())
        self.feed_url.setPlaceholderText("the signed backend feed's https:// URL")
        self.feed_url.returnPressed.connect(lambda: self.install_from_feed())
        self.feed_button = QPushButton("Install the one for this machine")
        self.feed_button.setToolTip("Picks the archive for this machine's NVIDIA GPU and driver (or the CPU one) "
                                    "from the publisher's signed list of prebuilt backends")
        self.feed_button.clicked.connect(lambda: self.install_from_feed())
        feed_row = QHBoxLayout()
        feed_row.addWidget(QLabel("From the feed:"))
        feed_row.addWidget(self.feed_url, 1)
        feed_row.addWidget(self.feed_button)
        self.feed_label = wrapping_label()  # which archive the feed gave and why, or why none fits
        self.feed_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.feed_label.hide()
        self.feed_build_button = QPushButton("Build here")  # offered when no prebuilt archive fits
        self.feed_build_button.clicked.connect(lambda: self.build_instead())
        self.feed_build_button.hide()
        feed_fallback = QHBoxLayout()
        feed_fallback.addWidget(self.feed_build_button)
        feed_fallback.addStretch(1)
        self.step_label = wrapping_label("The first build takes a few minutes; later builds with the same inputs "
                                         "reuse the cached build tree and take seconds.")
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setValue(0)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setPlaceholderText("The build log appears here.")
        self.log.setMinimumHeight(110)
        status = QHBoxLayout()
        status.addWidget(self.progress, 1)
        status.addWidget(self.cancel_build_button)
        box = QVBoxLayout(group)
        box.addWidget(self._heading("Build here"))
        box.addWidget(wrapping_label("Compiles llama.cpp with the FastMTP d2t patch on this machine, from the "
                                     "pinned, hash-checked source; needs the build tools above."))
        box.addLayout(buttons)
        box.addWidget(self._heading("Install a prebuilt backend"))
        box.addWidget(wrapping_label("Built elsewhere, packed and signed by its publisher: the signature is checked "
                                     "against a trusted publisher key, then the archive's sha256 and what it "
                                     "holds; nothing is installed unless every check passes."))
        box.addLayout(feed_row)
        box.addWidget(self.feed_label)
        box.addLayout(feed_fallback)
        box.addWidget(wrapping_label("Or a given archive, a file or its URL:"))
        box.addLayout(prebuilt)
        box.addWidget(wrapping_label("Either way, the backend's self-test runs on this machine before it is "
                                     "used."))
        box.addWidget(self.step_label)
        box.addLayout(status)
        box.addWidget(self.log, 1)
        self.build_cuda_button.setEnabled(False)  # until the toolchain says CUDA can be built
        self.cancel_build_button.setEnabled(False)
        return group

    def _build_installed_group(self) -> QGroupBox:
        group = QGroupBox("Installed backends")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(["Backend", "Flavor", "d2t patch", "Self-test", "Origin", "Built", ""])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(150)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.details.setMaximumHeight(140)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setPlaceholderText("Select a backend to see its manifest.")
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self._details_json = ""  # the selected backend's manifest as JSON, for "Copy as JSON"
        self.copy_json_button = QPushButton("Copy as JSON")
        self.copy_json_button.setToolTip("The selected backend's manifest, as `python -m app backend list --json` "
                                         "gives it, for a bug report")
        self.copy_json_button.clicked.connect(lambda: QApplication.clipboard().setText(self._details_json))
        self.use_button = QPushButton("Use")
        self.use_button.clicked.connect(self.use_selected)
        self.selftest_button = QPushButton("Run self-test")
        self.selftest_button.clicked.connect(self.selftest_selected)
        self.selftest_label = wrapping_label()
        buttons = QHBoxLayout()
        buttons.addWidget(self.selftest_label, 1)
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.selftest_button)
        buttons.addWidget(self.copy_json_button)
        box = QVBoxLayout(group)
        box.addWidget(self.table)
        box.addWidget(self.details)
        box.addLayout(buttons)
        return group

    # ------------------------------------------------------------------ toolchain

    def refresh_toolchain(self) -> None:
        """Detect the build tools off the GUI thread (it runs each tool's --version and nvidia-smi)."""
        for label in self.tool_labels.values():
            label.setText("…")

        def work(_report: Report) -> tuple[Toolchain, ToolkitOffer | None]:
            tools = detect()
            return tools, toolkit_offer(tools, cuda_wheels.driver_cuda_version(), toolkit_mode())

        self.ops.start(work, self._toolchain_detected, lambda exc: self.problems_label.setText(error_text(exc)))

    def _toolchain_detected(self, detected: tuple[Toolchain, ToolkitOffer | None]) -> None:
        tools, self.offer = detected
        self.toolchain = tools
        labels = self.tool_labels
        labels["cmake"].setText(_tool_text(tools.cmake))
        labels["ninja"].setText(_tool_text(tools.ninja))
        labels["c_compiler"].setText(_tool_text(tools.c_compiler))
        labels["cxx_compiler"].setText(_tool_text(tools.cxx_compiler))
        app_toolkit = tools.cuda_toolkit is not None and tools.cuda_toolkit.source == "app"
        labels["nvcc"].setText(_tool_text(tools.nvcc, "not found (CPU builds only)")
                               + (", the app's own CUDA toolkit (NVIDIA's pip wheels)" if app_toolkit else ""))
        labels["cublas"].setText(f"{tools.cublas.lib_dir}{' (pip wheel)' if tools.cublas.from_wheel else ''}"
                                 if tools.cublas else "not found")
        labels["ccache"].setText(_tool_text(tools.ccache, "not found (optional: faster rebuilds)"))
        labels["gpus"].setText(", ".join(f"{g.name} (compute {g.compute_capability}, {g.memory_mib} MiB)"
                                         for g in tools.gpus) or "none found")
        problems = tools.problems(cuda=tools.nvcc is not None)
        if self.offer is not None and tools.nvcc is None:
            problems.append("The CUDA compiler nvcc and cuBLAS were not found, so only the CPU backend can be built: "
                            "the button below gets them.")
        if not tools.gpus and tools.can_build_cuda:
            problems.append("No NVIDIA GPU was found, so the CUDA architecture is unknown: build the CPU backend "
                            "here, or use `python -m app backend build --cuda --cuda-arch 89` for another machine.")
        self.problems_label.setText("\n".join(problems) if problems else "Everything needed is there.")
        self.problems_label.setStyleSheet(f"color: {bad_colour(self).name()};" if not tools.can_build_cpu else "")
        if self.offer is not None:
            self.toolkit_label.setText(self.offer.text())
            self.toolkit_label.setToolTip(str(cuda_wheels.toolkit_dir(self.offer.cuda)))
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
            left = job.remaining()
            self.step_label.setStyleSheet("")
            self.step_label.setText(f"Building the {job.flavor.upper()} backend: {job.step_text} · "
                                    f"{duration_words(job.elapsed())} elapsed"
                                    + (f" · about {duration_words(left)} left" if left is not None else ""))
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
            self.step_label.setText("Cancelling the CUDA build tools…" if getting else
                                    "Cancelling the install…" if installing else "Cancelling the build…")
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
        self.toolkit_button.setVisible(self.offer is not None)
        self.toolkit_label.setVisible(self.offer is not None)
        self.toolkit_button.setEnabled(not building and self.offer is not None)
        for widget in (self.prebuilt_source, self.browse_button, self.install_button, self.feed_url,
                       self.feed_button, self.feed_build_button):
            widget.setEnabled(not building)

    # ------------------------------------------------------------------ the app's CUDA toolkit

    def get_cuda_toolkit(self) -> None:
        """Fetch and install the offered CUDA toolkit, as ``python -m app backend cuda-toolkit install``."""
        offer = self.offer
        if self.building or offer is None:
            return
        cancel = self.cancel_token = CancelToken()
        self.toolkit = None
        self.last_error = None
        self.log.clear()
        self.progress.setValue(0)
        self.step_label.setStyleSheet("")
        self.step_label.setText(f"Getting the CUDA {offer.cuda} build tools…")
        wheels = len(cuda_wheels.requirements(offer.cuda))

        def work(report: Report) -> cuda_wheels.AppToolkit:
            return cuda_wheels.ensure(offer.cuda, log=ToolkitProgress(report, wheels), cancel=cancel)

        self.toolkit_op = self.ops.start(work, self._toolkit_done, self._toolkit_failed, self._event)
        self.destroyed.connect(lambda *_args: cancel.cancel())  # nothing half-installed is kept
        self.cancel_build_button.setText("Cancel download")
        self._set_building(True)

    def _toolkit_done(self, toolkit: cuda_wheels.AppToolkit) -> None:
        self.toolkit = toolkit
        self.cancel_token = None
        self.offer = None  # installed: detection decides what is offered next
        self._set_building(False)
        self.progress.setValue(100)
        self.step_label.setText(f"The CUDA {toolkit.cuda} build tools (nvcc {toolkit.nvcc_version} and cuBLAS) are "
                                f"in the app's cache, {toolkit.root}; nothing was installed system-wide. "
                                "CUDA builds use them.")
        self.log.appendPlainText(f"==> CUDA toolkit {toolkit.nvcc_version} ready in {toolkit.root}")
        self.refresh_toolchain()

    def _toolkit_failed(self, exc: Exception) -> None:
        self.last_error = exc
        self.cancel_token = None
        self._set_building(False)
        self.progress.setValue(0)
        if isinstance(exc, BuildCancelled):
            self.step_label.setText("Cancelled; no CUDA toolkit was installed. Wheels that finished downloading "
                                    "stay in the app's cache, so getting them again continues from there.")
        else:
            self.step_label.setText("Getting the CUDA build tools failed; nothing was installed. " + error_text(exc))
            self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};")

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
        self.step_label.setText(f"Backend {manifest.id} built, self-tested and active "
                                f"({duration_words(self.build_job.elapsed())}).")
        self.refresh_backends(select=manifest.id)

    def _build_failed(self, exc: Exception) -> None:
        self.last_error = exc
        self._set_building(self.building)
        self.progress.setValue(0)  # never a bar left at 94% by a build that installed nothing (issue 36 item 9)
        if isinstance(exc, BuildCancelled):
            self.step_label.setText("Build cancelled; nothing was installed. Building again resumes from the "
                                    "cached build tree.")
        else:
            self.step_label.setText("The build failed; nothing was installed. " + error_text(exc))
            self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};")
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
            self.step_label.setText(f"There is no file at {source}. Pick the backend archive (.tar.xz) with "
                                    "Browse…, or give its https:// URL.")
            self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};")
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
        self.log.clear()
        self.progress.setValue(0)
        self.step_label.setStyleSheet("")
        self.step_label.setText(message)
        asked: list[TrustQuestion] = []

        def work(report: Report) -> T:
            def confirm(repo: str, fingerprint: str) -> bool:
                question = TrustQuestion(repo, fingerprint)
                asked.append(question)
                report(question)
                question.answered.wait()
                return question.trusted and not cancel.cancelled

            return install(confirm, report, cancel)

        def stop(*_args: object) -> None:
            """The page is gone: nothing half-checked is installed, and a key question cannot be answered."""
            cancel.cancel()
            for question in asked:
                question.answered.set()

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

    @staticmethod
    def _default_feed_url() -> str:
        """The catalog's feed (``FASTMTP_BACKEND_FEED_URL`` replaces it); empty when there is none."""
        try:
            return backend_feed_url()
        except CatalogError:
            return ""

    def install_from_feed(self, url: str | None = None) -> None:
        """Pick the archive for this machine from the signed feed, say which and why, then check, self-test,
        install and activate it, as ``python -m app backend install --feed``; none fits: why, and "Build here"."""
        if self.building:
            return
        url = (url if url is not None else self.feed_url.text()).strip()
        if not url:
            self._show_feed_text("No backend feed is known. Give the URL of the publisher's signed backend feed.",
                                 bad=True)
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

    def _show_feed_text(self, text: str, *, bad: bool = False) -> None:
        self.feed_label.setText(text)
        self.feed_label.setStyleSheet(f"color: {bad_colour(self).name()};" if bad else "")
        self.feed_label.show()

    def _show_selection(self, selection: Selection) -> None:
        """Which archive the feed gave this machine and why; or why none fits, with "Build here" offered."""
        self.feed_selection = selection
        chosen = selection.archive
        if chosen is None:
            self._show_feed_text(f"No prebuilt backend fits this machine ({selection.machine.describe()}): "
                                 f"{selection.reason} Build here instead: it compiles the backend for this machine.")
            self.feed_build_button.show()
        else:
            self._show_feed_text(f"Picked {chosen.name} ({chosen.label()}) for this machine "
                                 f"({selection.machine.describe()}). {selection.reason}")
            self.feed_build_button.hide()
        self.feed_label.setToolTip("\n".join(selection.passed_over))

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
            self.last_error = exc
            self.cancel_token = None
            self._set_building(False)
            self._show_selection(exc.selection)
            self.step_label.setText(f"No prebuilt backend fits this machine: {exc.selection.reason} Nothing was "
                                    "downloaded or installed; the active backend is unchanged. Build here instead.")
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
        self.cancel_token = None
        self._set_building(False)
        self.progress.setValue(100)
        signer = ("Publisher-signed: the key that signed it ships with the app" if got.publisher_signed else
                  "Signed by a key you trusted, not one shipped with the app")
        self.step_label.setText(f"Prebuilt backend {got.manifest.id} is installed"
                                f"{' and active' if got.active else ''}. {signer} ({got.origin.fingerprint}, "
                                f"for {got.origin.repo}). Its self-test passed on this machine.")
        self.refresh_backends(select=got.manifest.id)

    def _install_failed(self, exc: Exception) -> None:
        self.last_error = exc
        self.cancel_token = None
        self._set_building(False)
        self.progress.setValue(0)
        if isinstance(exc, BuildCancelled):
            self.step_label.setText("Install cancelled; nothing was installed.")
            return
        refused = "Refused" if isinstance(exc, VerificationError) else "The install failed"
        self.step_label.setText(f"{refused}: nothing was installed and the active backend is unchanged. "
                                + error_text(exc))
        self.step_label.setStyleSheet(f"color: {bad_colour(self).name()};")
        self.log.appendPlainText("error: " + error_text(exc))

    # ------------------------------------------------------------------ installed backends

    def refresh_backends(self, select: str | None = None) -> None:
        """Re-read the registry (small JSON files) and show every backend, the active one marked."""
        if not self.building:
            registry.cleanup_stale_staging()
        backends = registry.list_backends()
        active = registry.active_id()
        selected = select or self.selected_id() or active
        self.manifests = {m.id: m for m in backends}
        self.table.setRowCount(len(backends))
        for row, manifest in enumerate(backends):
            origin = archive.read_origin(registry.backend_dir(manifest.id))
            cells = [manifest.id, manifest.flavor + (f" {feed.sm(manifest.cuda_archs)}" if manifest.cuda_archs else ""),
                     "yes" if manifest.patched else "no (cannot load d2t sidecars)",
                     "ok" if manifest.selftest_ok else "FAILED", archive.origin_label(origin),
                     manifest.built_at.replace("T", " ")[:19], "● active" if manifest.id == active else ""]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == B_SELFTEST:
                    item.setForeground(good_colour(self) if manifest.selftest_ok else bad_colour(self))
                if column == B_ORIGIN:
                    item.setToolTip(origin.describe() if origin is not None else "built on this machine")
                self.table.setItem(row, column, item)
        ids = [m.id for m in backends]
        if selected in ids:
            self.table.selectRow(ids.index(selected))
        self._selection_changed()

    def selected_id(self) -> str | None:
        rows = {index.row() for index in self.table.selectionModel().selectedRows()}
        if not rows:
            return None
        item = self.table.item(min(rows), B_ID)
        return item.text() if item is not None else None

    def row_texts(self, backend_id: str) -> dict[str, str]:
        """The texts of one backend's row by column name (what a user reads; used by tests)."""
        for row in range(self.table.rowCount()):
            texts = [item.text() if (item := self.table.item(row, column)) is not None else ""
                     for column in range(len(COLUMNS))]
            if texts[B_ID] == backend_id:
                return dict(zip(COLUMNS, texts, strict=True))
        raise KeyError(backend_id)

    def _selection_changed(self) -> None:
        backend_id = self.selected_id()
        manifest = self.manifests.get(backend_id) if backend_id else None
        busy = self.selftest_op is not None and self.selftest_op.running
        self.use_button.setEnabled(manifest is not None and manifest.id != registry.active_id())
        self.selftest_button.setEnabled(manifest is not None and not busy)
        self.copy_json_button.setEnabled(manifest is not None)
        if manifest is None:
            self.details.clear()
            self._details_json = ""
            return
        origin = archive.describe_origin(registry.backend_dir(manifest.id))
        self.details.setPlainText(manifest_text(manifest, origin))
        self._details_json = json.dumps({"origin": origin, **manifest.to_dict()}, indent=2)
        if busy:
            return
        if self.selftest_result is not None and self.selftest_of == manifest.id:
            self.selftest_label.setText(f"Self-test of {manifest.id}: {selftest_summary(self.selftest_result)}")
        else:
            when = "at build time" if archive.read_origin(registry.backend_dir(manifest.id)) is None else \
                "when it was installed here"
            self.selftest_label.setText(f"Self-test {when}: {selftest_summary(manifest.selftest)}")

    def use_selected(self) -> None:
        backend_id = self.selected_id()
        if backend_id is None:
            return
        try:
            registry.set_active(backend_id)
        except FastMTPError as exc:
            self.selftest_label.setText(error_text(exc))
            return
        self.refresh_backends(select=backend_id)
        self.selftest_label.setText(f"{backend_id} is the active backend now; the next model load uses it.")

    def selftest_selected(self) -> None:
        """Run the self-test again in a child process (a native crash cannot take the window down)."""
        backend_id = self.selected_id()
        if backend_id is None or (self.selftest_op is not None and self.selftest_op.running):
            return
        folder = registry.backend_dir(backend_id)
        self.selftest_result = None
        self.selftest_label.setText(f"Self-testing {backend_id}…")
        self.selftest_button.setEnabled(False)

        self.selftest_of = backend_id

        def done(result: dict[str, Any]) -> None:
            self.selftest_result = result
            self._selection_changed()

        def failed(exc: Exception) -> None:
            self.selftest_result = {"ok": False, "error": f"the self-test could not run: {error_text(exc)}"}
            self._selection_changed()

        self.selftest_op = self.ops.start(lambda _report: run_selftest_subprocess(folder), done, failed)

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
