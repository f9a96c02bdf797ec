"""Adaptive depth against every fixed depth on a grid of simulated cases, as a markdown table.

``python -m tests.helpers.adaptive_grid`` prints, for each machine of tests/helpers/adaptive_sim.py at high, low and
the demo's acceptance, in sessions of 2048 tokens (5 seeds), 508 tokens (the first prompt set of a fresh ``bench spec``
session, 20 seeds) and 1016 tokens with easy and hard passages (10 seeds), the fastest fixed depth 1..8 and
adaptive depth's tokens per second against it. docs/benchmarks.md quotes it for the current method and for the
one before (that file's ``app/engine/adaptive.py`` swapped in). It is a study, not a test: the tests hold the
cases that must stay within 3% (tests/integration/engine/test_adaptive_sessions.py).
"""

from __future__ import annotations

import random

from tests.helpers import adaptive_sim as sim


def passages(seed: int, length: int = 4000) -> list[tuple[int, float]]:
    """Easy and hard passages of 20-80 tokens: acceptance times 0.5, 0.8, 1.0 (twice as likely) or 1.15."""
    rng = random.Random(seed)
    out, token = [], 0
    while token < length:
        out.append((token, rng.choice([0.5, 0.8, 1.0, 1.0, 1.15])))
        token += rng.randint(20, 80)
    return out


def main() -> None:
    print("| machine | acceptance | session | fastest fixed depth | its tok/s | adaptive tok/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for machine in (sim.XEON, sim.SLOW_CPU, sim.FAST_CPU, sim.GPU_LIKE):
        for name, accept in (("high", sim.HIGH), ("low", sim.LOW), ("demo 0.84", sim.DEMO)):
            for tokens, seeds, varied in ((2048, range(1, 6), False), (508, range(1, 21), False),
                                          (1016, range(1, 11), True)):
                adaptive, fixed = sim.against_fixed(machine, accept, tokens, seeds,
                                                    passages if varied else lambda _seed: ())
                best = max(range(1, 9), key=lambda k: fixed[k])
                session = f"{tokens} tokens x {len(seeds)}" + (", passages" if varied else "")
                print(f"| {machine.name} | {name} | {session} | k={best} | {fixed[best]:.2f} | {adaptive:.2f} | "
                      f"{adaptive / fixed[best]:.3f}x |")


if __name__ == "__main__":
    main()
