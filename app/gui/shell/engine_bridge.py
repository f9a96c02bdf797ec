"""The engine as Qt signals: one ``EngineClient`` (a worker process) or, for a remote server, a ``RemoteClient``
(the same events over HTTP); loads and replies run as background ops.

A reply's token events never wait on the window: the client's own thread drains the worker's pipe, the reply's
background op takes the events off it and queues them here, and the GUI thread is woken once for all the tokens
queued since its last delivery (``tokens``: one signal per batch, however fast the tokens come or however busy
the window is), at most once every ``DELIVERY_INTERVAL_MS`` (the first token of a reply at once).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QMetaMethod, QObject, Qt, QTimer, Signal

from app.core.errors import FastMTPError
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig
from app.gui.shell.ops import Report
from app.gui.shell.page_ops import OwnedOps
from app.machines.remote_client import RemoteClient
from app.machines.remote_servers import RemoteServer

DELIVERY_INTERVAL_MS = 16  # token batches reach the GUI thread at most this often (the chat view draws every 50 ms)


def _error_event(exc: Exception) -> dict[str, Any]:
    """An exception raised by the client, shaped like the engine's own ``error`` event."""
    if isinstance(exc, FastMTPError):
        return {"kind": "error", **exc.to_dict(), "log_tail": []}
    return {"kind": "error", "error": type(exc).__name__, "message": str(exc), "advice": "", "log_tail": []}


def _progress_to(report: Report) -> Callable[[dict[str, Any]], None]:
    """A load's ``on_event`` that reports its ``load_progress`` events to the GUI thread (the end comes as the
    op's result)."""

    def on_event(event: dict[str, Any]) -> None:
        if event.get("kind") == "load_progress":
            report(event)

    return on_event


