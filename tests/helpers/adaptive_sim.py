"""A simulated machine and text for adaptive depth: round costs split like the engine's, noise like a shared box.

A round at depth ``k`` costs ``rest(k + 1)`` (verify pass + host) plus, when it drafts, a first draft pass
(which also catches up on the previous round's accepted drafts) and ``k - 1`` further draft steps. On top,
as adaptive depth's clock sees it: a jitter of a few percent on every round, stalled rounds (3x), a slow
start (the first rounds of a freshly loaded model), a rebuild cost when the verify batch differs from the
previous round's (llama.cpp rebuilds its graph), a load that steps up and down as other jobs come and go,
and a wobble from round to round (other jobs' time slices). Whether a draft is accepted is drawn once per
token of the text, with a probability set by its position in the round (given the ones before it were
accepted) and, optionally, by the passage (easy and hard stretches of text).

The timing streams are seeded by the round index, the load and the acceptance by the point of the text, so a
fixed depth and adaptive depth meet the same stalls, jitter, load and text, as ``bench spec``'s variants meet
the same prompts.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from app.engine.adaptive import AdaptiveDepth, RoundTiming
from app.engine.depth_worker import DepthWorker, Observation

Accept = Callable[[int], float]

# session lengths the tests simulate, in tokens
SESSION = 2048  # tokens: two bench spec runs (8 prompts of 128 tokens each)
SEEDS = range(1, 6)
REPLY = 127  # tokens: the demo model's reply, the same for every prompt
PROMPT_SET = 508  # tokens: one prompt set of one bench spec run (4 prompts, 127 decoded each), a fresh session


def factor_at(steps: Sequence[tuple[int, float]], token: int) -> float:
    """The factor in force at ``token`` of the text: that of the last step starting at or before it, else 1."""
    factor = 1.0
    for start, value in steps:
        if token >= start:
            factor = value
    return factor


@dataclass(frozen=True)
class Machine:
    name: str
    rest: Sequence[float]  # seconds of verify + host per round, by batch size 1, 2, ... (drafts + 1)
    first_pass: float  # the first draft pass of a round, seconds
    step: float  # each further draft step, seconds
    catch_up: float = 0.0  # added to the first pass per draft accepted in the previous round
    jitter: float = 0.04  # every round's time times uniform(1 - jitter, 1 + jitter)
    stalls: float = 0.0  # share of rounds that take 3x as long
    slow_start: int = 0  # the first rounds take 2.5x, easing off over this many rounds; the very first 5x
    rebuild: float = 0.0  # seconds added to the verify pass when its batch size changed since the last round
    # (from token, load factor): other jobs starting and stopping, met at the same point of the text by every
    # policy (a fixed depth and adaptive depth take different numbers of rounds for the same text)
    loads: Sequence[tuple[int, float]] = ()
    # other jobs' time slices: the share of the core this process gets wanders from round to round (a log-normal
    # factor of this spread, half of it carried from one round to the next; on this 2-core machine, shared with
    # test suites and compilers, measured rounds wandered 20-27% around their prediction, lag-1 correlation 0.4-0.6)
    wobble: float = 0.0
    # the draft passes' own jitter next to the verify pass's: on the real machine their times wander apart from
    # round to round (the verify/draft ratio of a round spreads 3-4% around its median on the Xeon), so a round's
    # draft steps tell its load only roughly
    part_jitter: float = 0.0
    # (from token, factor) on the draft passes alone, on top of ``loads``: another job that slows the draft head's
    # small passes far more than the target's verify pass, so that the best depth itself moves with the load
    # (``bench adaptive-load``'s phases: quiet, loaded, quiet)
    draft_loads: Sequence[tuple[int, float]] = ()
    # added to a round's first further draft step, the one right after the first pass: on the Xeon it costs a
    # quarter more than each step after it (``RoundTiming.first_step``)
    first_step: float = 0.0
    # another job's moments: in this share of the rounds a pause of ``hiccup`` seconds lands at a uniformly drawn
    # point of the round, so mostly in the verify pass and now and then in the short draft passes (the Xeon's quiet
    # phase, 512-token replies at depth 3: 5-9% of the rounds' verify passes 4 ms longer, 0.5-0.9% of their draft
    # passes 5-6 ms longer, the drafts' share of such a round 4-6x its usual)
    hiccups: float = 0.0
    hiccup: float = 0.005

    def load_at(self, token: int) -> float:
        return factor_at(self.loads, token)


@dataclass
class Totals:
    tokens: int = 0
    seconds: float = 0.0
    depths: list[int] = field(default_factory=list)

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


class _Text:
    """The text being written, token by token: whether the draft of each token would be accepted is drawn once
    per token, so every policy meets the same easy and hard tokens at the same point of the text (as ``bench
    spec``'s variants meet the same prompts), whichever round and draft position reaches them. ``stretches``
    scales the acceptance along the text: easy and hard passages, as real text has."""

    _streams: ClassVar[dict[int, tuple[random.Random, list[float]]]] = {}  # by seed: every policy reads the same draws

    def __init__(self, seed: int, stretches: Sequence[tuple[int, float]]) -> None:
        if seed not in self._streams:
            self._streams[seed] = (random.Random(seed * 7_919 + 17), [])
        self.rng, self.draws = self._streams[seed]
        self.stretches = stretches

    def draftable(self, token: int, acceptance: float) -> bool:
        while len(self.draws) <= token:
            self.draws.append(self.rng.random())
        return self.draws[token] < min(acceptance * factor_at(self.stretches, token), 0.999)


@functools.cache
def _round_draws(seed: int, index: int) -> tuple[float, float, float, float, float, float]:
    """A round's random draws (a standard normal, then five uniforms in [0, 1)), seeded by its index so that every
    policy meets the same ones; drawn once per round and seed however many policies replay it (seeding a
    generator per round was a tenth of the simulation's time)."""
    rng = random.Random(seed * 1_000_003 + index)
    return rng.gauss(0.0, 1.0), rng.random(), rng.random(), rng.random(), rng.random(), rng.random()


def _between(low: float, high: float, draw: float) -> float:
    """``random.uniform(low, high)`` for a draw already made: the same arithmetic, so the same value."""
    return low + (high - low) * draw


def simulate(machine: Machine, accept: Accept, tokens: int, seed: int,
             choose: Callable[[], int], observe: Callable[[int, int, int, RoundTiming], None] | None = None,
             stretches: Sequence[tuple[int, float]] = (), reply: int = 0) -> Totals:
    """Generate ``tokens`` tokens (or a few more: a round's accepted drafts all count) with the depth ``choose``
    gives each round; returns tokens and seconds. The round's costs are drawn by round (seeded by its index),
    its acceptance by the tokens of the text it reaches. ``reply``: the text is a reply of this many tokens,
    written again and again from its start (the demo model's: every prompt gets the same reply, so every round
    of a fixed depth falls where it fell the last time)."""
    totals = Totals()
    text = _Text(seed, stretches)
    last_batch, held = 0, 0
    index = -1
    drift = 0.0
    in_reply = 0
    while totals.tokens < tokens:
        index += 1
        # the same draws at the same round for every policy
        normal, jitter, stall, part, pause, landing = _round_draws(seed, index)
        depth = choose()
        totals.depths.append(depth)
        accepted = 0
        start, room = (in_reply, min(depth, reply - in_reply - 1)) if reply else (totals.tokens, depth)
        while accepted < room and text.draftable(start + accepted, accept(accepted)):
            accepted += 1
        in_reply = (in_reply + accepted + 1) % reply if reply else 0
        tested = min(depth, accepted + 1)
        drift = 0.5 * drift + machine.wobble * (0.0 + normal * 0.87)  # 0.87 = sqrt(1 - 0.5**2): the spread stays wobble
        scale = machine.load_at(totals.tokens) * _between(1 - machine.jitter, 1 + machine.jitter, jitter) * \
            math.exp(drift)
        if stall < machine.stalls:
            scale *= 3.0
        if index == 0 and machine.slow_start:
            scale *= 5.0
        elif index < machine.slow_start:
            scale *= 1.0 + 1.5 * (1 - index / machine.slow_start)
        batch = depth + 1
        verify = machine.rest[batch - 1] + (machine.rebuild if batch != last_batch else 0.0)
        parts = scale * _between(1 - machine.part_jitter, 1 + machine.part_jitter, part) * \
            factor_at(machine.draft_loads, totals.tokens)
        first = (machine.first_pass + machine.catch_up * held if depth else 0.0) * parts
        first_step = (machine.step + machine.first_step) * parts if depth >= 2 else None
        steps = machine.step * max(depth - 1, 0) * parts + (machine.first_step * parts if depth >= 2 else 0.0)
        verify *= scale
        if pause < machine.hiccups:  # a pause lands in the first pass, the steps or the verify pass, by their length
            at = landing * (first + steps + verify)
            if at < first:
                first += machine.hiccup
            elif at < first + steps:
                steps += machine.hiccup
                if first_step is not None and at < first + first_step:
                    first_step += machine.hiccup
            else:
                verify += machine.hiccup
        timing = RoundTiming(seconds=verify + first + steps, verify=verify,
                             draft=first + steps, draft_steps=steps, proposed=depth, first_step=first_step)
        if observe is not None:
            observe(depth, tested, accepted, timing)
        totals.tokens += accepted + 1
        totals.seconds += timing.seconds
        last_batch, held = batch, (accepted if depth else held + 1)
    return totals


def run_adaptive(machine: Machine, accept: Accept, tokens: int, seed: int, draft_depth: int = 8,
                 adaptive: AdaptiveDepth | None = None, stretches: Sequence[tuple[int, float]] = (),
                 reply: int = 0) -> tuple[Totals, AdaptiveDepth]:
    adaptive = adaptive or AdaptiveDepth(draft_depth)
    return simulate(machine, accept, tokens, seed, adaptive.depth, adaptive.observe, stretches, reply), adaptive


def run_with_worker(worker: DepthWorker, machine: Machine, accept: Accept, tokens: int, seed: int,
                    report_built: bool = False, built_ahead: Collection[int] = ()) -> Totals:
    """A session driven as the engine drives a ``DepthWorker``: the depth, the verify pass (the worker thread's turn),
    the observation; settled at the end. ``report_built``: each round says whether its verify pass built a graph (the
    first at each batch size), as the engine does with our patch's graph pool; else it does not say (None).
    ``built_ahead``: batch sizes whose graphs a warm-up built before the session (``prepare_visit_graphs``)."""
    sizes: set[int] = set(built_ahead)

    def choose() -> int:
        depth = worker.next_depth()
        worker.verify_starts()
        return depth

    def observe(depth: int, tested: int, accepted: int, timing: RoundTiming) -> None:
        if report_built:
            batch = timing.proposed + 1
            timing = replace(timing, built=batch not in sizes)
            sizes.add(batch)
        worker.observed(Observation(depth, tested, accepted, timing))

    totals = simulate(machine, accept, tokens, seed, choose, observe)
    worker.settle()
    return totals


def run_fixed(machine: Machine, accept: Accept, tokens: int, seed: int, depth: int,
              stretches: Sequence[tuple[int, float]] = (), reply: int = 0) -> Totals:
    """A fixed depth's session; the same arguments give the same draws, so a session run once (the fixed depths
    several tests compare with) is not simulated again."""
    done = _fixed_runs(machine, accept, tokens, seed, depth, tuple(stretches), reply)
    return Totals(done.tokens, done.seconds, list(done.depths))


@functools.cache
def _fixed_runs(machine: Machine, accept: Accept, tokens: int, seed: int, depth: int,
                stretches: tuple[tuple[int, float], ...], reply: int) -> Totals:
    return simulate(machine, accept, tokens, seed, lambda: depth, stretches=stretches, reply=reply)


def together(runs: Sequence[Totals]) -> float:
    """Tokens per second over several sessions."""
    return sum(t.tokens for t in runs) / sum(t.seconds for t in runs)


def against_fixed(machine: Machine, accept: Accept, tokens: int, seeds: Sequence[int],
                  passages: Callable[[int], Sequence[tuple[int, float]]] = lambda seed: (),
                  ) -> tuple[float, dict[int, float]]:
    """Adaptive depth's tokens per second over the seeds' sessions, and every fixed depth's (0..8) under the same
    draws; ``passages`` gives each seed's text its easy and hard stretches."""
    adaptive = together([run_adaptive(machine, accept, tokens, s, stretches=passages(s))[0] for s in seeds])
    fixed = {k: together([run_fixed(machine, accept, tokens, s, k, passages(s)) for s in seeds]) for k in range(9)}
    return adaptive, fixed


def ms(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(v / 1000.0 for v in values)


# Four machine shapes (seconds). The fast CPU is the AMD EPYC 2-core dev machine, measured depth by depth in
# blocks on the small demo model: its verify + host time doubles from 1 to 2 tokens, then rises unevenly (8 tokens
# cost more than 9). The slow CPU is the machine: a plain pass 69 ms, draft steps dear next to it, verify
# rising ever faster with the batch. The Xeon is the quiet 2-core Intel Xeon of docs/benchmarks.md's fifth run
# (plain decoding 20.4 tok/s), its costs the medians of that run's decision log (decoding-thread CPU time): there
# depths 3, 4 and 5 are within a few percent of each other at the demo's acceptance. The GPU-like one verifies
# 1 or 9 tokens in about the same time.
SLOW_CPU = Machine("slow cpu", rest=ms([69, 90, 95, 101, 110, 121, 133, 146, 160]), first_pass=0.008, step=0.011,
                   catch_up=0.0006, jitter=0.08, stalls=0.03, slow_start=8, rebuild=0.003,
                   loads=((0, 1.0), (150, 1.7), (450, 1.0), (800, 1.4), (1100, 1.0)), wobble=0.1)
FAST_CPU = Machine("fast cpu", rest=ms([21.7, 42.0, 43.2, 45.6, 48.5, 48.0, 53.4, 79.0, 59.5]), first_pass=0.0047,
                   step=0.0038, catch_up=0.00035, jitter=0.05, stalls=0.03, slow_start=8, rebuild=0.0024,
                   loads=((0, 1.0), (200, 2.0), (330, 1.0), (700, 1.5), (1000, 1.0)), wobble=0.05)
XEON = Machine("xeon", rest=ms([48, 88, 95, 101, 115, 120, 132, 143, 151]), first_pass=0.0097, step=0.008,
               catch_up=0.0004, jitter=0.04, stalls=0.01, slow_start=4, rebuild=0.0007, wobble=0.03)
# The built-in chat demo (``scaled``: the real model's proportions) on the quiet Xeon, the medians of a bench spec
# decision log (docs/benchmarks.md, issue 39's verdicts): a plain pass 40 ms, verify of 2-6 tokens 49-110 ms, each
# draft pass about 4.5 ms, so depths 1-4 are within a few percent of each other and depth 0 is 25% behind them.
SCALED_XEON = Machine("scaled xeon", rest=ms([40, 49, 62, 77, 87.5, 110, 121, 132, 143]), first_pass=0.0046,
                      step=0.0045, catch_up=0.0002, jitter=0.04, stalls=0.01, slow_start=4, rebuild=0.0007,
                      wobble=0.03)
# The same demo on the quiet AMD EPYC, 1 thread (2026-12-04's bench spec decision log, medians): verify of 2 tokens
# 77-82 ms, of 3 88-94 ms, draft passes 5.3-5.8 ms, so depth 1 is 8-10% behind depths 2 and 3; and its rounds wander
# 20% around their prediction (the wobble), with which a depth without draft steps used to keep a cost learned too
# cheap for good (the load index, measured against its own estimate, took the error in).
SCALED_EPYC = Machine("scaled epyc", rest=ms([64, 78, 92, 107, 138, 145, 172, 176, 186]), first_pass=0.0058,
                      step=0.0053, catch_up=0.0002, jitter=0.04, stalls=0.01, slow_start=4, rebuild=0.0007,
                      wobble=0.2)
# The scaled demo on a faster AMD EPYC, 1 thread, under load (2026-12-04's bench adaptive-load decision log, CPU
# time): a plain one-token pass about 9.8 ms (off ran 66 tok/s where every depth ran 41-58), verify of 2 tokens
# 26.6 ms, of 3-6 tokens 30.4-35.4 ms, draft passes 1.8 ms and 1.3 ms a step. The one-token pass runs other kernels
# than the verify passes, so it is a third of a two-token pass, not half: no measured batch predicts it.
FAST_EPYC_1T = Machine("fast epyc 1 thread", rest=ms([9.8, 26.6, 30.4, 31.3, 33.4, 35.4, 39.8, 42.3, 44.8]),
                       first_pass=0.0018, step=0.0013, catch_up=0.0001, jitter=0.04, stalls=0.01, slow_start=4,
                       rebuild=0.0007, wobble=0.03)
# The scaled demo once it was Q8_0 and the d2t head's canvas fill was fixed (2026-12-05, the same EPYC, 1 thread, quiet;
# bench spec's decision log, medians): a plain pass 6 ms, verify of 2-7 tokens 9.5-23.8 ms, and draft passes so short
# (first 0.6 ms, each further step 0.3 ms) that their timings wander 35% apart from the verify pass's round to round:
# a round's draft steps no longer tell its load
SCALED_EPYC_Q8 = Machine("scaled q8 epyc", rest=ms([6.0, 9.5, 11.3, 14.7, 18.6, 20.6, 23.8, 26.5, 29.0]),
                         first_pass=0.0006, step=0.0003, catch_up=0.00005, jitter=0.04, stalls=0.01, slow_start=4,
                         rebuild=0.0007, wobble=0.03, part_jitter=0.35)
# The scaled demo (Q8_0) on the Xeon, 2 threads, quiet (2026-12-06's bench adaptive-load decision logs, medians of the
# counted rounds): verify + host 10.7-13.7 ms for 2-4 tokens, 19.4-22.5 ms for 5-7 and 19.5 ms for 8 (a kernel that
# tiles well), draft passes 0.57 ms; the first draft step after the first pass costs 0.1 ms more than each one
# after it (timed pass by pass: 0.40 ms, then 0.33 and 0.31), so the steps' average depends on the depth
SCALED_XEON_2T = Machine("scaled xeon 2 threads", rest=ms([9.6, 10.7, 12.2, 13.7, 19.4, 21.0, 22.5, 19.5, 28.8]),
                         first_pass=0.00057, step=0.00035, first_step=0.0001, catch_up=0.00002, jitter=0.04,
                         stalls=0.01, slow_start=4, rebuild=0.0007, wobble=0.03)
GPU_LIKE = Machine("gpu-like", rest=ms([20.0, 20.2, 20.4, 20.6, 20.8, 21.0, 21.2, 21.4, 21.6]), first_pass=0.0025,
                   step=0.002, catch_up=0.0001, jitter=0.03, stalls=0.01, slow_start=8, rebuild=0.0003, wobble=0.05)

HIGH: Accept = lambda p: 0.95 - 0.01 * p  # noqa: E731
LOW: Accept = lambda p: max(0.65 - 0.06 * p, 0.2)  # noqa: E731
DEMO: Accept = lambda p: 0.84  # noqa: E731  (the small demo model "at acceptance 0.8": 0.84 a position, measured)
# an easy passage (acceptance 18% higher, capped at 0.999) from the 30th token to the 150th: the stretch of text in
# which adaptive depth first tries the deeper depths, as in docs/benchmarks.md's fifth run
EASY_START = ((0, 1.0), (30, 1.18), (150, 1.0))
