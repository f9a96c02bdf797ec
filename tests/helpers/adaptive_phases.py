"""A study, not a test: ``bench adaptive-load``'s three phases on a simulated machine (tests/helpers/adaptive_sim.py).

Quiet, loaded (every part of a round slower alike, and wobblier), quiet again; each phase a fresh session started
from the record the phase before left, as the benchmark carries adaptive depth's memory. Prints adaptive depth's
tokens per second against the fastest fixed depth of each phase, pooled over the seeds. docs/benchmarks.md quotes it.

    PYTHONPATH=. .venv/bin/python -m tests.helpers.adaptive_phases [TOKENS] [SEEDS]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from app.engine.adaptive import AdaptiveDepth
from tests.helpers.adaptive_sim import DEMO, SCALED_XEON, Machine, Totals, run_adaptive, run_fixed, together

PHASES = (("quiet", 1.0, 0.03), ("loaded", 1.55, 0.15), ("quiet again", 1.0, 0.03))  # name, load, wobble


def study(machine: Machine, tokens: int, seeds: range) -> dict[str, tuple[float, int]]:
    """Per phase: adaptive / the fastest fixed depth 1..8, and that depth."""
    adaptive: dict[str, list[Totals]] = {name: [] for name, _, _ in PHASES}
    fixed: dict[str, dict[int, list[Totals]]] = {name: {k: [] for k in range(9)} for name, _, _ in PHASES}
    for seed in seeds:
        record: dict[str, Any] | None = None
        for i, (name, load, wobble) in enumerate(PHASES):
            shaped = dataclasses.replace(machine, loads=((0, load),), wobble=wobble)
            depth = AdaptiveDepth(8)
            if record is not None:
                depth.restore(json.loads(json.dumps(record)))
            totals, depth = run_adaptive(shaped, DEMO, tokens, seed * 10 + i, adaptive=depth)
            record = depth.snapshot()
            adaptive[name].append(totals)
            for k in range(9):
                fixed[name][k].append(run_fixed(shaped, DEMO, tokens, seed * 10 + i, k))
    found = {}
    for name, _, _ in PHASES:
        rates = {k: together(runs) for k, runs in fixed[name].items()}
        best = max(range(1, 9), key=lambda k: rates[k])
        found[name] = (together(adaptive[name]) / rates[best], best)
    return found


def main() -> None:
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    seeds = range(1, 1 + (int(sys.argv[2]) if len(sys.argv) > 2 else 10))
    for name, (ratio, best) in study(SCALED_XEON, tokens, seeds).items():
        print(f"{name:12s} adaptive / best fixed (k={best}) {ratio:.3f}x")


if __name__ == "__main__":
    main()
