"""``bench adaptive-load``: adaptive depth against every fixed depth while the machine's load changes.

Decisions learned under one load must not stick under another (issue 36 item 4). The benchmark runs ``bench spec``'s
interleaved variants (drafting off, the d2t sidecar at each fixed depth and with adaptive depth) in phases, and
starts and stops its own load between them: quiet, loaded (``BusyCores``: child processes spinning on cores, as
many as asked), quiet again. Adaptive depth's memory is carried from phase to phase (as the app carries it from load
to load), so the loaded phase starts from what the quiet one learned and the last phase from what the loaded one
learned; with the memory's staleness rules (``depth_memory.stale_reason``) a record made under another load is
measured again. Each phase reports every variant's decode tok/s (the one definition, pooled over the prompts; the
median over the runs), and adaptive depth's against the fastest fixed depth of that phase (by median): the median of
its ratios in each run, measured side by side (``spec.side_by_side``), with the depths it chose, as JSON and a
markdown table; the JSON also keeps every reply's tokens and seconds. On a shared machine the figures move with
whatever else runs: they are indicative. The same prompt's replies of two variants in one run spread 5-8% apart on
the Xeon (its speed moves by 10-20% over seconds), so more runs are what narrow a verdict: after a phase's first run,
the fixed depths far behind the fastest (``SCREEN``) are left out of its later runs, and those runs come quicker.

Beside the wall-time verdict, each phase says what adaptive depth's own choices cost on its own round clock
(``OwnClock``, from the decision log): the seconds its rounds at other depths took beyond what its own rounds at the
phase's fastest fixed depth would have taken for the same tokens. A wall-time ratio of one invocation moves a few
percent either way with the machine (the loaded phase's runs 0.89x-1.05x for one policy held at one depth); this
figure does not, and says which part of a miss is the choices' and which the machine's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.bench import spec
from app.bench.busy_cores import BusyCores
from app.bench.report import device_description
from app.engine.depth_memory import load_average

PHASES = (("quiet", 0), ("loaded", None), ("quiet again", 0))  # None: the cores asked for
PHASE_WINDOW_S = 0.5  # the idle cores measured over this as a phase begins (the children start spinning in it)
YARDSTICK_ROUNDS = 20  # rounds a run must play at the phase's fastest fixed depth for its own clock to be read
# after a phase's first run, a fixed depth (or drafting off) more than this much slower than the fastest fixed one in
# it is not run again in that phase (``spec.screened``): the runs of the depths that compete come sooner and closer
# together, and more of them fit in the same time (the Xeon's scaled demo: drafting off, k=1 and k=4 18-45% behind k=3
# in every phase, k=2 5-11%)
SCREEN = 0.15
REASONS = {"probe": "visits", "explore": "tries", "best": "played", "start": "played"}  # the log's reasons, in words


@dataclass(frozen=True)
class OwnClock:
    """One adaptive run on its own round clock (the seconds the engine measured a round to take): the share of the
    run's seconds its rounds at depths other than ``depth`` took beyond what its own rounds at ``depth`` (the
    phase's fastest fixed depth) took for as many tokens, by what chose them: ``visits`` of a depth measured before,
    ``tries`` of a depth not measured yet, ``played`` (the estimates preferred another depth for a while). Negative
    where those rounds ran faster than the yardstick."""

    depth: int
    rounds: int
    lost: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.lost.values())

    def to_dict(self) -> dict[str, Any]:
        return {"depth": self.depth, "rounds": self.rounds, "lost": round(self.total, 4),
                "lost_by_reason": {k: round(v, 4) for k, v in sorted(self.lost.items())}}


def own_clock(rounds: Iterable[dict[str, Any]], depth: int) -> list[OwnClock | None]:
    """Each run's ``OwnClock`` against ``depth``, from a phase's decision log (its JSON lines, the warm-up's left
    out), in the order of the runs; None for a run with fewer than ``YARDSTICK_ROUNDS`` rounds at ``depth`` (it
    cannot say what that depth's rounds cost)."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for entry in rounds:
        if entry.get("prompt_set") != "warm-up":
            runs.setdefault(int(entry["run"]), []).append(entry)
    found: list[OwnClock | None] = []
    for run in sorted(runs):
        played = runs[run]
        yardstick = [r for r in played if r["depth"] == depth]
        seconds = sum(float(r["seconds"]) for r in played)
        if len(yardstick) < YARDSTICK_ROUNDS or seconds <= 0.0:
            found.append(None)
            continue
        per_token = sum(float(r["seconds"]) for r in yardstick) / sum(int(r["accepted"]) + 1 for r in yardstick)
        lost: dict[str, float] = {}
        for r in played:
            if r["depth"] != depth:
                reason = REASONS.get(str(r["reason"]), str(r["reason"]))
                extra = float(r["seconds"]) - (int(r["accepted"]) + 1) * per_token
                lost[reason] = lost.get(reason, 0.0) + extra / seconds
        found.append(OwnClock(depth, len(played), lost))
    return found


def median_lost(runs: Sequence[OwnClock | None]) -> float | None:
    """The median over the priced runs of the share their rounds at other depths lost (None: none was priced)."""
    known = [run.total for run in runs if run is not None]
    return statistics.median(known) if known else None


@dataclass
class Phase:
    """One phase: its name, the spinning children during it, the load per core before and after, and its rows."""

    name: str
    busy: int
    load_before: float | None
    load_after: float | None
    seconds: float
    rows: list[spec.Row] = field(default_factory=list)
    threads: int = 0  # decode threads of every variant in the phase, from the idle cores measured as it began
    decisions: list[dict[str, Any]] = field(default_factory=list)  # adaptive depth's rounds (the decision log)

    def fixed_rows(self) -> dict[int, spec.Row]:
        """Each fixed depth's row (0: drafting off)."""
        return {0 if row.variant.mode == "off" else row.variant.draft_depth: row
                for row in self.rows if not row.variant.adaptive and row.samples}

    def screened(self) -> list[int]:
        """The fixed depths run in fewer runs than the others (left out after the first, ``SCREEN``)."""
        rows = self.fixed_rows()
        most = max((len(row.samples) for row in rows.values()), default=0)
        return sorted(depth for depth, row in rows.items() if len(row.samples) < most)

    def fixed(self) -> dict[int, float]:
        """Each fixed depth's decode tok/s (0: drafting off)."""
        return {depth: row.tps for depth, row in self.fixed_rows().items()}

    def adaptive(self) -> spec.Row | None:
        return next((row for row in self.rows if row.variant.adaptive and row.samples), None)

    def best_fixed(self) -> tuple[int, float] | None:
        """The fastest fixed depth by median, among those run in every run (one left out after the first run was
        far behind in it)."""
        out = self.screened()
        fixed = {depth: tps for depth, tps in self.fixed().items() if depth not in out}
        return max(fixed.items(), key=lambda item: item[1]) if fixed else None

    def adaptive_runs(self) -> list[tuple[float, str]]:
        """Adaptive depth's speed over the phase's fastest fixed depth in each run (that same depth in every run) and
        how the run began (``spec.start_word``): the phase's ratio is their median; on a shared machine they spread
        a few percent either way."""
        adaptive, best = self.adaptive(), self.best_fixed()
        if adaptive is None or best is None:
            return []
        fixed = self.fixed_rows()[best[0]].samples
        ratios = spec.side_by_side(adaptive.samples, fixed)
        return [(ratio, spec.start_word(mine)) for ratio, mine in zip(ratios, adaptive.samples, strict=False)]

    def own_clock(self) -> list[OwnClock | None]:
        """Each adaptive run on its own clock against the phase's fastest fixed depth (``own_clock``)."""
        best = self.best_fixed()
        return own_clock(self.decisions, best[0]) if best is not None and self.decisions else []

    def to_dict(self) -> dict[str, Any]:
        adaptive, best = self.adaptive(), self.best_fixed()
        runs = [ratio for ratio, _ in self.adaptive_runs()]  # the phase's verdict is their median
        clock = self.own_clock()  # read from the decision log once
        lost = median_lost(clock)
        return {"phase": self.name, "busy_cores": self.busy, "threads": self.threads,
                "load_per_core_before": self.load_before,
                "load_per_core_after": self.load_after, "seconds": round(self.seconds, 1),
                "fixed_tps": {str(k): round(v, 2) for k, v in sorted(self.fixed().items())},
                "screened_out": self.screened(),
                "adaptive_tps": round(adaptive.tps, 2) if adaptive else None,
                "best_fixed_depth": best[0] if best else None,
                "adaptive_vs_best": round(statistics.median(runs), 3) if runs else None,
                "adaptive_vs_best_of_medians": round(adaptive.tps / best[1], 3) if adaptive and best and best[1]
                else None,
                "adaptive_vs_best_runs": [round(ratio, 3) for ratio in runs],
                "adaptive_depths": {str(k): round(v, 3) for k, v in adaptive.depth_shares.items()} if adaptive else {},
                "adaptive_warm": [s.warm for s in adaptive.samples] if adaptive else [],
                "own_clock_lost": round(lost, 4) if lost is not None else None,
                "own_clock_runs": [run.to_dict() if run is not None else None for run in clock],
                "replies": {row.variant.label: [[[tokens, round(seconds, 4)] for tokens, seconds in sample.spans]
                                                for sample in row.samples] for row in self.rows}}


@dataclass
class AdaptiveLoadResult:
    model: str
    n_tokens: int
    depths: list[int]
    adaptive_max: int
    phases: list[Phase]
    device: str
    runs: int = 1  # interleaved runs a phase: one run's fixed depths wander a few percent, and the best of them
    # is then the luckiest (a 3% verdict against the best of five needs several runs)
    screen: float = 0.0  # the share behind the fastest fixed depth that left a depth out after a phase's first run

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "n_tokens": self.n_tokens, "depths": self.depths,
                "adaptive_max": self.adaptive_max, "runs": self.runs, "screen": self.screen, "device": self.device,
                "phases": [p.to_dict() for p in self.phases]}

    def markdown(self) -> str:
        cols = " | ".join(f"k={k}" if k else "off" for k in [0, *self.depths])
        runs = (f"{self.runs} interleaved runs a phase, decode tok/s the median over them, adaptive against the best "
                "fixed depth the median of the runs' ratios" if self.runs > 1 else "one interleaved run a phase")
        lines = [f"`bench adaptive-load` on the {self.model}, {self.device}; {self.n_tokens} tokens per prompt, "
                 f"{runs} (indicative: a shared machine)", "",
                 f"| phase | busy cores | threads | load/core | {cols} | adaptive ≤{self.adaptive_max} | "
                 "vs best fixed (each run: c cold, w warm) | depths chosen |",
                 "|---|---|---|---|" + "---|" * (len(self.depths) + 1) + "---|---|---|"]
        for phase in self.phases:
            d = phase.to_dict()
            fixed = phase.fixed()
            out = phase.screened()
            cells = " | ".join((f"{fixed[k]:.1f}" + ("¹" if k in out else "")) if k in fixed else "–"
                               for k in [0, *self.depths])
            load = f"{phase.load_before:.2f}" if phase.load_before is not None else "–"
            shares = ", ".join(f"{k}: {v:.0%}" for k, v in d["adaptive_depths"].items() if v >= 0.05)
            each_run = phase.adaptive_runs()
            each = "; " + ", ".join(f"{r:.3f}{start[:1]}" for r, start in each_run) if len(each_run) > 1 else ""
            ratio = f"{d['adaptive_vs_best']:.3f}x (k={d['best_fixed_depth']}{each})" if d["adaptive_vs_best"] else "–"
            adaptive = f"{d['adaptive_tps']:.1f}" if d["adaptive_tps"] is not None else "–"
            lines.append(f"| {phase.name} | {phase.busy} | {phase.threads} | {load} | {cells} | {adaptive} | {ratio} "
                         f"| {shares} |")
        if any(phase.screened() for phase in self.phases):
            lines += ["", f"¹ the first run only: more than {self.screen:.0%} slower than the fastest fixed depth in "
                      "it, so not run again in that phase"]
        return "\n".join(lines + self._own_clock_lines()) + "\n"

    def _own_clock_lines(self) -> list[str]:
        """The table of what adaptive depth's choices cost on its own clock (none when no log was kept)."""
        clocks = [(phase.name, phase.own_clock()) for phase in self.phases]  # each priced once
        if not any(run is not None for _, runs in clocks for run in runs):
            return []  # no log kept, or no run played the fastest fixed depth long enough to price the others
        lines = ["", "Adaptive depth on its own clock (the seconds the engine timed each round): the share of a run's "
                 "time its rounds at other depths took beyond what its own rounds at the phase's fastest fixed depth "
                 "took for as many tokens; by what chose them, the mean over the runs", "",
                 "| phase | against | lost (median of the runs) | each run | visits | tries | played |",
                 "|---|---|---|---|---|---|---|"]
        for name, runs in clocks:
            known = [run for run in runs if run is not None]
            lost = median_lost(runs)
            if lost is None:
                continue
            each = ", ".join(f"{run.total:.1%}" if run is not None else "–" for run in runs)
            by = [f"{sum(run.lost.get(reason, 0.0) for run in known) / len(known):.1%}"
                  for reason in ("visits", "tries", "played")]
            lines.append(f"| {name} | k={known[0].depth} | {lost:.1%} | {each} | {' | '.join(by)} |")
        return lines


