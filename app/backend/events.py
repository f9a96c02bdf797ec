"""Build progress as events: the CLI prints them (or JSON lines), the GUI will show them."""

from __future__ import annotations

import json
import re
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
