"""Adaptive depth re-checks itself when the load changes (issue 36 item 4), on the simulated machines.

Phases as ``bench adaptive-load`` runs them: quiet, loaded, quiet. The load here is another job that slows the draft
head's small passes 8x and the verify pass not at all, so the best depth itself moves (deep when quiet, no drafting
under load); the estimates alone read it as load on everything. After each change the depth rejected before is
visited again and chosen once it is best, within a bounded number of rounds, every seed; and a load on everything
alike (the machines' own ``loads``) still changes nothing (test_adaptive_sessions.py's 3% cases hold).
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections import Counter

import pytest

from app.engine.adaptive import AdaptiveDepth, RoundTiming
from tests.helpers.adaptive_sim import (
    DEMO,
    FAST_CPU,
    HIGH,
    REPLY,
    SCALED_XEON_2T,
    SLOW_CPU,
    XEON,
    Machine,
    ms,
    run_adaptive,
    run_fixed,
    simulate,
)

LOADED, QUIET_AGAIN, END = 1500, 3000, 4500  # tokens: the phases' starts and the end
MACHINE = dataclasses.replace(XEON, draft_loads=((0, 1.0), (LOADED, 8.0), (QUIET_AGAIN, 1.0)))
WITHIN = 256  # rounds after a change by which the new best is played (probes come every <= 96 rounds' time)
# ... and back from depth 0 (no draft pass there to notice the change: only visits can) in half that: visits from
# depth 0 are paced by their predicted rate's shortfall, not by their longer rounds (it took 132-221 rounds)
BACK_WITHIN = 128


def _run(seed: int, machine: Machine = MACHINE, end: int = END,
         noticed: list[int] | None = None) -> tuple[list[tuple[int, int, str]], AdaptiveDepth]:
    """(token reached, depth, reason) of every round, and the adaptive depth; ``noticed`` gets the count of rounds
    played when each load change was noticed."""
    adaptive = AdaptiveDepth(8)
    adaptive.log = []
    rounds: list[tuple[int, int, str]] = []
    reached = [0]

    def observe(depth: int, tested: int, accepted: int, timing: RoundTiming) -> None:
        shifts = adaptive.shifts
        adaptive.observe(depth, tested, accepted, timing)
        assert adaptive.log is not None
        rounds.append((reached[0], depth, adaptive.log[-1].reason))
        reached[0] += accepted + 1
        if noticed is not None and adaptive.shifts > shifts:
            noticed.append(len(rounds))

    simulate(machine, DEMO, end, seed, adaptive.depth, observe)
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


# The built-in demo on the Xeon with two threads, quiet but for another job's moments: a pause of 4.5 ms in 7% of the
# rounds, landing in the short draft passes now and then (``bench adaptive-load``'s quiet phase at 512-token replies)
MOMENTS = dataclasses.replace(SCALED_XEON_2T, hiccups=0.07, hiccup=0.0045)


def test_another_jobs_moments_are_not_taken_for_a_load_change() -> None:
    """A pause that lands in one round's draft passes makes that round's drafts' share 4-6x its usual. The recent
    average of the share read each such round as a load change: 22 surveys of every depth in these ten sessions, the
    measured rates then free to overrule the estimates (depth 7 played for a hundred rounds), 0.974x fixed depth 3
    where the same sessions without the moments ran 0.986x. Each round's share now enters the averages held within
    ``SHIFT`` squared of the longer one, so a moment moves the recent one a tenth; a load that stays on the drafts is
    still noticed within a few rounds (the tests above and below)."""
    shifts, ratios = 0, []
    for seed in range(1, 11):
        totals, adaptive = run_adaptive(MOMENTS, DEMO, 2048, seed, reply=REPLY)
        shifts += adaptive.shifts
        ratios.append(totals.tps / run_fixed(MOMENTS, DEMO, 2048, seed, 3, reply=REPLY).tps)
    assert shifts <= 2, shifts
    assert statistics.mean(ratios) >= 0.98, ratios


def _visit_timing(depth: int, spiked: bool) -> RoundTiming:
    """A round of a machine whose best depth is 3 with drafts accepted 2 or 3 at a time; ``spiked``: a pause of
    another job's made its draft passes 5x as long."""
    rest = (0.0086, 0.0094, 0.0105, 0.0112, 0.0145)[depth]
    slower = 5.0 if spiked else 1.0
    steps = 0.0003 * max(depth - 1, 0) * slower
    draft = (0.0006 if depth else 0.0) * slower + steps
    return RoundTiming(rest + draft, rest, draft, steps, depth, built=False)


