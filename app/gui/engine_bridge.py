"""The engine as Qt signals: one ``EngineClient`` (a worker process) or, for a remote server, a ``RemoteClient``
(the same events over HTTP); loads and replies run as background ops."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig
from app.engine.remote import RemoteClient
from app.errors import FastMTPError
from app.gui.ops import Report
from app.gui.page_ops import OwnedOps
from app.remote_servers import RemoteServer


def _error_event(exc: Exception) -> dict[str, Any]:
    """An exception raised by the client, shaped like the engine's own ``error`` event."""
    if isinstance(exc, FastMTPError):
        return {"kind": "error", **exc.to_dict(), "log_tail": []}
    return {"kind": "error", "error": type(exc).__name__, "message": str(exc), "advice": "", "log_tail": []}


class EngineBridge(QObject):
    """Owns the engine process. Every signal carries the engine's event dict and fires on the GUI thread.

    ``loaded`` / ``token`` / ``done`` / ``error`` mirror the protocol's events; ``busy_changed`` says
    whether a load or a reply is under way (one at a time).
    """

    loaded = Signal(object)
    token = Signal(object)
    done = Signal(object)
    error = Signal(object)
    busy_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._local = EngineClient()
        self._client: EngineClient | RemoteClient = self._local
        self.config: EngineConfig | None = None
        self.remote: RemoteServer | None = None  # the remote server in use, or None for the local engine
        self.busy = False
        self.ops = OwnedOps(self)

    def load(self, config: EngineConfig) -> None:
        """Load (or switch) the model pair in the engine process."""
        self._set_busy(True)
        self._use_local()
        self.config = config
        client = self._local
        self.ops.start(lambda _report: client.load(config), self._finished, self._failed)

    def load_remote(self, server: RemoteServer) -> None:
        """Chat through a remote server instead: the local engine process is stopped (its memory freed) and the
        ``loaded`` event says what the server is (``server_kind``, ``warning``, ``no_tint_reason``)."""
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

    def generate(self, messages: list[Message], options: ChatOptions) -> None:
        """Stream one reply: ``token`` signals, then ``done`` (or ``error``)."""
        self._set_busy(True)

        def work(report: Report) -> dict[str, Any]:
            last: dict[str, Any] = {}
            for event in self._client.generate(messages, options):
                if event["kind"] == "token":
                    report(event)
                last = event
            return last

        self.ops.start(work, self._finished, self._failed, self.token.emit)

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
        self._set_busy(True)
        self.ops.start(lambda _report: self._client.restart() or {"kind": "reset_done"},
                       self._finished, self._failed)

    def close(self) -> None:
        """Stop the engine process (called when the window closes)."""
        self.cancel()
        self._client.close()
        self._local.close()

    def _finished(self, event: dict[str, Any]) -> None:
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
        self._set_busy(False)
        self.error.emit(_error_event(exc))

    def _set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)
