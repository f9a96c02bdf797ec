"""``bench spec``: our speculative loop across modes and depths, side by side with upstream llama-server.

Every variant runs every prompt of each prompt set once per run, and the reported figures are medians over runs; a
ratio of two variants (vs off, vs llama-server, adaptive vs fixed) is the median of the ratios in each run. On
a demo model each prompt's reply starts on its own table word (:func:`demo_opening`), so the prompts get different
replies, as on a real model. On a CPU our variants are interleaved prompt by prompt (every variant's session stays
open for the run, all on the same memory-mapped files, and the order rotates from prompt to prompt), so a burst of
load from another job hits every variant alike; with GPU offload (each session would hold its own copy of the
weights on the device) or a time limit they run variant by variant. Decode tok/s is the one definition
(``app.engine.stats.decode_tps``): each reply's tokens after its first over the time from its first token to its
last, pooled over the prompts of a set; llama-server's ``predicted_per_second`` is the same figure on its clock.
Sampling is greedy. The bound is what the measured acceptance
allows with the measured costs: (1 - a^(k+1)) / (1 - a) tokens per round for k draft steps plus one verify pass (the
break-even model's ``expected_tokens_per_pass``), against one plain pass per token; efficiency is the measured
speedup over ``off`` divided by it. Our rows split each round into the verify pass, the draft steps and our host
(Python) time; native times are taken after ``llama_synchronize``, so a GPU's work counts as native, not as ours.

Adaptive rows are set against the fastest fixed depth of the same mode (by median): the ratio in each run, measured
side by side, and the median of those (``side_by_side``), and report the depths they chose; every round's decision
(depth, reason, predicted and measured time, the estimates) is kept as JSON lines and drawn. Each run loads
the model afresh; with a depth-memory folder (``bench spec``'s default) the first run's adaptive rows start
cold and every later run's start from what the runs before learned, as every load after a model's first
does in the app; each run's ratio says which it was.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from app.bench.report import device_description, round_or_none
from app.core.resources import resources_dir
from app.engine.breakeven import expected_tokens_per_pass
from app.engine.chat_template import Message
from app.engine.config import DEFAULT_DRAFT_DEPTH, DRAFT_DEPTH_MAX, EngineConfig, Mode
from app.engine.depth_memory import DepthMemory
from app.engine.stats import pooled_decode_tps

if TYPE_CHECKING:
    from app.engine.session import ChatSession
    from app.engine.state_cache import Snapshot

DraftKind = Literal["full", "d2t"]
Interleave = Literal["prompt", "variant"]
PROMPT_SETS = ("document", "reasoning")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    engine: Literal["ours", "upstream", "remote"]
    mode: Mode
    draft: DraftKind | None = None
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    adaptive: bool = False
    remote: str = ""  # engine "remote": the server's name (it drafts, or not, its own way)

    @property
    def label(self) -> str:
        if self.engine == "remote":
            return f"remote {self.remote}"
        if self.mode == "off":
            what = "off"
        else:
            what = ("d2t sidecar" if self.draft == "d2t" else "full sidecar") if self.mode == "sidecar" else "embedded"
            what += f" adaptive k<={self.draft_depth}" if self.adaptive else f" k={self.draft_depth}"
        return what if self.engine == "ours" else f"llama-server {what}"

    @property
    def fixed_key(self) -> tuple[Mode, DraftKind | None, int]:
        """What an upstream variant is compared with: same mode, draft and fixed depth."""
        return self.mode, self.draft, 0 if self.mode == "off" else self.draft_depth


def load_prompts(name: str) -> list[str]:
    """The prompts of ``resources/prompts/<name>.txt`` (``---`` separates them, ``#`` lines are comments)."""
    text = (resources_dir() / "prompts" / f"{name}.txt").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return [p.strip() for p in "\n".join(lines).split("\n---\n") if p.strip()]


@dataclass
class Sample:
    """One variant over one prompt set in one run (all its prompts summed)."""

    generated: int = 0
    decode_seconds: float = 0.0
    passes: int = 0
    tested: int = 0
    proposed: int = 0
    accepted: int = 0
    draft_native: float = 0.0
    verify_native: float = 0.0
    depths: Counter[int] = field(default_factory=Counter)  # adaptive: rounds at each depth
    cpu_seconds: float = 0.0  # ours: the decoding thread's CPU time (without the waits for a core)
    warm: bool | None = None  # adaptive: whether it started from what an earlier run learned (None: not adaptive)
    spans: list[tuple[int, float]] = field(default_factory=list)  # per reply: tokens, first-to-last-token seconds
    order: int = 0  # when it was measured among the run's samples (``bench matrix``'s verdicts check alternation)
    after_warm_up: bool = True  # ours and llama-server warm up first; a remote server is measured cold

    def add_reply(self, tokens: int, span_seconds: float) -> None:
        self.spans.append((tokens, span_seconds))

    @property
    def tps(self) -> float:
        """Decode tok/s, the one definition pooled over the replies (``pooled_decode_tps``)."""
        return pooled_decode_tps(self.spans)

    @property
    def cpu_tps(self) -> float:
        return self.generated / self.cpu_seconds if self.cpu_seconds > 0 else 0.0


@dataclass
class Row:
    variant: Variant
    prompt_set: str
    samples: list[Sample] = field(default_factory=list)

    def median(self, fn: Callable[[Sample], float]) -> float:
        return statistics.median(fn(s) for s in self.samples)

    @property
    def tps(self) -> float:
        return self.median(lambda s: s.tps)

    @property
    def acceptance(self) -> float | None:
        """Accepted of the drafts actually tested (those up to the first mismatch): the per-token acceptance ``a``
        the bound's formula takes. llama-server does not say which of its drafts it tested: None for its rows."""
        tested = sum(s.tested for s in self.samples)
        return sum(s.accepted for s in self.samples) / tested if tested else None

    @property
    def accepted_of_drafted(self) -> float | None:
        """Accepted of every draft made, llama-server's ``draft_n_accepted / draft_n``: the one acceptance both
        engines report, so the one to set side by side (at depth k it is below ``a``: drafts after a mismatch
        count as made and not accepted)."""
        proposed = sum(s.proposed for s in self.samples)
        return sum(s.accepted for s in self.samples) / proposed if proposed else None

    @property
    def tokens_per_pass(self) -> float | None:
        passes = sum(s.passes for s in self.samples)
        return sum(s.generated for s in self.samples) / passes if passes else None

    # Our rows split each round three ways: the target's verify pass, the draft steps, and our host
    # (Python) time; the native parts are synchronized (``Context.decode`` waits for the device), so on a
    # GPU the device's work is in them, not in the host share. llama-server rows have none of these.

    @property
    def python_ms_per_round(self) -> float | None:
        """Decode time not spent inside llama.cpp (decode and rollback), per target pass: our loop's own cost."""
        if self.variant.engine != "ours" or not self.samples[0].passes:
            return None
        return self.median(lambda s: (s.decode_seconds - s.draft_native - s.verify_native) / s.passes * 1000)

    @property
    def draft_ms(self) -> float | None:
        """Draft time per draft token made (0 in ``off``)."""
        if self.variant.engine != "ours":
            return None
        if not any(s.proposed for s in self.samples):
            return 0.0 if not any(s.draft_native for s in self.samples) else None
        return self.median(lambda s: s.draft_native / s.proposed * 1000 if s.proposed else 0.0)

    @property
    def draft_ms_per_round(self) -> float | None:
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.draft_native / s.passes * 1000 if s.passes else 0.0)

    @property
    def verify_ms(self) -> float | None:
        """The target's verify pass (rollback included) per round."""
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.verify_native / s.passes * 1000 if s.passes else 0.0)

    @property
    def cpu_tps(self) -> float | None:
        """Ours: tokens per second of the decoding thread's CPU time (median over runs). With one decode thread on a
        CPU this is what the wall-clock speed would be on a quiet machine; on a shared one it leaves out the
        waits for a core, which hit whichever variant happened to run then."""
        if self.variant.engine != "ours" or not any(s.cpu_seconds for s in self.samples):
            return None
        return self.median(lambda s: s.cpu_tps)

    @property
    def depth_shares(self) -> dict[int, float]:
        """Adaptive: the share of rounds at each depth, over every run."""
        total: Counter[int] = Counter()
        for sample in self.samples:
            total.update(sample.depths)
        rounds = sum(total.values())
        return {k: total[k] / rounds for k in sorted(total)} if rounds else {}

    @property
    def round_ms(self) -> float | None:
        """Decode wall time per round: verify + draft + host."""
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.decode_seconds / s.passes * 1000 if s.passes else 0.0)


