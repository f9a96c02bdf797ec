"""Download events and the bookkeeping behind them: bytes per file and in total, speed, ETA, throttling.

Workers report every byte; the GUI and the CLI want a steady ~10 updates a second, per file and for
the batch, each already carrying speed and ETA. Keeping that arithmetic here leaves the fetcher about
HTTP and files only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

EventKind = Literal["start", "progress", "retry", "done", "error", "paused", "resumed"]

_SMOOTHING = 0.3  # weight of the newest speed sample: steady but quick to follow a change


@dataclass(frozen=True)
class FetchEvent:
    """One thing that happened in a fetch; ``file`` is "" for whole-batch events.

    For a file's events ``bytes_*``, ``speed_bps`` and ``eta_s`` are that file's, for batch events the
    batch's; ``total_*`` are always the batch's. ``None`` means unknown (no size announced yet).
    """

    kind: EventKind
    file: str
    bytes_done: int
    bytes_total: int | None
    total_done: int
    total_bytes: int | None
    speed_bps: float
    eta_s: float | None
    message: str = ""
    error_kind: str = ""  # an "error" event's FastMTPError kind ("sha256-mismatch", …): what a window chooses by
    retry_in_s: float | None = None  # a "retry" event's wait before the next attempt (0: at once)

    def to_json(self) -> str:
        return json.dumps({"event": "fetch", **asdict(self)})


@dataclass
class _Meter:
    """Bytes and a smoothed speed for one file or for the batch."""

    done: int = 0
    total: int | None = None
    speed: float = 0.0
    tick_time: float = 0.0
    tick_bytes: int = 0
    emitted: float = float("-inf")

    def sample(self, now: float) -> None:
        elapsed = now - self.tick_time
        if elapsed > 0:
            current = max(0.0, (self.done - self.tick_bytes) / elapsed)
            self.speed = current if self.speed == 0.0 else _SMOOTHING * current + (1 - _SMOOTHING) * self.speed
        self.tick_time, self.tick_bytes = now, self.done

    def eta(self) -> float | None:
        if self.total is None or self.speed <= 0:
            return None
        return max(0.0, (self.total - self.done) / self.speed)


class Progress:
    """Thread-safe counters for a batch of files, emitting throttled events to one callback.

    Events are delivered one at a time (a lock around the callback), from whichever thread caused
    them: a GUI must hand them to its main thread itself, and should return quickly.
    """

    def __init__(self, on_event: Callable[[FetchEvent], None] | None, sizes: dict[str, int | None],
                 interval: float = 0.1) -> None:
        self._on_event = on_event
        self._interval = interval
        self._lock = threading.RLock()
        now = time.monotonic()
        self._files = {name: _Meter(total=size, tick_time=now) for name, size in sizes.items()}
        self._batch = _Meter(tick_time=now)
        self._refresh_total()

    def start(self, name: str, done: int, message: str = "") -> None:
        """A file begins (or resumes) with ``done`` bytes already in place."""
        with self._lock:
            meter = self._files[name]
            self._batch.done += done - meter.done
            meter.done, meter.tick_bytes, meter.tick_time = done, done, time.monotonic()
            self._emit("start", name, message)

    def set_total(self, name: str, total: int | None) -> None:
        """The server told us a size we did not know."""
        with self._lock:
            if self._files[name].total is None and total is not None:
                self._files[name].total = total
                self._refresh_total()

    def advance(self, name: str, count: int) -> None:
        """``count`` more bytes of ``name`` are on disk; emits at most every ``interval`` seconds."""
        with self._lock:
            meter = self._files[name]
            meter.done += count
            self._batch.done += count
            now = time.monotonic()
            if now - meter.emitted >= self._interval:
                meter.sample(now)
                self._emit("progress", name)
            if now - self._batch.emitted >= self._interval:
                self._batch.sample(now)
                self._emit("progress", "")

    def restart(self, name: str, message: str) -> None:
        """The file's bytes were thrown away (the server's file changed or it ignored Range)."""
        with self._lock:
            meter = self._files[name]
            self._batch.done -= meter.done
            self._batch.tick_bytes -= meter.done
            meter.done = meter.tick_bytes = 0
            self._emit("retry", name, message)

    def waiting(self, name: str, message: str, seconds: float) -> None:
        """A retry of ``name`` in ``seconds``: its speed (and the batch's) is unknown while it waits, so no ETA is
        shown frozen at its last value; the batch's line is refreshed too."""
        with self._lock:
            now = time.monotonic()
            meter = self._files[name]
            meter.speed, meter.tick_time, meter.tick_bytes = 0.0, now, meter.done
            self._batch.speed, self._batch.tick_time, self._batch.tick_bytes = 0.0, now, self._batch.done
            self._emit("retry", name, message, retry_in_s=round(seconds, 1))
            self._emit("progress", "")

    def event(self, kind: EventKind, name: str = "", message: str = "", error_kind: str = "") -> None:
        """An event now, unthrottled (start, retry, done, error, paused, resumed); an error carries its kind."""
        with self._lock:
            now = time.monotonic()
            self._batch.sample(now)
            if name:
                self._files[name].sample(now)
            self._emit(kind, name, message, error_kind)

    def _refresh_total(self) -> None:
        totals = [m.total for m in self._files.values()]
        self._batch.total = None if any(t is None for t in totals) else sum(t for t in totals if t is not None)

    def _emit(self, kind: EventKind, name: str, message: str = "", error_kind: str = "",
              retry_in_s: float | None = None) -> None:
        meter = self._files[name] if name else self._batch
        meter.emitted = time.monotonic()
        if self._on_event is None:
            return
        self._on_event(FetchEvent(kind=kind, file=name, bytes_done=meter.done, bytes_total=meter.total,
                                  total_done=self._batch.done, total_bytes=self._batch.total,
                                  speed_bps=round(meter.speed, 1), eta_s=_round(meter.eta()), message=message,
                                  error_kind=error_kind, retry_in_s=retry_in_s))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
