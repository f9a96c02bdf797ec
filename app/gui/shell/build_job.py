"""The window's one backend build: every page that builds (the first-run panel, the Backend page) starts it here,
and every page shows the same progress, elapsed time, estimate, log and Cancel.

A build started on the first-run panel used to be invisible to the Backend page (0 %, an empty log, "Build CPU
backend" enabled, "Cancel build" greyed), and a second build could be started beside it. Now there is one job
per window: :meth:`BuildJob.start` refuses while one runs, and :class:`app.gui.shell.build_status.BuildStatus`
widgets bound to it all show the same state. The build itself is the core's (``build_estimate.build_and_record``:
``build_backend``, then the time is remembered for the next estimate), in a background op.
"""

from __future__ import annotations

import time
from collections import deque

from PySide6.QtCore import QObject, Signal

from app.backend import build_estimate
from app.backend.build_estimate import BuildEstimate
from app.backend.builder import BuildOptions
from app.backend.events import BuildEvent, ninja_fraction
from app.backend.registry import BackendManifest
from app.core.cancel import CancelToken
from app.core.errors import BuildCancelled
from app.gui.shell.page_ops import OwnedOps

LOG_LINES = 5000  # the newest build output kept for the log view


class BuildJob(QObject):
    """One backend build at a time, watched by every page. ``changed`` fires on each new state, step, percent or
    log line; ``finished`` with the manifest; ``failed`` with the exception (``BuildCancelled`` when cancelled)."""

    changed = Signal()
    finished = Signal(object)
    failed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.ops = OwnedOps(self)
        self.running = False
        self.options: BuildOptions | None = None
        self.estimate: BuildEstimate | None = None
        self.percent = 0.0
        self.step = ""  # the builder's step id ("source", "configure", "compile", ...)
        self.step_text = ""  # its words ("compiling llama.cpp ...")
        self.log: deque[str] = deque(maxlen=LOG_LINES)
        self.log_count = 0  # lines logged by this build, the dropped oldest included
        self.outcome = ""  # "", "built", "failed", "cancelled": how the last build ended
        self.error: Exception | None = None
        self.manifest: BackendManifest | None = None
        self._started = 0.0
        self._ended = 0.0
        self._compile_started: float | None = None
        self._compile_fraction: float | None = None
        self._cancel: CancelToken | None = None

    @property
    def flavor(self) -> str:
        return self.options.flavor if self.options is not None else "cpu"

    def start(self, options: BuildOptions) -> bool:
        """Start building ``options``; False (and nothing started) while another build runs."""
        if self.running:
            return False
        self.running = True
        self.options = options
        self.estimate = build_estimate.estimate(options)
        self.percent, self.outcome, self.error, self.manifest = 0.0, "", None, None
        self.step, self.step_text = "starting", "starting"
        self.log.clear()
        self.log_count = 0
        self._log(f"estimate: {self.estimate.words()}")
        self._started, self._ended = time.monotonic(), 0.0
        self._compile_started = self._compile_fraction = None
        cancel = self._cancel = CancelToken()
        cached = self.estimate.cached
        self.ops.start(lambda report: build_estimate.build_and_record(options, report, cancel, cached),
                       self._done, self._failed, self._event)
        self.changed.emit()
        return True

    def cancel(self) -> None:
        """Stop the build under way (its compiler is killed at once); ``failed`` follows with BuildCancelled."""
        if self.running and self._cancel is not None:
            self._cancel.cancel()
            self.step_text = "cancelling"
            self.changed.emit()

    def elapsed(self) -> float:
        """Seconds since the build started (to its end once it ended)."""
        if not self._started:
            return 0.0
        return (self._ended or time.monotonic()) - self._started

    def remaining(self) -> float | None:
        """Seconds left while running, from the compile step's own rate once it says enough; else None."""
        if not self.running or self.estimate is None:
            return None
        compile_elapsed = time.monotonic() - self._compile_started if self._compile_started else None
        return build_estimate.remaining(self.estimate.seconds, self.elapsed(), self._compile_fraction,
                                        compile_elapsed)

    def _event(self, value: object) -> None:
        if not isinstance(value, BuildEvent):
            return
        if value.percent is not None:
            self.percent = value.percent
        if value.kind == "step":
            self.step, self.step_text = value.step, value.message or value.step
            if value.step == "compile" and self._compile_started is None:
                self._compile_started = time.monotonic()
        if value.message.strip():
            self._log(("==> " if value.kind == "step" else "") + value.message.rstrip())  # steps stand out
            fraction = ninja_fraction(value.message) if value.kind == "log" else None
            if fraction is not None and self._compile_started is not None:
                self._compile_fraction = fraction
        self.changed.emit()

    def _done(self, manifest: BackendManifest) -> None:
        self._end("built")
        self.manifest = manifest
        self.percent = 100.0
        self._log(f"built {manifest.id} in {self.elapsed():.0f} s")
        self.changed.emit()
        self.finished.emit(manifest)

    def _failed(self, exc: Exception) -> None:
        self._end("cancelled" if isinstance(exc, BuildCancelled) else "failed")
        self.error = exc
        self._log(f"{self.outcome}: {exc}")
        self.changed.emit()
        self.failed.emit(exc)

    def lines_since(self, shown: int) -> list[str]:
        """The log lines after the first ``shown`` of this build (all kept ones when a new build started since, or
        the oldest were dropped): what a log view showing ``shown`` lines appends."""
        new = self.log_count - shown if shown <= self.log_count else self.log_count
        return list(self.log)[max(0, len(self.log) - new):] if new else []

    def _log(self, line: str) -> None:
        self.log.append(line)
        self.log_count += 1

    def _end(self, outcome: str) -> None:
        self.running = False
        self.outcome = outcome
        self._ended = time.monotonic()
        self._cancel = None

    @property
    def idle(self) -> bool:
        return self.ops.idle
