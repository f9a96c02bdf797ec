"""What the Benchmark page measures: the model the chat has chosen, with the files each drafting mode needs.

The model selector builds it (``ModelSelector.bench_model``) and the Benchmark page reads it, so it lives in the
Models room: the Benchmark page stands on the Models room, never the other way round."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BenchModel:
    """The model the page measures: the chat's choice, with the files each mode needs."""

    name: str
    target: Path
    d2t: Path | None = None
    full: Path | None = None
    mtp_head: bool = True

    def has(self, mode: str) -> bool:
        return {"off": True, "embedded": self.mtp_head, "d2t": self.d2t is not None,
                "full": self.full is not None}[mode]
