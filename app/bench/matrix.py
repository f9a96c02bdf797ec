"""The ``bench spec`` matrix for one model on this machine, variant by variant, with progress and cancel.

The Benchmark page (and ``bench matrix``) picks the modes and depths; each variant of each run is one call of
``app.bench.spec.run`` (the same measurement as ``bench spec``: a warm-up, then greedy replies; medians,
acceptance, tokens per pass), so progress can be reported and a cancel honoured between variants, and the rows
are merged into one ``MatrixResult``. The variants are interleaved run by run, as ``bench spec`` interleaves
them prompt by prompt: every run measures each variant once, in an order that rotates from run to run (so no
variant always follows the same one and a burst of load from another job hits them alike). Each drafting row's
comparison with ``off`` is a verdict (``app.engine.verdict``): from ``MIN_SAMPLES`` runs on, the medians, their
spreads and the ratio, "no clear difference" when the spreads overlap; with fewer runs it says what is missing.
The chart is the one the page draws: decode tok/s against draft depth, one line per drafting mode, ``off`` as a
flat line, a panel per prompt set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.bench import spec
from app.core.errors import FastMTPError
from app.core.words import noun, plural
from app.engine.config import DRAFT_DEPTH_MAX, DRAFT_DEPTH_MIN
from app.engine.modes import DRAFT_MODES, depth_series, mode_colour, mode_label
from app.engine.verdict import MIN_SAMPLES, Condition, Sample, Verdict, compare
from app.models.sidecar_job import Control

MODES = DRAFT_MODES


class BenchError(FastMTPError):
    """A benchmark request that cannot run (a mode without its file, no depth)."""


@dataclass(frozen=True)
class MatrixRequest:
    """What to measure: the model, its sidecars, the modes and depths, and how much."""

    target: Path
    sidecars: dict[str, Path] = field(default_factory=dict)  # "d2t" / "full" -> file
    modes: tuple[str, ...] = ("off", "embedded", "d2t")
    depths: tuple[int, ...] = (1, 2, 3, 4)
    n_tokens: int = 64
    runs: int = MIN_SAMPLES  # interleaved runs; fewer give no verdict against off
    prompt_sets: tuple[str, ...] = ("document",)
    n_threads: int | None = None
    n_gpu_layers: int = 0
    name: str = ""

    def variants(self) -> list[spec.Variant]:
        return spec.default_variants(list(self.depths), list(self.modes), upstream=False, adaptive_max=0)


@dataclass(frozen=True)
class MatrixProgress:
    done: int
    total: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "progress", "done": self.done, "total": self.total, "message": self.message}


def check_request(request: MatrixRequest) -> None:
    """Refuse what cannot run before anything loads: unknown modes, missing sidecars, bad depths.

    Raises:
        BenchError: in words.
    """
    unknown = [m for m in request.modes if m not in MODES]
    if unknown or not request.modes:
        raise BenchError(f"Unknown drafting mode(s): {', '.join(unknown) or 'none given'}.",
                         f"Choose from {', '.join(MODES)}.")
    for mode in ("d2t", "full"):
        if mode in request.modes and mode not in request.sidecars:
            raise BenchError(f"The {mode_label(mode)} mode needs that sidecar, and none was given for "
                             f"{request.target.name}.", "Make or attach the sidecar first, or leave the mode out.")
    drafting = any(mode != "off" for mode in request.modes)
    if drafting and (not request.depths or min(request.depths) < DRAFT_DEPTH_MIN
                     or max(request.depths) > DRAFT_DEPTH_MAX):
        raise BenchError(f"Drafting modes need draft depths from {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}.",
                         f"Pick depths {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}.")
    if request.n_tokens < 1 or request.runs < 1:
        raise BenchError("Tokens per prompt and runs must be at least 1.", "Raise them.")
    for name in request.prompt_sets:
        if name not in spec.PROMPT_SETS:
            raise BenchError(f"There is no prompt set {name!r}.", f"Choose from {', '.join(spec.PROMPT_SETS)}.")


def run_order(variants: list[spec.Variant], run_index: int) -> list[spec.Variant]:
    """The order of run ``run_index``: the variants rotated by one place per run."""
    shift = run_index % len(variants) if variants else 0
    return variants[shift:] + variants[:shift]


def run_matrix(request: MatrixRequest, on_progress: Callable[[MatrixProgress], None] = lambda _p: None,
               control: Control | None = None) -> MatrixResult:
    """Measure every variant ``runs`` times, interleaved run by run (``run_order``), and merge the rows.

    Raises:
        JobCancelled: ``control`` was cancelled (between variants).
        BenchError: the request cannot run.
    """
    check_request(request)
    control = control or Control()
    variants = request.variants()
    total = len(variants) * request.runs
    rows: dict[tuple[spec.Variant, str], spec.Row] = {}
    done = 0
    device = ""
    on_progress(MatrixProgress(0, total, f"Measuring {plural(len(variants), 'variant')} x "
                                         f"{plural(request.runs, 'run')}, interleaved"))
    for run_index in range(request.runs):
        for variant in run_order(variants, run_index):
            control.check()
            on_progress(MatrixProgress(done, total, f"run {run_index + 1}/{request.runs}: {variant.label}"))
            part = spec.run(request.target, request.sidecars, variants=[variant], n_tokens=request.n_tokens, runs=1,
                            prompt_sets=request.prompt_sets, n_threads=request.n_threads,
                            n_gpu_layers=request.n_gpu_layers, interleave="variant")
            device = part.device
            for row in part.rows:
                merged = rows.setdefault((row.variant, row.prompt_set), spec.Row(row.variant, row.prompt_set))
                for sample in row.samples:
                    sample.order = done  # when it was measured: the verdicts check that the variants alternated
                merged.samples.extend(row.samples)
            done += 1
            on_progress(MatrixProgress(done, total, f"run {run_index + 1}/{request.runs}: {variant.label} done"))
    ordered = [rows[(v, p)] for p in request.prompt_sets for v in variants if (v, p) in rows]
    return MatrixResult(ordered, request.n_tokens, request.runs, request.name or request.target.name, device,
                        threads=request.n_threads)


def _condition(variant: spec.Variant, model: str, threads: int | None) -> Condition:
    """A matrix row's condition as the verdicts see it: greedy, its depth, the model and the threads."""
    if variant.mode == "off":
        return Condition("off", "", "greedy", model, threads)
    name = variant.draft or "embedded"
    depth = f"adaptive depth ≤{variant.draft_depth}" if variant.adaptive else f"depth {variant.draft_depth}"
    return Condition(name, depth, "greedy", model, threads)


