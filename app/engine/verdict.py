"""Honest speed comparisons, in one Qt-free place: a verdict only from enough samples taken under the same
conditions, after a warm-up, alternating A/B/A/B.

A single reply's speed moves by 10-30% with the load of a shared machine, the reply's length and luck, so one
reply per side says nothing about which side is faster; two sides measured at different sampling (greedy against
temperature 0.7) or different draft depths are not the same question. Every comparison the app shows (the HUD's
"does drafting pay here", ``quickstart``, ``bench matrix`` and so the Benchmark page, and Auto drafting) goes
through ``compare``:

- a **sample** is one measurement (a reply, or a benchmark run) with its decode tok/s (``stats.decode_tps``), the
  **condition** it was taken under (drafting mode, depth, sampling, model, threads), when it was taken (``order``),
  whether a warm-up came before it, and the load average then;
- the two sides are two drafting modes (each at one depth); everything else must be the same: the samples whose
  sampling, model or threads differ from the latest sample's, or whose depth differs from their side's latest,
  are left out, and so are samples taken before a warm-up;
- a verdict needs ``MIN_SAMPLES`` per side and as many rounds in which both sides were measured (A/B/A/B, not
  AAA then BBB, so a burst of load from another job hits both alike); otherwise it says what is missing;
- it reports each side's median and spread (min-max), the ratio of the medians and the load average; when the
  spreads overlap it says "no clear difference" rather than naming a winner.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.words import noun
from app.engine.config import EngineConfig
from app.engine.stats import describe_depth

MIN_SAMPLES = 3  # per side, and rounds with both sides in them
MIN_TOKENS = 32  # a reply shorter than this is no sample: its speed is mostly noise

Outcome = Literal["faster", "slower", "no clear difference", "not enough"]
# what an outcome means for drafting, in the words every place that shows a verdict uses (the HUD, the Benchmark
# page, Auto, quickstart, ``bench matrix``)
PAYS: dict[str, str] = {"faster": "pays", "slower": "does not pay", "no clear difference": "no clear gain",
                        "not enough": "not decided yet"}


def side_words(mode: str, depth: str = "") -> str:
    """A side of a comparison in words: ``drafting off``, ``d2t at depth 3``, ``d2t at adaptive depth ≤8``."""
    if mode == "off":
        return "drafting off"
    return f"{mode} at {depth}" if depth else mode


@dataclass(frozen=True)
class Condition:
    """What a sample was measured under. ``mode`` and ``depth`` make its side; the rest must match across sides."""

    mode: str  # "off", "embedded", "d2t", "full"
    depth: str = ""  # "depth 3", "adaptive depth ≤8"; "" with drafting off
    sampling: str = "greedy"  # ``stats.describe_sampling``
    model: str = ""  # the model files (a path, or a name)
    threads: int | None = None  # None: the backend's default

    @property
    def setup(self) -> tuple[str, str, int | None]:
        return self.sampling, self.model, self.threads

    @property
    def label(self) -> str:
        return f"{self.mode} ({self.depth})" if self.depth and self.mode != "off" else self.mode


@dataclass(frozen=True)
class Sample:
    condition: Condition
    tps: float  # decode tok/s, ``stats.decode_tps``
    order: int  # when it was taken, among the samples compared (larger: later)
    warm: bool = True  # taken after a warm-up (a first reply after a cold start is not)
    load: float | None = None  # the 1-minute load average when it was taken
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        c = self.condition
        return {"mode": c.mode, "depth": c.depth, "sampling": c.sampling, "model": c.model, "threads": c.threads,
                "tps": self.tps, "order": self.order, "warm": self.warm, "load": self.load, "tokens": self.tokens}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Sample:
        """The inverse of ``to_dict`` (``ValueError``/``KeyError``/``TypeError`` on a damaged record)."""
        threads = data.get("threads")
        load = data.get("load")
        condition = Condition(str(data["mode"]), str(data.get("depth", "")), str(data["sampling"]),
                              str(data.get("model", "")), int(threads) if threads is not None else None)
        if not isinstance(data["tps"], int | float) or not isinstance(data["order"], int):
            raise TypeError("a sample's tps and order are numbers")
        return Sample(condition, float(data["tps"]), int(data["order"]), bool(data.get("warm", True)),
                      float(load) if isinstance(load, int | float) else None, int(data.get("tokens", 0)))


def mode_name(config: EngineConfig) -> str:
    """A configuration's drafting mode as a side of a comparison: ``off``, ``embedded``, ``d2t`` or ``full``."""
    if config.mode != "sidecar":
        return config.mode
    from app.engine.modes import sidecar_kind

    return sidecar_kind(config.draft) if config.draft is not None else "full"


