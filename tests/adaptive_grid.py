"""Adaptive depth against every fixed depth on a grid of simulated cases, as a markdown table.

``python -m tests.adaptive_grid`` prints, for each machine of tests/adaptive_sim.py at high, low and the demo's
acceptance, in sessions of 2048 tokens (5 seeds), 508 tokens (the first prompt set of a fresh ``bench spec``
session, 20 seeds) and 1016 tokens with easy and hard passages (10 seeds), the fastest fixed depth 1..8 and
adaptive depth's tokens per second against it. docs/benchmarks.md quotes it for the current method and for the
one before (that file's ``app/engine/adaptive.py`` swapped in). It is a study, not a test: the tests hold the
cases that must stay within 3% (test_adaptive.py).
"""

from __future__ import annotations

import random

from tests.adaptive_sim import (
    DEMO,
    FAST_CPU,
    GPU_LIKE,
    HIGH,
    LOW,
    SLOW_CPU,
    XEON,
    Accept,
    Machine,
    Totals,
    run_adaptive,
    run_fixed,
)


def passages(seed: int, length: int = 4000) -> list[tuple[int, float]]:
    """Easy and hard passages of 20-80 tokens: acceptance times 0.5, 0.8, 1.0 (twice as likely) or 1.15."""
    rng = random.Random(seed)
    out, token = [], 0
    while token < length:
        out.append((token, rng.choice([0.5, 0.8, 1.0, 1.0, 1.15])))
        token += rng.randint(20, 80)
    return out


def _together(runs: list[Totals]) -> float:
    return sum(t.tokens for t in runs) / sum(t.seconds for t in runs)


def case(machine: Machine, accept: Accept, tokens: int, seeds: range, varied: bool) -> tuple[int, float, float]:
    """The fastest fixed depth 1..8, its tokens per second and adaptive depth's, over the seeds' sessions."""
    text = {seed: passages(seed) if varied else [] for seed in seeds}
    adaptive = _together([run_adaptive(machine, accept, tokens, s, stretches=text[s])[0] for s in seeds])
    fixed = {k: _together([run_fixed(machine, accept, tokens, s, k, text[s]) for s in seeds]) for k in range(1, 9)}
    best = max(fixed, key=lambda k: fixed[k])
    return best, fixed[best], adaptive


def main() -> None:
    print("| machine | acceptance | session | fastest fixed depth | its tok/s | adaptive tok/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for machine in (XEON, SLOW_CPU, FAST_CPU, GPU_LIKE):
        for name, accept in (("high", HIGH), ("low", LOW), ("demo 0.84", DEMO)):
            for tokens, seeds, varied in ((2048, range(1, 6), False), (508, range(1, 21), False),
                                          (1016, range(1, 11), True)):
                best, speed, adaptive = case(machine, accept, tokens, seeds, varied)
                session = f"{tokens} tokens x {len(seeds)}" + (", passages" if varied else "")
                print(f"| {machine.name} | {name} | {session} | k={best} | {speed:.2f} | {adaptive:.2f} | "
                      f"{adaptive / speed:.3f}x |")


if __name__ == "__main__":
    main()
