"""Adaptive depth's mechanism against simulated machines and text (tests/helpers/adaptive_sim.py), no engine.

Short sessions and hand-made rounds: it settles on the best depth, stops drafting when drafts are rejected,
sees a busier machine as load, keeps a stalled round out of its estimates, remembers and restores, and corrects
a record that makes drafting look dear. The sweeps that hold it within 3% of the fastest fixed depth on every
simulated machine, over whole sessions, are tests/integration/engine/test_adaptive_sessions.py (a minute of
simulation, too long for ``make check``). The engine-level checks of adaptive mode are in test_engine.py
(lossless) and ``bench spec`` (speed on this machine).
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
from collections import Counter

import pytest

from app.engine.adaptive import START_DEPTH, WARM_TESTS, AdaptiveDepth, RoundTiming
from app.engine.depth_worker import DepthWorker
from tests.helpers.adaptive_sim import (
    DEMO,
    FAST_CPU,
    FAST_EPYC_1T,
    GPU_LIKE,
    HIGH,
    PROMPT_SET,
    SCALED_EPYC_Q8,
    SCALED_XEON,
    SCALED_XEON_2T,
    SEEDS,
    SESSION,
    SLOW_CPU,
    XEON,
    Accept,
    Machine,
    run_adaptive,
    run_fixed,
    run_with_worker,
    together,
)


def test_tries_walk_out_from_the_measured_depths() -> None:
    """A drafting depth not measured yet is tried only next to one already played: from 3, say, 4 before 5 and 2
    before 1, never a jump to 8 on a guess. Drafting off (depth 0) is the exception: measured once whatever its
    neighbours (``test_drafting_off_is_measured_once_even_far_from_every_measured_depth``)."""
    for machine in (SLOW_CPU, FAST_CPU, GPU_LIKE):
        adaptive = AdaptiveDepth(draft_depth=8)
        adaptive.log = []
        run_adaptive(machine, HIGH, 1024, seed=3, adaptive=adaptive)
        played: set[int] = set()
        tries = []
        for decision in adaptive.log:
            if decision.reason == "explore" and decision.depth not in played and decision.depth != 0:
                assert {decision.depth - 1, decision.depth + 1} & played, (machine.name, decision.depth, played)
                tries.append(decision.depth)
            played.add(decision.depth)
        assert tries, machine.name  # it did try depths beyond where it started


def test_drafting_off_is_measured_once_even_far_from_every_measured_depth() -> None:
    """A one-token pass runs other kernels than a verify pass, so no measured batch says what it costs: on a fast
    EPYC with one thread, plain decoding ran 15% ahead of every depth while adaptive depth, predicting it as half a
    two-token pass, never played it (and depth 1 was never measured, so depth 0 was next to nothing measured).
    On that machine's shape, depth 0 is tried early, then kept."""
    for seed in SEEDS:
        adaptive = AdaptiveDepth(draft_depth=8)
        adaptive.log = []
        run_adaptive(FAST_EPYC_1T, DEMO, 1024, seed=seed, adaptive=adaptive)
        explored_off = [d.round for d in adaptive.log if d.reason == "explore" and d.depth == 0]
        assert explored_off and explored_off[0] <= 64, (seed, explored_off)  # once the load is known
        later = Counter(d.depth for d in adaptive.log[len(adaptive.log) // 2:])
        assert later[0] >= 0.8 * sum(later.values()), (seed, later)


def test_the_issue_17_machine_drafts_as_deep_as_the_fastest_fixed_depth() -> None:
    """The slow 2-core machine of issue 17 at the demo's acceptance 0.8 (0.9 or so per position): a straight
    cost line through noisy round times made adaptive draft 2.69 tokens per pass where depth 3 made 3.56."""
    accept: Accept = lambda p: 0.92 - 0.02 * p  # noqa: E731
    passes = tokens = 0
    for seed in SEEDS:
        totals, _ = run_adaptive(SLOW_CPU, accept, SESSION, seed)
        passes, tokens = passes + len(totals.depths), tokens + totals.tokens
    fixed3 = [run_fixed(SLOW_CPU, accept, SESSION, seed, 3) for seed in SEEDS]
    assert tokens / passes >= sum(t.tokens for t in fixed3) / sum(len(t.depths) for t in fixed3)


def _linear(base: float, per_depth: float) -> Machine:
    """A machine whose whole round cost is a straight line in the depth, all of it in the verify pass."""
    return Machine("line", rest=[base + per_depth * k for k in range(9)], first_pass=0.0, step=0.0, jitter=0.03)


def _rate(accept: Accept, machine: Machine, k: int) -> float:
    total, reach = 1.0, 1.0
    for position in range(k):
        reach *= accept(position)
        total += reach
    return total / machine.rest[k]


@pytest.mark.parametrize(("name", "acceptance", "base", "per_depth"), [
    ("cpu, steep verify", 0.8, 0.036, 0.0066),  # measured on the small demo model, one thread
    ("gpu, flat verify", 0.92, 0.020, 0.0004),
    ("cheap drafts, middling acceptance", 0.6, 0.030, 0.0015),
])
def test_settles_on_the_best_depth(name: str, acceptance: float, base: float, per_depth: float) -> None:
    machine, accept = _linear(base, per_depth), (lambda _p: acceptance)
    totals, _ = run_adaptive(machine, accept, 1500, seed=7)
    best = max(range(9), key=lambda k: _rate(accept, machine, k))
    top = Counter(totals.depths).most_common(1)[0][0]
    # the most chosen depth is the optimum or a neighbour whose rate is within 2% of it
    assert _rate(accept, machine, top) >= 0.98 * _rate(accept, machine, best), (name, top, best, totals.depths)
    assert len(set(totals.depths)) >= 2, "it must try more than one depth to learn the costs"


def test_stops_drafting_when_drafts_are_rejected() -> None:
    """Acceptance 0.05 with drafts that cost something: depth 0 most of the time, with rare probes."""
    totals, adaptive = run_adaptive(_linear(0.030, 0.005), lambda _p: 0.05, 600, seed=3, draft_depth=4)
    assert Counter(totals.depths)[0] > 0.8 * len(totals.depths), Counter(totals.depths)
    assert adaptive.best() == 0


def test_follows_acceptance_that_falls_with_depth() -> None:
    """Real drafts get worse with depth: the per-position model stops where the next draft stops paying."""
    accept: Accept = lambda p: [0.95, 0.85, 0.5, 0.2, 0.1, 0.1][p]  # noqa: E731
    machine = _linear(0.030, 0.004)
    totals, adaptive = run_adaptive(machine, accept, 1200, seed=11, draft_depth=6)
    best = max(range(7), key=lambda k: _rate(accept, machine, k))
    assert best == 3  # 1 + .95 + .81 + .40 tokens for 42 ms beats 2 for 38 ms and 4 for 46 ms
    assert Counter(totals.depths).most_common(1)[0][0] == best, Counter(totals.depths)
    assert adaptive.acceptance_at(0) == pytest.approx(0.95, abs=0.08)


def test_recovers_when_the_text_becomes_predictable() -> None:
    """After a stretch where drafting did not pay, the visits to other depths find the new best depth."""
    machine = _linear(0.030, 0.005)
    _, adaptive = run_adaptive(machine, lambda _p: 0.05, 250, seed=5, draft_depth=4)
    assert adaptive.best() == 0
    totals, _ = run_adaptive(machine, lambda _p: 0.9, 1200, seed=6, adaptive=adaptive)
    assert adaptive.best() == max(range(5), key=lambda k: _rate(lambda _p: 0.9, machine, k)) == 4
    assert Counter(totals.depths)[4] > 0.5 * len(totals.depths), Counter(totals.depths)


def test_starts_at_the_usual_depth() -> None:
    assert AdaptiveDepth(draft_depth=5).depth() == START_DEPTH == 3
    assert AdaptiveDepth(draft_depth=2).depth() == 2


def _timing(seconds: float, depth: int, step: float = 0.004, first: float = 0.005,
            built: bool | None = None) -> RoundTiming:
    draft = (first + step * (depth - 1)) if depth else 0.0
    return RoundTiming(seconds + draft, seconds, draft, step * max(depth - 1, 0), depth, built)


def _play(adaptive: AdaptiveDepth, depth: int, rounds: int, rest: float, scale: float = 1.0,
          built: bool | None = None) -> None:
    for _ in range(rounds):
        adaptive.depth()
        timing = _timing(rest, depth)
        adaptive.observe(depth, depth, depth - 1 if depth else 0, RoundTiming(
            timing.seconds * scale, timing.verify * scale, timing.draft * scale, timing.draft_steps * scale, depth,
            built))


def test_a_stalled_round_does_not_move_the_estimates() -> None:
    adaptive = AdaptiveDepth(draft_depth=4)
    _play(adaptive, 3, 12, 0.040)
    before = adaptive.predicted_seconds(3)
    _play(adaptive, 3, 1, 0.040, scale=3.0)  # another job took the core for a while
    assert adaptive.predicted_seconds(3) == pytest.approx(before, rel=0.02)


def test_a_busier_machine_is_seen_as_load_not_as_dearer_depths() -> None:
    adaptive = AdaptiveDepth(draft_depth=4)
    _play(adaptive, 3, 12, 0.040)
    _play(adaptive, 3, 12, 0.040, scale=2.0)
    assert adaptive.load == pytest.approx(2.0, rel=0.05)
    assert adaptive.predicted_seconds(3) == pytest.approx(2.0 * (0.040 + 0.005 + 0.008), rel=0.05)


def test_the_first_round_at_a_new_batch_size_does_not_count() -> None:
    """Changing the depth makes llama.cpp rebuild its graph: that round says nothing about the depth."""
    adaptive = AdaptiveDepth(draft_depth=4)
    _play(adaptive, 3, 1, 0.500)  # the very first round of a session (and a new batch size)
    _play(adaptive, 3, 10, 0.040)
    assert adaptive.predicted_seconds(3) == pytest.approx(0.040 + 0.005 + 0.008, rel=0.02)


def test_what_the_engine_says_about_the_graph_decides_which_rounds_count() -> None:
    """The engine tells whether a verify pass built llama.cpp's graph: with our patch's graph pool a switch back to
    a depth whose graph is kept is a fair sample, and a pass that built its graph at an unchanged batch size is not."""
    adaptive = AdaptiveDepth(draft_depth=4)
    _play(adaptive, 3, 1, 0.500, built=True)
    _play(adaptive, 3, 10, 0.040, built=False)
    _play(adaptive, 3, 1, 0.400, built=True)  # the same batch size, but its graph built again (a reserve, say)
    assert adaptive.predicted_seconds(3) == pytest.approx(0.040 + 0.005 + 0.008, rel=0.02)
    _play(adaptive, 2, 1, 0.500, built=True)  # a new batch size: its graph built
    _play(adaptive, 3, 1, 0.040, built=False)  # back: the depth's graph was kept, the round counts at once
    assert 3 not in adaptive.rest
    _play(adaptive, 2, 1, 0.030, built=False)  # the kept graph at once: counted, where a switch used not to be
    _play(adaptive, 3, 6, 0.040, built=False)  # the load after it
    assert len(adaptive.rest[3]) == 1  # the one kept-graph round at depth 2, not the built one
    assert adaptive.predicted_seconds(2) == pytest.approx(0.030 + 0.005 + 0.004, rel=0.02)
    assert adaptive.predicted_seconds(3) == pytest.approx(0.040 + 0.005 + 0.008, rel=0.02)


def _visits(adaptive: AdaptiveDepth) -> list[tuple[int, list[bool]]]:
    """Each visit of another measured depth in the log: its depth and whether each of its rounds counted."""
    visits: list[tuple[int, list[bool]]] = []
    last = -2
    for d in adaptive.log or []:
        if d.reason == "probe":
            if visits and visits[-1][0] == d.depth and d.round == last + 1:
                visits[-1][1].append(d.counted)
            else:
                visits.append((d.depth, [d.counted]))
            last = d.round
    return visits


@pytest.mark.parametrize("overlap", [False, True], ids=["in-turn", "beside-the-verify-pass"])
def test_a_first_visit_lasts_a_round_more_only_where_it_builds_its_verify_graph(overlap: bool) -> None:
    """A depth's first visit in a session lasts a round more because its first round builds the verify graph, which
    does not count. Where the engine says whether a pass built its graph, that is decided by what the pass did: after
    a warm-up that built the graphs of the depths visited (``prepare_visit_graphs``, batch sizes 3-6 here) their
    first visits are two counted rounds, as every later visit, where a depth not built ahead (0, a one-token pass)
    still takes three; without the warm-up every first visit takes three, the first of them built. A warm session
    (started from a record), so that the first visits are visits, not tries of depths never measured."""
    _, earlier = run_adaptive(SCALED_XEON_2T, DEMO, SESSION, seed=7)
    record = json.loads(json.dumps(earlier.snapshot()))
    for ahead in ((), (3, 4, 5, 6)):
        adaptive = AdaptiveDepth(draft_depth=8)
        assert adaptive.restore(record)
        adaptive.log = []
        run_with_worker(DepthWorker(adaptive, overlap), SCALED_XEON_2T, DEMO, SESSION, 1, report_built=True,
                        built_ahead=ahead)
        visits = _visits(adaptive)
        first = {depth: rounds for depth, rounds in reversed(visits)}  # each depth's first visit
        assert set(first) >= {0, 2, 4}, visits
        for depth, rounds in first.items():
            built = depth + 1 not in ahead
            assert rounds == ([False, True, True] if built else [True, True]), (ahead, depth, visits)
        later = [rounds for i, (depth, rounds) in enumerate(visits) if any(d == depth for d, _ in visits[:i])]
        assert later and all(rounds == [True, True] for rounds in later), visits


def test_a_depth_tried_while_the_load_changes_is_compared_at_equal_load() -> None:
    """The load climbs round by round while a neighbour is tried: its time is divided by the load around it,
    so it is not mistaken for a dearer (or cheaper) depth."""
    machine = Machine("rising", rest=[0.020, 0.040, 0.041, 0.042, 0.043, 0.044, 0.045, 0.046, 0.047],
                      first_pass=0.005, step=0.004, jitter=0.0)
    adaptive = AdaptiveDepth(draft_depth=8)
    run_adaptive(machine, lambda _p: 0.85, 400, seed=2, adaptive=adaptive)
    steady = {b: adaptive.rest_estimate(b) for b in (4, 5)}
    climbing = Machine("rising", rest=machine.rest, first_pass=0.005, step=0.004, jitter=0.0,
                       loads=[(t, 1.0 + t / 400) for t in range(0, 2000, 4)])
    run_adaptive(climbing, lambda _p: 0.85, 1500, seed=3, adaptive=adaptive)
    ratio = adaptive.rest_estimate(5) / adaptive.rest_estimate(4)
    assert ratio == pytest.approx(steady[5] / steady[4], rel=0.02)


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
def test_the_depths_not_played_keep_their_cost_next_to_the_one_played(machine: Machine) -> None:
    """A long session (6000 tokens, about 2000 rounds) mostly at one depth, the others visited now and then: each
    visited depth's verify cost keeps its true ratio to the played one's. The costs are kept in draft steps, a
    unit that does not move; when the step's own estimate was divided by the load (a round's time over its
    predicted time, which the estimates themselves set) the unit wandered, the lower median pushing it down
    round after round: the played depth's cost followed it, the others kept the old unit, and the played depth
    came to look 5% cheaper next to them than it was (real runs: 8-10%, docs/benchmarks.md). Here every part
    of a round is slowed alike, so a round's draft steps tell its load exactly; depth 1's rounds have no draft
    steps and are divided by the load around them instead, which is rougher, and are left out."""
    adaptive = AdaptiveDepth(draft_depth=8)
    run_adaptive(machine, DEMO, 6000, seed=1, adaptive=adaptive)  # no part_jitter: every part slowed alike
    played = adaptive.current + 1
    visited = [int(b) for b in adaptive.snapshot()["rest"] if int(b) >= 3 and int(b) != played]
    assert len(visited) >= 3, visited
    for batch in visited:
        measured = adaptive.rest_estimate(batch) / adaptive.rest_estimate(played)
        assert measured == pytest.approx(machine.rest[batch - 1] / machine.rest[played - 1], rel=0.015), batch


@pytest.mark.parametrize("seed", [1, 2])
def test_a_round_reads_its_load_from_its_first_draft_step_the_same_work_at_every_depth(seed: int) -> None:
    """The first draft step after the first pass costs more than each one after it (the Xeon, 2 threads: 0.40 ms,
    then 0.33 and 0.31), so the steps' average, read as a round's load, read a depth-2 round 5-23% busier than a
    depth-3 round in the real decision logs: depth 2's own rounds came out too cheap next to depth 3, and a warm
    quiet run of ``bench adaptive-load`` kept depth 2 for 136 rounds where k=3 ran 7% faster (issue 36). Read from
    the first step alone, the same work at every depth of 2 or more, every visited depth keeps its true cost next to
    the played one, and adaptive depth keeps up with the fastest fixed depth. (Read from the average on this machine:
    depth 2 played in 85% of the rounds, depth 3's estimate 12.5% too dear next to it, 0.90-0.91x of the fastest.)"""
    adaptive = AdaptiveDepth(draft_depth=8)
    totals, _ = run_adaptive(SCALED_XEON_2T, DEMO, 6000, seed, adaptive=adaptive)
    played = adaptive.current + 1
    visited = [int(b) for b in adaptive.snapshot()["rest"] if int(b) >= 3 and int(b) != played]
    assert played >= 4 and 3 in visited, (played, visited)  # depth 3 or deeper played, depth 2 visited
    for batch in visited:
        measured = adaptive.rest_estimate(batch) / adaptive.rest_estimate(played)
        truth = SCALED_XEON_2T.rest[batch - 1] / SCALED_XEON_2T.rest[played - 1]
        assert measured == pytest.approx(truth, rel=0.025), batch
    fastest = max(run_fixed(SCALED_XEON_2T, DEMO, 6000, seed, k).tps for k in range(9))
    assert totals.tps >= 0.96 * fastest


@pytest.mark.parametrize("seed", range(1, 7))
def test_a_machine_slowing_while_a_depth_is_played_is_load_not_its_cost(seed: int) -> None:
    """Where the draft steps are too short to tell the load (the scaled demo's d2t steps: their timings wander 35%
    apart from the verify pass's), the load index is measured against the played depth's own estimate. Its own
    rounds used to feed that estimate too, divided by an index that follows a slowing machine a few rounds late,
    so part of the slowing went into the estimate and stayed there when another depth was played (on the Xeon:
    depth 3 +4.5% in 15 rounds, then 1.17x depth 2's cost where its rounds measured 1.12x). Here the machine
    slows by 12% over 300 tokens while depth 2 is played: its estimate stays put (it moved 0.7-4.2% before) and
    the load index takes the whole slowing (``OWN_WEIGHT``)."""
    calm = dataclasses.replace(SCALED_EPYC_Q8, name="calm", wobble=0.0, stalls=0.0, jitter=0.01)
    slowing = dataclasses.replace(calm, name="slowing", slow_start=0,  # the same session going on
                                  loads=[(t, 1.0 + 0.12 * t / 300) for t in range(0, 304, 4)])
    _, adaptive = run_adaptive(calm, DEMO, 2000, seed)
    played = adaptive.current + 1
    assert played == 3  # depth 2, the fastest fixed depth on this machine
    cost, load = adaptive.rest_estimate(played), adaptive.load
    assert adaptive.gauge_weight() < 0.1  # the steps tell nothing here
    totals, _ = run_adaptive(slowing, DEMO, 300, seed + 50, adaptive=adaptive)
    assert adaptive.current + 1 == played and totals.depths.count(played - 1) >= 0.75 * len(totals.depths)
    assert adaptive.rest_estimate(played) == pytest.approx(cost, rel=0.005)
    assert adaptive.load / load > 1.08


def test_the_log_keeps_every_decision_with_predicted_and_measured_time() -> None:
    adaptive = AdaptiveDepth(draft_depth=8)
    adaptive.log = []
    totals, _ = run_adaptive(FAST_CPU, HIGH, 600, seed=1, adaptive=adaptive)
    assert len(adaptive.log) == len(totals.depths)
    assert [d.depth for d in adaptive.log] == totals.depths
    assert {d.reason for d in adaptive.log} >= {"start", "best", "explore", "probe"}
    later = [d for d in adaptive.log[40:] if d.predicted is not None and d.reason == "best"]
    errors = sorted(abs(d.seconds - d.predicted) / d.seconds for d in later)
    assert errors[len(errors) // 2] < 0.08  # the median round is predicted within a few percent
    entry = adaptive.log[-1].to_dict()
    assert set(entry) >= {"round", "depth", "reason", "seconds", "predicted", "load", "rates", "acceptance"}
    assert len(entry["rates"]) == 9


def test_without_a_log_nothing_is_kept() -> None:
    adaptive = AdaptiveDepth(draft_depth=4)
    run_adaptive(GPU_LIKE, HIGH, 200, seed=1, adaptive=adaptive)
    assert adaptive.log is None and sum(adaptive.chosen.values()) > 0


def test_random_acceptance_streams_do_not_break_it() -> None:
    """Acceptance that jumps between stretches of easy and hard text: it keeps drafting where it pays."""
    rng = random.Random(4)
    levels = [rng.choice([0.3, 0.6, 0.95]) for _ in range(20)]
    adaptive = AdaptiveDepth(draft_depth=8)
    for index, level in enumerate(levels):
        run_adaptive(FAST_CPU, lambda p, a=level: a, 150, seed=100 + index, adaptive=adaptive)
    assert 0 <= adaptive.best() <= 8 and adaptive.load > 0


# ------------------------------------------------------------------ a warm start (depth memory)

def test_a_record_that_makes_drafting_look_dear_is_proved_wrong_by_the_first_visits() -> None:
    """Issue 36: on the scaled demo a slow stretch at depth 1 left every drafting depth's verify estimate 1.6x too
    dear next to depth 0's; at depth 0 the load index is measured against depth 0's own estimate, so it could not
    see the error, and the next session, started from that record, kept depth 0 for 233 of 239 rounds where fixed
    depth 3 ran 1.25x faster. A visit that runs far faster than its estimate now replaces the estimate: the
    session leaves depth 0 within its first visits and keeps within 5% of the fastest fixed depth (its first
    ~100 rounds at depth 0 are the price), where the record alone would hold it at depth 0."""
    _, earlier = run_adaptive(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed=101)
    state = json.loads(json.dumps(earlier.snapshot()))
    state["rest"] = {b: cost * (1.6 if int(b) >= 2 else 1.0) for b, cost in state["rest"].items()}
    state["current"] = 0
    sessions, fixed = [], {k: [] for k in range(9)}
    for seed in range(1, 6):
        adaptive = AdaptiveDepth(draft_depth=8)
        assert adaptive.restore(state)
        assert adaptive._choose()[0] == 0  # the record, as the stuck session left it, settles on depth 0
        adaptive.log = []
        sessions.append(run_adaptive(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed, adaptive=adaptive)[0])
        assert adaptive.corrections >= 1
        assert sum(1 for d in adaptive.log if d.depth == 0) < len(adaptive.log) / 4, adaptive.chosen
        for k in fixed:
            fixed[k].append(run_fixed(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed, k))
    rates = {k: together(runs) for k, runs in fixed.items()}
    best = max(range(1, 9), key=lambda k: rates[k])
    assert rates[best] >= 1.2 * rates[0]  # the machine is the scaled demo's: drafting pays
    assert together(sessions) >= 0.95 * rates[best], (best, together(sessions), rates)


def test_a_record_a_little_too_dear_at_the_best_depth_is_corrected_at_its_first_visit() -> None:
    """The Xeon's quiet phase (bench adaptive-load, 2026-12-06, two threads): a cold run ended at depth 2 with depth
    3's cost remembered 12% too dear, and the warm runs from that record held depth 2 (6% slower) for 127 and 204
    rounds. One visit's error below ``PROVEN_FASTER`` is one sample in the window, and a depth's first visit in a
    session builds its verify graph in its first round, which does not count: it brought one sample against the two
    each remembered cost counts as, and the record stood until a second visit. The first visit now lasts a round
    more. Here the scaled demo's best depth is remembered 12% too dear and the depth below it as the one settled on."""
    _, earlier = run_adaptive(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed=101)
    state = json.loads(json.dumps(earlier.snapshot()))
    best = state["current"]
    state["rest"][str(best + 1)] *= 1.12
    state["current"] = best - 1
    away, ratios = [], []
    for seed in range(1, 21):
        adaptive = AdaptiveDepth(draft_depth=8)
        assert adaptive.restore(state)
        adaptive.log = []
        session = run_adaptive(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed, adaptive=adaptive)[0]
        away.append(sum(1 for decision in adaptive.log if decision.depth != best))
        ratios.append(together([session]) / together([run_fixed(SCALED_XEON, DEMO, 2 * PROMPT_SET, seed, best)]))
    assert statistics.median(away) <= 180, away  # 283 before
    assert statistics.median(ratios) >= 0.967, ratios  # 0.961 before


def test_a_warm_start_weighs_the_old_text_lightly_and_fits_a_different_limit() -> None:
    """The remembered acceptance counts as at most WARM_TESTS tests at each position (the new text takes over within
    a few dozen rounds), with each position's estimate as it was; a limit of 4 where the record had 8 keeps positions
    1-4 and a settled depth beyond the limit is not taken."""
    _, earlier = run_adaptive(GPU_LIKE, HIGH, 2048, seed=2)
    state = json.loads(json.dumps(earlier.snapshot()))
    assert state["current"] > 4 and state["tested"][0] > WARM_TESTS
    shallow = AdaptiveDepth(draft_depth=4)
    assert shallow.restore(state)
    assert len(shallow.tested) == 4 and shallow.tested[0] == pytest.approx(WARM_TESTS)
    for position in range(4):
        ratio = state["accepted"][position] / state["tested"][position]
        assert shallow.accepted[position] / shallow.tested[position] == pytest.approx(ratio)
    assert shallow.current == -1 and 0 <= shallow.depth() <= 4


# bench adaptive-load's loaded phase on the Xeon (2026-12-06 evening, one thread, both cores kept busy): the record
# its nine runs left. A batch of 8 costs less than batches of 5-7 on that CPU, so depth 7 is a contender on cost, and
# positions 4-7 had been tested 14.5, 9.1, 8.0 and 6.5 times
LOADED_REST = {1: 0.01324, 2: 0.01536, 3: 0.01889, 4: 0.02115, 5: 0.03129, 6: 0.03058, 7: 0.03389, 8: 0.03075,
               9: 0.0383}  # by batch size
LOADED_FIRST, LOADED_STEP = 0.00055, 0.00041
LOADED_RECORD: dict[str, object] = {
    "version": 2, "draft_depth": 8, "rest": {str(b): cost for b, cost in LOADED_REST.items()},
    "first_pass": LOADED_FIRST, "step": LOADED_STEP, "first_step": LOADED_STEP,
    "tested": [84.76, 72.94, 67.09, 14.47, 9.09, 8.04, 6.55, 0.0],
    "accepted": [62.61, 63.69, 55.25, 10.97, 7.99, 6.5, 5.58, 0.0], "current": 3, "rounds": 166, "gauge": 0.12386}


def test_a_record_keeps_what_its_deep_positions_measured_and_two_lucky_visits_do_not_move_the_depth() -> None:
    """Issue 36: in three of nine loaded runs a warm session switched from depth 3 to depth 7 after two visits of it
    kept 7 drafts of 7, and played it for 15-37 rounds (0.8-2.8% of those runs). The record's acceptance was scaled
    as a whole to WARM_TESTS at the first position, so positions 4-7 came back with a quarter of their tests and two
    rounds moved them from ~0.8 to 0.9 and more. Each position is now capped on its own: the deep ones keep their
    tests, the lucky rounds move them less, and depth 3 stays."""
    adaptive = AdaptiveDepth(draft_depth=8)
    assert adaptive.restore(json.loads(json.dumps(LOADED_RECORD)))
    assert adaptive.tested[:3] == pytest.approx([WARM_TESTS] * 3)
    assert adaptive.tested[3:7] == pytest.approx([14.47, 9.09, 8.04, 6.55])

    def timing(depth: int) -> RoundTiming:  # a round at the record's own costs, its verify graph kept
        return _timing(LOADED_REST[depth + 1], depth, LOADED_STEP, LOADED_FIRST, built=False)

    for accepted in [3, 2, 3, 0, 3, 1] * 5:  # the depth played, at its usual acceptance
        assert adaptive.depth() == 3
        adaptive.observe(3, min(3, accepted + 1), accepted, timing(3))
    assert adaptive._choose()[0] == 3
    for _ in range(2):  # two visits of depth 7 that keep every draft
        adaptive.observe(7, 7, 7, timing(7))
    assert adaptive._choose()[0] == 3, adaptive.rates()


def _record(gauge: float | None) -> dict[str, object]:
    """A hand-made depth memory: depth 2 settled and best, the draft steps as a load reading weighed ``gauge``."""
    state: dict[str, object] = {
        "version": 2, "draft_depth": 8, "rest": {"1": 0.005, "2": 0.0065, "3": 0.008, "4": 0.0115},
        "first_pass": 0.0003, "step": 0.00025, "first_step": 0.00025, "tested": [100.0, 80.0] + [0.0] * 6,
        "accepted": [80.0, 64.0] + [0.0] * 6, "current": 2, "rounds": 200}
    if gauge is not None:
        state["gauge"] = gauge
    return state


@pytest.mark.parametrize("gauge", [0.0, None])
def test_a_warm_session_reads_its_first_rounds_load_the_way_the_session_before_had_learned(
        gauge: float | None) -> None:
    """Issue 39: the session before had found that its draft steps (0.3 ms, timed 30% apart) do not tell a verify
    pass's load (``gauge_weight`` near 0), but a warm session read its first rounds' load from them all the same
    until it had gauged them itself (ten rounds): on a machine 1.4x busier than the record's unit, with steps that
    did not show it, its first samples came out 1.4x too dear beside the two each remembered cost counts as, the
    estimate moved to them and the session left its best depth (a warm run held depth 1 for 126 rounds where depth 2
    ran 5% faster). Restored with the record's gauge, they are divided by the load index: the estimate and the depth
    stay. A record without a gauge (written before it was kept) starts as a cold session does: the old behaviour."""
    adaptive = AdaptiveDepth(draft_depth=8)
    assert adaptive.restore(_record(gauge))
    assert adaptive.gauge_prior == (1.0 if gauge is None else gauge)
    chosen = []
    for _ in range(6):
        chosen.append(adaptive.depth())
        if chosen[-1] != 2:
            break
        verify = 0.008 * 1.4  # the whole machine 1.4x slower than the record's unit ...
        draft = 0.0003 * 1.4 + 0.00025  # ... but for the draft step, as its noisy reading can come out
        adaptive.observe(2, 2, 2, RoundTiming(verify + draft, verify, draft, 0.00025, 2, built=False))
    if gauge is None:
        assert chosen[-1] != 2 and adaptive.rest_estimate(3) > 0.008 * 1.3
    else:
        assert chosen == [2] * 6 and adaptive.rest_estimate(3) == pytest.approx(0.008, rel=0.03)
    assert adaptive.snapshot()["gauge"] == adaptive.gauge_weight()


@pytest.mark.parametrize("damage", [
    {"version": 1}, {"version": 3}, {"rest": {}}, {"rest": {"4": -0.01}}, {"rest": {"4": float("nan")}},
    {"rest": {"x": 0.1}}, {"rest": {"40": 0.1}}, {"rest": [1, 2]}, {"step": "fast"}, {"accepted": [5000.0] + [0.0] * 7},
    {"tested": [1.0]}, {"tested": None}, {"first_pass": 0.0}, {"first_step": None}, {"first_step": -0.001},
    {"gauge": 1.5}, {"gauge": float("nan")},
    {"gauge": "high"},
], ids=lambda d: json.dumps(d))
def test_a_record_that_makes_no_sense_is_a_cold_start(damage: dict[str, object]) -> None:
    _, earlier = run_adaptive(XEON, DEMO, 300, seed=1)
    state = {**earlier.snapshot(), **damage}
    adaptive = AdaptiveDepth(draft_depth=8)
    assert not adaptive.restore(state)
    assert not adaptive.warm and not adaptive.rest and adaptive.depth() == START_DEPTH
    assert adaptive.restore(earlier.snapshot())  # the same record undamaged is taken