def condition_for(config: EngineConfig, sampling: str, mode: str | None = None) -> Condition:
    """The condition a reply of ``config`` sampled as ``sampling`` (``stats.describe_sampling``) was measured under;
    ``mode``: its side's name when the caller knows it (Auto: the mode it loaded), else ``mode_name(config)``."""
    name = mode or mode_name(config)
    return Condition(name, describe_depth(config) if name != "off" else "", sampling, str(config.target),
                     config.n_threads)


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none, as on Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@dataclass(frozen=True)
class Verdict:
    """The comparison of side ``b`` against side ``a`` (``ratio`` = median b / median a)."""

    a: str  # the sides' labels ("off", "d2t (depth 3)")
    b: str
    outcome: Outcome
    a_tps: tuple[float, ...] = ()  # the samples used, in the order taken
    b_tps: tuple[float, ...] = ()
    sampling: str = ""
    load: float | None = None  # the median load average over the samples used
    missing: tuple[str, ...] = ()  # why there is no verdict yet, in words
    left_out: tuple[str, ...] = ()  # samples not counted, and why
    rounds: int = 0  # rounds in which both sides were measured
    a_words: str = ""  # the sides in words (``side_words``): "drafting off", "d2t at depth 3"
    b_words: str = ""
    needs: tuple[int, int, int] = (0, 0, 0)  # samples still missing: side a, side b, alternating rounds
    min_samples: int = MIN_SAMPLES

    @property
    def decided(self) -> bool:
        return self.outcome != "not enough"

    @property
    def a_median(self) -> float | None:
        return statistics.median(self.a_tps) if self.a_tps else None

    @property
    def b_median(self) -> float | None:
        return statistics.median(self.b_tps) if self.b_tps else None

    @property
    def ratio(self) -> float | None:
        a, b = self.a_median, self.b_median
        return b / a if a and b is not None else None

    def spread(self, side: Literal["a", "b"]) -> tuple[float, float] | None:
        values = self.a_tps if side == "a" else self.b_tps
        return (min(values), max(values)) if values else None

    def short(self) -> str:
        """A few words: ``1.21x, faster``, ``0.98x, no clear difference``, ``measuring: off 1/3, d2t 2/3``."""
        if not self.decided:
            counts = f"{self.a} {len(self.a_tps)}/{MIN_SAMPLES}, {self.b} {len(self.b_tps)}/{MIN_SAMPLES}"
            return f"measuring: {counts}"
        return f"{self.ratio:.2f}x, {self.outcome}"

    def headline(self, unit: str = "reply") -> str:
        """What is compared and the outcome, in the words shown everywhere: ``d2t at depth 3 vs drafting off:
        1.12x, pays``; undecided: ``... vs drafting off: needs 2 more replies with d2t at depth 3 and 1 with
        drafting off``."""
        head = f"{self.b_words or self.b} vs {self.a_words or self.a}"
        if not self.decided:
            return f"{head}: needs {self.missing_words(unit)}"
        return f"{head}: {self.ratio:.2f}x, {PAYS[self.outcome]}"

    def missing_words(self, unit: str = "reply") -> str:
        """What a verdict still needs, in words (``needs_words``)."""
        return needs_words(self.a_words or self.a, self.b_words or self.b, self.needs[:2], unit)

    def sentence(self) -> str:
        """The verdict in one sentence, with the medians, spreads, samples, sampling and load; or what is missing."""
        if not self.decided:
            text = f"Not enough comparable samples yet to compare {self.b} with {self.a}: " + "; ".join(self.missing)
            if self.left_out:
                text += " (not counted: " + "; ".join(self.left_out) + ")"
            return text + "."
        a_lo, a_hi = self.spread("a") or (0.0, 0.0)
        b_lo, b_hi = self.spread("b") or (0.0, 0.0)
        head = {"faster": f"{self.b} is faster than {self.a}",
                "slower": f"{self.b} is slower than {self.a}",
                "no clear difference": f"No clear difference between {self.b} and {self.a}"}[self.outcome]
        load = f", load {self.load:.1f}" if self.load is not None else ""
        return (f"{head}: {self.ratio:.2f}x, median {self.b_median:.1f} tok/s ({b_lo:.1f}-{b_hi:.1f}) against "
                f"{self.a_median:.1f} ({a_lo:.1f}-{a_hi:.1f}), {len(self.b_tps)} and {len(self.a_tps)} samples "
                f"alternating, {self.sampling}{load}.")

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "outcome": self.outcome, "ratio": self.ratio,
                "a_median": self.a_median, "b_median": self.b_median, "a_spread": self.spread("a"),
                "b_spread": self.spread("b"), "a_tps": list(self.a_tps), "b_tps": list(self.b_tps),
                "samples": [len(self.a_tps), len(self.b_tps)], "rounds": self.rounds, "sampling": self.sampling,
                "load": self.load, "missing": list(self.missing), "left_out": list(self.left_out),
                "sentence": self.sentence(), "headline": self.headline(), "needs": list(self.needs),
                "a_words": self.a_words, "b_words": self.b_words}


