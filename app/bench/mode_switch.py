"""``bench mode-switch``: how long a drafting-mode switch keeps the person waiting, through the engine process.

The window switches modes (off, the embedded head, the d2t sidecar) by asking its engine worker to load again;
the worker keeps the target and the sidecars it loaded (``app.engine.model_pool``), so a switch should cost a new
context, not a new model. This starts the real worker (``EngineClient``, the window's own path), loads the target
once (the first load, reported on its own), then switches round the modes ``rounds`` times, timing each load call
from request to answer and noting how many models the worker had to read from disk. After every switch a short
greedy reply proves the new mode answers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

from app.bench.report import spread
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, Mode

ORDER: tuple[Mode, ...] = ("embedded", "sidecar", "off")  # every switch of the cycle off -> embedded -> d2t -> off


@dataclass
class SwitchTiming:
    """The switches into one mode: wall seconds per load call, and models read from disk per call."""

    into: Mode
    seconds: list[float] = field(default_factory=list)
    models_loaded: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"into": self.into, **spread(self.seconds, "s", 3), "samples": len(self.seconds),
                "models_loaded": self.models_loaded}


@dataclass
class ModeSwitchBench:
    model: str
    first_load_s: float
    rounds: int
    load_average: float
    switches: list[SwitchTiming]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "first_load_s": round(self.first_load_s, 3), "rounds": self.rounds,
                "load_average": self.load_average, "switches": [s.to_dict() for s in self.switches]}

    def markdown(self) -> str:
        lines = [f"Drafting-mode switches through the engine worker ({self.model}; first load "
                 f"{self.first_load_s:.2f} s; {self.rounds} rounds; load average {self.load_average:.2f})", "",
                 "| switch into | median s | min | max | models read from disk |", "|---|---|---|---|---|"]
        for s in self.switches:
            d = s.to_dict()
            lines.append(f"| {s.into} | {d['median_s']:.3f} | {d['min_s']:.3f} | {d['max_s']:.3f} | "
                         f"{sum(s.models_loaded)} in {len(s.models_loaded)} |")
        return "\n".join(lines)


def _loaded(answer: dict[str, Any]) -> int:
    if answer.get("kind") != "loaded":
        raise RuntimeError(f"the engine did not load: {answer.get('message') or answer}")
    return int(answer.get("models_loaded", 0))


def _answers(client: EngineClient) -> None:
    events = list(client.generate([Message("user", "Say something.")], ChatOptions(max_tokens=8)))
    if not events or events[-1].get("kind") != "done":
        raise RuntimeError(f"the engine did not answer after the switch: {events[-1] if events else 'nothing'}")


def run(config: EngineConfig, name: str, *, rounds: int = 5) -> ModeSwitchBench:
    """Load ``config`` drafting off, then switch into each mode of :data:`ORDER` ``rounds`` times."""
    modes = {"off": replace(config, mode="off"), "embedded": replace(config, mode="embedded"),
             "sidecar": replace(config, mode="sidecar")}
    switches = {mode: SwitchTiming(mode) for mode in ORDER}
    with EngineClient() as client:
        client.start()
        started = time.perf_counter()
        _loaded(client.load(modes["off"]))
        first = time.perf_counter() - started
        _answers(client)
        for _ in range(rounds):
            for mode in ORDER:
                started = time.perf_counter()
                read = _loaded(client.load(modes[mode]))
                switches[mode].seconds.append(time.perf_counter() - started)
                switches[mode].models_loaded.append(read)
                _answers(client)
    return ModeSwitchBench(name, first, rounds, round(os.getloadavg()[0], 2), [switches[m] for m in ORDER])
