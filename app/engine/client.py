"""The caller's side of the engine worker: start it, load models, stream replies, survive its crash.

Events arrive as dicts (see ``protocol``). If the worker dies (a native abort, a segfault, a kill),
the stream ends with an ``error`` event of kind ``WorkerCrashed`` carrying the tail of the engine log and
llama.cpp's own assert line (``native_error``); ``restart()`` starts a fresh worker and reloads the last
configuration, without the sidecar when the crash came while loading it or in the first drafting pass (the
same pair would crash again). The log is this app process's own, ``logs/engine-<pid>.log`` (a second app, a CLI run
or a test run beside it must not rotate or overwrite the lines a crash report reads); each worker start keeps the
previous run's log as ``engine-<pid>.log.1``, and logs of processes that have ended are pruned to the newest few.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from app.core import paths
from app.core.errors import EngineError
from app.core.processes import child_python, creationflags, pid_alive
from app.engine import protocol
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig

_END = {"loaded", "done", "error", "reset_done"}
_KEEP_ENDED_LOGS = 5  # logs of app processes that have ended, kept for a look after a crash
_LOG_NAME = re.compile(r"engine-(?P<pid>\d{1,9})\.log(?:\.1)?")
# what a native abort prints: ggml's "file.c:123: GGML_ASSERT(x) failed" / GGML_ABORT, a C++ terminate, an assert
_NATIVE_ABORT = re.compile(r"GGML_ASSERT|GGML_ABORT|\.(?:c|cc|cpp|cu|h):\d+: |terminate called|Assertion .+ failed")

Phase = Literal["idle", "load", "first_pass", "reply"]


class EngineClient:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._config: EngineConfig | None = None
        self.log_path = paths.cache_dir() / "logs" / f"engine-{os.getpid()}.log"
        self.previous_log_path = self.log_path.with_name(self.log_path.name + ".1")
        # what the worker is doing, kept by the pump thread in event order: a crash in "load" or "first_pass"
        # (a first reply up to its first verified draft round) blames the pair
        self._phase: Phase = "idle"
        self._replies = 0  # replies finished since the last load
        self.last_crash: dict[str, Any] | None = None  # the latest WorkerCrashed event, until a restart

    # ------------------------------------------------------------------ process

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def config(self) -> EngineConfig | None:
        """The configuration loaded last (after a fallback restart: the one without the sidecar)."""
        return self._config

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _prune_ended_logs(self.log_path.parent)
        if self.log_path.is_file() and self.log_path.stat().st_size:  # keep the previous run (a crash's lines)
            os.replace(self.log_path, self.previous_log_path)
        log = self.log_path.open("w", encoding="utf-8")
        self._events = queue.Queue()
        env = dict(os.environ)
        if not env.get("FASTMTP_NATIVE_BACKTRACE"):
            env["GGML_NO_BACKTRACE"] = "1"  # no gdb attaching on an abort: the assert line stays the last line
        self._phase, self._replies = "idle", 0
        self._proc = subprocess.Popen([child_python(), "-m", "app.engine.worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=env,
                                      creationflags=creationflags())  # no console window flashing on Windows
        log.close()
        threading.Thread(target=self._pump, args=(self._proc, self._events), daemon=True).start()
        first = self._events.get()
        if first["kind"] != "ready":
            raise EngineError("The engine process did not start.", first.get("message", ""))

    def _pump(self, proc: subprocess.Popen[str], events: queue.Queue[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = protocol.decode(line)
            except ValueError:
                continue
            self._track(event)
            events.put(event)
        code = proc.wait()
        lines = self._log_lines()
        native = next((line.strip() for line in reversed(lines) if _NATIVE_ABORT.search(line)), None)
        if native is not None:  # the tail ends at llama.cpp's own words, not at what a debugger printed after them
            lines = lines[:max(i for i, line in enumerate(lines) if line.strip() == native) + 1]
        phase, config = self._phase, self._config
        advice = "The text written so far is kept. Restart the engine to go on."
        if _blames_sidecar(phase, config):
            assert config is not None and config.draft is not None
            when = "while loading" if phase == "load" else "in its first drafting pass"
            advice = (f"It crashed {when} with the sidecar {config.draft.name}: restarting loads "
                      f"{config.target.name} without it (drafting off).")
        event = {"kind": "error", "error": "WorkerCrashed",
                 "message": _describe_exit(code) + (f" llama.cpp stopped at: {native}" if native else ""),
                 "advice": advice, "log_tail": lines[-20:], "native_error": native, "exit_code": code,
                 "during": phase}
        if self._proc is proc:  # not a shutdown we asked for
            self.last_crash = event
        events.put(event)

    def _track(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        passes = (event.get("stats") or {}).get("target_passes", 0)
        if kind == "loaded":
            self._phase, self._replies = "idle", 0
        elif kind == "done":
            self._phase, self._replies = "idle", self._replies + 1
        elif kind == "error":
            self._phase = "idle"
        elif kind == "token" and self._phase == "first_pass" and passes >= 2:
            self._phase = "reply"  # a draft round was made and verified: the pair works

    def _log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []

    def log_tail(self, n: int = 20) -> list[str]:
        return self._log_lines()[-n:]

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

    def load(self, config: EngineConfig,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Load (or switch) the model pair: a clean reload in the worker. RPC workers (``config.rpc``) are connected
        by the worker before the load, through the active backend's RPC backend; ggml keeps them registered for the
        life of the process, so other workers (or none) need a fresh worker process.

        Returns the load's last event (``loaded`` or ``error``); ``on_event`` sees every event of the load as it
        comes (``load_progress`` for each model file read, then that last one), so a long load can be watched."""
        if self._config is not None and self._config.rpc != config.rpc:
            self.close()
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        self._config = config
        self._phase = "load"
        self._send("load", config=protocol.config_to_dict(config))
        last: dict[str, Any] = {}
        for event in self._until_end():
            if on_event is not None:
                on_event(event)
            last = event
        return last

    def generate(self, messages: list[Message], options: ChatOptions,
                 conversation: str | None = None) -> Iterator[dict[str, Any]]:
        """Send the request now; the iterator streams the events of the reply, the last is ``done`` or ``error``.

        ``conversation``: the chat's id, so that the engine keeps the state of a chat it leaves and takes it up
        again when the chat comes back (``done`` says how: ``state``, ``state_tokens``, ``restored_tokens``)."""
        self._phase = "first_pass" if self._replies == 0 else "reply"
        extra = {"conversation": conversation} if conversation is not None else {}
        self._send("generate", messages=[m.to_dict() for m in messages], options=protocol.options_to_dict(options),
                   **extra)
        return self._until_end()

    def cancel(self) -> None:
        self._send("cancel")

    def reset(self) -> dict[str, Any]:
        """Empty the decoder: the next reply reads its whole prompt, and the chat the engine held is dropped, not
        kept. Returns the last event (``reset_done``, or ``error``)."""
        self._send("reset")
        return list(self._until_end())[-1]

    def restart(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
        """A fresh worker with the last configuration; after a crash while loading the sidecar or during the
        first drafting pass, without the sidecar (the same pair would crash again): the ``loaded`` event then carries
        a ``notice`` saying why. ``on_event`` follows the reload as in ``load``."""
        crash, self.last_crash = self.last_crash, None
        self.close()
        self.start()
        config = self._config
        if config is None:
            return None
        notice = None
        if crash is not None and _blames_sidecar(crash.get("during", "idle"), config):
            assert config.draft is not None
            when = "while loading" if crash.get("during") == "load" else "in its first drafting pass"
            cause = crash.get("native_error") or crash.get("message")
            notice = (f"The engine crashed {when} with the sidecar {config.draft.name} ({cause}), so it was "
                      f"restarted without it: drafting is off. Check the pair with `python -m app sidecar check "
                      f"--target {config.target} --draft {config.draft}`, or use the sidecar released for "
                      f"this model.")
            config = replace(config, mode="off", draft=None)
        event = self.load(config, on_event)
        return {**event, "notice": notice, "fallback": True} if notice and event["kind"] == "loaded" else event

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


def _blames_sidecar(phase: str, config: EngineConfig | None) -> bool:
    """A crash while loading a sidecar pair or in its first drafting pass: the pair is the suspect."""
    return (phase in ("load", "first_pass") and config is not None and config.mode == "sidecar"
            and config.draft is not None)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"The engine process was stopped by {name}."
    return f"The engine process ended unexpectedly (exit code {code})."


def _prune_ended_logs(folder: Path) -> None:
    """Removes engine logs of app processes that are no longer running, past the newest few (best effort)."""
    ended: list[tuple[float, Path]] = []
    try:
        for path in folder.iterdir():
            match = _LOG_NAME.fullmatch(path.name)
            if match is None or int(match["pid"]) == os.getpid() or pid_alive(int(match["pid"])):
                continue
            ended.append((path.lstat().st_mtime, path))
    except OSError:
        return
    for _, path in sorted(ended, reverse=True)[_KEEP_ENDED_LOGS * 2:]:  # a log and its .1 per process
        with contextlib.suppress(OSError):
            path.unlink()