def test_one_odd_round_of_a_visit_is_checked_by_another_and_two_are_a_change() -> None:
    """A visited depth's drafts' share is compared with its last visit's. One round beyond ``SHIFT`` squared may be a
    moment of another job's: the visit lasts a round more and no survey starts; two rounds in a row beyond it are a
    load change, as before. (Read as a change at once, a spiked last round made every visit a survey: 59 of them in
    these 200 rounds.)"""
    adaptive = AdaptiveDepth(4)
    visits: list[list[int]] = []  # [depth, rounds] of each visit

    def play(rounds: int, spiked: int | None) -> None:
        """``rounds`` rounds; a visit's round number ``spiked`` (0-based; None: none, -1: all) has its drafts 5x."""
        at, previous = 0, -1
        for index in range(rounds):
            depth = adaptive.depth()
            visiting = depth != adaptive.current
            if visiting:
                at = at + 1 if depth == previous else 0
                if at == 0:
                    visits.append([depth, 0])
                visits[-1][1] += 1
            previous = depth if visiting else -1
            accepted = min(depth, 2 + index % 2)
            odd = visiting and spiked is not None and spiked in (at, -1)
            adaptive.observe(depth, min(depth, accepted + 1), accepted, _visit_timing(depth, odd))

    play(400, None)
    assert adaptive.current == 3 and adaptive.shifts == 0
    usual = {rounds for _, rounds in visits}
    before = len(visits)
    play(200, 1)  # each visit's second round, its last, spiked
    spiked = visits[before:]
    assert adaptive.shifts == 0, spiked
    drafting = [rounds for depth, rounds in spiked if depth > 0]  # depth 0 makes no draft: no share to compare
    assert drafting and all(rounds == max(usual) + 1 for rounds in drafting), (usual, spiked)  # one more round each
    play(200, -1)  # every round of a visit spiked: the drafts' share moved for good
    assert adaptive.shifts >= 1


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


# The Xeon's quiet phase with two threads (``bench adaptive-load``'s decision log, 2026-12-06): depth 3 fastest, depth 4
# 10% behind it; a load on the drafts earlier in the session (so the rounds' measured rates can overrule the estimates),
# then a burst of another job's, every part of the rounds 1.8x slower for a dozen tokens
BURST_AT = 2400
BURSTY = Machine("xeon 2 threads", rest=ms([8.6, 9.4, 10.5, 11.2, 14.5, 15.5, 17.0, 18.0, 19.5]), first_pass=0.0006,
                 step=0.0003, catch_up=0.00002, jitter=0.03, slow_start=4, rebuild=0.0003,
                 draft_loads=((0, 1.0), (400, 6.0), (1000, 1.0)),
                 loads=((0, 1.0), (BURST_AT, 1.8), (BURST_AT + 12, 1.0)))


def test_a_burst_of_slow_rounds_at_the_best_depth_does_not_keep_it_left() -> None:
    """The burst's rounds at depth 3 make its measured rate look 10% worse than an earlier calm visit's of another
    depth, which then overrules the estimates; the depth it replaced is visited again a few rounds later and taken
    back. Without that visit, a survey under way passed it over and the slow rounds stayed its latest: the bench's
    quiet phase played depth 7 for 35 rounds, and here the 120 rounds after the burst were 80-118 away from depth 3
    in most seeds."""
    away = []
    for seed in range(1, 11):
        rounds, _ = _run(seed, BURSTY, 3600)
        start = next(i for i, (token, _, _) in enumerate(rounds) if token >= BURST_AT)
        away.append(sum(depth != 3 for _, depth, _ in rounds[start:start + 120]))
    assert max(away) <= 60, away  # the burst, the visit back, and the usual probes
    assert sum(away) / len(away) <= 45, away


# The same machine, quiet, with a moment of another job's on the draft passes alone (twice as slow for 15 tokens): the
# drafts' share of a round moves, so every depth is due for a visit, while the best depth stays 3
MOMENT_AT = 1200
MOMENT = dataclasses.replace(BURSTY, draft_loads=((0, 1.0), (MOMENT_AT, 2.0), (MOMENT_AT + 15, 1.0)), loads=())


