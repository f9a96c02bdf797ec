"""The first-run panel: two ways in, offered at once.

- **Try the demo model**: the built-in demo model on the CPU backend. When no backend is active,
  the patched CPU backend is built first (the core builder, minutes the first time, seconds when the
  build tree is cached), with its progress shown here; then the demo model is written (seconds) and
  ``demo_ready(DemoModel)`` is emitted.
- **Set up the real model**: the detected GPU and build tools decide the proposal: build the CUDA backend
  when it can be built (else the CPU one), and the quantization the fit advice recommends for the GPU's
  memory at the configured context. ``backend_build_requested(flavor)`` or ``models_requested`` tell the
  window which page to open.

All slow work (detection, build, demo model) runs through :mod:`app.gui.shell.ops`.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.backend import build_estimate, registry
from app.backend.builder import BuildOptions
from app.backend.toolchain import Toolchain, detect, platform_note
from app.core import defaults, paths
from app.core.errors import FastMTPError
from app.core.units import format_bytes
from app.gguftools.builtin_demo import DEMO_NATURE, ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.gui.shell.build_job import BuildJob
from app.gui.shell.build_status import BuildStatus
from app.gui.shell.page_ops import OwnedOps
from app.models.fit import fit

_STYLE = """
#firstRun QFrame#card { border: 1px solid palette(mid); border-radius: 10px; background: palette(base); }
#firstRun QLabel#title { font-size: 22px; font-weight: 600; }
#firstRun QLabel#cardTitle { font-size: 15px; font-weight: 600; }
#firstRun QLabel#muted { color: palette(placeholder-text); }
#firstRun QPushButton#primary { padding: 6px 14px; font-weight: 600; }
"""


def real_model_advice(tools: Toolchain, context: int, platform: str = sys.platform) -> tuple[str, str]:
    """What the real-model card proposes for this machine: ``(text, backend flavor to build)``."""
    gpus = tools.gpus
    if platform == "darwin":  # no NVIDIA GPU to look for: say what a Mac gets instead
        text = (f"{platform_note(platform)}\nQwen3.8-27B needs about 16 GiB or more of memory to run at chat "
                "speed; build the backend here, then pick a quantization on the Models page (its fit advice "
                "counts NVIDIA GPU memory, so on a Mac go by the memory the Mac has).")
        return text, "cpu"
    if not gpus:
        flavor = "cpu"
        text = ("No NVIDIA GPU was found (nvidia-smi). Qwen3.8-27B needs a GPU with about 16 GiB or more to "
                "run at chat speed; on this machine you can build the CPU backend and pick a quantization "
                "for another machine on the Models page.")
        return text, flavor
    names = " + ".join(f"{g.name} ({g.memory_mib / 1024:.0f} GiB)" for g in gpus)
    vram = sum(g.memory_mib for g in gpus) * (1 << 20)
    report = fit(vram, context, names)
    best = report.recommended
    if tools.can_build_cuda:
        flavor, step1 = "cuda", "1. Build the CUDA backend (a few minutes, once)."
    else:
        missing = "; ".join(tools.problems(cuda=True)) or "the CUDA build tools are missing"
        flavor, step1 = "cpu", f"1. The CUDA backend cannot be built yet ({missing}). Build the CPU one for now."
    if best is None:
        step2 = (f"2. No quantization fits {format_bytes(vram)} with a {context}-token context: lower the context in "
                 "Settings, or pick one on the Models page to run partly on the CPU.")
    else:
        choice = next(q for q in report.quants if q.name == best)
        step2 = (f"2. Download {best}: about {format_bytes(choice.total_bytes)} of GPU memory with the FastMTP sidecar "
                 f"and a {context}-token context, so it fits.")
    return f"Found {names}.\n{step1}\n{step2}", flavor


class FirstRunPanel(QWidget):
    """Shown in place of the chat until a model can run. Emits ``demo_ready(DemoModel)``,
    ``backend_build_requested(flavor)`` and ``models_requested``."""

    demo_ready = Signal(object)
    backend_build_requested = Signal(str)
    models_requested = Signal()

    def __init__(self, context: int = defaults.CONTEXT_SIZE, build_job: BuildJob | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ops = OwnedOps(self)
        # the window's one build: the demo's backend build shows here and on the Backend page alike
        self.build_job = build_job if build_job is not None else BuildJob(self)
        self.build_job.finished.connect(self._backend_built)
        self.build_job.failed.connect(self._backend_failed)
        self.build_job.changed.connect(self._build_changed)
        self.setObjectName("firstRun")
        self.setStyleSheet(_STYLE)
        self.context = context
        self.toolchain: Toolchain | None = None
        self.flavor = "cpu"  # the backend the real-model card proposes
        self.demo_running = False
        self.last_error: Exception | None = None

        title = QLabel("Welcome to FastMTP Chat")
        title.setObjectName("title")
        intro = QLabel("Chat with Qwen3.8-27B on your own GPU, sped up by FastMTP drafting. Pick how to start; "
                       "the other way stays on the Backend and Models pages.")
        intro.setObjectName("muted")
        intro.setWordWrap(True)

        self.demo_button = QPushButton("Try the demo model")
        self.demo_button.setObjectName("primary")
        self.demo_button.setDefault(True)
        self.demo_button.clicked.connect(self.try_demo)
        self.demo_text = QLabel()
        self.build_status = BuildStatus(self.build_job)  # progress, elapsed, estimate, Cancel and the log
        self.demo_step = QLabel()
        self.demo_step.setObjectName("muted")
        self.demo_step.setWordWrap(True)
        demo_card = self._card("Try the demo model", self.demo_text,
                               [self.build_status, self.demo_step], [self.demo_button])

        self.real_text = QLabel("Looking for an NVIDIA GPU and the build tools…")
        self.build_button = QPushButton("Set up the real model")
        self.build_button.setObjectName("primary")
        self.build_button.setEnabled(False)
        self.build_button.clicked.connect(lambda: self.backend_build_requested.emit(self.flavor))
        self.models_button = QPushButton("Choose a quantization…")
        self.models_button.clicked.connect(self.models_requested.emit)
        real_card = self._card("Set up the real model", self.real_text, [], [self.build_button, self.models_button])

        cards = QHBoxLayout()
        cards.setSpacing(16)
        cards.addWidget(demo_card, 1)
        cards.addWidget(real_card, 1)
        column = QVBoxLayout()
        column.addStretch(1)
        column.addWidget(title)
        column.addWidget(intro)
        column.addSpacing(12)
        column.addLayout(cards)
        column.addStretch(2)
        holder = QWidget()
        holder.setLayout(column)
        holder.setMaximumWidth(900)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(24, 16, 24, 16)
        outer.addStretch(1)
        outer.addWidget(holder, 8)
        outer.addStretch(1)

    @staticmethod
    def _card(title: str, text: QLabel, extra: list[QWidget], buttons: list[QPushButton]) -> QFrame:
        card = QFrame()
        card.setObjectName("card")
        heading = QLabel(title)
        heading.setObjectName("cardTitle")
        text.setWordWrap(True)
        text.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        layout = QVBoxLayout(card)
        layout.setContentsMargins(18, 14, 18, 16)
        layout.addWidget(heading)
        layout.addWidget(text)
        for widget in extra:
            layout.addWidget(widget)
        layout.addStretch(1)  # both cards are as tall as the taller one; buttons sit at the bottom
        row = QHBoxLayout()
        for button in buttons:
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        return card

    # ------------------------------------------------------------------ detection

    def refresh(self) -> None:
        """Say what the demo needs, and look for GPUs and build tools (in the background)."""
        manifest = registry.active()
        if manifest is None:
            wait = build_estimate.estimate(BuildOptions(flavor="cpu")).words()
            self.demo_text.setText("A small built-in model that answers in a few seconds on any CPU: the way to "
                                   "see the app, the live speed HUD and the drafting at work right now. First "
                                   f"the patched CPU backend is built, once: {wait}. {DEMO_NATURE}")
        else:
            self.demo_text.setText("A small built-in model that answers in a few seconds: the way to see the app, "
                                   f"the live speed HUD and the drafting at work right now. It runs on the active "
                                   f"{manifest.flavor.upper()} backend. {DEMO_NATURE}")
        self.ops.start(lambda _report: detect(), self._detected, self._detection_failed)

    def _detected(self, tools: Toolchain) -> None:
        self.toolchain = tools
        text, self.flavor = real_model_advice(tools, self.context)
        self.real_text.setText(text)
        self.build_button.setText(f"Build the {self.flavor.upper()} backend")
        self.build_button.setEnabled(tools.can_build_cpu)
        if not tools.can_build_cpu:
            self.real_text.setText(text + "\nThe build tools are missing: " + "; ".join(tools.problems(cuda=False)))

    def _detection_failed(self, exc: Exception) -> None:
        self.real_text.setText(f"Could not look for GPUs and build tools: {exc}. The Backend page tries again.")
        self.build_button.setEnabled(True)

    # ------------------------------------------------------------------ demo

    def try_demo(self) -> None:
        """Build the CPU backend if no backend is active (the window's one build), write the demo model, then
        emit ``demo_ready``."""
        if self.demo_running:
            return
        self.demo_running = True
        self.last_error = None
        self.demo_button.setEnabled(False)
        self.demo_step.setStyleSheet("")
        if registry.active() is None:
            self.demo_step.setText("")
            if not self.build_job.running:
                self.build_job.start(BuildOptions(flavor="cpu"))
            return  # _backend_built writes the demo when the build (this one or the one already running) ends
        self._write_demo()

    def _write_demo(self) -> None:
        self.demo_step.setText("Preparing the demo model…")
        self.ops.start(lambda _report: ensure_demo_model(paths.demo_model_dir()), self._demo_done, self._demo_failed)

    def _backend_built(self, _manifest: object) -> None:
        if self.demo_running:
            self._write_demo()

    def _backend_failed(self, exc: Exception) -> None:
        if self.demo_running:
            self._demo_failed(exc)

    def _build_changed(self) -> None:
        """No second build from this card while one runs (started here or on the Backend page)."""
        running = self.build_job.running
        self.demo_button.setEnabled(not running and not self.demo_running)
        self.build_button.setEnabled(not running and (self.toolchain is None or self.toolchain.can_build_cpu))

    def _demo_done(self, demo: DemoModel) -> None:
        self.demo_running = False
        self.demo_button.setEnabled(True)
        self.demo_step.setText("Loading the demo model…")
        self.demo_ready.emit(demo)

    def _demo_failed(self, exc: Exception) -> None:
        self.demo_running = False
        self.last_error = exc
        self.demo_button.setEnabled(True)
        self.demo_button.setText("Try again")
        text = exc.message + (f"\n{exc.advice}" if exc.advice else "") if isinstance(exc, FastMTPError) else str(exc)
        self.demo_step.setText(f"The demo could not be prepared: {text}")
        self.demo_step.setStyleSheet("color: #b91c1c;")
