"""Adaptive depth re-checks itself when the load changes (issue 36 item 4), on the simulated machines.

Phases as ``bench adaptive-load`` runs them: quiet, loaded, quiet. The load here is another job that slows the draft
head's small passes 8x and the verify pass not at all, so the best depth itself moves (deep when quiet, no drafting
under load); the estimates alone read it as load on everything. After each change the depth rejected before is
visited again and chosen once it is best, within a bounded number of rounds, every seed; and a load on everything
alike (the machines' own ``loads``) still changes nothing (test_adaptive_sessions.py's 3% cases hold).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from app.engine.adaptive import AdaptiveDepth, RoundTiming
from tests.helpers.adaptive_sim import DEMO, FAST_CPU, HIGH, SLOW_CPU, XEON, Machine, run_adaptive, simulate

LOADED, QUIET_AGAIN, END = 1500, 3000, 4500  # tokens: the phases' starts and the end
MACHINE = dataclasses.replace(XEON, draft_loads=((0, 1.0), (LOADED, 8.0), (QUIET_AGAIN, 1.0)))
WITHIN = 256  # rounds after a change by which the new best is played (probes come every <= 96 rounds' time)
# ... and back from depth 0 (no draft pass there to notice the change: only visits can) in half that: visits from
# depth 0 are paced by their predicted rate's shortfall, not by their longer rounds (it took 132-221 rounds)
BACK_WITHIN = 128


def _run(seed: int) -> tuple[list[tuple[int, int, str]], AdaptiveDepth]:
    """(token reached, depth, reason) of every round, and the adaptive depth."""
    adaptive = AdaptiveDepth(8)
    adaptive.log = []
    rounds: list[tuple[int, int, str]] = []
    reached = [0]

    def observe(depth: int, tested: int, accepted: int, timing: RoundTiming) -> None:
        adaptive.observe(depth, tested, accepted, timing)
        assert adaptive.log is not None
        rounds.append((reached[0], depth, adaptive.log[-1].reason))
        reached[0] += accepted + 1

    simulate(MACHINE, DEMO, END, seed, adaptive.depth, observe)
    return rounds, adaptive


def _settled_after(rounds: list[tuple[int, int, str]], start_token: int, good: set[int]) -> int | None:
    """Rounds from the first one at ``start_token`` until 16 of 20 rounds in a row are at a depth in ``good``."""
    start = next(i for i, (token, _, _) in enumerate(rounds) if token >= start_token)
    for i in range(start, len(rounds) - 20):
        if sum(depth in good for _, depth, _ in rounds[i:i + 20]) >= 16:
            return i - start
    return None


@pytest.mark.parametrize("seed", range(1, 6))
def test_a_depth_rejected_under_one_load_is_probed_and_chosen_again_under_another(seed: int) -> None:
    rounds, adaptive = _run(seed)
    quiet = Counter(depth for token, depth, _ in rounds if token < LOADED)
    assert quiet.most_common(1)[0][0] >= 3  # quiet: drafting deep pays, depth 0 rejected
    to_shallow = _settled_after(rounds, LOADED, {0, 1})
    assert to_shallow is not None and to_shallow <= WITHIN, to_shallow  # under load: no drafting, soon
    back = _settled_after(rounds, QUIET_AGAIN, {3, 4, 5, 6})
    assert back is not None and back <= BACK_WITHIN, back  # quiet again: the deep depths rejected under load come back
    assert adaptive.shifts >= 2  # both changes were noticed
    # while loaded, a rejected deep depth was still visited now and then, at a bounded cost
    start = next(i for i, (token, _, _) in enumerate(rounds) if token >= LOADED + 500)
    end = next(i for i, (token, _, _) in enumerate(rounds) if token >= QUIET_AGAIN)
    loaded = rounds[start:end]
    probes = [depth for _, depth, reason in loaded if reason == "probe"]
    assert probes, "no depth was looked at again while loaded"
    assert len(probes) <= len(loaded) / 8  # visits are a small share of the rounds


@pytest.mark.parametrize("machine", [FAST_CPU, SLOW_CPU, XEON], ids=lambda m: m.name)
def test_a_load_on_everything_alike_is_not_taken_for_a_change(machine: Machine) -> None:
    """These machines' loads step up and down 1.4-2x on every part of a round alike: the estimates take that out as
    load, and the drafts' share of a round stays put, so no survey of every depth is paid for."""
    for seed in range(1, 4):
        _totals, adaptive = run_adaptive(machine, HIGH, 2048, seed)
        assert adaptive.shifts == 0


def test_rounds_without_drafts_are_not_watched_for_a_change() -> None:
    """At depth 0 the engine still times a little bookkeeping as draft time (microseconds that jitter by half): no
    draft was made, so there is no share to watch, and no survey of every depth follows (a sidecar whose drafts
    always fail stays at depth 0 and hardly drafts)."""
    adaptive = AdaptiveDepth(4)
    for i in range(400):
        depth = adaptive.depth()
        made = depth
        draft = 0.002 * made + (0.000002 if i % 2 else 0.000004)
        timing = RoundTiming(0.05 + draft, 0.05, draft, 0.0015 * max(made - 1, 0), made)
        adaptive.observe(depth, made, 0, timing)  # every draft rejected
    assert adaptive.shifts == 0
    assert adaptive.chosen[0] > 0.7 * sum(adaptive.chosen.values())
