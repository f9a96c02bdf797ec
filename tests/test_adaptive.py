"""Adaptive depth against simulated streams whose best depth is known in closed form.

The simulation draws each draft's acceptance from a seeded generator and charges each round a cost
that is a straight line in the depth, the way verify and draft passes cost on a CPU (steep) or a GPU
(flat). The engine-level test of adaptive mode is in test_engine.py (lossless) and bench spec (speed).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from app.engine.adaptive import AdaptiveDepth


def expected_tokens(accept: Callable[[int], float], k: int) -> float:
    total, reach = 1.0, 1.0
    for position in range(k):
        reach *= accept(position)
        total += reach
    return total


def optimum(accept: Callable[[int], float], base: float, per_depth: float, n_max: int) -> int:
    return max(range(n_max + 1), key=lambda k: expected_tokens(accept, k) / (base + per_depth * k))


def simulate(adaptive: AdaptiveDepth, accept: Callable[[int], float], base: float, per_depth: float,
             rounds: int, rng: random.Random) -> Counter[int]:
    """Run ``rounds`` rounds; returns how often each depth was chosen."""
    chosen: Counter[int] = Counter()
    for _ in range(rounds):
        depth = adaptive.depth()
        chosen[depth] += 1
        accepted = 0
        while accepted < depth and rng.random() < accept(accepted):
            accepted += 1
        tested = min(depth, accepted + 1)
        noise = rng.uniform(0.97, 1.03)  # a shared machine: round times jitter a few percent
        adaptive.observe(depth, tested, accepted, (base + per_depth * depth) * noise)
    return chosen


@pytest.mark.parametrize(("name", "acceptance", "base", "per_depth"), [
    ("cpu, steep verify", 0.8, 0.036, 0.0066),  # measured on the small demo model, one thread
    ("gpu, flat verify", 0.92, 0.020, 0.0004),
    ("cheap drafts, middling acceptance", 0.6, 0.030, 0.0015),
])
def test_settles_on_the_best_depth(name: str, acceptance: float, base: float, per_depth: float) -> None:
    rng = random.Random(7)
    adaptive = AdaptiveDepth(n_max=8)
    best = optimum(lambda _p: acceptance, base, per_depth, 8)
    chosen = simulate(adaptive, lambda _p: acceptance, base, per_depth, 400, rng)
    top = chosen.most_common(1)[0][0]
    # the most chosen depth is the optimum or a neighbour whose rate is within 2% of it
    rate = lambda k: expected_tokens(lambda _p: acceptance, k) / (base + per_depth * k)  # noqa: E731
    assert rate(top) >= 0.98 * rate(best), (name, top, best, chosen)
    assert len(chosen) >= 2, "it must try more than one depth to learn the cost slope"


def test_stops_drafting_when_drafts_are_rejected() -> None:
    """Acceptance 0.05 with drafts that cost something: depth 0 most of the time, with rare probes."""
    rng = random.Random(3)
    adaptive = AdaptiveDepth(n_max=4)
    chosen = simulate(adaptive, lambda _p: 0.05, 0.030, 0.005, 300, rng)
    assert chosen[0] > 0.8 * 300, chosen
    assert adaptive.best() == 0


def test_follows_acceptance_that_falls_with_depth() -> None:
    """Real drafts get worse with depth: the per-position model stops where the next draft stops paying."""
    accept = lambda p: [0.95, 0.85, 0.5, 0.2, 0.1, 0.1][p]  # noqa: E731
    rng = random.Random(11)
    adaptive = AdaptiveDepth(n_max=6)
    best = optimum(accept, 0.030, 0.004, 6)
    chosen = simulate(adaptive, accept, 0.030, 0.004, 400, rng)
    assert best == 3  # 1 + .95 + .81 + .40 tokens for 42 ms beats 2 for 38 ms and 4 for 46 ms
    assert chosen.most_common(1)[0][0] == best, chosen
    assert adaptive.acceptance_at(0) == pytest.approx(0.95, abs=0.08)


def test_recovers_when_the_text_becomes_predictable() -> None:
    """After a stretch where drafting did not pay, the periodic probes find the new best depth."""
    rng = random.Random(5)
    adaptive = AdaptiveDepth(n_max=4)
    simulate(adaptive, lambda _p: 0.05, 0.030, 0.005, 200, rng)
    assert adaptive.best() == 0
    chosen = simulate(adaptive, lambda _p: 0.9, 0.030, 0.005, 300, rng)
    assert adaptive.best() == optimum(lambda _p: 0.9, 0.030, 0.005, 4) == 4
    assert chosen[4] > 150, chosen


def test_before_any_round_it_drafts_at_the_deepest_depth() -> None:
    adaptive = AdaptiveDepth(n_max=5)
    assert adaptive.best() == 5  # the optimistic prior with equal costs: deeper always pays
    assert adaptive.depth() == 5
