"""The caller's side of the engine worker: start it, load models, stream replies, survive its crash.

Events arrive as dicts (see ``protocol``). If the worker dies (a native abort, a segfault, a kill),
the stream ends with an ``error`` event of kind ``WorkerCrashed`` carrying the tail of the engine log;
``restart()`` starts a fresh worker and reloads the last configuration.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

from app import paths
from app.engine import protocol
from app.engine.chat_template import Message
from app.engine.session import ChatOptions
from app.engine.speculative import EngineConfig
from app.errors import EngineError

_END = {"loaded", "done", "error", "reset_done"}


class EngineClient:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._config: EngineConfig | None = None
        self.log_path = paths.cache_dir() / "logs" / "engine.log"

    # ------------------------------------------------------------------ process

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w", encoding="utf-8")
        self._events = queue.Queue()
        self._proc = subprocess.Popen([sys.executable, "-m", "app.engine.worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
                                      env=dict(os.environ))
        log.close()
        threading.Thread(target=self._pump, args=(self._proc, self._events), daemon=True).start()
        first = self._events.get()
        if first["kind"] != "ready":
            raise EngineError("The engine process did not start.", first.get("message", ""))

    def _pump(self, proc: subprocess.Popen[str], events: queue.Queue[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                events.put(protocol.decode(line))
            except ValueError:
                continue
        code = proc.wait()
        events.put({"kind": "error", "error": "WorkerCrashed", "message": _describe_exit(code),
                    "advice": "The text written so far is kept. Restart the engine to go on.",
                    "log_tail": self.log_tail(), "exit_code": code})

    def log_tail(self, n: int = 20) -> list[str]:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def _send(self, kind: str, **fields: Any) -> None:
        if self._proc is None or self._proc.stdin is None or self._proc.poll() is not None:
            raise EngineError("The engine process is not running.", "Restart the engine.")
        try:
            self._proc.stdin.write(protocol.encode(kind, **fields))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise EngineError("The engine process stopped.", "Restart the engine.") from exc

    def _until_end(self) -> Iterator[dict[str, Any]]:
        while True:
            event = self._events.get()
            yield event
            if event["kind"] in _END:
                return

    # ------------------------------------------------------------------ requests

    def load(self, config: EngineConfig) -> dict[str, Any]:
        """Load (or switch) the model pair: a clean reload in the worker."""
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        self._config = config
        self._send("load", config=protocol.config_to_dict(config))
        return list(self._until_end())[-1]

    def generate(self, messages: list[Message], options: ChatOptions) -> Iterator[dict[str, Any]]:
        """Stream the events of one reply; the last is ``done`` or ``error``."""
        self._send("generate", messages=[m.to_dict() for m in messages], options=protocol.options_to_dict(options))
        yield from self._until_end()

    def cancel(self) -> None:
        self._send("cancel")

    def restart(self) -> dict[str, Any] | None:
        self.close()
        self.start()
        return self.load(self._config) if self._config is not None else None

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(protocol.encode("shutdown"))
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"The engine process was stopped by {name}."
    return f"The engine process ended unexpectedly (exit code {code})."