@dataclass
class SpecResult:
    rows: list[Row]
    n_tokens: int
    runs: int
    model: str
    device: str
    cut_short: bool = False  # the time limit stopped it before every run of every variant was done
    context: int = 0  # tokens of an earlier conversation before every prompt

    def row(self, variant: Variant, prompt_set: str) -> Row | None:
        return next((r for r in self.rows if r.variant == variant and r.prompt_set == prompt_set), None)

    def off_row(self, engine: str, prompt_set: str) -> Row | None:
        return next((r for r in self.rows if r.variant.engine == engine and r.variant.mode == "off"
                     and r.prompt_set == prompt_set), None)

    def upstream_peer(self, row: Row) -> Row | None:
        """llama-server at the same settings; for adaptive depth (which llama-server lacks), its fastest
        fixed depth with the same draft in this run: the strictest comparison."""
        if row.variant.engine != "ours":
            return None
        if row.variant.adaptive:
            same = [r for r in self.rows if r.variant.engine == "upstream" and r.prompt_set == row.prompt_set
                    and r.variant.mode == row.variant.mode and r.variant.draft == row.variant.draft]
            return max(same, key=lambda r: r.tps, default=None)
        return next((r for r in self.rows if r.variant.engine == "upstream" and r.prompt_set == row.prompt_set
                     and r.variant.fixed_key == row.variant.fixed_key), None)

    def fixed_rows(self, row: Row) -> list[Row]:
        """Our fixed-depth rows with the same drafting mode and draft as ``row``, over the same prompts."""
        return [r for r in self.rows if r.variant.engine == "ours" and not r.variant.adaptive
                and r.variant.mode == row.variant.mode and r.variant.draft == row.variant.draft
                and r.prompt_set == row.prompt_set and r.variant.mode != "off"]

    def fastest_fixed(self, row: Row) -> Row | None:
        """For an adaptive row: the fastest fixed depth of the same mode in this run (by median)."""
        if not row.variant.adaptive:
            return None
        return max(self.fixed_rows(row), key=lambda r: r.tps, default=None)

    def fastest_fixed_cpu(self, row: Row) -> Row | None:
        """For an adaptive row: the fixed depth of the same mode with the most tokens per CPU second."""
        if not row.variant.adaptive:
            return None
        return max(self.fixed_rows(row), key=lambda r: r.cpu_tps or 0.0, default=None)

    def vs_fastest_fixed_runs(self, row: Row) -> list[float]:
        """For an adaptive row: in each run, its speed over the fastest fixed depth's (by median, the same depth in
        every run) in that same run (``side_by_side``)."""
        fastest = self.fastest_fixed(row)
        return side_by_side(row.samples, fastest.samples) if fastest is not None else []

    def bound(self, row: Row) -> float | None:
        """The speedup over ``off`` the measured acceptance and step costs allow with zero loop overhead:
        k draft steps and a verify pass per round against ``off``'s pass per token, all synchronized."""
        off = self.off_row("ours", row.prompt_set)
        a, draft_ms, verify_ms = row.acceptance, row.draft_ms, row.verify_ms
        if off is None or a is None or draft_ms is None or verify_ms is None or row.variant.mode == "off":
            return None
        plain_ms = off.verify_ms
        if not plain_ms or verify_ms <= 0:
            return None
        depths = range(1, row.variant.draft_depth + 1) if row.variant.adaptive else [row.variant.draft_depth]
        return max(expected_tokens_per_pass(a, k) * plain_ms / (k * draft_ms + verify_ms) for k in depths)

    def summary(self, row: Row) -> dict[str, Any]:
        off = self.off_row(row.variant.engine, row.prompt_set) if row.variant.engine != "remote" else None
        peer = self.upstream_peer(row)
        bound = self.bound(row)
        vs_off = _paired(row, off)
        return {
            "variant": row.variant.label, "engine": row.variant.engine, "mode": row.variant.mode,
            "draft": row.variant.draft, "draft_depth": row.variant.draft_depth, "adaptive": row.variant.adaptive,
            "prompt_set": row.prompt_set, "decode_tps_median": round(row.tps, 2),
            "decode_tps_cpu_median": round_or_none(row.cpu_tps, 2),
            "decode_tps_runs": [round(s.tps, 2) for s in row.samples],
            "acceptance": round_or_none(row.acceptance, 3),
            "accepted_of_drafted": round_or_none(row.accepted_of_drafted, 3),
            "tokens_per_pass": round_or_none(row.tokens_per_pass, 3),
            "vs_off": round_or_none(vs_off, 3),
            "vs_upstream": round_or_none(_paired(row, peer), 3),
            "bound": round_or_none(bound, 3),
            "efficiency": round_or_none(vs_off / bound if vs_off and bound else None, 3),
            # per round: verify pass + draft steps + host (Python) = round_ms (each a median over runs)
            "round_ms": round_or_none(row.round_ms, 3), "verify_ms_per_pass": round_or_none(row.verify_ms, 3),
            "draft_ms_per_step": round_or_none(row.draft_ms, 3),
            "draft_ms_per_round": round_or_none(row.draft_ms_per_round, 3),
            "python_ms_per_round": round_or_none(row.python_ms_per_round, 3),
            "drafted": sum(s.proposed for s in row.samples), "accepted": sum(s.accepted for s in row.samples),
            **self._adaptive_summary(row),
        }

    def _adaptive_summary(self, row: Row) -> dict[str, Any]:
        """Adaptive rows: the fastest fixed depth of the same mode in this run, the ratios, the depths chosen."""
        fastest = self.fastest_fixed(row)
        if fastest is None:
            return {}
        by_cpu = self.fastest_fixed_cpu(row)
        runs = self.vs_fastest_fixed_runs(row)
        cpu_ratio = row.cpu_tps / by_cpu.cpu_tps if by_cpu is not None and row.cpu_tps and by_cpu.cpu_tps else None
        return {
            "fastest_fixed": fastest.variant.label, "fastest_fixed_tps_median": round(fastest.tps, 2),
            "vs_fastest_fixed": round_or_none(_paired(row, fastest), 3),
            "vs_fastest_fixed_of_medians": round_or_none(row.tps / fastest.tps if fastest.tps > 0 else None, 3),
            "vs_fastest_fixed_runs": [round(r, 3) for r in runs],
            "starts": [start_word(s) for s in row.samples],
            "vs_fastest_fixed_cold": round_or_none(_median_where(runs, row.samples, warm=False), 3),
            "vs_fastest_fixed_warm": round_or_none(_median_where(runs, row.samples, warm=True), 3),
            "fastest_fixed_cpu": by_cpu.variant.label if cpu_ratio is not None and by_cpu is not None else None,
            "vs_fastest_fixed_cpu": round_or_none(cpu_ratio, 3),
            "depths": {str(k): round(v, 3) for k, v in row.depth_shares.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "n_tokens": self.n_tokens, "runs": self.runs,
                "cut_short": self.cut_short, "context": self.context,
                "rows": [self.summary(r) for r in self.rows]}

    def markdown(self) -> str:
        earlier = f"Every reply decoded after {self.context:,} tokens of an earlier conversation."
        lines = [earlier] if self.context else []
        for prompt_set in PROMPT_SETS:
            rows = [r for r in self.rows if r.prompt_set == prompt_set]
            if not rows:
                continue
            lines += [f"\n**{prompt_set} prompts**\n",
                      "| variant | tok/s (median) | accepted / drafted | acceptance of tested | tokens/pass | vs off | "
                      "vs llama-server | bound | efficiency | verify ms/pass | draft ms/step | Python ms/round |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for row in rows:
                s = self.summary(row)
                lines.append(f"| {s['variant']} | {s['decode_tps_median']:.1f} | "
                             f"{_fmt(s['accepted_of_drafted'], '.3f')} | {_fmt(s['acceptance'], '.3f')} | "
                             f"{_fmt(s['tokens_per_pass'], '.2f')} | {_fmt(s['vs_off'], '.2f', 'x')} | "
                             f"{_fmt(s['vs_upstream'], '.2f', 'x')} | {_fmt(s['bound'], '.2f', 'x')} | "
                             f"{_fmt(s['efficiency'], '.0%')} | {_fmt(s['verify_ms_per_pass'], '.2f')} | "
                             f"{_fmt(s['draft_ms_per_step'], '.3f')} | {_fmt(s['python_ms_per_round'], '.2f')} |")
            lines += self._adaptive_table(rows)
        return "\n".join(lines).strip() + "\n"

    def _adaptive_table(self, rows: list[Row]) -> list[str]:
        adaptive = [self.summary(r) for r in rows if self.fastest_fixed(r) is not None]
        if not adaptive:
            return []
        lines = ["", "| adaptive variant | tok/s (median) | fastest fixed depth | its tok/s | "
                 "ratio (median of the runs') | ratio in each run (c: cold start, w: warm) | ratio in CPU time | "
                 "depths chosen (share of rounds) |",
                 "|---|---|---|---|---|---|---|---|"]
        for s in adaptive:
            depths = ", ".join(f"{k}: {v:.0%}" for k, v in s["depths"].items()) or "–"
            runs = ", ".join(f"{r:.3f}{start[:1]}" for r, start in zip(s["vs_fastest_fixed_runs"], s["starts"],
                                                                       strict=False)) or "–"
            cpu = "–" if s["vs_fastest_fixed_cpu"] is None else \
                f"{s['vs_fastest_fixed_cpu']:.3f}x vs {s['fastest_fixed_cpu'].rsplit(' ', 1)[-1]}"
            lines.append(f"| {s['variant']} | {s['decode_tps_median']:.1f} | {s['fastest_fixed']} | "
                         f"{s['fastest_fixed_tps_median']:.1f} | {_fmt(s['vs_fastest_fixed'], '.3f', 'x')} | {runs} | "
                         f"{cpu} | {depths} |")
        return lines

    def chart(self, path: Path) -> Path:
        """A grouped bar chart of decode tok/s per variant (ours solid, llama-server hatched)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sets = [p for p in PROMPT_SETS if any(r.prompt_set == p for r in self.rows)]
        fig, axes = plt.subplots(len(sets), 1, figsize=(12, 4.2 * len(sets)), squeeze=False)
        for ax, prompt_set in zip(axes[:, 0], sets, strict=True):
            rows = [r for r in self.rows if r.prompt_set == prompt_set]
            colors = [{"ours": "#4c78a8", "upstream": "#f58518", "remote": "#54a24b"}[r.variant.engine] for r in rows]
            bars = ax.bar(range(len(rows)), [r.tps for r in rows], color=colors)
            for bar, row in zip(bars, rows, strict=True):
                if row.variant.engine == "upstream":
                    bar.set_hatch("//")
            ax.set_xticks(range(len(rows)), [r.variant.label.replace("llama-server ", "srv ") for r in rows],
                          rotation=55, ha="right", fontsize=8)
            ax.set_ylabel("decode tok/s (median)")
            ax.set_title(f"{prompt_set} prompts — {self.model}, {self.n_tokens} tokens, {self.runs} runs "
                         "(blue: ours, orange: llama-server, green: remote)", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def decision_charts(decisions: Path, folder: Path) -> list[Path]:
    """Draw adaptive depth's decisions (the JSON lines ``run`` kept), one PNG per adaptive variant: the depth of
    every round (coloured by why it was chosen), and each round's measured time beside the time predicted for
    it, with the load index; runs one after another (each said to start cold or warm), the warm-up and the
    prompts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries: dict[str, list[dict[str, Any]]] = {}
    for entry in read_decisions(decisions):
        entries.setdefault(entry["variant"], []).append(entry)
    colours = {"best": "#4c78a8", "probe": "#f58518", "explore": "#e45756", "start": "#72b7b2"}
    paths = []
    for variant, rounds in entries.items():
        fig, (depth_ax, time_ax) = plt.subplots(2, 1, figsize=(13, 7.5), sharex=True)
        xs = list(range(len(rounds)))
        for reason, colour in colours.items():
            picked = [(x, r["depth"]) for x, r in zip(xs, rounds, strict=True) if r["reason"] == reason]
            if picked:
                depth_ax.scatter([x for x, _ in picked], [d for _, d in picked], s=7, color=colour, label=reason)
        measured = [r["seconds"] * 1000 for r in rounds]
        time_ax.scatter(xs, measured, s=5, color="#999999", label="measured")
        predicted = [(x, r["predicted"] * 1000) for x, r in zip(xs, rounds, strict=True) if r["predicted"]]
        time_ax.scatter([x for x, _ in predicted], [v for _, v in predicted], s=5, color="#4c78a8",
                        label="predicted for the round's depth")
        load_ax = time_ax.twinx()
        load_ax.plot(xs, [r["load"] for r in rounds], color="#54a24b", linewidth=0.8, label="load index")
        load_ax.set_ylabel("load index", color="#54a24b")
        for x, (before, after) in enumerate(itertools.pairwise(rounds), start=1):
            if (before["run"], before["prompt_set"], before["prompt"]) != (after["run"], after["prompt_set"],
                                                                           after["prompt"]):
                for ax in (depth_ax, time_ax):
                    ax.axvline(x - 0.5, color="#000000" if before["run"] != after["run"] else "#dddddd",
                               linewidth=0.6, zorder=0)
        for x, entry in enumerate(rounds):  # each run's first round: whether it started from a remembered record
            if x == 0 or entry["run"] != rounds[x - 1]["run"]:
                depth_ax.annotate(f"run {entry['run']}: {'warm' if entry.get('warm') else 'cold'} start", (x, 1.0),
                                  xycoords=("data", "axes fraction"), xytext=(3, -10), textcoords="offset points",
                                  fontsize=8)
        depth_ax.set_ylabel("depth")
        depth_ax.set_yticks(range(0, max(r["depth"] for r in rounds) + 1))
        depth_ax.legend(loc="upper right", fontsize=8, markerscale=2)
        depth_ax.set_title(f"{variant}: the depth of each round (runs split by black lines, prompts by grey)",
                           fontsize=9)
        time_ax.set_title("each round's time as adaptive depth measures it (the decoding thread's CPU time on a CPU "
                          "backend, wall time with GPU offload) and as it predicted it", fontsize=9)
        time_ax.set_ylabel("round ms (adaptive depth's clock)")
        time_ax.set_yscale("log")
        time_ax.set_xlabel("round")
        time_ax.legend(loc="upper left", fontsize=8, markerscale=2)
        fig.tight_layout()
        path = folder / f"adaptive-{re.sub(r'[^a-z0-9]+', '-', variant.lower()).strip('-')}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def side_by_side(mine: Sequence[Sample], theirs: Sequence[Sample]) -> list[float]:
    """Run by run, one variant's decode speed over another's measured beside it in that run (prompt by prompt): the
    ratio the benchmarks quote is the median of these. A ratio of the two variants' medians may take each from
    another run, and the runs of one variant drift a few percent apart on a shared machine (a fast run of one beside
    a slow run of the other): 0.967x where the three runs measured 0.990x, 0.990x and 0.967x."""
    return [m.tps / t.tps for m, t in zip(mine, theirs, strict=False) if t.tps > 0]


def _paired(row: Row, other: Row | None) -> float | None:
    """``row`` over ``other``: the median of their runs' side-by-side ratios (None without ``other``)."""
    ratios = side_by_side(row.samples, other.samples) if other is not None else []
    return statistics.median(ratios) if ratios else None


def _median_where(ratios: list[float], samples: list[Sample], warm: bool) -> float | None:
    """The median of the runs' ratios over the cold or the warm runs only (None when there are none)."""
    picked = [r for r, s in zip(ratios, samples, strict=False) if s.warm is warm]
    return statistics.median(picked) if picked else None


def start_word(sample: Sample) -> str:
    """How an adaptive run began, for reports: "cold", "warm" (from a remembered record), "" for a fixed depth."""
    return {None: "", False: "cold", True: "warm"}[sample.warm]


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


# (mode name on the command line, engine mode, draft kind)
_MODES: list[tuple[str, Mode, DraftKind | None]] = [("embedded", "embedded", None), ("full", "sidecar", "full"),
                                                     ("d2t", "sidecar", "d2t")]


def default_variants(depths: list[int], modes: list[str], upstream: bool,
                     adaptive_max: int = DRAFT_DEPTH_MAX) -> list[Variant]:
    """Ours: off, then each drafting mode at each depth and adaptive (up to ``adaptive_max``, 0 for none);
    upstream: off and the sidecars."""
    variants = [Variant("ours", "off")] if "off" in modes else []
    for name, mode, draft in _MODES:
        if name in modes:
            variants += [Variant("ours", mode, draft, k) for k in depths]
            if adaptive_max:
                variants.append(Variant("ours", mode, draft, adaptive_max, adaptive=True))
    if upstream:
        variants.append(Variant("upstream", "off"))
        for name, mode, draft in _MODES:
            if name in modes and draft is not None:
                variants += [Variant("upstream", mode, draft, k) for k in depths]
    return variants


def run(target: Path, sidecars: dict[str, Path], *, variants: list[Variant], n_tokens: int = 128, runs: int = 3,
        prompt_sets: tuple[str, ...] = PROMPT_SETS, n_threads: int | None = None, n_gpu_layers: int = 0,
        server_binary: Path | None = None, log: Log = lambda _m: None,
        time_limit_s: float | None = None, remote: Any = None, interleave: Interleave | None = None,
        decisions: Path | None = None, depth_memory: Path | None = None,
        keep_memory: bool = False, context: int = 0, screen: float = 0.0) -> SpecResult:
    """Run the matrix; ``server_binary`` is needed when ``variants`` include upstream ones, ``remote`` (a
    ``RemoteServer``) when they include a remote one: the same prompts as chat turns over its stream, with its
    own timings where it reports them (llama-server) and the stream's otherwise.

    ``interleave``: "prompt" runs our variants and llama-server's side by side, prompt by prompt, each in a session
    (or a server) kept for the run; "variant" runs each variant's prompts in one go. By default "prompt" on a CPU
    and "variant" with GPU offload or a time limit. ``decisions``: a JSON-lines file for every round adaptive depth
    decided.
    ``depth_memory``: a folder where the adaptive rows keep what they learned from run to run (emptied first, unless
    ``keep_memory``: ``bench adaptive-load``'s phases carry it from one phase to the next), so the first run starts
    cold and each later one warm; None: every run starts cold.
    ``context``: tokens of an earlier conversation before every prompt (0: none), so each reply is decoded against
    that much context, as in a long chat; both engines keep it between prompts (our decoder's snapshot taken after
    reading it, llama-server's prompt cache) and evaluate only what follows.

    With ``time_limit_s`` no variant but the first starts unless it would end within that much time
    (taking as long as the longest so far): the result keeps what was measured (rows without samples
    are left out) and says it was cut short, where a killed run would keep nothing (a lent GPU
    machine's budget).

    ``screen``: after the first run, a fixed variant of ours (drafting off or a fixed depth) whose decode speed in it
    lay more than this share below the fastest fixed one's is not run again (``screened``; 0: every variant runs
    every time). Its row keeps that one run, and the time goes to the runs of the variants that compete.
    """
    if interleave is None:
        interleave = "variant" if n_gpu_layers != 0 or time_limit_s is not None else "prompt"
    began = time.monotonic()
    cut_short = False
    # the same thread count on both sides: llama-server's own default differs from ours (llama.cpp's, not
    # one per physical core), which made it look faster on a 2-core machine
    from app.native.handles import default_threads  # native only once a run starts (the GUI imports this module)

    n_threads = n_threads or default_threads()
    longest = 0.0  # seconds of the longest variant run (or side-by-side block) so far
    run_order = sorted(variants, key=_priority)  # what a run cut short by its time limit should still have
    prompts = {name: load_prompts(name) for name in prompt_sets}
    rows = {(v, p): Row(v, p) for v in variants for p in prompt_sets}
    token_prompts = tokenize_prompts(target, prompts, context)
    first_prompt = token_prompts[next(iter(token_prompts))][0]
    window = Window(context_size(token_prompts, n_tokens), tuple(first_prompt[:context]))
    side_by_side = ("ours", "upstream") if server_binary is not None else ("ours",)
    together = [v for v in run_order if v.engine in side_by_side] if interleave == "prompt" else []
    one_by_one = [v for v in run_order if v not in together]
    record = _DecisionLog(decisions)
    dropped: list[Variant] = []  # left out after the first run (``screen``)
    if depth_memory is not None and not keep_memory:
        DepthMemory(depth_memory).forget()
    try:
        for run_index in range(runs):
            measured: dict[Variant, dict[str, Sample]] = {}
            if together:
                started = time.perf_counter()
                measured = _run_together(together, target, sidecars, token_prompts, n_tokens, n_threads,
                                         n_gpu_layers, record, run_index, depth_memory, window, server_binary)
                longest = max(longest, time.perf_counter() - started)
                log(f"run {run_index + 1}/{runs}: {len(together)} variants side by side, prompt by prompt "
                    f"({time.perf_counter() - started:.1f} s)")
            for index, variant in enumerate(one_by_one):
                # the first variant always runs (something to report); another starts only if the longest
                # one so far would still end within the limit
                started_any = run_index > 0 or index > 0 or bool(together)
                if time_limit_s is not None and started_any and \
                        time.monotonic() - began + longest >= time_limit_s:
                    cut_short = True
                    log(f"time limit of {time_limit_s:.0f} s reached: stopping before run {run_index + 1} "
                        f"of {variant.label}")
                    break
                started = time.perf_counter()
                warm_up = token_prompts[next(iter(token_prompts))][0]
                if variant.engine == "ours":
                    ours = _OursSession(variant, _config(variant, target, sidecars, n_threads, n_gpu_layers,
                                                         depth_memory, window.n_ctx), warm_up, record, run_index,
                                        window.earlier)
                    measured[variant] = _run_alone(ours, token_prompts, n_tokens)
                elif variant.engine == "remote":
                    measured[variant] = _run_remote(remote, prompts, n_tokens)
                else:
                    assert server_binary is not None, "upstream variants need the llama-server binary"
                    upstream = _UpstreamSession(variant, server_binary, target, sidecars, warm_up, n_threads,
                                                n_gpu_layers, window)
                    measured[variant] = _run_alone(upstream, token_prompts, n_tokens)
                longest = max(longest, time.perf_counter() - started)
                log(f"run {run_index + 1}/{runs} {variant.label} ({time.perf_counter() - started:.1f} s)")
            for variant, samples in measured.items():
                for prompt_set, sample in samples.items():
                    rows[(variant, prompt_set)].samples.append(sample)
                log(f"run {run_index + 1}/{runs} {variant.label}: "
                    + ", ".join(f"{p} {s.tps:.1f} tok/s" for p, s in samples.items()))
            if cut_short:
                break
            if run_index == 0 and screen > 0.0:
                dropped = screened(measured, screen)
                if dropped:
                    log("after the first run, left out as more than "
                        f"{screen:.0%} slower than the fastest fixed variant: "
                        + ", ".join(v.label for v in dropped))
                together = [v for v in together if v not in dropped]
                one_by_one = [v for v in one_by_one if v not in dropped]
    finally:
        record.close()
    measured_rows = [row for row in rows.values() if row.samples]
    completed = min((len(row.samples) for row in measured_rows if row.variant not in dropped), default=0)
    return SpecResult(measured_rows, n_tokens, completed, target.name, device_description(), cut_short, context)


def screened(measured: dict[Variant, dict[str, Sample]], screen: float) -> list[Variant]:
    """The fixed variants of ours (drafting off, a fixed depth) more than ``screen`` slower, in one run, than the
    fastest fixed one of that run: in each prompt set, so a variant is left out only where it lost in every one.
    Adaptive rows and other engines always stay."""
    fixed = {v: samples for v, samples in measured.items() if v.engine == "ours" and not v.adaptive}
    if len(fixed) < 2:
        return []
    names = {name for samples in fixed.values() for name in samples}
    fastest = {name: max(samples[name].tps for samples in fixed.values() if name in samples) for name in names}
    return [v for v, samples in fixed.items()
            if samples and all(sample.tps < (1.0 - screen) * fastest[name] for name, sample in samples.items())]


def _priority(variant: Variant) -> tuple[int, int, int]:
    """Run order: off, then the default depth 3 (d2t first, ours before llama-server), adaptive, then the
    depths further from 3. Medians do not depend on it; a run stopped by its time limit keeps the rows
    that matter most."""
    engine = {"ours": 0, "upstream": 1, "remote": 2}[variant.engine]
    if variant.engine == "remote":
        return 1, 0, engine  # beside the default depth: one row, the server's own drafting
    if variant.mode == "off":
        return 0, 0, engine
    mode = {"d2t": 0, None: 1, "full": 2}[variant.draft]
    depth = 1 if variant.adaptive else (0 if variant.draft_depth == DEFAULT_DRAFT_DEPTH
                                         else 1 + abs(variant.draft_depth - DEFAULT_DRAFT_DEPTH))
    return 1 + depth, mode, engine


@dataclass(frozen=True)
class Window:
    """The context both engines are made with, and whether a prompt's earlier conversation is kept between
    prompts (``run``'s ``context``) or every prompt starts a fresh one."""

    n_ctx: int
    earlier: tuple[int, ...] = ()  # the earlier conversation every prompt starts with

    @property
    def keep_prefix(self) -> bool:
        return bool(self.earlier)


BASE_CONTEXT = 2048  # the context of a run without an earlier conversation


def context_size(prompts: dict[str, list[list[int]]], n_tokens: int) -> int:
    """Room for the longest prompt and its reply, at least :data:`BASE_CONTEXT`, rounded up to 256."""
    longest = max((len(p) for ps in prompts.values() for p in ps), default=0)
    return max(BASE_CONTEXT, -(-(longest + n_tokens + 64) // 256) * 256)


def _config(variant: Variant, target: Path, sidecars: dict[str, Path], n_threads: int | None,
            n_gpu_layers: int, depth_memory: Path | None = None, n_ctx: int = BASE_CONTEXT) -> EngineConfig:
    draft = sidecars[variant.draft] if variant.draft else None
    return EngineConfig(target, mode=variant.mode, draft=draft, draft_depth=variant.draft_depth,
                        adaptive=variant.adaptive, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers,
                        depth_memory=depth_memory if variant.adaptive else None)


def tokenize_prompts(target: Path, prompts: dict[str, list[str]], context: int = 0) -> dict[str, list[list[int]]]:
    """Each prompt as the user turn of a chat, rendered with the target's template (thinking off); on a demo
    model of the ``words`` language, with the reply's first word given (:func:`demo_opening`). With ``context``,
    after that many tokens of an earlier conversation, the same for every prompt (:func:`earlier_conversation`)."""
    from app.engine.session import ChatSession
    from app.gguftools.demo_model import read_demo_table

    table = read_demo_table(target)
    cycle = table.cycle if table is not None and table.language == "words" else None
    session = ChatSession(EngineConfig(target, n_ctx=256))
    try:
        earlier = earlier_conversation(session, context)
        return {name: [earlier + session.prompt_tokens([Message("user", p)], thinking=False)
                       + ([demo_opening(cycle, p)] if cycle is not None else [])
                       for p in texts]
                for name, texts in prompts.items()}
    finally:
        session.close()


EARLIER_TURN = ("Tell me about the lighthouse keepers of the northern coast, the storms they lived through and how "
                "they kept the lamps burning all night. ")


def earlier_conversation(session: ChatSession, tokens: int) -> list[int]:
    """``tokens`` tokens of an earlier chat turn (a long user message, cut to length); none for 0."""
    if tokens <= 0:
        return []
    one = session.prompt_tokens([Message("user", EARLIER_TURN * 4)], thinking=False)
    return (one * (tokens // len(one) + 1))[:tokens]


def demo_opening(cycle: tuple[int, ...], prompt: str) -> int:
    """The table word a demo reply to ``prompt`` starts from, as if the assistant had written it first.

    The demo target's next token depends on the current one alone, and every chat prompt ends in the same
    markup, so without it every prompt would get the same reply: a benchmark would time one 127-token text
    again and again, and which fixed depth won would be that text's luck (on the ``small`` table at acceptance
    0.8, depth 3 makes 3.20 tokens a round on it against 2.99 over the whole table). A word the prompt's text picks
    puts each prompt's reply on its own stretch of the table, as different prompts get different replies
    from a real model, and the same prompt always on the same one."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return cycle[int.from_bytes(digest[:8], "big") % len(cycle)]


class _OursSession:
    """One of our variants for one run: its session, warmed up once, then one fresh conversation per prompt (each
    going on from the earlier conversation, read once, when there is one)."""

    def __init__(self, variant: Variant, config: EngineConfig, warm_up: list[int], record: _DecisionLog,
                 run_index: int, earlier: tuple[int, ...] = ()) -> None:
        from app.engine.session import ChatSession

        self.variant, self.record, self.run_index = variant, record, run_index
        self.session = ChatSession(config)
        self.decoder = self.session.decoder
        adaptive = self.decoder.adaptive
        if adaptive is not None and record.active:
            adaptive.log = []
        self.earlier: Snapshot | None = None
        try:
            self.decoder.generate(warm_up, 8)  # warm-up: first-pass allocations
            self.decoder.prepare_visit_graphs()  # adaptive depth's: those of the depths it visits, as for a fixed one
            if earlier:  # read once, then every prompt starts from it as a chat's next turn would
                self.decoder.reset()
                self.decoder.generate(list(earlier), 1)
                self.earlier = self.decoder.snapshot()
        except BaseException:
            self.session.close()
            raise
        self._keep_decisions("warm-up", 0)

    def prompt(self, prompt_set: str, index: int, prompt: list[int], n_tokens: int, sample: Sample) -> None:
        adaptive = self.decoder.adaptive
        chosen_before = Counter(adaptive.chosen) if adaptive is not None else Counter[int]()
        if self.earlier is not None:
            self.decoder.restore(self.earlier)  # the earlier conversation evaluated, the prompt follows it
        else:
            self.decoder.reset()  # a fresh conversation each time, as the server's cache_prompt=false
        stats = self.decoder.generate(prompt, n_tokens).stats
        sample.add_reply(stats.generated, stats.decode_span_seconds)
        sample.generated += stats.generated
        sample.decode_seconds += stats.decode_seconds
        sample.cpu_seconds += stats.decode_cpu_seconds
        sample.passes += stats.target_passes - 1  # the first token comes from the prompt pass
        sample.tested += stats.drafted
        sample.proposed += stats.proposed
        sample.accepted += stats.accepted
        sample.verify_native += stats.verify_native_seconds
        sample.draft_native += stats.draft_native_seconds
        if adaptive is not None:
            sample.depths.update(adaptive.chosen - chosen_before)
            sample.warm = adaptive.warm
        self._keep_decisions(prompt_set, index)

    def _keep_decisions(self, prompt_set: str, index: int) -> None:
        adaptive = self.decoder.adaptive
        if adaptive is not None and adaptive.log is not None:
            self.record.write(self.variant, self.run_index, prompt_set, index, adaptive.log, adaptive.warm)
            adaptive.log.clear()

    def close(self) -> None:
        self.session.close()


class _UpstreamSession:
    """One llama-server variant for one run: its server, warmed up once, then one completion per prompt (a fresh
    conversation each: the server does not keep the prompt between requests unless asked to)."""

    def __init__(self, variant: Variant, binary: Path, target: Path, sidecars: dict[str, Path], warm_up: list[int],
                 n_threads: int | None, n_gpu_layers: int, window: Window = Window(BASE_CONTEXT)) -> None:
        from app.machines.upstream_server import UpstreamServer

        self.variant = variant
        self.keep_prefix = window.keep_prefix
        draft = sidecars[variant.draft] if variant.draft else None
        self.server = UpstreamServer(binary, target, draft=draft, draft_depth=variant.draft_depth, threads=n_threads,
                                     ctx_size=window.n_ctx, n_gpu_layers=n_gpu_layers)
        self.server.start()
        try:
            self.server.complete(warm_up, 8, cache_prompt=self.keep_prefix)
        except BaseException:
            self.server.stop()
            raise

    def prompt(self, _prompt_set: str, _index: int, prompt: list[int], n_tokens: int, sample: Sample) -> None:
        done = self.server.complete(prompt, n_tokens, cache_prompt=self.keep_prefix)
        sample.add_reply(done.generated, done.decode_span_seconds)
        sample.generated += done.generated
        sample.decode_seconds += done.decode_span_seconds
        sample.proposed += done.drafted  # it counts every draft made, not which were tested
        sample.accepted += done.accepted

    def close(self) -> None:
        self.server.stop()


def _run_alone(session: _OursSession | _UpstreamSession, prompts: dict[str, list[list[int]]],
               n_tokens: int) -> dict[str, Sample]:
    """One variant's prompts in one go (``interleave="variant"``); closes its session."""
    try:
        samples: dict[str, Sample] = {}
        for name, token_prompts in prompts.items():
            sample = samples[name] = Sample()
            for index, prompt in enumerate(token_prompts):
                session.prompt(name, index, prompt, n_tokens, sample)
        return samples
    finally:
        session.close()


def _run_together(variants: list[Variant], target: Path, sidecars: dict[str, Path],
                  prompts: dict[str, list[list[int]]], n_tokens: int, n_threads: int | None, n_gpu_layers: int,
                  record: _DecisionLog, run_index: int, depth_memory: Path | None,
                  window: Window = Window(BASE_CONTEXT),
                  server_binary: Path | None = None) -> dict[Variant, dict[str, Sample]]:
    """The variants side by side, ours and llama-server's: each prompt goes to every variant before the next prompt,
    in an order that rotates from prompt to prompt (so no variant always follows the same one). llama-server's run
    beside ours, not in a block of their own: the machine's speed drifts by more between blocks than the two
    engines differ (``bench spec``'s per-run ratios against llama-server spread 0.98x-1.19x measured in blocks)."""
    sessions: list[_OursSession | _UpstreamSession] = []
    warm_up = prompts[next(iter(prompts))][0]
    try:
        for variant in variants:
            if variant.engine == "upstream":
                assert server_binary is not None, "upstream variants need the llama-server binary"
                sessions.append(_UpstreamSession(variant, server_binary, target, sidecars, warm_up, n_threads,
                                                 n_gpu_layers, window))
                continue
            sessions.append(_OursSession(variant, _config(variant, target, sidecars, n_threads, n_gpu_layers,
                                                          depth_memory, window.n_ctx), warm_up, record, run_index,
                                         window.earlier))
        samples = {variant: {name: Sample() for name in prompts} for variant in variants}
        turn = run_index
        for name, token_prompts in prompts.items():
            for index, prompt in enumerate(token_prompts):
                for offset in range(len(sessions)):
                    ours = sessions[(turn + offset) % len(sessions)]
                    ours.prompt(name, index, prompt, n_tokens, samples[ours.variant][name])
                turn += 1
        return samples
    finally:
        for ours in sessions:
            ours.close()


def read_decisions(path: Path) -> list[dict[str, Any]]:
    """The rounds a decision log (``_DecisionLog``) kept, in order; none when it was not kept."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class _DecisionLog:
    """Adaptive depth's decisions, one JSON line per round, tagged with the variant, run and prompt."""

    def __init__(self, path: Path | None) -> None:
        self._handle: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = path.open("w", encoding="utf-8")

    @property
    def active(self) -> bool:
        return self._handle is not None

    def write(self, variant: Variant, run_index: int, prompt_set: str, index: int, decisions: list[Any],
              warm: bool) -> None:
        if self._handle is None:
            return
        for decision in decisions:
            entry = {"variant": variant.label, "run": run_index + 1, "warm": warm, "prompt_set": prompt_set,
                     "prompt": index, **decision.to_dict()}
            self._handle.write(json.dumps(entry) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _run_remote(server: Any, prompts: dict[str, list[str]], n_tokens: int) -> dict[str, Sample]:
    """Each prompt as a fresh chat turn (thinking off, greedy) streamed from a remote server."""
    from app.engine.config import ChatOptions
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import RemoteError

    options = ChatOptions(max_tokens=n_tokens, thinking=False)
    with RemoteClient(server) as client:
        loaded = client.load()
        if loaded["kind"] == "error":
            raise RemoteError(loaded["message"], loaded.get("advice", ""))
        samples: dict[str, Sample] = {}
        for name, texts in prompts.items():
            sample = Sample(after_warm_up=False)
            for text in texts:
                done = list(client.generate([Message("user", text)], options))[-1]
                if done["kind"] == "error":
                    raise RemoteError(done["message"], done.get("advice", ""))
                stats = done["stats"]
                sample.add_reply(int(stats["generated"]), float(stats["decode_seconds"]))
                sample.generated += int(stats["generated"])
                sample.decode_seconds += float(stats["decode_seconds"])
                sample.proposed += int(stats["proposed"])  # a server counts drafts made, not which were tested
                sample.accepted += int(stats["accepted"])
            samples[name] = sample
        return samples
