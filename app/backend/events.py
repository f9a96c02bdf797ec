"""Build progress as events: the CLI prints them (or JSON lines), the GUI will show them."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

EventKind = Literal["step", "log", "progress", "done", "error"]

_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass(frozen=True)
class BuildEvent:
    kind: EventKind
    message: str = ""
    percent: float | None = None
    step: str = ""
    elapsed: float = 0.0  # seconds since the build started

    def to_json(self) -> str:
        return json.dumps(asdict(self))


EventSink = Callable[[BuildEvent], None]


def ninja_fraction(line: str) -> float | None:
    """The fraction done from a ninja ``[n/N]`` status line, or None for other lines."""
    match = _NINJA_PROGRESS.match(line)
    if match is None:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return done / total if total else None


class CancelToken:
    """Shared between the caller and a running build; ``cancel()`` stops the build promptly.

    The builder registers a kill function for its current child process, so cancelling
    does not wait for a long compile step to finish on its own.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._kill: Callable[[], None] | None = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            if self._kill is not None:
                self._kill()

    def set_kill(self, kill: Callable[[], None] | None) -> None:
        with self._lock:
            self._kill = kill
        if kill is not None and self.cancelled:
            kill()
