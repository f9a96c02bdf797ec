"""The engine's own process: ``python -m app.engine.worker`` speaks the JSON-lines protocol on stdio.

A native abort or segfault here cannot take the caller down; the caller sees the pipe close and
reports it with the tail of this process's log file (llama.cpp's lines are mirrored into it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from app.core.errors import EngineError, FastMTPError
from app.engine import protocol
from app.engine.model_pool import ModelPool, target_slot
from app.engine.session import ChatSession

PROGRESS_INTERVAL_S = 0.1  # load_progress events at most this often, or at each PROGRESS_STEP of a file
PROGRESS_STEP = 0.05


class ProgressThrottle:
    """Passes on a load's progress (``send(file, fraction)``) without flooding the pipe: llama.cpp reports every
    tensor, the window needs a few updates a second. A file's first report and its 1.0 always go through."""

    def __init__(self, send: Callable[[str, float], None], clock: Callable[[], float] = time.monotonic) -> None:
        self._send = send
        self._clock = clock
        self._last: dict[str, tuple[float, float]] = {}  # file: (fraction sent, when)

    def __call__(self, file: str, fraction: float) -> None:
        now = self._clock()
        last = self._last.get(file)
        if last is not None:
            sent, when = last
            finished = fraction >= 1.0 > sent
            soon = fraction - sent < PROGRESS_STEP and now - when < PROGRESS_INTERVAL_S
            if not finished and (fraction <= sent or soon):
                return
        self._last[file] = (fraction, now)
        self._send(file, fraction)


class Worker:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.session: ChatSession | None = None
        # the models stay loaded between loads: a drafting-mode switch loads only what changed
        self.models = ModelPool()
        self.cancel = threading.Event()

    def send(self, kind: str, **fields: Any) -> None:
        with self.lock:
            self.out.write(protocol.encode(kind, **fields))
            self.out.flush()

    def handle(self, request: dict[str, Any]) -> bool:
        """Run one request; False ends the worker."""
        kind = request["kind"]
        if kind == "shutdown":
            return False
        try:
            if kind == "load":
                self._load(request["config"])
            elif kind == "generate":
                self._generate(request)
            elif kind == "reset":
                if self.session is not None:
                    self.session.decoder.reset()
                self.send("reset_done")
            else:
                raise EngineError(f"Unknown request {kind!r}.")
        except FastMTPError as exc:
            self.send("error", **exc.to_dict(), log_tail=_log_tail())
        except Exception as exc:  # report, stay alive: the caller decides whether to restart
            self.send("error", error=type(exc).__name__, message=str(exc), advice="",
                      log_tail=_log_tail(), traceback=traceback.format_exc())
        return True

    def _load(self, config: dict[str, Any]) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        engine_config = protocol.config_from_dict(config)
        self.models.retain(target_slot(engine_config))  # another model's files are freed before this one loads
        loads = self.models.loads
        progress = ProgressThrottle(lambda file, fraction: self.send("load_progress", file=file,
                                                                     fraction=round(fraction, 4)))
        self.session = ChatSession(engine_config, self.models, progress)
        self.send("loaded", mode=self.session.decoder.config.mode, models_loaded=self.models.loads - loads)

    def _generate(self, request: dict[str, Any]) -> None:
        if self.session is None:
            raise EngineError("No model is loaded in the engine.", "Load a model first.")
        self.cancel.clear()
        session = self.session
        model = session.decoder.target

        def on_token(token: int, provenance: str, stats: Any) -> None:
            piece = "" if model.is_eog(token) else model.piece(token).decode("utf-8", errors="replace")
            self.send("token", token=token, provenance=provenance, piece=piece, stats=stats.to_dict())

        reply, text = session.reply(protocol.messages_from_list(request["messages"]),
                                    protocol.options_from_dict(request["options"]), on_token, self.cancel)
        self.send("done", tokens=reply.tokens, provenance=reply.provenance, text=text,
                  stop_reason=reply.stop_reason, stats=reply.stats.to_dict())


def _log_tail(n: int = 20) -> list[str]:
    from app.native.handles import LOG

    return list(LOG.lines)[-n:]


def main() -> int:
    from app.native.handles import LOG

    LOG.echo_to = sys.stderr  # the caller redirects our stderr into the engine log file
    worker = Worker(sys.stdout)
    requests: list[dict[str, Any]] = []
    available = threading.Condition()

    def read() -> None:
        """Read requests; ``cancel`` acts at once, everything else queues for the main thread."""
        for line in sys.stdin:
            request = protocol.decode(line)
            if request["kind"] == "cancel":
                worker.cancel.set()
                continue
            with available:
                requests.append(request)
                available.notify()
        with available:
            requests.append({"kind": "shutdown"})
            available.notify()

    threading.Thread(target=read, daemon=True).start()
    worker.send("ready", pid=os.getpid())
    while True:
        with available:
            while not requests:
                available.wait()
            request = requests.pop(0)
        if not worker.handle(request):
            break
    if worker.session is not None:
        worker.session.close()
    worker.models.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
