"""Adaptive draft depth: pick, round by round, the depth that emits the most tokens per second.

Two things decide the best depth, and both are measured while the reply streams:
- how far the drafts get accepted: the acceptance at each draft position, given that the drafts before it
  were accepted (it usually falls with depth on real text). A position rarely tested leans on the one
  before it, and what was measured at a position not tested lately ages, since the text moves on;
- what a round costs at each depth, built from the parts the engine times separately:
  ``rest(k + 1) + first_pass + step * (k - 1)`` for ``k`` drafts. ``rest(b)`` is the target's verify pass
  over ``b`` tokens plus our own bookkeeping, one estimate per batch size: on a GPU it is about flat, on a
  CPU it can double from 1 to 2 tokens and then rise unevenly (this 2-core machine: 8 tokens cost more
  than 9), so no straight line in the depth fits it. The first draft pass (which also catches the draft
  up) and each further draft step are measured in every drafting round, at every depth.

Every estimate is the lower median of its recent samples, so a stalled round does not move it, and a round whose
verify pass built llama.cpp's graph counts for no batch size (a shape new to the context; without our patch's graph
pool, any change of batch size); nor does the first drafting round. The engine times rounds in the decoding thread's
CPU time on a CPU backend with one thread (wall time with several), so other jobs' turns on a shared core stay out
of them; what such jobs still change (caches, memory bandwidth, the device's share with GPU offload) is taken out as
load: a round's verify time is divided by its first draft step's slowness against its estimate (it ran a moment
before, on the same core, and is the same work at every depth of 2 or more; the steps after it cost less each, so
the steps' average read the load of a depth-2 round 5-23% higher than a depth-3 round's, and depth 2's own rounds
came out that much too cheap), as far as that reading has told the verify times lately
(steps of a fraction of a millisecond time mostly the timer's noise, and the load index stands in for them); a round
at the current depth with one draft by its first draft pass's slowness, when that reading is near the load index
(``PASS_AGREE``); any other round by the load measured at the current depth around it, counting only if the load
before and after agree. A round at the depth played adds to that depth's verify estimate only while its draft steps
set the unit (``OWN_WEIGHT``): else its load is the load index, measured against that very estimate, and it would add
only the index's lag (a machine slowing while the depth is played crept into its cost and stayed there). Only depth 0
has no reading of its own: its load index is measured against its own estimate, so its estimate moves only through
visits (depth 1 was the same until issue 36's EPYC runs showed it keeping a cost learned too cheap). The first draft
step is the unit every cost is kept in, and it (with the draft step's estimate) does not move once measured: were the
step's own estimate divided by the load (a round's time over its prediction, which the estimates themselves set),
the unit would wander, the depth being played would follow it and the others, visited now and then, would not, and
it would come to look cheaper next to them than it is (by 8-10% in 300 rounds on this 2-core machine). Where the
steps are too short to time and the load index stands in, a depth's own rounds cannot move its estimate against the
others' at all (the index makes up any difference), so when another depth becomes the one played its first rounds
must read the load the rounds before read, or its estimate is corrected (``SWITCH_AGREE``): one noisy try would
otherwise fix it for good. Both loads are read as lower quartiles: another job makes rounds slower, never faster, and
a few slow rounds among the first five are not a level.

Expected tokens per round at depth ``k`` are ``1 + a1 + a1*a2 + ... + a1*...*ak``; the measured depth with
the highest expected tokens per second wins, and replaces the current one only when it promises
``SWITCH_MARGIN`` more. A depth not measured yet is tried for a few rounds when it could win by
``EXPLORE_MARGIN`` with its cost guessed low (a bigger batch on the line through the measured ones, a
smaller one cheaper in proportion) and its acceptance one standard error up, and only next to a measured
depth: the tries walk out from where it started and stop where the next depth stops promising. The
neighbours of the current depth and the most promising other are revisited now and then, less often the
dearer and the less promising a visit is, but at least once per ``PROBE_LONGEST * PROBE_EVERY`` rounds' time
(times how much dearer a visit's rounds are: a bounded share of the time), so a depth rejected under one load is
looked at again under another. A depth's first visit in a session lasts a round more when its first round builds the
verify pass's graph (the engine says whether a pass built one; without that word, always): that round does not count,
and a session started from a record must bring two samples against the two each remembered cost counts as.

A load that weighs on the draft passes more than on the verify pass (another job on the core the draft head's
small passes wait for) looks to the estimates like load on everything, and they would keep drafting deep under it
(issue 36: decisions learned under load stick). So each depth's latest rounds are also kept as measured
(``seen_rates``), and the draft passes' share of a round is watched, at the current depth (a recent against a
longer average, each round's share held near it so that another job's moment in one round's draft passes is not a
level) and at each visit (against its last visit, two counted rounds in a row): when it moves, the load changed in a way
the estimates cannot take out, every other depth is visited once more in turn (nearest first; the survey ends once the
nearest depth on either side has measured slower than the one played), and from then on a depth whose measured rate
beats the chosen one's by ``SEEN_MARGIN`` is chosen instead, and the depth it replaced is visited again
``RECHECK_AFTER`` rounds later (a burst of slow rounds looks the same). A load on everything alike leaves the
share where it was and changes nothing here. Recent measurements weigh most: the estimates keep the latest
``WINDOW`` rounds, the measured rates only those of the last ``SEEN_FRESH`` rounds.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

DEPTH_LIMIT = 16  # the deepest draft depth a remembered record may describe (the app offers up to 8)
START_DEPTH = 3  # the usual fixed depth (llama.cpp's --spec-draft-n-max 3): where measuring starts
DECAY = 0.99  # per test of a draft position: about its last 100 tests count
AGE = 0.998  # per round in which a position was not tested
FIRST_PRIOR = 0.8  # acceptance assumed at the first position before any draft was tested ...
PRIOR_WEIGHT = 2.0  # ... and the weight, in tests, of each position's prior (the position before it)
WINDOW = 15  # samples kept per cost estimate (the median of them is the estimate)
LOAD_WINDOW = 5  # rounds whose median measured/predicted ratio is the load index
BRACKET = 3  # load samples before and after a round that the load it is divided by is the median of
LOAD_AGREE = 0.2  # how far the load before and after a visit elsewhere may differ for the visit to count
MIN_SAMPLES = 1  # counted rounds before a batch size's own estimate replaces the extrapolated one (a try of a
# depth not measured yet lasts this many rounds and one more, which rebuilds the graph; later visits add samples)
PROBE_EVERY = 24  # rounds between visits of another measured depth, at least ...
PROBE_GAP = 0.05  # ... and longer the further its predicted rate lies below: once more per 5% behind
HOPELESS = 3  # ... and this many times longer for a depth that would lose even with its acceptance guessed high
PROBE_LONGEST = 4  # ... but never longer than this many times PROBE_EVERY (times how much dearer its rounds are, so
# that a visit costs a bounded share): at depth 0 or 1 the deeper positions are not tested, so what was measured there
# in a hard passage (or under another load) would otherwise stand for hundreds of rounds
PROBE_ROUNDS = 2  # a visit's rounds (the first counts too when the verify pass found its graph kept; a depth's first
# visit in a session: one more)
OPTIMISM = 1.0  # standard errors added to a position's acceptance when judging a depth not measured yet
EXPLORE_MARGIN = 0.05  # a depth not measured yet is tried when it could win by this much (a try costs rounds)
SWITCH_MARGIN = 0.01  # a depth must promise 1% more tokens per second than the current one to replace it
WARM_SAMPLES = 2  # a remembered cost estimate counts as this many samples: two rounds that disagree replace it
WARM_TESTS = 20.0  # remembered acceptance counts as at most this many tests at each position: the new text takes
# over within a few dozen rounds where it is tested every round, and a deep position, tested only now and then, keeps
# what the sessions before measured there
MEMORY_VERSION = 2  # the layout of ``snapshot``; another version is not restored (2: the first draft step, the
# unit the load is read in, is kept; a record without it would read this session's load against another unit)
# What each depth's rounds measured lately, as they came, beside the estimates (which take the load out): the check
# that catches a load that is not the same at every depth (another job that slows the draft head's small passes far
# more than the verify pass: the estimates see it as load on everything and keep drafting deep)
SEEN_KEEP = 3  # per depth: its latest counted rounds' times, the lower median of those still fresh ...
SEEN_FRESH = 160  # ... fresh: measured within this many rounds (a probe comes at least every PROBE_LONGEST *
# PROBE_EVERY rounds' time, longer only for a dearer depth)
SEEN_MARGIN = 0.1  # a measured depth replaces the one the estimates chose when its measured rate is 10% higher
RECHECK_AFTER = 4  # ... and the depth it replaced is visited again this many rounds later (once another job's
# burst of slow rounds, which looks the same, is likely over): on the Xeon's quiet phase two such rounds at depth 3
# put depth 7 in its place for 35 rounds, its rates 8% below, while a survey visited every other depth but 3
SHIFT = 1.3  # the draft passes' share of the current depth's rounds this much above or below its longer average (a
# visited depth's: SHIFT squared against its last visit, two counted rounds in a row): the load changed how it weighs
# on drafts and verify
SHIFT_FAST = 0.85  # the recent average of that share ...
SHIFT_SLOW = 0.99  # ... and its "before", a slower one; each round's share held within SHIFT squared of the slower
# one as it enters them. Another job's moment (a pause of a few ms) that lands in a round's short draft passes makes
# that one round's share 4-6x its usual: the Xeon's quiet phase met one every 100-200 rounds at 512-token replies,
# and the recent average read each as a load change (a survey of every depth, and the measured rates free to
# overrule the estimates: depth 7 played for a hundred rounds). Held, one such round moves it a tenth; a load that
# stays moves it past SHIFT in four rounds
# A visit's verify time, divided by the load it ran under, this much below its batch size's estimate proves the
# estimate wrong: it replaces it, instead of being one sample among WINDOW. Only faster: a round cannot run fast by
# chance the way it can stall, and a depth predicted too cheap corrects itself by being played (its draft passes
# read its rounds' load; the proof takes the lowest reading of the load around the visit). (Issue 36: after a
# slow stretch at depth 1, the Xeon's scaled demo predicted depth 3 at 0.132 s a round where its rounds took
# 0.09 s, and stayed at depth 0 for hundreds of rounds.)
PROVEN_FASTER = 1.2
# A round with one draft reads its load from its first draft pass when that reading is within this factor of the load
# index: an estimate wrong by up to this much corrects itself, while a load on the draft passes alone (8x in
# ``bench adaptive-load``'s loaded phase on the Xeon) is left to the load index and the measured rates
PASS_AGREE = 1.5
# A round at the depth played adds to that depth's verify estimate only while the draft steps set the unit this far
# (``gauge_weight``). Below it the round's load is the load index, measured against that estimate, so its own rounds
# would add only the index's lag: on the scaled demo on the Xeon (one thread, steps too short to time) a machine
# slowing while depth 3 was played crept 4.5% into depth 3's estimate in 15 rounds and stayed there when depth 2 was
# played (depth 3 at 1.17x depth 2's cost where its rounds measured 1.12x). Left out, not replaced by the estimate:
# copies of it would fill its window, and the visits could no longer correct an estimate learned in slow first rounds
OWN_WEIGHT = 0.5
# How far a round's draft-step reading tells its verify pass's load is measured over this many recent rounds, once
# this many of them are at a batch size seen twice or more (``_gauged``)
GAUGE_PAIRS = 30
GAUGE_MIN = 10
# When another depth becomes the one played, the load index is measured against its estimate from then on: its first
# ``LOAD_WINDOW`` rounds there should read the load the rounds before the change read. Where they read more than this
# much apart, the new depth's estimate was off against the old one's and is corrected to agree (the small demo on the
# Xeon: one try 12% low set depth 2's estimate, which was then played where depth 3 ran 7% faster). Smaller gaps are
# left to the visits: a level of five rounds wanders a few percent, and 4% here corrected noise as often as errors
SWITCH_AGREE = 0.08
# The depth played learns from every round of its own, the others only at their visits, every few dozen rounds, so
# a change of the unit the estimates are in reaches the depth played within a few rounds and the others' windows of
# ``WINDOW`` samples only after several visits: a load on the verify pass alone (steps that do not read it) on the
# Xeon's quiet phase after a loaded one (2026-12-07) made depth 3 look 15-17% dearer within three rounds, beside
# depths 2 and 7 still as they were, and those were played for the rest of the run. So where the depth played's
# estimate moved by more than ``SWITCH_AGREE`` since another depth's last visit, that depth is visited before it may
# take over (at most once per this many rounds), and a visit that reads its depth moved the same way (at least half
# as far, in ratio) moves that depth's estimate as far: the unit changed for both. One that does not was the depth
# played's own error, and the change goes ahead. A depth's first ``WINDOW`` rounds as the one played are not a move
# (they correct its own estimate, most favourable where it was chosen)
CONFIRM_HOLD = PROBE_EVERY
# A depth not played is measured only at its visits, and its estimate is the lower median of up to ``WINDOW`` samples,
# some of them from other loads or a remembered session's record: visits that keep reading it off by 10% move that
# median one sample at a time, a visit every few dozen rounds, and it takes them hundreds of rounds (the Xeon's quiet
# phase, 2026-12-07: depth 3's remembered 24.3 ms a round, in the unit, stood while its visits read 20.5-26.7 ms and
# depth 2 was played for 268 rounds where fixed depth 3 ran 8% faster). So where the median of a depth's latest this
# many visit samples, from two visits or more, lies more than ``SWITCH_AGREE`` from its estimate either way, those
# samples replace its window: they are what it costs now, in the unit the depth played reads the load in. Either way,
# unlike ``PROVEN_FASTER``: three samples from two moments are not one round that ran fast by chance. A depth's
# samples are forgotten for this when it becomes or stops being the one played, and all of them at a load change
# (``SHIFT``): samples from before are of another unit
VISITS_AGREE = 3


@dataclass(frozen=True)
class RoundTiming:
    """What one round cost, in seconds, split the way the engine measures it. The engine's round clock: the
    decoding thread's CPU time when the model runs on the CPU with one thread (other jobs' turns on the core left
    out), wall time with several threads or GPU offload (the other threads' and the device's time are in it)."""

    seconds: float  # the whole round: draft passes, verify pass, sampling and bookkeeping
    verify: float  # the target's pass over pending + drafts, with its rollback
    draft: float  # every draft pass of the round (catch-up and steps), with the draft's rollback
    draft_steps: float  # the part of ``draft`` spent in the passes after the first (one per further draft)
    proposed: int  # drafts made: the depth, or fewer when a confidence cut-off stopped drafting
    # whether the verify pass built its graph (None: not known, then a batch size unlike the last round's is taken
    # to have): llama.cpp builds a graph for each new shape of pass, which costs a fair share of a small model's
    # pass; our patch keeps the graphs of small batches, so a switch of depth builds one only the first time
    built: bool | None = None
    # the part of ``draft_steps`` up to the end of the first of them (None: not timed apart, then their average
    # stands in): the load reading. The first step after the first pass costs more than the ones after it (the
    # scaled demo on the Xeon: 0.40 ms, then 0.33 and 0.31 with two threads; 0.63, 0.46 and 0.40 with one), so the
    # steps' average depends on the depth, and the first step alone does not
    first_step: float | None = None


@dataclass
class Decision:
    """One round as the log keeps it: what was chosen and why, what was predicted and what was measured."""

    round: int
    depth: int  # the depth asked for
    reason: str  # "start", "best", "explore" (a depth not measured yet), "probe" (a neighbour revisited)
    rates: list[float]  # predicted tokens per second at each depth 0..draft_depth when the choice was made
    acceptance: list[float]  # the acceptance estimate at each draft position then
    batch: int = 0  # tokens the target verified (drafts made + 1)
    tested: int = 0
    accepted: int = 0
    seconds: float = 0.0  # measured
    verify: float = 0.0
    draft: float = 0.0
    draft_steps: float = 0.0  # the part of ``draft`` after the first pass: with the rest, a log replays the session
    first_step: float | None = None  # the first of those steps (``RoundTiming.first_step``)
    predicted: float | None = None  # predicted seconds for this round's shape at the load of the moment
    load: float = 1.0  # the load index after this round
    counted: bool = False  # whether this round's time entered its batch size's estimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round, "depth": self.depth, "reason": self.reason, "batch": self.batch,
            "tested": self.tested, "accepted": self.accepted, "seconds": self.seconds, "verify": self.verify,
            "draft": self.draft, "draft_steps": self.draft_steps, "first_step": self.first_step,
            "predicted": self.predicted, "load": self.load,
            "counted": self.counted,
            "rates": [round(rate, 3) for rate in self.rates], "acceptance": [round(a, 4) for a in self.acceptance],
        }


def _median(values: Iterable[float]) -> float:
    """``statistics.median`` (the mean of the middle two of an even count), without its checks: a round asks for
    several, and the round's Python time is time the reply waits."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def lower_median(values: Iterable[float]) -> float:
    """The lower median: the median of many samples, the smaller of two. A stalled round (3x) does not move it;
    with few samples, erring low is the error that corrects itself (a depth that looks cheaper than it is gets
    played and so measured again; one that looks dearer would be left alone)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def lower_quartile(values: Iterable[float]) -> float:
    """The lower quartile (the smallest of up to three). Where a level is read from a handful of rounds: another
    job's moment makes rounds slower, never faster, and a few slow rounds among five move their median by the whole
    spike (the Xeon, two threads: rounds of 15.8, 15.5 and 21.7 ms after 14.0 and 13.7 moved a median of five by 12%,
    and the depth's estimate was corrected by as much), where the lower quartile moves only with four of them."""
    ordered = sorted(values)
    return ordered[len(ordered) // 4]


@dataclass(slots=True)
class _Samples:
    """One round's raw cost samples, before they are divided by the load."""

    batch: int
    rest: float | None  # verify + host: None when the batch size changed since the previous round
    first_pass: float | None = None
    step: float | None = None
    first_step: float | None = None  # the first draft step's time (the load reading's unit), sampled with ``step``
    visit: bool = False  # from a visit of another measured depth (a probe): may prove its estimate wrong


@dataclass(slots=True)
class AdaptiveDepth:
    draft_depth: int
    # per draft position: decayed counts of rounds that tested it, and of those that accepted it
    tested: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    # load-normalized cost samples: verify + host per batch size, first draft pass, one further draft step (the
    # unit: the samples taken before it had an estimate, or the remembered one, stay)
    rest: dict[int, deque[float]] = field(default_factory=dict)
    first_pass: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    step: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    # the first draft step of a round (``RoundTiming.first_step``): the unit the load is read in, set with ``step``
    first_step: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    load_samples: list[float] = field(default_factory=list)  # measured/predicted time of rounds at the current depth
    load: float = 1.0
    rounds: int = 0
    elapsed: float = 0.0  # seconds of all rounds observed
    chosen: Counter[int] = field(default_factory=Counter)  # depths asked for, round by round
    log: list[Decision] | None = None  # set to a list to keep every round's decision (bench spec does)
    current: int = -1  # the depth played between probes (-1: none yet)
    _block_depth: int = -1  # a probe or a first measurement in progress: its depth, reason and rounds left
    _block_reason: str = ""
    _block_left: int = 0
    _returning: int = 0  # rounds back at the current depth after a block, before any other choice
    _visited: dict[int, float] = field(default_factory=dict)  # depth: ``elapsed`` when it was last played
    # per depth: (round, measured seconds) of its latest counted rounds: what its rounds cost lately, as they came
    _seen: dict[int, deque[tuple[int, float]]] = field(default_factory=dict)
    _shift: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # fast and slow sums, their weights
    _shift_depth: int = -1  # the current depth those averages are of
    shifts: int = 0  # load changes noticed (each makes the other depths due for a visit)
    _shift_round: int = 0  # the round the latest one was noticed in
    _overruled_round: int = -1  # the round the measured rates last overruled the estimates in
    # how far the depth played's own rounds have moved its verify estimate, all told (a log ratio, carried from one
    # depth played to the next), and its value when each batch size last had a sample of another kind (a visit, a
    # try) or was left as the one played: the unit moved by the difference since (``CONFIRM_HOLD``)
    _drift: float = 0.0
    _marks: dict[int, float] = field(default_factory=dict)
    _played_since: int = 0  # the round the depth played became the one played
    # the latest visit before a change: its depth, its first round, whether a round of it came in (counted)
    _confirm: tuple[int, int, bool] | None = None
    unit_moves: int = 0  # visits that moved their depth's estimate with the depth played's (``CONFIRM_HOLD``)
    # per batch size: (round, sample) of its latest visit samples, in the unit of its window (``VISITS_AGREE``)
    _recent: dict[int, deque[tuple[int, float]]] = field(default_factory=dict)
    visit_moves: int = 0  # estimates replaced by their latest visits' samples (``VISITS_AGREE``)
    _survey: list[int] = field(default_factory=list)  # depths to visit one after another after a load change
    _shares: dict[int, float] = field(default_factory=dict)  # per depth visited: its drafts' share at the last visit
    # per depth visited: a round's share beyond the one before it, up (True) or down, waiting for the next round there
    _odd_share: dict[int, bool] = field(default_factory=dict)
    _builds_told: bool = False  # the engine says whether each verify pass built its graph (``RoundTiming.built``)
    _first_visit: int = -1  # a depth on its first visit in this session, its first round not observed yet (when told)
    _since_probe: int = 0
    _last_batch: int = 0
    _drafting_rounds: int = 0
    _loads_seen: int = 0  # load samples ever taken (``load_samples`` keeps the latest)
    # rounds waiting for the load after them: (samples, load samples before them, whether they gave one)
    _waiting: list[tuple[_Samples, int, bool]] = field(default_factory=list)
    # (batch, log verify time, log draft-step reading) of recent rounds: how well the reading tells the verify's load
    _gauge_pairs: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=GAUGE_PAIRS))
    # per batch size, running sums over those pairs: count, sum of each, of their products, of the readings squared
    _gauge_sums: dict[int, tuple[float, float, float, float, float]] = field(default_factory=dict)
    _reference: bool = False  # the round being observed is at the current depth
    _probing: bool = False  # the round being observed is a visit of another measured depth
    # what each depth decided and not observed yet was (at the current depth, a visit, its log entry), oldest first:
    # one in turn-by-turn use; the engine decides the next round's depth before the last round is observed (while
    # the verify pass runs), so two there
    _decided: deque[tuple[bool, bool, Decision | None]] = field(default_factory=deque)
    corrections: int = 0  # visits that proved their depth's estimate too dear (``PROVEN_FASTER``)
    rescales: int = 0  # changes of the depth played whose load index jumped: the new depth's estimate corrected
    _ref_depth: int = -1  # the depth of the latest round the load index was measured on
    _switch: tuple[float, float, int] | None = None  # after a change of that depth: the load before (its lower
    # quartile and lower median), its first sample's count
    _pending: Decision | None = None
    _observed: int = 0  # rounds observed: the estimates change only then
    _rates: dict[bool, tuple[int, list[float]]] = field(default_factory=dict)  # (rounds observed, rates) by optimism
    _accepts: dict[bool, tuple[int, list[float]]] = field(default_factory=dict)  # the same for the acceptances
    _changes: int = 0  # changes of the cost estimates: ``_costs``' cached list is of this count
    # each cost's estimate, kept up to date where its samples change (``_add``, ``restore``): a round changes one
    # batch size's samples, and sorting every one of them again each round was a tenth of adaptive depth's time
    _rest_estimates: dict[int, float] = field(default_factory=dict)  # by batch size, those with samples
    _first_estimate: float = 0.0  # 0 before any sample, as ``_estimates`` gives it
    _step_estimate: float = 0.0
    _first_step_estimate: float = 0.0
    _known_version: int = 0  # counts the changes of which costs have samples at all (``_known_depths``' key)
    _cost_cache: tuple[int, list[float]] | None = None  # (changes, ``_costs``)
    _known_cache: tuple[int, frozenset[int]] | None = None  # (``_known_version``, the measured depths)
    # the latest rest table and what it was made from
    _table: tuple[tuple[int, int, int], list[float]] | None = None  # ((size, rest version, known version), table)
    _rest_version: int = 0  # changes of any batch size's verify estimate (the rest table's key)
    warm: bool = False  # started from what an earlier session learned (``restore``)
    # the draft steps' weight as a load reading before this session has gauged it (``gauge_weight``): a warm session
    # starts from the one it was restored from. With 1 there, a fresh context's first rounds, divided by their steps'
    # noisy readings (0.3 ms steps timed 30% apart; the scaled demo at one thread), put samples 13-25% too dear beside
    # the two each remembered cost counts as, and a warm run held depth 1 for 126 rounds where depth 2 was 5% faster
    gauge_prior: float = 1.0

    def __post_init__(self) -> None:
        self.tested = [0.0] * self.draft_depth
        self.accepted = [0.0] * self.draft_depth

    # ------------------------------------------------------------------ choosing

    def depth(self) -> int:
        """The depth for the next round."""
        self.rounds += 1
        if self._block_left > 0:
            self._block_left -= 1
            if self._block_left == 0:
                self._returning = 1 + BRACKET
            depth, reason = self._block_depth, self._block_reason
        elif not self._known_depths():
            depth, reason = min(START_DEPTH, self.draft_depth), "start"
            self.current = depth
        elif (self._returning or any(not own for _, _, own in self._waiting)) and self._known(self.current):
            # back at the current depth (a switch, then counted rounds): they tell the load after the visit
            self._returning = max(self._returning - 1, 0)
            depth, reason = self.current, "best"
        else:
            settled, best, overruled = self._choose()
            if overruled is not None and settled != self.current:
                # the rounds measured lately overrule the estimates and a new depth is played: a few slow rounds
                # of another job's at the estimates' choice look the same as a load that weighs on its drafts,
                # and once left, its rounds would wait for a probe to be measured again (a survey under way
                # passes it over: it was the current depth when the survey began), so it is visited again soon
                self._survey = [overruled, *(k for k in self._survey if k != overruled)]
                self._overruled_round = self.rounds
                self._since_probe = max(self._since_probe, PROBE_EVERY - RECHECK_AFTER)
            if overruled is None and settled != self.current and self._known(self.current) and \
                    abs(math.log(self._moved_since_visit(settled + 1))) > math.log1p(SWITCH_AGREE):
                confirm = self._confirm
                if confirm is None or confirm[0] != settled or self.rounds - confirm[1] > CONFIRM_HOLD:
                    if not self._steady():
                        settled = self.current  # a visit now would not count: the change waits for one that does
                    else:
                        self._confirm = (settled, self.rounds, False)
                        self._since_probe = 0
                        return self._decide(*self._visit(settled))
                elif confirm[2]:
                    # measured lately, and the depth played's estimate moved on since: it is measured again once
                    # the visit is CONFIRM_HOLD rounds old (as a gauge crosses OWN_WEIGHT, the depth played's own
                    # rounds enter its estimate one by one, and each moves it a little further)
                    settled = self.current
                # else visited lately and its rounds did not count: the change goes ahead, as the estimates say
            if settled != self.current:
                self._marks[self.current + 1] = self._drift  # its estimate is as of now
                self._played_since = self.rounds
                # the visits of either were before its rounds as the one played
                self._recent.pop(self.current + 1, None)
                self._recent.pop(settled + 1, None)
            self.current = settled
            baseline = not self._known(0) and self.current != 0
            if (not self._known(best) or baseline) and self._steady():
                # promising but never measured (and the load is known, so it can be compared): a few rounds
                # there, then back to the current depth. Drafting off (depth 0) is always measured once: a
                # one-token pass runs other kernels than the verify passes (on a CPU it can cost a third of a
                # two-token one, not half), so no batch measured says what it costs, and it is the one choice
                # that says whether drafting pays at all (a fast EPYC, one thread: off 15% ahead of every
                # depth, never tried, since no measured depth was next to it)
                depth, reason = self._block(best if not self._known(best) else 0, "explore", MIN_SAMPLES + 1)
            else:
                depth, reason = settled, "best"
                self._since_probe += 1
                if self._since_probe >= PROBE_EVERY and self._steady():
                    self._survey = [k for k in self._survey if k != settled and self._known(k)]
                    if self._survey and self._survey_settled():
                        self._survey = []  # the farther depths are left to the usual visits
                    target = self._survey.pop(0) if self._survey else self._probe_target()
                    if target is not None:
                        # after a load change every depth in turn (back here between them), then the usual pace
                        self._since_probe = PROBE_EVERY - 1 if self._survey else 0
                        depth, reason = self._visit(target)
        return self._decide(depth, reason)

    def _visit(self, target: int) -> tuple[int, str]:
        """Begin a visit of ``target``, a measured depth other than the current one. A depth's first visit builds
        its verify graph in its first round, which does not count: one round more, or a warm session's visit would
        bring one sample against the two each remembered cost counts as, and a record too dear by less than
        ``PROVEN_FASTER`` would stand. Where the engine says whether a pass built its graph, only when it did (a
        benchmark's warm-up builds the graphs of the depths visited most, ``prepare_visit_graphs``)."""
        first_visit = not self.chosen[target]
        self._first_visit = target if first_visit and self._builds_told else -1
        return self._block(target, "probe", PROBE_ROUNDS + (1 if first_visit and not self._builds_told else 0))

    def _decide(self, depth: int, reason: str) -> int:
        """Book the depth decided for the next round (its log entry too) and give it."""
        self._visited[depth] = self.elapsed
        self.chosen[depth] += 1
        # the lists themselves: each is made anew when it changes, never changed in place (rounded in ``to_dict``)
        logged = Decision(self.rounds, depth, reason, self.rates(), self._acceptances(False)) \
            if self.log is not None else None
        self._decided.append((reason in ("start", "best"), reason == "probe", logged))
        return depth

    def _moved_since_visit(self, batch: int) -> float:
        """How far the depth played's own rounds moved its verify estimate (a ratio) since ``batch``'s estimate was
        last brought up to date (a visit, a try, or its last round as the depth played); 1 where it never was."""
        mark = self._marks.get(batch)
        return 1.0 if mark is None else math.exp(self._drift - mark)

    def withdraw(self) -> None:
        """The latest depth decided will not be played (the engine decided it ahead and the reply or the learner
        changed): its round is not waited for."""
        if self._decided:
            self._decided.pop()

    def best(self) -> int:
        """The depth with the highest expected tokens per second under the current estimates: a measured
        one, or one not measured yet (predicted optimistically, at most one deeper than the deepest measured)
        that would be tried next."""
        return self._choose()[1]

    def _choose(self) -> tuple[int, int, int | None]:
        """The measured depth to settle on (the current one unless another beats it by ``SWITCH_MARGIN``), the
        depth that promises most, measured or not, and the estimates' choice when the measured rates overruled it
        (else None: ``depth`` visits it again)."""
        known = sorted(self._known_depths())
        if not known:
            start = min(START_DEPTH, self.draft_depth)
            return start, start, None
        rates = self.rates()
        settled = max(known, key=lambda k: rates[k])
        if self.current in known and rates[settled] < rates[self.current] * (1.0 + SWITCH_MARGIN):
            settled = self.current
        seen = self.seen_rates() if self.shifts else {}
        overruled = None
        if settled in seen:  # once a load weighed on one part more, what the rounds measured lately overrules the
            # estimates where it differs clearly
            fastest = max(seen, key=lambda k: seen[k])
            if seen[fastest] > seen[settled] * (1.0 + SEEN_MARGIN) and self._known(fastest):
                settled, overruled = fastest, settled
        # a depth not measured yet is tried if it could win clearly: its cost predicted optimistically, and its
        # acceptance one standard error up; only next to a measured depth, so that the tries walk out from the
        # depths measured and stop where the next one stops promising. A jump (from 4 to 8, say) pays for a
        # guess: its cost lies past what was measured, and its deep positions' acceptance leans on the shallow
        # ones; and on a CPU whose verify cost has a hump (batch 8 dearer than 9) it can settle beyond the hump
        # and never come back, since the depth next to it looks bad
        optimistic = self.rates(optimistic=True)
        unknown = [k for k in range(self.draft_depth + 1) if k not in known and (k - 1 in known or k + 1 in known)]
        top = max(unknown, key=lambda k: optimistic[k], default=settled)
        promising = top if optimistic[top] >= rates[settled] * (1.0 + EXPLORE_MARGIN) else settled
        return settled, promising, overruled

    def seen_rates(self) -> dict[int, float]:
        """Expected tokens per second of each depth visited lately, from what its rounds measured as they came
        (not load-normalized: a load that weighs on drafts more than on the verify pass shows here) and the
        acceptance estimates; only depths whose measurements are fresh (``SEEN_FRESH``)."""
        accept = self._acceptances(False)
        found = {}
        for k, times in self._seen.items():
            fresh = [seconds for at, seconds in times if self.rounds - at <= SEEN_FRESH]
            if fresh and k <= self.draft_depth:
                expected, reach = 1.0, 1.0
                for a in accept[:k]:
                    reach *= a
                    expected += reach
                found[k] = expected / max(lower_median(fresh), 1e-9)
        return found

    def _near(self, depth: int) -> list[int]:
        """The measured depths other than ``depth``, the nearest first: a survey's order."""
        known = [k for k in range(self.draft_depth + 1) if k != depth and self._known(k)]
        return sorted(known, key=lambda k: (abs(k - depth), k))

    def _see(self, depth: int, timing: RoundTiming) -> None:
        """One counted round's time at ``depth``, for ``seen_rates``; and the check for a load that weighs on one
        part more than the other (``SHIFT``): when the draft passes' share of the current depth's recent rounds
        parts from its longer average, or a visited depth's share from its last visit's in two counted rounds in a
        row, the other depths are due for a visit at once (what they measured is from before). A load on everything
        alike leaves the share where it was: the estimates take that out as load. A pause of another job's that lands
        in one round's draft passes moves that round's share alone, and is not a change: each share enters the
        averages held near the longer one."""
        self._seen.setdefault(depth, deque(maxlen=SEEN_KEEP)).append((self.rounds, timing.seconds))
        if timing.proposed < 1 or timing.draft <= 0.0 or timing.verify <= 0.0:
            return  # no draft made (depth 0 still times a little bookkeeping as draft): no share to watch
        share = timing.draft / timing.verify
        if depth != self.current:  # a visit: its drafts' share against the share at its last visit
            self._visit_share(depth, share)
            return
        if depth != self._shift_depth:  # another current depth: another share, its averages start anew
            self._shift_depth, self._shift = depth, [0.0, 0.0, 0.0, 0.0]
        fast_s, fast_w, slow_s, slow_w = self._shift
        if slow_w >= 10.0:  # held near the level of the rounds so far (ten of them make one): a moment is no level
            usual = slow_s / slow_w
            share = min(max(share, usual / SHIFT ** 2), usual * SHIFT ** 2)
        fast_s, fast_w = fast_s * SHIFT_FAST + share, fast_w * SHIFT_FAST + 1.0
        slow_s, slow_w = slow_s * SHIFT_SLOW + share, slow_w * SHIFT_SLOW + 1.0
        self._shift = [fast_s, fast_w, slow_s, slow_w]
        if slow_w >= 20.0 and fast_w >= 4.0:  # a longer average to compare with, at this depth
            ratio = (fast_s / fast_w) / (slow_s / slow_w)
            if ratio > SHIFT or ratio < 1.0 / SHIFT:
                self._shift = [fast_s, fast_w, fast_s, fast_w]  # the new level is the level now
                self._shifted(depth)

    def _visit_share(self, depth: int, share: float) -> None:
        """A visited depth's counted round: its drafts' share against the share its rounds had before. One round beyond
        ``SHIFT`` squared may be a pause of another job's: the visit lasts a round more where it can, and a second
        round beyond it the same way (then, or at the next visit) is a load change."""
        before = self._shares.get(depth)
        if before is None or before / SHIFT ** 2 <= share <= before * SHIFT ** 2:
            self._shares[depth] = share
            self._odd_share.pop(depth, None)
            return
        up = share > before
        if self._odd_share.get(depth) == up:
            del self._odd_share[depth]
            self._shares[depth] = share
            self._shifted(depth)
            return
        self._odd_share[depth] = up
        if self._block_left == 0 and self._block_depth == depth and self._block_reason == "probe":
            self._block_left = 1  # the visit's last round was this one: one more tells a moment from a change

    def _survey_settled(self) -> bool:
        """Whether a survey after a load change has seen enough: the nearest measured depth on either side of the
        current one visited since the change, neither measured faster than the current depth (``seen_rates``), and
        the measured rates have not moved the depth played since.
        The rates fall away from the best depth on both sides, so the farther depths are left to the usual visits
        (the most promising of them is due at once, ``_probe_target``). A survey of every depth costs several
        percent of a few hundred rounds (the Xeon's quiet phase, 2026-12-06: depths 0-8 visited in turn, 6-8 tried
        for the first time, after a draft share moved by another job's moment), mostly at the depths furthest off."""
        since = self._shift_round
        if self._overruled_round >= since:
            return False  # the measured rates moved the depth played: the survey goes on (a burst looks the same)
        seen = {k: rate for k, rate in self.seen_rates().items()
                if any(at > since for at, _ in self._seen.get(k, ()))}
        if self.current not in seen:
            return False
        return all(k in seen and seen[k] <= seen[self.current] for k in self._neighbours(self._known_depths()))

    def _neighbours(self, known: Collection[int]) -> list[int]:
        """The nearest of ``known`` (measured depths) on either side of the current depth: below first."""
        below = [k for k in known if k < self.current]
        above = [k for k in known if k > self.current]
        return ([max(below)] if below else []) + ([min(above)] if above else [])

    def _shifted(self, depth: int) -> None:
        """The load changed the draft passes' share of a round: every other depth is visited again soon, nearest
        first (what they measured is from before), and from now on what the rounds measured can overrule the
        estimates (``seen_rates``)."""
        self.shifts += 1
        self._shift_round = self.rounds
        self._visited = {k: -math.inf for k in self._visited}
        self._since_probe = PROBE_EVERY
        self._survey = self._near(self.current if self.current >= 0 else depth)
        self._recent.clear()  # their visits were under the load before (``VISITS_AGREE``)

    def rates(self, optimistic: bool = False) -> list[float]:
        """Predicted tokens per second at each depth 0..draft_depth; ``optimistic``: with each position's acceptance
        one standard error higher (a position rarely tested could well be better than measured)."""
        cached = self._rates.get(optimistic)
        if cached is not None and cached[0] == self._observed:  # nothing measured since: the same answer
            return cached[1]
        costs, accept, load = self._costs(), self._acceptances(optimistic), self.load
        first = costs[0] * load
        rates = [1.0 / (first if first > 1e-9 else 1e-9)]
        expected, reach = 1.0, 1.0
        for cost, accepted in zip(costs[1:], accept, strict=False):
            reach *= accepted
            expected += reach
            seconds = cost * load
            rates.append(expected / (seconds if seconds > 1e-9 else 1e-9))
        self._rates[optimistic] = (self._observed, rates)
        return rates

    def acceptance_at(self, position: int) -> float:
        """Acceptance at draft ``position`` (0-based) given the ones before it were accepted: what was
        measured there, leaning on the position before it (or ``FIRST_PRIOR``) while tests are few."""
        return self._acceptances(False)[position]

    def _acceptances(self, optimistic: bool) -> list[float]:
        """Every position's acceptance (``acceptance_at``). ``optimistic``: one standard error up, the error
        weighed by how much was measured there, so that a position hardly tested is as high as the one before
        it (taken high too) and no higher: the error would otherwise compound from position to position and
        make every deep depth look worth a try."""
        cached = self._accepts.get(optimistic)
        if cached is not None and cached[0] == self._observed:  # the counts change only with a round observed
            return cached[1]
        # both kinds in one pass: every round asks for both
        plain, high, prior, prior_high = [], [], FIRST_PRIOR, FIRST_PRIOR
        for tests, accepted in zip(self.tested, self.accepted, strict=True):
            weight = tests + PRIOR_WEIGHT
            value = (accepted + PRIOR_WEIGHT * prior) / weight
            prior = value if value < 0.999 else 0.999
            plain.append(prior)
            value = (accepted + PRIOR_WEIGHT * prior_high) / weight
            spread = math.sqrt(value * (1.0 - value) / weight) * tests / weight
            value += OPTIMISM * spread
            prior_high = value if value < 0.999 else 0.999
            high.append(prior_high)
        self._accepts[False], self._accepts[True] = (self._observed, plain), (self._observed, high)
        return high if optimistic else plain

    def _costs(self) -> list[float]:
        """Predicted round time at each depth 0..draft_depth, load-normalized (computed once per change of the
        estimates)."""
        if self._cost_cache is None or self._cost_cache[0] != self._changes:
            rest, first, step = self._estimates()
            self._cost_cache = (self._changes, [rest[k] + ((first + step * (k - 1)) if k else 0.0)
                                                for k in range(self.draft_depth + 1)])
        return self._cost_cache[1]

    def predicted_seconds(self, depth: int, drafts: int | None = None) -> float:
        """Predicted time of a round at ``depth`` (``drafts`` made, the depth unless fewer) at the current load."""
        made = depth if drafts is None else drafts
        cost = self.rest_estimate(made + 1)
        if made >= 1:
            _, first, step = self._estimates()
            cost += first + step * (made - 1)
        return cost * self.load

    def _steady(self) -> bool:
        """Whether the load has held still lately (the medians of the last ``BRACKET`` load samples and of the
        ones before them agree within ``LOAD_AGREE``): a visit elsewhere started now will likely count."""
        if len(self.load_samples) < 2 * BRACKET:
            return False
        low, high = sorted((_median(self.load_samples[-BRACKET:]),
                            _median(self.load_samples[-2 * BRACKET:-BRACKET])))
        return high <= low * (1.0 + LOAD_AGREE)

    def _block(self, depth: int, reason: str, rounds: int) -> tuple[int, str]:
        self._block_depth, self._block_reason, self._block_left = depth, reason, rounds - 1
        self._returning = 1 + BRACKET if rounds == 1 else 0
        return depth, reason

    @staticmethod
    def _beyond(measured: dict[int, float]) -> tuple[float, float]:
        """The line (intercept, slope) that verify + host time follows past the biggest measured batch: the median
        line through the measured batches of 2 or more tokens (the median of the slopes between every two of them,
        not falling), so that one odd batch size (a kernel that tiles badly) does not bend it; flat at the biggest
        one's own time while fewer than two are measured (an optimistic guess, which a visit corrects)."""
        points = [(b, cost) for b, cost in measured.items() if b >= 2]
        if len(points) < 2:
            return measured[max(measured)], 0.0
        slope = max(_median((c2 - c1) / (b2 - b1) for i, (b1, c1) in enumerate(points)
                                      for b2, c2 in points[i + 1:]), 0.0)
        return float(_median(c - slope * b for b, c in points)), slope

    def _probe_target(self) -> int | None:
        """The depth to revisit, if one is due: a neighbour of the current depth, or the most promising of the
        others (with the acceptance one standard error up), so that the estimates on either side stay true and
        a better depth further away is not missed. Each is due after ``PROBE_EVERY`` rounds at the current
        depth, stretched by what a visit costs: by how much longer its rounds take and by how far its predicted
        rate lies below the current one's (once more per ``PROBE_GAP``); one that would not win even with the
        acceptance guessed high waits ``HOPELESS`` times as long again. The closest rival among those due goes
        first."""
        rates, optimistic = self.rates(), self.rates(optimistic=True)
        top, round_seconds = rates[self.current], self.predicted_seconds(self.current)
        if top <= 0.0 or round_seconds <= 0.0:
            return None
        known = [k for k in range(self.draft_depth + 1) if k != self.current and self._known(k)]
        # the neighbours (from depth 0 with depths 1-2 never measured, say, depth 3: the rounds at depth 0 time no
        # draft pass, so only a visit can tell that drafting pays again)
        rivals = self._neighbours(known)
        far = [k for k in known if k not in rivals]
        if far:
            rivals.append(max(far, key=lambda k: optimistic[k]))
        due = []
        for k in rivals:
            gap = max(top - rates[k], 0.0) / top
            # how much dearer a visit is: its rounds' length, or from depth 0 its rate's shortfall alone (rounds
            # without a draft pass cannot see a load change, so visits are the only way back to drafting, and a
            # visit of a depth predicted as fast as depth 0 costs nothing however long its rounds)
            longer = max(top / max(rates[k], 1e-9) if self.current == 0 else self.predicted_seconds(k) / round_seconds,
                         1.0)
            wait = PROBE_EVERY * round_seconds * (1.0 + gap / PROBE_GAP)
            if optimistic[k] < top:
                wait *= HOPELESS
            # a wrong estimate gets checked too, and a visit's cost stays bounded: at most PROBE_ROUNDS of its
            # rounds per PROBE_LONGEST * PROBE_EVERY rounds' time at the current depth, times how much dearer
            wait = min(wait, PROBE_EVERY * PROBE_LONGEST * round_seconds) * longer
            if self.elapsed - self._visited.get(k, 0.0) >= wait:
                due.append((gap, abs(k - self.current), k))
        return min(due)[2] if due else None

    # ------------------------------------------------------------------ learning

    def observe(self, depth: int, tested: int, accepted: int, timing: RoundTiming) -> None:
        """One finished round: asked for ``depth``, ``tested`` drafts checked, ``accepted`` kept, costing ``timing``.
        It is the round of the oldest depth decided and not observed yet."""
        if self._decided:
            self._reference, self._probing, self._pending = self._decided.popleft()
        counts, kept = self.tested, self.accepted
        for i in range(min(tested, self.draft_depth)):
            counts[i] = counts[i] * DECAY + 1.0
            kept[i] = kept[i] * DECAY + (1.0 if i < accepted else 0.0)
        for i in range(max(tested, 0), self.draft_depth):
            # what was measured at a position not tested lately ages too, more slowly: the text moves on
            counts[i] *= AGE
            kept[i] *= AGE
        self.elapsed += timing.seconds
        self._observed += 1
        made = timing.proposed
        batch = made + 1
        shape_known = self._batch_known(batch) and (made < 1 or bool(self.first_pass)) and \
            (made < 2 or bool(self.step))
        predicted = self.predicted_seconds(depth, made) if shape_known else None
        # a pass that built llama.cpp's graph is not a fair sample of its cost
        counted = not timing.built if timing.built is not None else batch == self._last_batch
        self._last_batch = batch
        self._builds_told = self._builds_told or timing.built is not None
        if self._first_visit == depth and self._probing:  # a depth's first visit, its first round
            self._first_visit = -1
            if timing.built and self._block_depth == depth and self._block_reason == "probe":
                self._block_left += 1  # it built the verify graph and does not count: the visit lasts a round more
        if counted:
            self._see(depth, timing)
        samples = _Samples(batch, timing.seconds - timing.draft if counted else None, visit=self._probing)
        if made >= 1:
            self._drafting_rounds += 1
            if self._drafting_rounds > 1:  # the first drafting round warms the draft context up
                samples.first_pass = timing.draft - timing.draft_steps
                if made >= 2:
                    samples.step = timing.draft_steps / (made - 1)
                    # the first step's own time where the engine timed it apart, else the steps' average
                    samples.first_step = timing.first_step if timing.first_step is not None else samples.step
        if not self.load_samples and not self._waiting and not self._known_depths():
            self._add(samples, 1.0)  # nothing measured to compare with yet: the first rounds set the scale
        else:
            own = self._reference and counted and predicted is not None
            if own:
                assert predicted is not None
                self.load_samples.append(timing.seconds / (predicted / self.load))
                self._loads_seen += 1
                del self.load_samples[:-4 * WINDOW]
                self.load = lower_median(self.load_samples[-LOAD_WINDOW:])
                self._keep_load_level(depth)
            if samples.first_step and self.first_step:
                # the first draft step of this very round tells its load best: it ran a moment before the verify
                # pass, on the same core, and is the same work at every depth. It is the unit, and neither it nor
                # the step is sampled again (see the module's docstring)
                steps_load = self._gauged(batch, samples.rest, samples.first_step / self._first_step_estimate)
                # a round at the depth played tells that depth's verify cost only where the steps set the unit:
                # else its load is the load index, measured against that very estimate, and the sample would add
                # only the index's lag (``OWN_WEIGHT``)
                rest = samples.rest if not own or self.gauge_weight() >= OWN_WEIGHT else None
                self._add(_Samples(batch, rest, samples.first_pass, visit=samples.visit), steps_load,
                          proof_load=min(steps_load, self.load))
                samples = _Samples(batch, None)
            elif own and made == 1 and samples.first_pass and self.first_pass and \
                    1.0 / PASS_AGREE < (pass_load := samples.first_pass / self._first_estimate) / self.load \
                    < PASS_AGREE:
                # one draft: no steps, but the first draft pass ran a moment before the verify pass as well, and
                # costs about the same at any depth. Without it, depth 1's rounds would be divided by the load
                # measured against depth 1's own estimate, which then could never move: too cheap, it would keep
                # depth 1 chosen for good (its load index 10-20% above the other depths', on the machine and in
                # the simulation). Here the first pass is the unit and is not sampled
                self._add(_Samples(batch, samples.rest, visit=samples.visit), pass_load,
                          proof_load=min(pass_load, self.load))
                samples = _Samples(batch, None)
            self._waiting.append((samples, self._loads_seen - (1 if own else 0), own))
            self._settle()
        if self._pending is not None and self.log is not None:
            decision = self._pending
            decision.batch, decision.tested, decision.accepted = batch, tested, accepted
            decision.seconds, decision.verify, decision.draft = timing.seconds, timing.verify, timing.draft
            decision.draft_steps, decision.first_step = timing.draft_steps, timing.first_step
            decision.predicted, decision.load, decision.counted = predicted, self.load, counted
            self.log.append(decision)
            self._pending = None

    @property
    def _loads_dropped(self) -> int:
        """The count of load samples taken and no longer kept (``load_samples`` keeps the latest)."""
        return self._loads_seen - len(self.load_samples)

    def _keep_load_level(self, depth: int) -> None:
        """Called with each load sample. The load index is a round's time over its depth's estimate, so a depth's
        own rounds, divided by it, cannot move that estimate against the others' (whatever it is, the index makes up
        the difference): only visits compare depths, and their samples join a window of older ones. So when another
        depth becomes the one played, its first rounds should read the load the rounds before read; once it has
        ``LOAD_WINDOW`` of them (or at least ``BRACKET`` when it is left sooner), a level more than ``SWITCH_AGREE``
        apart means its estimate was off against the old depth's, and it is corrected to agree. A level is read
        twice, as the lower quartile (``lower_quartile``) and the lower median of its rounds, and it moved only where
        both moved the same way, by the lesser of the two moves: a few slow rounds of another job's among five move
        the median alone, two fast ones the quartile alone (the Xeon's quiet phase, 2026-12-07: depth 7's first five
        rounds, two of them 12% faster than the rest, read a quartile 10% below the level before and a median 2%
        below; the quartile alone made its estimate 11% cheaper, and it was played for 310 of 581 rounds where its
        rounds were 9% slower a token than depth 3's). A load that changes at the very moment the depth does is
        taken for an error of the estimate; the visits and the measured rates (``seen_rates``) see that load as
        before."""
        if depth == self._ref_depth:
            if self._switch is not None and self._loads_seen - self._switch[2] >= LOAD_WINDOW:
                self._level_check(depth)
            return
        if self._switch is not None and self._loads_seen - 1 - self._switch[2] >= BRACKET:
            self._level_check(self._ref_depth, self._loads_seen - 1)  # the depth left: its rounds so far
        level = self.load_samples[-2 * LOAD_WINDOW - 1:-1]
        self._switch = (lower_quartile(level), lower_median(level), self._loads_seen - 1) \
            if self._ref_depth >= 0 and level else None
        self._ref_depth = depth

    def _level_check(self, depth: int, end: int | None = None) -> None:
        """``_keep_load_level``'s comparison for ``depth``, played from the switch to ``end`` (a count of load
        samples; None: up to now)."""
        assert self._switch is not None
        level, middle, start = self._switch
        self._switch = None
        first = self._loads_dropped
        stop = (end if end is not None else self._loads_seen) - first
        if start < first or stop <= start - first:
            return
        # as far as the draft steps do not set the unit (``gauge_weight``): where they do, the depth's own rounds are
        # divided by their steps' reading, not by the load index, and its estimate is right against the others'
        rounds = self.load_samples[start - first:stop]
        quartile_moved = math.log(lower_quartile(rounds) / level)
        median_moved = math.log(lower_median(rounds) / middle)
        moved = 0.0 if quartile_moved * median_moved <= 0.0 else min(quartile_moved, median_moved, key=abs)
        ratio = math.exp((1.0 - self.gauge_weight()) * moved)
        batch = depth + 1
        kept, rest = self.rest.get(batch), self._rest_estimates.get(batch)
        if abs(math.log(ratio)) <= math.log1p(SWITCH_AGREE) or not kept or not rest:
            return
        drafting = self._first_estimate + self._step_estimate * (depth - 1) if depth >= 1 else 0.0
        factor = (ratio * (rest + drafting) - drafting) / rest  # the round's whole prediction moves by ``ratio``
        if factor <= 0.0:
            return
        self._scale_rest(batch, factor)
        for i in range(start - first, stop):
            self.load_samples[i] /= ratio
        self.load = lower_median(self.load_samples[-LOAD_WINDOW:])
        self.rescales += 1

    def _scale_rest(self, batch: int, factor: float) -> None:
        """Scale a batch size's verify samples, and so its estimate, by ``factor``: they were in another unit than
        the depth played's (``_level_check``, ``CONFIRM_HOLD``)."""
        kept = self.rest[batch]
        scaled = [value * factor for value in kept]
        kept.clear()
        kept.extend(scaled)
        if recent := self._recent.get(batch):
            self._recent[batch] = deque(((at, value * factor) for at, value in recent), maxlen=VISITS_AGREE)
        self._rest_estimates[batch] = lower_median(kept)
        self._rest_version += 1
        self._changes += 1

    def _visits_agree(self, batch: int) -> None:
        """Where ``batch``'s latest visit samples, from two visits or more, lie together more than ``SWITCH_AGREE``
        from its estimate, they become its window (``VISITS_AGREE``). The rounds of one visit come in at most a few
        rounds apart; two visits of one depth, ``PROBE_EVERY`` rounds or more."""
        recent, kept = self._recent[batch], self.rest[batch]
        if len(recent) < VISITS_AGREE or recent[-1][0] - recent[0][0] <= PROBE_ROUNDS + BRACKET:
            return
        latest = _median(value for _, value in recent)
        if abs(math.log(latest / lower_median(kept))) <= math.log1p(SWITCH_AGREE):
            return
        kept.clear()
        kept.extend(value for _, value in recent)
        self.visit_moves += 1

    # ------------------------------------------------------------------ memory

    def snapshot(self) -> dict[str, Any]:
        """What this session learned, for the next one with the same model files, backend and threads: each
        batch size's cost, the draft passes' costs, each position's acceptance and the depth settled on. The
        costs are in this session's load-normalized units; only their ratios matter, since the next session
        measures its own load against them."""
        return {
            "version": MEMORY_VERSION, "draft_depth": self.draft_depth,
            "rest": {str(b): lower_median(self.rest[b]) for b in sorted(self.rest) if self._batch_known(b)},
            "first_pass": lower_median(self.first_pass) if self.first_pass else None,
            "step": lower_median(self.step) if self.step else None,
            "first_step": lower_median(self.first_step) if self.first_step else None,
            "tested": list(self.tested), "accepted": list(self.accepted),
            "current": self.current, "rounds": self.rounds, "gauge": self.gauge_weight(),
        }

    def restore(self, state: dict[str, Any]) -> bool:
        """Start from ``snapshot``'s record of an earlier session, so that the tries of depths it measured are not
        paid again (on a 2-core CPU they cost a fresh session 2-4%). Each remembered cost counts as
        ``WARM_SAMPLES`` rounds and each position's acceptance as at most ``WARM_TESTS`` tests, so what this session
        measures soon outweighs it; the neighbours are still revisited as usual. False, and nothing changed, when the
        record is not one this version wrote or its numbers do not make sense."""
        try:
            if state.get("version") != MEMORY_VERSION:
                return False
            rest = {int(b): float(c) for b, c in dict(state["rest"]).items()}
            first = None if state.get("first_pass") is None else float(state["first_pass"])
            step = None if state.get("step") is None else float(state["step"])
            first_step = None if state.get("first_step") is None else float(state["first_step"])
            tested = [float(v) for v in state["tested"]]
            accepted = [float(v) for v in state["accepted"]]
            current = int(state.get("current", -1))
            gauge = float(state.get("gauge", 1.0))  # a record from before the gauge was kept: as a cold session
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):  # OverflowError: int(inf)
            return False
        costs = [*rest.values(), *(v for v in (first, step, first_step) if v is not None)]
        counts_sane = len(tested) == len(accepted) and all(
            math.isfinite(t) and 0.0 <= a <= t for a, t in zip(accepted, tested, strict=False))
        if not rest or not counts_sane or not all(math.isfinite(c) and c > 0.0 for c in costs) \
                or not all(1 <= b <= DEPTH_LIMIT + 1 for b in rest) or not 0.0 <= gauge <= 1.0 \
                or (step is None) != (first_step is None):  # the unit comes with the step
            return False
        self._changes += 1
        for batch, cost in rest.items():
            self.rest[batch] = deque([cost] * WARM_SAMPLES, maxlen=WINDOW)
        for samples, remembered in ((self.first_pass, first), (self.step, step), (self.first_step, first_step)):
            samples.clear()
            if remembered is not None:
                samples.extend([remembered] * WARM_SAMPLES)
        self._rest_estimates = {b: lower_median(kept) for b, kept in self.rest.items() if kept}
        self._rest_version += 1
        self._first_estimate = lower_median(self.first_pass) if self.first_pass else 0.0
        self._step_estimate = lower_median(self.step) if self.step else 0.0
        self._first_step_estimate = lower_median(self.first_step) if self.first_step else 0.0
        self._known_version += 1
        for i in range(self.draft_depth):  # a deeper limit than the earlier session's: its extra positions start new
            # each position capped on its own: scaled as a whole to the first position's cap, a loaded phase's
            # record came back with positions 4-7 at 3.4, 2.1, 1.9 and 1.5 of their 14.5, 9.1, 8.0 and 6.5 tests, and
            # two visits of depth 7 that kept every draft made it the depth played (issue 36)
            if i < len(tested):  # (as long as ``accepted``: checked above)
                weight = min(1.0, WARM_TESTS / tested[i]) if tested[i] > 0 else 1.0
                self.tested[i], self.accepted[i] = tested[i] * weight, accepted[i] * weight
            else:
                self.tested[i] = self.accepted[i] = 0.0
        if 0 <= current <= self.draft_depth and self._known(current):
            self.current = current
        for k in range(self.draft_depth + 1):
            if self._known(k):
                self._visited[k] = 0.0
        self._marks = dict.fromkeys(rest, self._drift)  # the record's estimates are all of one moment
        self._observed += 1  # the cached rates are stale
        self.gauge_prior = gauge
        self.warm = True
        return True

    # ------------------------------------------------------------------ estimates

    def _settle(self) -> None:
        """Divide the waiting rounds' samples by the load around them, once ``BRACKET`` rounds at the current
        depth have told the load after them. A round at the current depth takes the median of its own load
        sample and those just before and after it, so a load that climbs or falls leaves no bias. A round
        elsewhere takes the mean of the loads just before and just after it, and counts only if the two agree
        within ``LOAD_AGREE``: when the machine got busier or quieter during a visit, nobody knows which of its
        rounds had which load (the first rounds of a session run slower and faster in turn, other jobs come and
        go), and a wrong guess would stay in that depth's estimate until its next visit."""
        first = self._loads_dropped
        while self._waiting:
            samples, before, own = self._waiting[0]
            end = before + (1 if own else 0) + BRACKET
            if end > self._loads_seen and len(self._waiting) <= WINDOW:
                break
            self._waiting.pop(0)
            ahead = self.load_samples[max(before - BRACKET - first, 0):max(before - first, 0)]
            after = self.load_samples[max(end - BRACKET - first, 0):max(end - first, 0)]
            if own or not ahead:
                window = self.load_samples[max(before - BRACKET - first, 0):max(end - first, 0)]
                self._add(samples, _median(window) if window else self.load)
            elif after:
                low, high = sorted((_median(ahead), _median(after)))
                if high <= low * (1.0 + LOAD_AGREE):
                    self._add(samples, (low + high) / 2.0, proof_load=low)

    def _add(self, samples: _Samples, load: float, proof_load: float | None = None) -> None:
        """Add a round's samples, divided by the load it ran under. A visit's verify time ``PROVEN_FASTER`` below
        its batch size's estimate replaces the estimate: the median of ``WINDOW`` older samples would need many
        visits, one every ``PROBE_EVERY`` rounds or more, to move, while the depth played meanwhile measures the
        load against its own estimate and cannot see the error. The proof divides by ``proof_load``, the lowest
        reading of the load around the visit: a visit is one counted round, and the load before and after it can
        differ by 20%, so dividing by their mean (right for one sample among many) would let a visit at a quiet
        moment "prove" an estimate too dear that is not, and the estimate would only ever move one way."""
        before = (self._rest_estimates.get(samples.batch), self._first_estimate, self._step_estimate)
        if samples.rest is not None:
            rest = samples.rest / load
            kept = self.rest.setdefault(samples.batch, deque(maxlen=WINDOW))
            proof = samples.rest / (load if proof_load is None else proof_load)
            if not kept:
                self._known_version += 1
            if samples.visit and kept and proof * PROVEN_FASTER < lower_median(kept):
                kept.clear()
                kept.extend([rest] * WARM_SAMPLES)
                self._recent.pop(samples.batch, None)
                self.corrections += 1
            else:
                if samples.visit and kept:
                    # the depth played's estimate moved since this depth's last visit, and this visit reads it moved
                    # the same way, at least half as far: the unit changed for both (``CONFIRM_HOLD``)
                    moved = math.log(self._moved_since_visit(samples.batch))
                    seen = math.log(rest / lower_median(kept))
                    if abs(moved) > math.log1p(SWITCH_AGREE) and seen * moved > 0.0 and abs(seen) >= abs(moved) / 2:
                        self._scale_rest(samples.batch, math.exp(moved))
                        self.unit_moves += 1
                kept.append(rest)
                if samples.visit:
                    self._recent.setdefault(samples.batch, deque(maxlen=VISITS_AGREE)).append((self.rounds, rest))
                    self._visits_agree(samples.batch)
            if samples.batch != self.current + 1:  # a visit's, a try's: brought up to date
                self._marks[samples.batch] = self._drift
                if samples.visit and self._confirm is not None and samples.batch == self._confirm[0] + 1:
                    self._confirm = (self._confirm[0], self._confirm[1], True)
            elif before[0] is not None and before[0] > 0.0 and self.rounds - self._played_since > WINDOW:
                # the depth played's own round, once its first rounds there have set its estimate: those correct
                # its own error (a depth becomes the one played where its estimate is most favourable)
                self._drift += math.log(lower_median(kept) / before[0])
            self._rest_estimates[samples.batch] = lower_median(kept)
        if samples.first_pass is not None:
            if not self.first_pass:
                self._known_version += 1
            self.first_pass.append(samples.first_pass / load)
            self._first_estimate = lower_median(self.first_pass)
        if samples.step is not None:
            if not self.step:
                self._known_version += 1
            self.step.append(samples.step / load)
            self._step_estimate = lower_median(self.step)
        if samples.first_step is not None:
            self.first_step.append(samples.first_step / load)
            self._first_step_estimate = lower_median(self.first_step)
        rest_now = self._rest_estimates.get(samples.batch)
        if rest_now != before[0]:
            self._rest_version += 1
        if (rest_now, self._first_estimate, self._step_estimate) != before:
            self._changes += 1  # most samples leave every lower median where it was: the costs stay cached

    def _gauged(self, batch: int, rest: float | None, reading: float) -> float:
        """The load a round's verify time is divided by, from its draft steps' ``reading`` (their time over their
        estimate) and the load index, weighed by how well the readings have told the verify passes' times lately:
        the slope of the verify time against the reading over the last ``GAUGE_PAIRS`` rounds (each batch size
        about its own mean), between 0 and 1. Where the steps are long enough to time well, a round's load shows
        in both alike and the slope is near 1 (the reading alone, as before); where they are a fraction of a
        millisecond (the scaled demo's d2t head on a fast CPU: 0.16 ms, timed 30% apart from round to round), the
        reading is mostly the timer's noise, the slope near 0, and the load index decides. Divided by that noise
        instead, every drafting depth's estimate wandered apart from depth 0's, whose rounds time no draft, and
        adaptive depth went back and forth between depth 0 and 2 (half its rounds at depth 0 where k=3 ran 1.12x)."""
        if rest is not None and rest > 0.0 and reading > 0.0:
            if len(self._gauge_pairs) == GAUGE_PAIRS:
                self._gauge_sum(*self._gauge_pairs[0], sign=-1.0)
            pair = (batch, math.log(rest), math.log(reading))
            self._gauge_pairs.append(pair)
            self._gauge_sum(*pair, sign=1.0)
        weight = self.gauge_weight()
        return math.exp((1.0 - weight) * math.log(self.load) + weight * math.log(reading))

    def gauge_weight(self) -> float:
        """How far the draft steps' reading tells a verify pass's load (``_gauged``): the slope over the recent pairs,
        once ``GAUGE_MIN`` of them are in, and before that what the session this one was restored from had measured
        (``gauge_prior``; 1 in a cold session, which has nothing else to set the scale with)."""
        together = covariance = spread = 0.0
        for n, sum_v, sum_g, sum_vg, sum_gg in self._gauge_sums.values():
            if n >= 2:  # each batch size about its own means
                together += n
                covariance += sum_vg - sum_v * sum_g / n
                spread += sum_gg - sum_g * sum_g / n
        if together >= GAUGE_MIN and spread > 0.0:
            return min(max(covariance / spread, 0.0), 1.0)
        return self.gauge_prior

    def _gauge_sum(self, batch: int, verify: float, reading: float, sign: float) -> None:
        """Add a pair to (or, ``sign`` -1, take one out of) its batch size's running sums: the count, the sums of
        the log verify times and readings, of their products and of the readings squared. A batch size whose
        pairs are all gone starts from zero again, so no rounding is carried over."""
        n, sum_v, sum_g, sum_vg, sum_gg = self._gauge_sums.get(batch, (0.0, 0.0, 0.0, 0.0, 0.0))
        n += sign
        if n <= 0.0:
            self._gauge_sums.pop(batch, None)
            return
        self._gauge_sums[batch] = (n, sum_v + sign * verify, sum_g + sign * reading,
                                   sum_vg + sign * verify * reading, sum_gg + sign * reading * reading)

    def _batch_known(self, batch: int) -> bool:
        return len(self.rest.get(batch, ())) >= MIN_SAMPLES

    def _known(self, depth: int) -> bool:
        """Measured: the batch size has its own estimate, and the draft parts the depth uses have been timed."""
        return depth in self._known_depths()

    def _known_depths(self) -> frozenset[int]:
        """Every measured depth (``_known``), found again only when a cost gets its first samples: each round asks a
        few dozen times, and the Python time a round spends here is time the reply waits (``bench spec``'s Python
        column)."""
        if self._known_cache is None or self._known_cache[0] != self._known_version:
            found = frozenset(k for k in range(self.draft_depth + 1) if self._batch_known(k + 1)
                              and (k < 1 or bool(self.first_pass)) and (k < 2 or bool(self.step)))
            self._known_cache = (self._known_version, found)
        return self._known_cache[1]

    def rest_estimate(self, batch: int) -> float:
        """Verify + host time of a round over ``batch`` tokens (load-normalized): measured, interpolated
        between measured batch sizes, or extrapolated optimistically beyond them."""
        if batch <= self.draft_depth + 1:
            return self._estimates()[0][batch - 1]
        return self._rest_table(batch)[batch - 1]

    def _estimates(self) -> tuple[list[float], float, float]:
        """The rest table (``_rest_table``, kept until a verify estimate moves), the first draft pass's and a draft
        step's estimates (0 before any was measured)."""
        return self._rest_table(), self._first_estimate, self._step_estimate

    def _rest_table(self, largest: int | None = None) -> list[float]:
        """``rest_estimate`` of every batch size 1..largest (draft_depth + 1 unless given), in one go: made again only
        when an estimate moved (the list is kept: not to be changed by the caller)."""
        size = largest or self.draft_depth + 1
        key = (size, self._rest_version, self._known_version)
        if self._table is not None and self._table[0] == key:  # a new sample seldom moves a lower median
            return self._table[1]
        measured = {b: self._rest_estimates[b] for b in sorted(self._rest_estimates) if self._batch_known(b)}
        table = self._table_of(range(1, size + 1), measured) if measured else [1.0] * size
        self._table = (key, table)
        return table

    def _table_of(self, sizes: range, measured: dict[int, float]) -> list[float]:
        """``_rest_table`` from the measured batches' estimates: interpolated between them, on a line past them."""
        batches = list(measured)
        line: tuple[float, float] | None = None
        table = []
        for batch in sizes:
            if batch in measured:
                table.append(measured[batch])
                continue
            above = next((b for b in batches if b > batch), None)
            below = next((b for b in reversed(batches) if b < batch), None)
            if below is not None and above is not None:
                table.append(measured[below] + (measured[above] - measured[below]) * (batch - below) / (above - below))
            elif below is not None:  # bigger than any measured: on a line through the measured batches of 2 or more
                if line is None:
                    line = self._beyond(measured)
                table.append(line[0] + line[1] * batch)
            else:  # smaller: cheaper in proportion
                assert above is not None
                table.append(measured[above] * batch / above)
        return table