def needs_words(a_words: str, b_words: str, needs: Sequence[int], unit: str = "reply") -> str:
    """What a verdict still needs, in words: ``2 more replies with d2t at depth 3 and 1 with drafting off, in
    turn`` (``needs``: the samples of side a and side b still missing, ``still_needed``; ``unit``: "reply" or
    "run"). Each side's count when enough of each were taken but not in turn, too."""
    a_need, b_need = int(needs[0]), int(needs[1])
    wanted = [(n, what) for n, what in ((b_need, f"with {b_words}"), (a_need, f"with {a_words}")) if n > 0]
    if not wanted:
        return "nothing more"
    many = "replies" if unit == "reply" else None
    text = f"{wanted[0][0]} more {noun(wanted[0][0], unit, many)} {wanted[0][1]}"
    text += "".join(f" and {n} {what}" for n, what in wanted[1:])
    return text + (", in turn" if len(wanted) == 2 else "")  # one each way at a time: a burst of load hits both


def alternating_rounds(sides: Sequence[str]) -> int:
    """How many consecutive rounds, each with both sides in it, the sequence of sides (in the order taken) splits
    into: ``a b a b a b`` and ``a b b a b a`` make 3, ``a a a b b b`` makes 1."""
    rounds, seen = 0, set[str]()
    for side in sides:
        seen.add(side)
        if len(seen) == 2:
            rounds, seen = rounds + 1, set()
    return rounds


def still_needed(sides: Sequence[str], a: str, b: str, min_samples: int = MIN_SAMPLES) -> tuple[int, int]:
    """How many more samples of ``a`` and of ``b`` a verdict needs after ``sides`` (the sides of the samples
    counted, in the order taken), taken in turn from now on: enough of each and ``min_samples`` alternating rounds
    (``alternating_rounds``). So ``a a a b b b`` (3 each, 1 round) still needs 2 of each."""
    rounds, seen = 0, set[str]()
    for side in sides:
        seen.add(side)
        if len(seen) == 2:
            rounds, seen = rounds + 1, set()
    have = {a: sum(1 for s in sides if s == a), b: sum(1 for s in sides if s == b)}
    more = {a: 0, b: 0}
    while rounds < min_samples or have[a] < min_samples or have[b] < min_samples:
        # half a round: the other side completes it; else the side further from enough (b on a tie: the mode judged)
        further = a if have[a] < have[b] else b
        side = (b if a in seen else a) if seen else further
        seen.add(side)
        have[side] += 1
        more[side] += 1
        if len(seen) == 2:
            rounds, seen = rounds + 1, set()
    return more[a], more[b]


def _left_out(count: int, why: str) -> list[str]:
    return [f"{count} {'sample' if count == 1 else 'samples'} {why}"] if count else []


