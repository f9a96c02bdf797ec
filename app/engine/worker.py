"""The engine's own process: ``python -m app.engine.worker`` speaks the JSON-lines protocol on stdio.

A native abort or segfault here cannot take the caller down; the caller sees the pipe close and
reports it with the tail of this process's log file (llama.cpp's lines are mirrored into it).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from app.core.errors import EngineError, FastMTPError
from app.engine import protocol
from app.engine.chat_template import take_notices
from app.engine.config import EngineConfig
from app.engine.model_pool import ModelPool, target_slot
from app.engine.session import ChatSession
from app.engine.speculative import Reply
from app.engine.state_cache import StateCache, StateKey, key_for

log = logging.getLogger(__name__)

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
        # long chats reopen at once: the states of the chats left (``engine.state_cache``), the key the loaded
        # models' states are valid for (None: not kept), and the chat whose conversation the decoder holds
        self.states: StateCache | None = None
        self.state_key: StateKey | None = None
        self.conversation: str | None = None

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
                self.conversation = None
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
        self._leave()  # the chat the decoder holds keeps its state (used again if the same models load)
        if self.session is not None:
            self.session.close()
            self.session = None
        engine_config = protocol.config_from_dict(config)
        self.models.retain(target_slot(engine_config))  # another model's files are freed before this one loads
        loads = self.models.loads
        progress = ProgressThrottle(lambda file, fraction: self.send("load_progress", file=file,
                                                                     fraction=round(fraction, 4)))
        self.session = ChatSession(engine_config, self.models, progress)
        self._open_states(self.session.decoder.keyed_config)
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

        messages = protocol.messages_from_list(request["messages"])
        options = protocol.options_from_dict(request["options"])
        arrival = self._arrive(request.get("conversation"), lambda: session.planned_prompt(messages, options))
        try:
            reply, text = session.reply(messages, options, on_token, self.cancel, self._prompt_progress)
        except BaseException:
            self.conversation = None  # whatever the decoder holds now is not kept as this chat's state
            raise
        self.send("done", tokens=reply.tokens, provenance=reply.provenance, text=text,
                  stop_reason=reply.stop_reason, stats=reply.stats.to_dict(), **self._state_report(arrival, reply))


    def _prompt_progress(self, done: int, total: int) -> None:
        """A long prompt read batch by batch (a pasted document, a trimmed chat read again): ``prompt_progress``."""
        window = self.session.window if self.session is not None else None
        self.send("prompt_progress", done=done, total=total,
                  trimmed_turns=window.dropped_turns if window is not None else 0)

    # ------------------------------------------------------------------ chats left and come back to

    def _open_states(self, config: EngineConfig) -> None:
        """The state cache for ``config`` (its folder and cap) and the key the loaded models' states are valid for;
        without a backend manifest or the model files' stat, states are not kept (logged)."""
        from app.native.loader import backend_manifest

        try:
            self.state_key = key_for(config, backend_manifest().id)
        except (OSError, FastMTPError) as exc:
            log.warning("chat states are not kept: %s", exc)
            self.state_key = None
        if self.states is not None and (self.states.folder, self.states.max_bytes) != (
                config.state_cache_dir, config.state_cache_bytes):
            self.states.close()
            self.states = None
        if self.states is None:
            self.states = StateCache(config.state_cache_dir, config.state_cache_bytes)

    def _leave(self) -> None:
        """Keep the state of the chat the decoder holds (memory now, its file in the background)."""
        conversation, self.conversation = self.conversation, None
        if conversation is None or self.session is None or self.states is None or self.state_key is None:
            return
        decoder = self.session.decoder
        if not decoder.tokens:
            return
        try:
            self.states.keep(conversation, self.state_key, decoder.snapshot())
        except FastMTPError as exc:  # llama.cpp could not write it: the chat is read again when it comes back
            log.warning("the state of a chat left could not be kept: %s", exc)

    def _arrive(self, conversation: Any, prompt: Callable[[], list[int]]) -> dict[str, Any]:
        """Turn the decoder to ``conversation`` (the caller's chat id; None: no chat to keep): the chat it held keeps
        its state, and this one's kept state is taken up when it is valid for the loaded models and its tokens begin
        ``prompt()``; else it is dropped. What happened, for the ``done`` event."""
        arrival: dict[str, Any] = {"restored_tokens": 0, "state_source": "", "state_note": ""}
        if not isinstance(conversation, str) or not conversation:
            conversation = None
        if conversation == self.conversation:
            return arrival
        self._leave()
        self.conversation = conversation
        if conversation is None or self.session is None or self.states is None or self.state_key is None:
            return arrival
        try:
            tokens = prompt()
        except FastMTPError as exc:  # the conversation does not fit: the reply says so
            arrival["state_note"] = str(exc.message)
            return arrival
        found = self.states.lookup(conversation, self.state_key, tokens)
        if found.snapshot is None:
            arrival["state_note"] = found.reason
            return arrival
        started = time.perf_counter()
        try:
            self.session.decoder.restore(found.snapshot)
        except FastMTPError as exc:  # refused by llama.cpp or by the decoder's checks: read the chat again
            log.warning("a kept chat state was not used: %s", exc)
            self.states.drop(conversation)
            arrival["state_note"] = str(exc.message)
            return arrival
        arrival.update(restored_tokens=len(found.snapshot.tokens), state_source=found.source,
                       state_seconds=time.perf_counter() - started)
        return arrival

    def _state_report(self, arrival: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The ``done`` event's account of the conversation's state: ``state`` "restored" (a kept state was taken up
        and its tokens not read again), "kept" (the decoder held them already) or "reread" (nothing reused);
        ``state_tokens`` the tokens reused; ``restored_tokens``, ``state_source`` ("memory" / "disk") and
        ``state_seconds`` of a restore; ``state_note`` why a kept state was not used; ``state_notices`` a failed save,
        each kind said once."""
        reused = reply.stats.reused_tokens
        state = "reread" if reused <= 0 else "restored" if arrival["restored_tokens"] else "kept"
        notices = self.states.settle() if self.states is not None else []
        notices += take_notices()  # a model's chat template that broke and was replaced by ChatML, said once
        return {**arrival, "state": state, "state_tokens": max(reused, 0), "state_notices": notices}

    def close(self) -> None:
        """At the engine's end: the chat held keeps its state, the writes finish, the models are freed."""
        try:
            self._leave()
        finally:
            if self.states is not None:
                for notice in self.states.close():
                    log.warning("%s", notice)
            if self.session is not None:
                self.session.close()
                self.session = None


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
    worker.close()
    worker.models.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
