"""Adaptive depth over whole sessions on every simulated machine (tests/helpers/adaptive_sim.py), no engine.

The machine cases run sessions of two ``bench spec`` runs' worth of text (16 prompts of 128 tokens) with
seeded draws, adaptive depth and every fixed depth meeting the same load, stalls, jitter and text at the same
point of the text, and ask adaptive depth to keep within 3% of the fastest fixed depth 1..8 (the depths
``bench spec`` and the engine's ``draft_depth`` offer), and not to fall far behind drafting nothing (depth 0)
where that is fastest; the same with an easy passage while it tries deeper depths (the lucky streak of
docs/benchmarks.md's fifth run), over the first prompt set of a fresh session, which pays for the tries, and over
the first prompt set of a session started from an earlier one's record. A minute of simulation on 2 cores; the
mechanism's quick checks are tests/unit/engine/test_adaptive.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from app.engine.adaptive import AdaptiveDepth
from tests.helpers.adaptive_sim import (
    DEMO,
    EASY_START,
    FAST_CPU,
    GPU_LIKE,
    HIGH,
    LOW,
    PROMPT_SET,
    REPLY,
    SCALED_EPYC,
    SCALED_EPYC_Q8,
    SCALED_XEON,
    SEEDS,
    SESSION,
    SLOW_CPU,
    XEON,
    Accept,
    Machine,
    against_fixed,
    run_adaptive,
    run_fixed,
    together,
)


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
@pytest.mark.parametrize("accept", [HIGH, LOW], ids=["high acceptance", "low acceptance"])
def test_keeps_within_3_percent_of_the_fastest_fixed_depth(machine: Machine, accept: Accept) -> None:
    adaptive, fixed = against_fixed(machine, accept, SESSION, SEEDS)
    best = max(range(1, 9), key=lambda k: fixed[k])
    assert adaptive >= 0.97 * fixed[best], (best, adaptive, fixed)
    # where drafting nothing is fastest (a CPU whose 2-token pass costs twice a 1-token one, drafts accepted 65%
    # of the time or less), adaptive depth finds that too, paying a few percent for keeping an eye on the others
    assert adaptive >= 0.95 * fixed[0], (adaptive, fixed)


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
def test_an_easy_passage_while_it_tries_deeper_depths_does_not_hold_it_there(machine: Machine) -> None:
    """The fifth benchmark run's document prompts (docs/benchmarks.md): its tries of depths 5, 6 and 7 fell in
    an easy stretch and accepted nearly everything, and it settled on depth 5 for 69 rounds of a run where
    depth 3 was faster. Simulated: acceptance 0.84 a position, 18% higher from token 30 to 150. The fast CPU is
    the sharpest case: before tries went only next to a measured depth, it jumped to depth 8 while the text was
    easy, and the dear batch of 8 next to it kept it there (0.94x the fastest fixed depth)."""
    adaptive, fixed = against_fixed(machine, DEMO, SESSION, SEEDS, lambda _seed: EASY_START)
    best = max(range(1, 9), key=lambda k: fixed[k])
    assert adaptive >= 0.97 * fixed[best], (best, adaptive, fixed)


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
def test_the_first_prompt_set_of_a_fresh_session_keeps_within_3_percent(machine: Machine) -> None:
    """``bench spec`` starts every run with a fresh session, and its first prompt set (508 tokens) carries all
    the tries of depths not measured yet: they must not cost more than the 3%, on 20 sessions of the demo's
    acceptance."""
    adaptive, fixed = against_fixed(machine, DEMO, PROMPT_SET, range(1, 21))
    best = max(range(1, 9), key=lambda k: fixed[k])
    assert adaptive >= 0.97 * fixed[best], (best, adaptive, fixed)


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
def test_the_demo_models_one_reply_keeps_within_3_percent(machine: Machine) -> None:
    """The demo model writes the same reply to every chat prompt (``bench spec`` gives each of its prompts its own
    first word; before it did, its 8 prompts were one 127-token text), so a fixed depth cuts it into the same
    rounds every time and the acceptance of a draft position depends on the depth (one text's luck). A cold
    run of 8 such replies, 10 such texts, with the draft passes jittering apart from the verify pass as they do
    on the real machine."""
    jittery = dataclasses.replace(machine, part_jitter=0.06)
    seeds = range(1, 11)
    adaptive = together([run_adaptive(jittery, DEMO, 8 * REPLY, s, reply=REPLY)[0] for s in seeds])
    fixed = {k: together([run_fixed(jittery, DEMO, 8 * REPLY, s, k, reply=REPLY) for s in seeds]) for k in range(1, 9)}
    best = max(fixed, key=lambda k: fixed[k])
    assert adaptive >= 0.97 * fixed[best], (best, adaptive, fixed)


def test_draft_passes_too_short_to_time_well_do_not_steer_the_choice() -> None:
    """The scaled demo on the fast EPYC once a d2t draft step cost 0.16 ms (issue 39): its draft passes' timings
    wander 35% apart from the verify pass's from round to round, so dividing each round's verify time by its own
    draft steps' reading made the drafting depths' estimates wander against depth 0's (whose rounds time no draft),
    and adaptive depth spent up to half its rounds at depth 0 where depth 2 ran 1.2x faster (simulated: 0.938x of the
    fastest fixed depth over two bench spec runs, 0.890x over one cold prompt set). The reading now counts as far as
    it has told the verify passes' times lately (``_gauged``)."""
    adaptive, fixed = against_fixed(SCALED_EPYC_Q8, DEMO, SESSION, SEEDS)
    best = max(range(1, 9), key=lambda k: fixed[k])
    assert fixed[best] >= 1.15 * fixed[0]  # drafting pays on this machine
    assert adaptive >= 0.95 * fixed[best], (best, adaptive, fixed)
    seeds = range(1, 11)
    cold = together([run_adaptive(SCALED_EPYC_Q8, DEMO, PROMPT_SET, s)[0] for s in seeds])
    fixed_cold = {k: together([run_fixed(SCALED_EPYC_Q8, DEMO, PROMPT_SET, s, k) for s in seeds]) for k in range(1, 9)}
    assert cold >= 0.95 * max(fixed_cold.values()), (cold, fixed_cold)


def test_a_depth_that_becomes_the_one_played_reads_the_load_read_before_it() -> None:
    """Where the draft steps are too short to tell the load (the same machine), the load index is a round's time
    over the played depth's estimate, so that depth's own rounds cannot correct its estimate against the others':
    one session here (acceptance falling with the position, as the small demo's on the Xeon: 0.83, 0.78, 0.68)
    learned depth 2 dear, spent 82% of its rounds at depths 0 and 1, and ran 0.876x fixed k=2. When another depth
    becomes the one played, its first rounds now read the load the rounds before read, or its estimate is
    corrected (``SWITCH_AGREE``): that session played depth 2 in 90% of its rounds. Since a played depth's own
    rounds stay out of its estimate where the steps tell nothing (``OWN_WEIGHT``), sessions here settle by other
    paths (that one, seed 8, at 0.92x again, others better; over 24 sessions of each acceptance curve this machine
    is where it was); this one, seed 4, needs the check: without it 0.97x fixed k=2 and depth 2 in 76% of its
    rounds, with it 0.99x and 93%."""
    falling: Accept = lambda p: (0.83, 0.78, 0.68, 0.7)[min(p, 3)]  # noqa: E731
    totals, adaptive = run_adaptive(SCALED_EPYC_Q8, falling, SESSION, 4)
    fixed = run_fixed(SCALED_EPYC_Q8, falling, SESSION, 4, 2)
    assert max(run_fixed(SCALED_EPYC_Q8, falling, SESSION, 4, k).tps for k in range(9)) == fixed.tps  # k=2 fastest
    assert totals.depths.count(2) >= 0.85 * len(totals.depths)
    assert totals.tps >= 0.98 * fixed.tps, (totals.tps, fixed.tps)
    assert adaptive.rescales >= 1


def _warm(machine: Machine, accept: Accept, seed: int, draft_depth: int = 8) -> AdaptiveDepth:
    """An adaptive depth started from what an earlier session (other text: 1016 tokens, one bench spec run)
    learned on ``machine``, the record passed through JSON as the depth memory keeps it."""
    _, earlier = run_adaptive(machine, accept, 2 * PROMPT_SET, seed + 100)
    restored = AdaptiveDepth(draft_depth)
    assert restored.restore(json.loads(json.dumps(earlier.snapshot())))
    return restored


@pytest.mark.parametrize("machine", [SLOW_CPU, FAST_CPU, XEON, SCALED_XEON, GPU_LIKE], ids=lambda m: m.name)
def test_a_warm_start_keeps_the_first_prompt_set_within_3_percent_without_trying_again(machine: Machine) -> None:
    """The next load of the same model starts from what the last one measured: the first prompt set of the
    session does not pay again for tries of the depths measured then, and stays within the 3%."""
    sessions, fixed = [], {k: [] for k in range(9)}
    for seed in range(1, 21):
        adaptive = _warm(machine, DEMO, seed)
        known = {k for k in range(9) if adaptive._known(k)}
        adaptive.log = []
        sessions.append(run_adaptive(machine, DEMO, PROMPT_SET, seed, adaptive=adaptive)[0])
        assert adaptive.warm and adaptive.log[0].reason == "best" and adaptive.log[0].depth in known
        assert not [d for d in adaptive.log if d.reason == "start" or (d.reason == "explore" and d.depth in known)]
        for k in fixed:
            fixed[k].append(run_fixed(machine, DEMO, PROMPT_SET, seed, k))
    rates = {k: together(runs) for k, runs in fixed.items()}
    best = max(range(1, 9), key=lambda k: rates[k])
    assert together(sessions) >= 0.97 * rates[best], (best, together(sessions), rates)


def test_a_depth_without_draft_steps_does_not_keep_a_cost_learned_too_cheap() -> None:
    """Issue 36's last phase gap: on the scaled demo's EPYC shape (depth 1 8-10% behind depths 2 and 3, rounds
    wandering 20%) adaptive depth spent a quarter to a third of its rounds at depth 1, 0.967x the best fixed depth.
    A visit of depth 1 at a quiet moment left its estimate too cheap, and once chosen its own rounds could not show
    it: they were divided by a load measured against that very estimate. Its first draft pass now reads the load of
    its rounds, as the draft steps do for the deeper depths."""
    accept: Accept = lambda p: 0.78  # noqa: E731  (the scaled demo at acceptance 0.8: 0.76-0.79 measured)
    seeds = range(1, 11)
    sessions = [run_adaptive(SCALED_EPYC, accept, 1024, seed)[0] for seed in seeds]
    fixed = {k: together([run_fixed(SCALED_EPYC, accept, 1024, seed, k) for seed in seeds]) for k in range(4)}
    assert fixed[2] >= 1.05 * fixed[1] and fixed[3] >= 1.05 * fixed[1]  # the shape: depth 1 is behind
    depth_one = sum(depth == 1 for t in sessions for depth in t.depths) / sum(len(t.depths) for t in sessions)
    assert depth_one < 0.1, depth_one
    assert together(sessions) >= 0.97 * max(fixed.values()), (together(sessions), fixed)