def compare(samples: Iterable[Sample], a: str, b: str, min_samples: int = MIN_SAMPLES,
            depth: str | None = None) -> Verdict:
    """Side ``b`` (a drafting mode) against side ``a`` (usually ``off``) from ``samples`` (any order, any mix): the one
    function every verdict the app shows comes from.

    The conditions compared are the latest sample's (its sampling, model and threads), each side at the depth
    of its own latest sample, or side ``b`` at ``depth`` when given (the HUD: the depth loaded now, so replies at
    another depth never decide for it); see the module's docstring for the rules."""
    pool = [s for s in samples if s.condition.mode in (a, b)]
    label = {a: a, b: b if depth is None else Condition(b, depth).label}
    words = {a: side_words(a), b: side_words(b, depth or "")}
    if not pool:
        return Verdict(a, label[b], "not enough", missing=(f"no sample of {a} or {label[b]} yet",), a_words=words[a],
                       b_words=words[b], needs=(min_samples, min_samples, 0), min_samples=min_samples)
    latest = max(pool, key=lambda s: s.order)
    setup = latest.condition.setup
    left: list[str] = []
    same = [s for s in pool if s.condition.setup == setup]
    other_sampling = sum(1 for s in pool if s.condition.setup != setup and s.condition.sampling != setup[0])
    left += _left_out(other_sampling, f"at other sampling than {setup[0]}")
    left += _left_out(len(pool) - len(same) - other_sampling, "with another model or thread count")
    used: dict[str, list[Sample]] = {}
    for side in (a, b):
        mine = [s for s in same if s.condition.mode == side]
        pinned = depth if side == b and depth is not None else None
        if mine or pinned is not None:
            at = pinned if pinned is not None else max(mine, key=lambda s: s.order).condition.depth
            label[side] = Condition(side, at).label
            words[side] = side_words(side, at)
            kept = [s for s in mine if s.condition.depth == at]
            left += _left_out(len(mine) - len(kept), f"of {side} at another depth than {at}")
            mine = kept
        warm = [s for s in mine if s.warm]
        left += _left_out(len(mine) - len(warm), f"of {side} taken before a warm-up")
        used[side] = sorted(warm, key=lambda s: s.order)
    missing: list[str] = []
    for side in (a, b):
        have = len(used[side])
        if have < min_samples:
            cold = any(not s.warm for s in same if s.condition.mode == side)
            what = f"{label[side]} has {have} of {min_samples} samples"
            missing.append(what + (" after a warm-up" if cold else ""))
    order = sorted(used[a] + used[b], key=lambda s: s.order)
    rounds = alternating_rounds([s.condition.mode for s in order])
    if not missing and rounds < min_samples:
        missing.append(f"they were taken in {rounds} alternating round{'s' if rounds != 1 else ''}, not "
                       f"{min_samples} (A/B/A/B)")
    a_tps = tuple(s.tps for s in used[a])
    b_tps = tuple(s.tps for s in used[b])
    loads = [s.load for s in order if s.load is not None]
    load = statistics.median(loads) if loads else None
    outcome: Outcome
    if missing:
        outcome = "not enough"
    elif max(a_tps) >= min(b_tps) and max(b_tps) >= min(a_tps):
        outcome = "no clear difference"
    else:
        outcome = "faster" if min(b_tps) > max(a_tps) else "slower"
    need_a, need_b = still_needed([s.condition.mode for s in order], a, b, min_samples)
    return Verdict(label[a], label[b], outcome, a_tps, b_tps, setup[0], load, tuple(missing), tuple(left), rounds,
                   words[a], words[b], (need_a, need_b, max(min_samples - rounds, 0)), min_samples)


@dataclass
class SampleLog:
    """Samples as they come (the HUD's replies): numbered in order; the first sample of each model is the warm-up
    (a cold start: files paged in, first-pass allocations), not counted."""

    samples: list[Sample] = field(default_factory=list)
    _warmed: set[str] = field(default_factory=set)

    def add(self, condition: Condition, tps: float, tokens: int, load: float | None = None) -> Sample | None:
        """Log one reply; None (not logged) when it is too short to be a sample or has no speed."""
        if tokens < MIN_TOKENS or tps <= 0:
            return None
        warm = condition.model in self._warmed
        self._warmed.add(condition.model)
        sample = Sample(condition, tps, len(self.samples), warm, load, tokens)
        self.samples.append(sample)
        return sample

    def compare(self, a: str, b: str, depth: str | None = None) -> Verdict:
        return compare(self.samples, a, b, depth=depth)