class EngineBridge(QObject):
    """Owns the engine process. Every signal carries the engine's event dict and fires on the GUI thread.

    ``loaded`` / ``done`` / ``error`` mirror the protocol's events; ``tokens`` carries the list of ``token``
    events that arrived since the last delivery (coalesced: one signal per batch, in order); ``token`` repeats
    each of them for a listener that wants them one at a time (emitted only while one is connected);
    ``busy_changed`` says whether a load or a reply is under way (one at a time), ``loading`` whether that is a
    load; ``load_progress`` carries the engine's ``load_progress`` events ({file, fraction}) while a load reads
    its model files, so the window can show a long load moving; ``prompt_progress`` ({done, total}) while a long
    prompt is read before the reply's first token.
    """

    loaded = Signal(object)
    tokens = Signal(object)
    token = Signal(object)
    done = Signal(object)
    error = Signal(object)
    busy_changed = Signal(bool)
    load_progress = Signal(object)
    prompt_progress = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._local = EngineClient()
        self._client: EngineClient | RemoteClient = self._local
        self.config: EngineConfig | None = None
        self.remote: RemoteServer | None = None  # the remote server in use, or None for the local engine
        self.busy = False
        self.loading = False  # the busy request is a load (or a restart's reload), not a reply
        self.ops = OwnedOps(self)
        self._pending: list[dict[str, Any]] = []  # token events not yet delivered to the GUI thread
        self._pending_lock = threading.Lock()
        self._token_signal = QMetaMethod.fromSignal(self.token)
        self._last_delivery = 0.0  # time.monotonic() of the last batch delivered
        self._delivery_timer = QTimer(self)  # the next delivery, while a batch waits for its interval
        self._delivery_timer.setSingleShot(True)
        self._delivery_timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._delivery_timer.timeout.connect(self._deliver)
        # set off the GUI thread when the engine's side of the reply is over (its ``done`` or ``error`` came),
        # before the window has necessarily seen it
        self.reply_received = threading.Event()

    @property
    def engine_pid(self) -> int | None:
        """The local engine worker's process id (None before it starts), for CPU accounting (``bench window``)."""
        return self._local.pid

    def load(self, config: EngineConfig) -> None:
        """Load (or switch) the model pair in the engine process."""
        self.loading = True
        self._set_busy(True)
        self._use_local()
        self.config = config
        client = self._local
        self.ops.start(lambda report: client.load(config, _progress_to(report)), self._finished, self._failed,
                       self._progress)

    def load_remote(self, server: RemoteServer) -> None:
        """Chat through a remote server instead: the local engine process is stopped (its memory freed) and the
        ``loaded`` event says what the server is (``server_kind``, ``warning``, ``no_tint_reason``)."""
        self.loading = True
        self._set_busy(True)
        if isinstance(self._client, RemoteClient):
            self._client.close()
        self._local.close()
        client = RemoteClient(server)
        self._client, self.remote, self.config = client, server, None
        self.ops.start(lambda _report: client.load(), self._finished, self._failed)

    def _use_local(self) -> None:
        if isinstance(self._client, RemoteClient):
            self._client.close()
        self._client, self.remote = self._local, None

    def generate(self, messages: list[Message], options: ChatOptions, conversation: str | None = None) -> None:
        """Stream one reply: ``tokens`` batches, then ``done`` (or ``error``). ``conversation``: the chat's id, so that
        the local engine keeps the state of a chat it leaves and takes it up again when the chat comes back."""
        self.loading = False
        self._set_busy(True)
        self.reply_received.clear()

        def work(report: Report) -> dict[str, Any]:
            last: dict[str, Any] = {}
            try:
                client = self._client
                events = (client.generate(messages, options, conversation) if isinstance(client, EngineClient)
                          else client.generate(messages, options))
                for event in events:
                    if event["kind"] == "token":
                        with self._pending_lock:
                            wake = not self._pending  # the GUI thread took everything before: wake it once
                            self._pending.append(event)
                        if wake:
                            report(None)
                    elif event["kind"] == "prompt_progress":
                        report(event)
                    last = event
            finally:
                self.reply_received.set()
            return last

        self.ops.start(work, self._finished, self._failed, self._reply_progress)

    def _reply_progress(self, event: dict[str, Any] | None) -> None:
        """On the GUI thread: tokens are waiting (None), or the prompt's reading moved on (``prompt_progress``)."""
        if event is None:
            self._wake()
        else:
            self.prompt_progress.emit(event)

    def _wake(self) -> None:
        """Tokens are waiting (the queue was empty before them): deliver them now, or one interval after the last
        delivery. Until then the queue stays non-empty, so the reply's thread does not wake this thread again."""
        if self._delivery_timer.isActive():
            return
        since = (time.monotonic() - self._last_delivery) * 1000
        if since >= DELIVERY_INTERVAL_MS:
            self._deliver()
        else:
            self._delivery_timer.start(math.ceil(DELIVERY_INTERVAL_MS - since))

    def _deliver(self) -> None:
        """On the GUI thread: every token event queued since the last delivery, as one ``tokens`` batch."""
        self._delivery_timer.stop()
        with self._pending_lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        self._last_delivery = time.monotonic()
        self.tokens.emit(batch)
        if self.isSignalConnected(self._token_signal):
            for event in batch:
                self.token.emit(event)

    def cancel(self) -> None:
        """Stop the reply under way; the engine ends it with a ``done`` event (stop reason ``cancelled``)."""
        if self.busy:
            try:
                self._client.cancel()
            except FastMTPError as exc:
                self.error.emit(_error_event(exc))

    def restart(self) -> None:
        """A fresh engine process, reloading the last configuration (without the sidecar after a crash while
        loading it or in its first drafting pass: the ``loaded`` event's ``notice`` says so, ``config`` follows)."""
        self.loading = True
        self._set_busy(True)
        client = self._client

        def work(report: Report) -> dict[str, Any]:
            if isinstance(client, EngineClient):
                return client.restart(_progress_to(report)) or {"kind": "reset_done"}
            return client.restart() or {"kind": "reset_done"}

        self.ops.start(work, self._finished, self._failed, self._progress)

    def close(self) -> None:
        """Stop the engine process (called when the window closes)."""
        self.cancel()
        self._client.close()
        self._local.close()

    def _progress(self, event: dict[str, Any]) -> None:
        """On the GUI thread: a load's progress event, while that load is still the one under way."""
        if self.loading:
            self.load_progress.emit(event)

    def _finished(self, event: dict[str, Any]) -> None:
        self._deliver()  # a reply's last tokens before its end (normally delivered already)
        self._set_busy(False)
        kind = event.get("kind")
        if kind == "loaded":
            if self.remote is None:
                self.config = self._local.config or self.config
            self.loaded.emit(event)
        elif kind == "done":
            self.done.emit(event)
        elif kind == "error":
            self.error.emit(event)

    def _failed(self, exc: Exception) -> None:
        self._deliver()
        self._set_busy(False)
        self.error.emit(_error_event(exc))

    def _set_busy(self, busy: bool) -> None:
        if not busy:
            self.loading = False
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)