def row_verdict(result: spec.SpecResult, row: spec.Row, threads: int | None = None) -> Verdict | None:
    """The drafting row against ``off`` on the same prompts (None for ``off`` itself, llama-server and remote rows,
    or when ``off`` was not measured)."""
    off = result.off_row("ours", row.prompt_set)
    if row.variant.engine != "ours" or row.variant.mode == "off" or off is None:
        return None
    samples = [Sample(_condition(r.variant, result.model, threads), s.tps, s.order, s.after_warm_up)
               for r in (off, row) for s in r.samples]
    return compare(samples, "off", _condition(row.variant, result.model, threads).mode)


@dataclass
class MatrixResult(spec.SpecResult):
    """``bench spec``'s result with a verdict against ``off`` for every drafting row."""

    threads: int | None = None

    def verdict(self, row: spec.Row) -> Verdict | None:
        return row_verdict(self, row, self.threads)

    def summary(self, row: spec.Row) -> dict[str, Any]:
        verdict = self.verdict(row)
        return dict(super().summary(row), sampling="greedy",
                    verdict=verdict.to_dict() if verdict is not None else None)

    def markdown(self) -> str:
        lines = [super().markdown(), "", f"**Against off** (greedy, {self.runs} interleaved "
                 f"{noun(self.runs, 'run')}, a verdict from "
                 f"{MIN_SAMPLES} on: medians, spreads min-max, 'no clear difference' when they overlap)", "",
                 "| variant | prompts | verdict |", "|---|---|---|"]
        for row in self.rows:
            verdict = self.verdict(row)
            if verdict is not None:
                lines.append(f"| {row.variant.label} | {row.prompt_set} | {verdict.sentence()} |")
        return "\n".join(lines) + "\n"


def chart_png(summaries: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Decode tok/s vs draft depth, one line per mode, off dashed; one panel per prompt set (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(row["prompt_set"] for row in summaries)) or ["document"]
    fig, axes = plt.subplots(1, len(sets), figsize=(6.5 * len(sets), 4.2), squeeze=False)
    for ax, prompt_set in zip(axes[0], sets, strict=True):
        series = depth_series(summaries, prompt_set)
        depths = sorted({d for mode, pts in series.items() if mode != "off" for d, _ in pts}) or [1]
        for mode, points in series.items():
            if mode == "off":
                ax.axhline(points[0][1], color=mode_colour("off"), linestyle="--", label=mode_label("off"))
            else:
                ax.plot([d for d, _ in points], [t for _, t in points], marker="o", color=mode_colour(mode),
                        label=mode_label(mode))
        ax.set_xticks(depths)
        ax.set_xlabel("draft depth")
        ax.set_ylabel("decode tok/s (median)")
        ax.set_title(f"{prompt_set} prompts", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(result: MatrixResult, request: MatrixRequest, folder: Path) -> dict[str, str]:
    """``matrix.json``, ``matrix.md`` and ``matrix.png`` in ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    data = dict(result.to_dict(), request=request_dict(request))
    json_path = folder / "matrix.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path = folder / "matrix.md"
    md_path.write_text(f"# Speculative decoding on this machine: {result.model}\n\n{result.device}, "
                       f"{result.n_tokens} tokens per prompt, greedy, {result.runs} interleaved "
                       f"{noun(result.runs, 'run')}; decode tok/s "
                       "is the tokens after each reply's first over the time from its first token to its last\n\n"
                       + result.markdown(), encoding="utf-8")
    png_path = chart_png(data["rows"], folder / "matrix.png", f"{result.model} — {result.device}")
    return {"json": str(json_path), "markdown": str(md_path), "png": str(png_path)}


def request_dict(request: MatrixRequest) -> dict[str, Any]:
    return {"target": str(request.target), "sidecars": {k: str(v) for k, v in request.sidecars.items()},
            "modes": list(request.modes), "depths": list(request.depths), "n_tokens": request.n_tokens,
            "runs": request.runs, "prompt_sets": list(request.prompt_sets)}