def test_a_survey_after_a_passing_load_ends_once_both_neighbours_measure_slower() -> None:
    """A load change starts a survey of every measured depth, nearest first. Once the nearest depth on either side
    has been visited and neither measured faster than the one played, the farther depths are left to the usual
    visits (the most promising of them is due at once): before, a moment of another job's on the Xeon's quiet phase
    sent a warm run to depths 0-8 in turn (the first tries of 6-8 among them), 7% of that run on its own clock; here
    7-8 depths were visited in most seeds, 17 rounds away from depth 3 of the 120 after the change on average."""
    away, visited = [], []
    for seed in range(1, 11):
        noticed: list[int] = []
        rounds, _ = _run(seed, MOMENT, 2400, noticed)
        start = next(i for i in noticed if rounds[i - 1][0] >= MOMENT_AT - 50)  # the moment was noticed
        after = rounds[start:start + 120]
        visited.append({depth for _, depth, reason in after if reason == "probe"})
        away.append(sum(depth != 3 for _, depth, _ in after))
    assert all({2, 4} <= depths and len(depths) <= 4 for depths in visited), visited  # both neighbours, few others
    assert sum(away) / len(away) <= 13, away


@pytest.mark.parametrize("odd", [{3: 1.15, 4: 1.15, 5: 1.6}, {4: 0.86, 5: 0.86}], ids=["slow", "fast"])
def test_a_few_slow_or_fast_rounds_after_a_switch_do_not_correct_the_new_depths_estimate(odd: dict[int, float]) \
        -> None:
    """When a depth becomes the one played, its first rounds' load is compared with the load read before, and a
    level apart means its estimate was off (``_level_check``). A few slow rounds among those five (another job's
    moment) used to move their median by the whole spike: on the Xeon's quiet phase, rounds of 15.8, 15.5 and 21.7 ms
    after 14.0 and 13.7 corrected depth 3's estimate up by 12%, and depth 2 was played in 37% of the rounds where
    depth 3 ran 6% faster. Read as their lower quartile instead, two fast rounds among five moved the level as far:
    on the Xeon's quiet phase (2026-12-07) depth 7's estimate was made 11% cheaper, and depth 7 was played for 310 of
    581 rounds where its rounds were 9% slower a token than depth 3's. Here the text's acceptance moves the best depth
    from 3 to 2 and back, the costs stay, and three rounds after each switch run slow (or two fast): once the first
    rounds have set the estimates, none is corrected. A level shift of every round is still corrected
    (test_adaptive_sessions.py)."""
    rng = random.Random(5)
    rest = [0.0086, 0.0094, 0.0105, 0.0112, 0.0145]  # by batch size 1..5
    adaptive = AdaptiveDepth(4)
    current, since_switch, played, settled_rescales = -1, 0, [], 0
    for index in range(900):
        depth = adaptive.depth()
        if adaptive.current != current:
            current, since_switch = adaptive.current, 0
            played.append(current)
        since_switch += 1
        # as on the Xeon: the third, fourth and fifth rounds at the new depth 1.15x, 1.15x and 1.6x slow, or the
        # fourth and fifth 14% fast
        factor = odd.get(since_switch, 1.0) if depth == current else 1.0
        # draft steps whose time wanders apart from the verify pass's: they cannot tell its load (gauge weight low)
        steps = 0.0003 * max(depth - 1, 0) * rng.uniform(0.6, 1.4)
        first = 0.0006 * rng.uniform(0.6, 1.4) if depth else 0.0
        verify = rest[depth] * factor
        # drafts accepted up to 2 or 3 in turn (depth 3 best), from round 300 to 600 up to 1 or 2 (depth 2 best)
        accepted = min(depth, (1 if 300 <= index < 600 else 2) + rng.randrange(2))
        adaptive.observe(depth, min(depth, accepted + 1), accepted,
                         RoundTiming(verify + first + steps, verify, first + steps, steps, depth))
        if index == 100:
            settled_rescales = adaptive.rescales
    assert adaptive.gauge_weight() < 0.5
    assert played[:3] == [3, 2, 3], played  # 3, then 2, then 3 again: the switches happened
    assert adaptive.rescales == settled_rescales


# Verify + host seconds by batch size 1..9 for the two tests below: depth 3 runs about 7% faster than 2 and 4 at
# the demo's acceptance (0.84 a position), as on the Xeon's scaled demo
_VERIFY = [0.0096, 0.0107, 0.0122, 0.0137, 0.0170, 0.0190, 0.0215, 0.0240, 0.0270]