def decisions_file(phase: str) -> str:
    """The name of a phase's decision log: ``adaptive-decisions-quiet-again.jsonl``."""
    return f"adaptive-decisions-{phase.replace(' ', '-')}.jsonl"


def run(target: Path, d2t: Path, *, depths: Sequence[int] = (1, 2, 3, 4), adaptive_max: int = 8,
        n_tokens: int = 64, busy_cores: int = 1, prompt_sets: tuple[str, ...] = ("reasoning",),
        n_threads: int | None = None, memory: Path, log: spec.Log = lambda _m: None,
        phases: Sequence[tuple[str, int | None]] = PHASES, runs: int = 1,
        decisions: Path | None = None, screen: float | None = None) -> AdaptiveLoadResult:
    """Every phase: start its load (``busy_cores`` spinning children in a loaded phase), ``runs`` interleaved runs of
    off, d2t at each of ``depths`` and d2t with adaptive depth up to ``adaptive_max``, stop the load. ``memory``:
    adaptive depth's folder, emptied once at the start and carried across the phases (and the runs). ``decisions``:
    a folder for each phase's round-by-round log of adaptive depth (``adaptive-decisions-<phase>.jsonl``), to see
    why a phase's choice lost (None: not kept). ``screen``: a fixed depth this much behind the fastest in a phase's
    first run is not run again in that phase (0: every depth in every run; None: ``SCREEN``)."""
    from app.core import idle_cores
    from app.engine.depth_memory import DepthMemory
    from app.native.handles import threads_for

    screen = SCREEN if screen is None else screen
    DepthMemory(memory).forget()
    variants = [spec.Variant("ours", "off"),
                *(spec.Variant("ours", "sidecar", "d2t", k) for k in depths),
                spec.Variant("ours", "sidecar", "d2t", adaptive_max, adaptive=True)]
    done = []
    for name, cores in phases:
        busy = busy_cores if cores is None else cores
        before = load_average()
        started = time.monotonic()
        with BusyCores(busy):
            # the phase's thread count from the machine as it is now (the children spinning, or just stopped): the
            # engine's own default reads the time since the last reply, which ran in the phase before
            threads = n_threads or threads_for(idle_cores.measure(PHASE_WINDOW_S))
            log(f"phase {name}: {busy} busy core(s), load {before if before is not None else '?'} per core, "
                f"{threads} decode thread(s)")
            result = spec.run(target, {"d2t": d2t}, variants=variants, n_tokens=n_tokens, runs=runs,
                              prompt_sets=prompt_sets, n_threads=threads, interleave="prompt",
                              depth_memory=memory, keep_memory=True, log=log, screen=screen,
                              decisions=None if decisions is None else decisions / decisions_file(name))
        kept = spec.read_decisions(decisions / decisions_file(name)) if decisions is not None else []
        done.append(Phase(name, busy, before, load_average(), time.monotonic() - started, result.rows, threads, kept))
    return AdaptiveLoadResult(target.name, n_tokens, list(depths), adaptive_max, done, device_description(), runs,
                              screen)
