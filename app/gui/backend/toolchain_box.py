"""The Backend page's first group: the build tools and GPUs this machine has, what a build still lacks, and the
offer of the app's own CUDA toolkit (NVIDIA's pip wheels) when nvcc or cuBLAS is missing.

``ToolchainBox`` shows a detected ``Toolchain`` (``show``); the page runs the detection off the GUI thread and
the toolkit's download as its job. ``toolkit_offer`` decides whether the toolkit is offered, ``ToolkitProgress``
turns the download's log lines into the job strip's events.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QWidget

from app.backend import cuda_wheels
from app.backend.events import BuildEvent, EventKind
from app.backend.toolchain import Tool, Toolchain, ToolkitMode
from app.core.errors import ToolchainError
from app.gui.shell.labels import wrapping_label
from app.gui.shell.ops import Report
from app.gui.shell.status_text import bad_colour

TOOLKIT_BUTTON = "Get the CUDA build tools (about 530 MB download)"
# FASTMTP_CUDA_TOOLKIT=app on a machine without a driver: build for another machine with CUDA 13.0, the
# oldest CUDA 13 (a backend built with it runs on every CUDA 13 driver)
OTHER_MACHINE_CUDA = "13.0"



def _tool_text(tool: Tool | None, missing: str = "not found") -> str:
    return f"{tool.version}  ({tool.path})" if tool is not None else missing



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


class ToolchainBox(QGroupBox):
    """"Build tools and GPUs": one line a tool, the problems that stop a build, and the toolkit's button (its
    ``clicked`` is the page's to wire) with the line that says what it does."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Build tools and GPUs", parent)
        self.tool_labels: dict[str, QLabel] = {}
        form = QFormLayout(self)
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
        self.toolkit_label = wrapping_label()  # under the button, the full width: it never squeezes beside it
        offer = QHBoxLayout()
        offer.addWidget(self.toolkit_button)
        offer.addStretch(1)
        form.addRow(offer)
        form.addRow(self.toolkit_label)
        self.toolkit_button.hide()  # until the toolchain says it is wanted
        self.toolkit_label.hide()

    def detecting(self) -> None:
        """Detection started: every tool reads "…" until it is known."""
        for label in self.tool_labels.values():
            label.setText("…")

    def show_toolchain(self, tools: Toolchain, offer: ToolkitOffer | None) -> None:
        """What was found, what a build lacks, and the toolkit's offer (``offer``; shown by ``set_offered``)."""
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
        if offer is not None and tools.nvcc is None:
            problems.append("The CUDA compiler nvcc and cuBLAS were not found, so only the CPU backend can be built: "
                            "the button below gets them.")
        if not tools.gpus and tools.can_build_cuda:
            problems.append("No NVIDIA GPU was found, so the CUDA architecture is unknown: build the CPU backend "
                            "here, or use `python -m app backend build --cuda --cuda-arch 89` for another machine.")
        self.problems_label.setText("\n".join(problems) if problems else "Everything needed is there.")
        self.problems_label.setStyleSheet(f"color: {bad_colour(self).name()};" if not tools.can_build_cpu else "")
        if offer is not None:
            self.toolkit_label.setText(offer.text())
            self.toolkit_label.setToolTip(str(cuda_wheels.toolkit_dir(offer.cuda)))

    def set_offered(self, offer: ToolkitOffer | None, busy: bool) -> None:
        """The toolkit's button and line shown while it is offered, the button off while a job runs."""
        self.toolkit_button.setVisible(offer is not None)
        self.toolkit_label.setVisible(offer is not None)
        self.toolkit_button.setEnabled(not busy and offer is not None)