def _slowed_from(seed: int, factor_at: dict[int, float], start: int = 300, rounds: int = 600,
                 factor_before: dict[int, float] | None = None) -> tuple[AdaptiveDepth, list[int]]:
    """Rounds whose verify pass, from round ``start`` on, runs ``factor_at[batch size]`` times as long (1 where not
    named), before it ``factor_before[batch size]`` times, while the draft passes do not; throughout, the whole
    machine's load wanders (every part alike, so the draft steps tell it: ``gauge_weight`` near 1). Returns adaptive
    depth with its log and the depths of the rounds from ``start`` on."""
    rng = random.Random(seed)
    adaptive = AdaptiveDepth(8)
    adaptive.log = []
    after = []
    for index in range(rounds):
        depth = adaptive.depth()
        load = 1.0 + 0.1 * math.sin(index / 3.0)
        factor = factor_at if index >= start else factor_before or {}
        verify = _VERIFY[depth] * load * factor.get(depth + 1, 1.0)
        first = 0.00057 * load if depth else 0.0
        steps = 0.00035 * (depth - 1) * load if depth > 1 else 0.0
        accepted = 0
        while accepted < depth and rng.random() < 0.84:
            accepted += 1
        adaptive.observe(depth, min(depth, accepted + 1), accepted,
                         RoundTiming(verify + first + steps, verify, first + steps, steps, depth, None,
                                     steps / (depth - 1) if depth > 1 else None))
        if index >= start:
            after.append(depth)
    return adaptive, after


@pytest.mark.parametrize("seed", range(1, 9))
def test_a_verify_pass_slowed_at_every_depth_does_not_hand_the_depth_played_over_unmeasured(seed: int) -> None:
    """The Xeon's quiet phase after a loaded one (2026-12-07): the verify passes ran 14-35% slower at every depth
    while the draft steps did not, and the depth played, learning from every round of its own, looked 15-17% dearer
    within three rounds, beside the other depths' estimates from their last visits: depths 2 and 7 were played for
    the rest of the run where depth 3 was fastest. Now a depth measured before the change is measured again before it
    is played (its visit reads the same slowdown and moves its estimate as far), and depth 3 stays."""
    adaptive, after = _slowed_from(seed, dict.fromkeys(range(1, 10), 1.35))
    measured_before = {d.depth for d in adaptive.log if d.reason in ("probe", "explore") and d.round <= 300}
    measured_since: set[int] = set()
    unmeasured = []
    for decision in adaptive.log[300:]:
        if decision.reason in ("probe", "explore"):
            measured_since.add(decision.depth)
        elif decision.depth != 3 and decision.depth in measured_before - measured_since:
            unmeasured.append((decision.round, decision.depth))
    assert not unmeasured, unmeasured
    assert adaptive.unit_moves >= 1
    assert after.count(3) >= 0.88 * len(after), Counter(after)


def test_a_depth_played_that_alone_became_dearer_is_left_after_one_visit_elsewhere() -> None:
    """The other side: where the depth played became dearer by itself (its own verify pass 35% slower, the others
    not), the visit before a change reads the other depth unchanged, moves nothing, and the change goes ahead at once
    (depth 2 or 4 then plays most rounds)."""
    for seed in range(1, 5):
        adaptive, after = _slowed_from(seed, {4: 1.35})
        assert adaptive.unit_moves == 0
        left = next(i for i, depth in enumerate(after) if depth != 3 and adaptive.log[300 + i].reason == "best")
        assert left <= 30, (seed, left)
        assert after.count(3) <= 0.3 * len(after), Counter(after)


def test_a_depth_that_became_cheaper_again_is_played_again_within_a_few_visits() -> None:
    """The Xeon's quiet phase (2026-12-07): depth 3's remembered cost stood while its visits read it up to 16%
    cheaper (one sample at a time into its window, short of ``PROVEN_FASTER``), and depth 2 was played for 268
    rounds where fixed depth 3 ran 8% faster. Here depth 3's verify pass runs 12% slower for 400 rounds (depth 2, 4
    or 5 is played and every visit of depth 3 fills its window at that cost), then as before: the median of its
    latest visits' samples, from two visits, replaces the window, and depth 3 is played again within 250 rounds,
    every seed (62-152). Before, three seeds of eight never came back in 600 rounds and the others took 439-523."""
    for seed in range(1, 9):
        adaptive, after = _slowed_from(seed, {}, start=400, rounds=1000, factor_before={4: 1.12})
        assert Counter(d.depth for d in adaptive.log[200:400] if d.reason == "best")[3] <= 20  # left while dearer
        back = next((i for i in range(len(after) - 20) if after[i:i + 20].count(3) >= 16), None)
        assert back is not None and back <= 250, (seed, back)
        assert adaptive.visit_moves >= 1
