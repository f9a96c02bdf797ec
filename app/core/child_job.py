"""Run one of the app's own commands in a child process and follow its ``--json`` event lines.

Jobs that load native code (making a sidecar tokenizes and probes through llama.cpp, a benchmark runs the
engine) run as ``python -m app <command> --json`` children, so a native abort ends the child, not the window,
and every such job in the window is the very command a user can run headless. The child prints one JSON
object per line: ``{"kind": "progress", ...}`` events, then ``{"kind": "result", ...}``, or the CLI's error
object (``{"error": ..., "kind": ..., "message": ..., "advice": ...}``) and a non-zero exit.

Cancel asks the child to stop (SIGTERM: the command removes what it was writing and exits 130); a child that
has not ended after ``grace_s`` is killed, and ``leftovers`` (the ``.partial`` files it could have been
writing) are removed by the parent, so nothing half-written survives either way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.core import processes
from app.core.errors import FastMTPError, JobCancelled

OnEvent = Callable[[dict[str, Any]], None]


class ChildJobError(FastMTPError):
    """The child command failed; message, advice and kind are the child's own (``error`` is its class name), so
    the window can choose its wording by ``kind`` as for an error raised in-process."""

    kind = "child-failed"

    def __init__(self, message: str, advice: str = "", exit_code: int = 1, error: str = "", *,
                 kind: str | None = None) -> None:
        super().__init__(message, advice, kind=kind or None)
        self.exit_code = exit_code
        self.error = error


class ChildJob:
    """``python -m app ARGS --json`` as a child; ``run`` blocks (call it from a worker), ``cancel`` from anywhere."""

    def __init__(self, args: Sequence[str], *, leftovers: Sequence[Path] = (), grace_s: float = 20.0,
                 env: dict[str, str] | None = None) -> None:
        self.args = [*args, "--json"]
        self.leftovers = list(leftovers)
        self.grace_s = grace_s
        self.env = env
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._cancelled = False
        self.stderr_tail: deque[str] = deque(maxlen=30)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def run(self, on_event: OnEvent = lambda _e: None) -> dict[str, Any]:
        """Start the child, pass each event to ``on_event``, return the result object.

        Raises:
            JobCancelled: ``cancel`` was called (the leftovers are gone).
            ChildJobError: the child reported an error or ended without a result.
        """
        env = dict(os.environ if self.env is None else self.env, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
        with self._lock:
            if self._cancelled:
                raise JobCancelled("Stopped before it started.", "")
            self._proc = subprocess.Popen([processes.child_python(), "-m", "app", *self.args], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                          errors="replace", env=env, creationflags=processes.creationflags())
        proc = self._proc
        assert proc.stdout is not None and proc.stderr is not None
        reader = threading.Thread(target=self._drain_stderr, args=(proc,), daemon=True)
        reader.start()
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        try:
            for line in proc.stdout:
                event = _parse(line)
                if event is None:
                    continue
                if "error" in event and "message" in event:
                    error = event
                elif event.get("kind") == "result":
                    result = event
                else:
                    on_event(event)
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=5)
        if self._cancelled:
            self._clean()
            raise JobCancelled("Stopped: nothing half-written was kept.", "Start it again when you want it.")
        if error is not None:
            raise ChildJobError(str(error["message"]), str(error.get("advice", "")), code or 1, str(error["error"]),
                                kind=str(error.get("kind") or "") or None)
        if code != 0 or result is None:
            self._clean()
            tail = "\n".join(self.stderr_tail)
            raise ChildJobError(f"`python -m app {' '.join(self.args)}` ended with code {code} and no result.",
                                "The last lines it wrote:\n" + tail if tail else "Run the command in a terminal "
                                "to see what happens.", code or 1, kind="child-no-result")
        return result

    def cancel(self) -> None:
        """Ask the child to stop; kill it if it has not ended after ``grace_s`` seconds."""
        with self._lock:
            self._cancelled = True
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            if sys.platform == "win32":
                proc.terminate()
            else:
                proc.send_signal(signal.SIGTERM)
        except OSError:
            return
        threading.Thread(target=self._kill_later, args=(proc,), daemon=True).start()

    def _kill_later(self, proc: subprocess.Popen[str]) -> None:
        try:
            proc.wait(timeout=self.grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()

    def _drain_stderr(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.stderr_tail.append(line.rstrip())

    def _clean(self) -> None:
        for path in self.leftovers:
            for leftover in (path, path.with_name(path.name + ".partial")):
                if leftover.name.endswith(".partial") or self._cancelled:
                    leftover.unlink(missing_ok=True)


def _parse(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
