"""``bench prompt``: prompt processing (the prefill of a chat turn) of our engine against llama-server, side by side.

Each prompt is evaluated from an empty context. Ours is what a chat turn does: ``SpeculativeDecoder.generate`` with
``max_tokens=1`` after ``reset()``, timed by the reply's own ``prompt_seconds`` (the prompt split into ``n_batch``
chunks, each one ``llama_decode``; with the d2t sidecar the draft context is fed the prompt too, with the target's
hidden rows). Our side also splits that time into the target's passes, the draft context's passes (both
synchronized) and the host time between them (batch fills, row copies). llama-server gets the same token ids
through ``/completion`` with ``n_predict`` 1 and ``cache_prompt`` false, and its own ``timings.prompt_ms`` is the
figure: from its first prompt batch to its first token sampled, its MTP draft context's catch-up included. Both
run the same build tree, the same model files, the same context size and the same threads (``-t``/``-tb``).

Every variant stays loaded (our decoders, one llama-server per server variant) while the runs interleave: in each
run every prompt length goes to every variant, in an order that rotates from prompt to prompt, so a burst of load
from another job on a shared machine hits every variant alike. The figures are medians over runs; the ratio ours /
llama-server is the ratio of the median prompt tok/s, and each run's own ratio is kept beside it. Beside the wall
times, each engine process's CPU time over the prompt (ours ``time.process_time``, llama-server's
``/proc/<pid>/stat``) gives the same figures per CPU second: on a shared machine, the prompt without the waits for a
core. Our rows at other batch sizes show which ``EngineConfig.n_batch`` is best on this device (ours sets
``n_ubatch = n_batch``; llama-server's defaults are ``-b 2048 -ub 512``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from app.bench.report import device_description, round_or_none, spread
from app.core import defaults
from app.engine.config import EngineConfig

Engine = Literal["ours", "upstream"]
Log = Callable[[str], None]

LENGTHS = (512, 2048)
OURS_N_BATCH = EngineConfig(Path()).n_batch  # the engine's chunk size (and n_ubatch) unless a caller sets one
SERVER_N_BATCH = 2048  # llama-server's defaults (common.h: n_batch, n_ubatch)
SERVER_N_UBATCH = 512
TARGET_RATIO = 0.95  # issue 34: ours at least 0.95x llama-server's prompt processing


@dataclass(frozen=True)
class Variant:
    """One engine at one batch size, drafting off or with the d2t sidecar."""

    engine: Engine
    draft: bool = False  # with the d2t sidecar (our prefill feeds the draft context too; llama-server's MTP hook)
    n_batch: int = OURS_N_BATCH  # ours: EngineConfig.n_batch, the chunk size; llama-server: -b
    n_ubatch: int = OURS_N_BATCH  # ours: always n_batch (Context sets n_ubatch = n_batch); llama-server: -ub

    @property
    def label(self) -> str:
        what = "d2t sidecar" if self.draft else "off"
        if self.engine == "ours":
            return f"ours {what}, n_batch {self.n_batch}"
        return f"llama-server {what}, -b {self.n_batch} -ub {self.n_ubatch}"

    @property
    def is_default(self) -> bool:
        """Each engine's own defaults: ours at EngineConfig's n_batch, llama-server at -b 2048 -ub 512."""
        if self.engine == "ours":
            return self.n_batch == OURS_N_BATCH
        return (self.n_batch, self.n_ubatch) == (SERVER_N_BATCH, SERVER_N_UBATCH)


def ours(n_batch: int = OURS_N_BATCH, draft: bool = False) -> Variant:
    return Variant("ours", draft, n_batch, n_batch)


def upstream(draft: bool = False, n_batch: int = SERVER_N_BATCH, n_ubatch: int = SERVER_N_UBATCH) -> Variant:
    return Variant("upstream", draft, n_batch, n_ubatch)


def default_variants(batches: Sequence[int] = (256, 1024, 2048), *, draft: bool = True, upstream_too: bool = True,
                     server_ubatches: Sequence[int] = ()) -> list[Variant]:
    """Each engine at its defaults, off and (``draft``) with the d2t sidecar; ours at the other ``batches`` too
    (drafting off); llama-server at the other ``server_ubatches`` (``-b 2048``, drafting off)."""
    variants = [ours()] + ([ours(draft=True)] if draft else [])
    if upstream_too:
        variants += [upstream()] + ([upstream(draft=True)] if draft else [])
        variants += [upstream(n_ubatch=n) for n in server_ubatches if n != SERVER_N_UBATCH]
    variants += [ours(n) for n in batches if n != OURS_N_BATCH]
    return list(dict.fromkeys(variants))


@dataclass
class Sample:
    """One prompt through one variant: its prompt time; ours also the split of it."""

    seconds: float
    target_native: float | None = None  # ours: the target's llama_decode calls, synchronized
    draft_native: float | None = None  # ours: the draft context's, likewise
    # the engine process's CPU time over the prompt (all its threads; None where the system does not say): on a
    # machine shared with other jobs, the prompt time without the waits for a core
    cpu_seconds: float | None = None

    @property
    def host(self) -> float | None:
        """Ours: prompt time outside llama.cpp (batch fills, hidden-row copies, the bookkeeping)."""
        if self.target_native is None:
            return None
        return self.seconds - self.target_native - (self.draft_native or 0.0)


@dataclass
class Row:
    variant: Variant
    length: int
    samples: list[Sample] = field(default_factory=list)  # one per run, in run order

    @property
    def tps_runs(self) -> list[float]:
        return [self.length / s.seconds for s in self.samples if s.seconds > 0]

    @property
    def tps(self) -> float:
        """Prompt tok/s, the median over runs."""
        runs = self.tps_runs
        return statistics.median(runs) if runs else 0.0

    @property
    def cpu_tps_runs(self) -> list[float]:
        return [self.length / s.cpu_seconds for s in self.samples if s.cpu_seconds]

    @property
    def cpu_tps(self) -> float | None:
        """Prompt tokens per second of the engine's CPU time, the median over runs (None: not measured)."""
        runs = self.cpu_tps_runs
        return statistics.median(runs) if runs else None

    def median_ms(self, part: Callable[[Sample], float | None]) -> float | None:
        values = [v for v in map(part, self.samples) if v is not None]
        return round(statistics.median(values) * 1000.0, 1) if values else None


@dataclass
class PromptResult:
    rows: list[Row]
    runs: int
    threads: int
    n_ctx: int
    model: str
    device: str
    load_average: tuple[float, float] = (0.0, 0.0)  # at the start and at the end

    @property
    def lengths(self) -> list[int]:
        return sorted({r.length for r in self.rows})

    def row(self, variant: Variant, length: int) -> Row | None:
        return next((r for r in self.rows if r.variant == variant and r.length == length), None)

    def upstream_peer(self, row: Row) -> Row | None:
        """What an ours row is set against: llama-server at its defaults, drafting the same way, same prompt."""
        if row.variant.engine != "ours":
            return None
        return self.row(upstream(row.variant.draft), row.length)

    def vs_upstream(self, row: Row) -> float | None:
        """The ratio of the median prompt tok/s, ours / llama-server."""
        peer = self.upstream_peer(row)
        return ratio(row.tps, peer.tps) if peer is not None else None

    def vs_upstream_cpu(self, row: Row) -> float | None:
        """The same ratio in tokens per CPU second (on a shared machine: without the waits for a core)."""
        peer = self.upstream_peer(row)
        if peer is None or row.cpu_tps is None or peer.cpu_tps is None:
            return None
        return ratio(row.cpu_tps, peer.cpu_tps)

    def vs_upstream_runs(self, row: Row) -> list[float]:
        """The ratio in each run (both measured in that run, side by side)."""
        peer = self.upstream_peer(row)
        if peer is None:
            return []
        return [r for r in (ratio(row.length / a.seconds, peer.length / b.seconds) if a.seconds > 0 and b.seconds > 0
                            else None for a, b in zip(row.samples, peer.samples, strict=False)) if r is not None]

    def vs_default(self, row: Row) -> float | None:
        """Ours at another n_batch: its speed over ours at the default n_batch (drafting the same way)."""
        if row.variant.engine != "ours" or row.variant.is_default:
            return None
        base = self.row(ours(draft=row.variant.draft), row.length)
        return ratio(row.tps, base.tps) if base is not None else None

    def draft_cost(self, row: Row, cpu: bool = False) -> float | None:
        """A d2t row: how much longer the prompt takes than drafting off at the same batch sizes (0.12 = 12%), from
        the median prompt tok/s (``cpu``: per CPU second)."""
        if not row.variant.draft:
            return None
        off = self.row(Variant(row.variant.engine, False, row.variant.n_batch, row.variant.n_ubatch), row.length)
        if off is None:
            return None
        slow, fast = (row.cpu_tps, off.cpu_tps) if cpu else (row.tps, off.tps)
        return fast / slow - 1.0 if slow and fast else None

    def best_n_batch(self, length: int, cpu: bool = False) -> int | None:
        """Our fastest n_batch (drafting off) at this prompt length, by median prompt tok/s (``cpu``: per CPU
        second)."""
        rows = [r for r in self.rows if r.length == length and r.variant.engine == "ours" and not r.variant.draft
                and (r.cpu_tps is not None or not cpu)]
        best = max(rows, key=lambda r: (r.cpu_tps or 0.0) if cpu else r.tps, default=None)
        return best.variant.n_batch if best is not None else None

    def target_met(self, length: int) -> bool | None:
        """Ours at its defaults, drafting off, at least ``TARGET_RATIO`` x llama-server at its defaults."""
        row = self.row(ours(), length)
        value = self.vs_upstream(row) if row is not None else None
        return None if value is None else value >= TARGET_RATIO

    def summary(self, row: Row) -> dict[str, Any]:
        v = row.variant
        return {
            "variant": v.label, "engine": v.engine, "draft": "d2t" if v.draft else None, "n_batch": v.n_batch,
            "n_ubatch": v.n_ubatch, "prompt_tokens": row.length, "prompt_tps_median": round(row.tps, 1),
            "prompt_tps_runs": [round(t, 1) for t in row.tps_runs],
            **spread([s.seconds * 1000.0 for s in row.samples], "ms", 1),
            "vs_upstream": round_or_none(self.vs_upstream(row), 3),
            "vs_upstream_runs": [round(r, 3) for r in self.vs_upstream_runs(row)],
            "prompt_tps_cpu_median": round_or_none(row.cpu_tps, 1),
            "prompt_tps_cpu_runs": [round(t, 1) for t in row.cpu_tps_runs],
            "vs_upstream_cpu": round_or_none(self.vs_upstream_cpu(row), 3),
            "vs_default_n_batch": round_or_none(self.vs_default(row), 3),
            "draft_cost": round_or_none(self.draft_cost(row), 3),
            "draft_cost_cpu": round_or_none(self.draft_cost(row, cpu=True), 3),
            "target_native_ms": row.median_ms(lambda s: s.target_native),
            "draft_native_ms": row.median_ms(lambda s: s.draft_native),
            "host_ms": row.median_ms(lambda s: s.host),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "device": self.device, "runs": self.runs, "threads": self.threads,
            "n_ctx": self.n_ctx, "prompt_lengths": self.lengths, "load_average": list(self.load_average),
            "target_ratio": TARGET_RATIO,
            "rows": [self.summary(r) for r in self.rows],
            "best_n_batch": {str(n): self.best_n_batch(n) for n in self.lengths},
            "best_n_batch_cpu": {str(n): self.best_n_batch(n, cpu=True) for n in self.lengths},
            "target_met": {str(n): self.target_met(n) for n in self.lengths},
        }

    def markdown(self) -> str:
        lines = [f"Prompt processing from an empty context ({self.model}; {self.runs} interleaved runs, "
                 f"{self.threads} thread{'s' if self.threads != 1 else ''} for both engines, context {self.n_ctx}; "
                 f"load average {self.load_average[0]:.2f} -> {self.load_average[1]:.2f})", "",
                 "| prompt | variant | prompt tok/s (median) | ms (median, min-max) | vs llama-server | ratio in each "
                 f"run | tok/s per CPU second | vs llama-server, CPU | vs n_batch {OURS_N_BATCH} | d2t cost | "
                 "ours: target / draft / host ms |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for length in self.lengths:
            for row in sorted((r for r in self.rows if r.length == length), key=_row_order):
                d = self.summary(row)
                split = ("–" if d["target_native_ms"] is None else
                         f"{d['target_native_ms']:.0f} / {d['draft_native_ms'] or 0:.0f} / {d['host_ms']:.0f}")
                lines.append(
                    f"| {length} | {d['variant']} | {d['prompt_tps_median']:.1f} | {d['median_ms']:.0f} "
                    f"({d['min_ms']:.0f}-{d['max_ms']:.0f}) | {_x(d['vs_upstream'], bold=row.variant == ours())} | "
                    f"{', '.join(f'{r:.3f}' for r in d['vs_upstream_runs']) or '–'} | "
                    f"{_number(d['prompt_tps_cpu_median'])} | {_x(d['vs_upstream_cpu'])} | "
                    f"{_x(d['vs_default_n_batch'])} | {_percent(d['draft_cost'], d['draft_cost_cpu'])} | {split} |")
        lines.append("")
        for length in self.lengths:
            default = self.row(ours(), length)
            value = self.vs_upstream(default) if default is not None else None
            cpu = self.vs_upstream_cpu(default) if default is not None else None
            verdict = ("not measured" if value is None else
                       f"{value:.3f}x, {'meets' if value >= TARGET_RATIO else 'below'} the {TARGET_RATIO}x target"
                       + ("" if cpu is None else f" ({cpu:.3f}x per CPU second)"))
            lines.append(f"- {length} tokens: ours (n_batch {OURS_N_BATCH}, off) / llama-server (-b {SERVER_N_BATCH} "
                         f"-ub {SERVER_N_UBATCH}, off) = {verdict}; our fastest n_batch here: "
                         f"{self.best_n_batch(length)}"
                         + ("" if cpu is None else f" ({self.best_n_batch(length, cpu=True)} per CPU second)"))
        return "\n".join(lines)


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 and a > 0 else None


def _x(value: float | None, bold: bool = False) -> str:
    if value is None:
        return "–"
    return f"**{value:.3f}x**" if bold else f"{value:.3f}x"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _percent(value: float | None, cpu: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:+.1%}" + ("" if cpu is None else f" ({cpu:+.1%} CPU)")


def _row_order(row: Row) -> tuple[int, int, int, int]:
    v = row.variant
    return (0 if v.is_default else 1, int(v.draft), 0 if v.engine == "ours" else 1, v.n_batch * 10_000 + v.n_ubatch)


def make_prompt(length: int, n_vocab: int, seed: int = 0) -> list[int]:
    """``length`` token ids, the same for both engines and every run (a dense model's prompt cost does not depend
    on which tokens they are); drawn from ordinary text ids, away from the special tokens at the vocabulary's end."""
    rng = np.random.default_rng(seed + length)
    high = max(2, min(n_vocab - 1024, 150_000))
    return [int(t) for t in rng.integers(min(1000, high - 1), high, length)]


# ---------------------------------------------------------------------------------------------- running


def process_cpu_seconds(pid: int | None) -> float | None:
    """A process's CPU time so far, all its threads (user + system, ``/proc/<pid>/stat``, in clock ticks of
    usually 10 ms); None where there is no such file."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _Ours:
    def __init__(self, variant: Variant, target: Path, d2t: Path, n_ctx: int, threads: int) -> None:
        from app.engine.speculative import SpeculativeDecoder

        self.variant = variant
        self.decoder = SpeculativeDecoder(EngineConfig(
            target, mode="sidecar" if variant.draft else "off", draft=d2t if variant.draft else None, n_ctx=n_ctx,
            n_batch=variant.n_batch, n_threads=threads))

    @property
    def n_vocab(self) -> int:
        return int(self.decoder.target.n_vocab)

    def measure(self, prompt: list[int]) -> Sample:
        decoder = self.decoder
        decoder.reset()  # an empty context, as llama-server's cache_prompt=false
        target0 = decoder.tctx.native_seconds
        draft0 = decoder.dctx.native_seconds if decoder.dctx is not None else 0.0
        cpu0 = time.process_time()
        stats = decoder.generate(prompt, 1).stats
        cpu = time.process_time() - cpu0
        if stats.prompt_tokens != len(prompt):
            raise RuntimeError(f"{self.variant.label} evaluated {stats.prompt_tokens} of {len(prompt)} prompt tokens")
        # max_tokens=1: no pass after the prefill's (the first token comes from its last row)
        return Sample(stats.prompt_seconds, decoder.tctx.native_seconds - target0,
                      (decoder.dctx.native_seconds - draft0) if decoder.dctx is not None else None, cpu)

    def close(self) -> None:
        self.decoder.close()


class _Upstream:
    def __init__(self, variant: Variant, binary: Path, target: Path, d2t: Path, n_ctx: int, threads: int) -> None:
        from app.machines.upstream_server import UpstreamServer

        self.variant = variant
        self.server = UpstreamServer(binary, target, draft=d2t if variant.draft else None, threads=threads,
                                     ctx_size=n_ctx,
                                     extra_args=["-b", str(variant.n_batch), "-ub", str(variant.n_ubatch)])
        self.server.start()

    def measure(self, prompt: list[int]) -> Sample:
        pid = self.server.proc.pid if self.server.proc is not None else None
        cpu0 = process_cpu_seconds(pid)
        done = self.server.complete(prompt, 1)
        cpu1 = process_cpu_seconds(pid)
        evaluated = int(done.timings.get("prompt_n", -1))
        if evaluated != len(prompt):
            raise RuntimeError(f"{self.variant.label} evaluated {evaluated} of {len(prompt)} prompt tokens")
        return Sample(float(done.timings["prompt_ms"]) / 1000.0,
                      cpu_seconds=cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None)

    def close(self) -> None:
        self.server.stop()


def run(target: Path, d2t: Path, *, variants: Sequence[Variant], lengths: Sequence[int] = LENGTHS, runs: int = 3,
        n_threads: int | None = None, server_binary: Path | None = None, log: Log = lambda _m: None) -> PromptResult:
    """Every variant over every prompt length, ``runs`` times, interleaved; one warm-up prompt each first."""
    from app.native.handles import default_threads

    if any(v.engine == "upstream" for v in variants) and server_binary is None:
        raise ValueError("llama-server variants need the llama-server binary")
    threads = n_threads or default_threads()
    n_ctx = max(defaults.CONTEXT_SIZE, max(lengths) + 64)  # the app's context, or room for the longest prompt
    load_start = os.getloadavg()[0]
    engines: list[_Ours | _Upstream] = []
    rows = {(v, n): Row(v, n) for v in variants for n in lengths}
    try:
        for variant in variants:
            started = time.perf_counter()
            if variant.engine == "ours":
                engines.append(_Ours(variant, target, d2t, n_ctx, threads))
            else:
                assert server_binary is not None
                engines.append(_Upstream(variant, server_binary, target, d2t, n_ctx, threads))
            log(f"loaded {variant.label} ({time.perf_counter() - started:.1f} s)")
        n_vocab = next((e.n_vocab for e in engines if isinstance(e, _Ours)), None) or _n_vocab(target)
        prompts = {n: make_prompt(n, n_vocab) for n in lengths}
        for engine in engines:  # warm-up: first-pass allocations, the page cache, llama-server's first request
            engine.measure(prompts[min(lengths)])
        turn = 0
        for run_index in range(runs):
            for length in lengths:
                for offset in range(len(engines)):
                    engine = engines[(turn + offset) % len(engines)]
                    sample = engine.measure(prompts[length])
                    rows[(engine.variant, length)].samples.append(sample)
                    log(f"run {run_index + 1}/{runs}, {length} tokens, {engine.variant.label}: "
                        f"{length / sample.seconds:.1f} tok/s ({sample.seconds * 1000:.0f} ms)")
                turn += 1
    finally:
        for engine in engines:
            engine.close()
    return PromptResult(list(rows.values()), runs, threads, n_ctx, target.name, device_description(),
                        (load_start, os.getloadavg()[0]))


def _n_vocab(target: Path) -> int:
    from app.gguftools.inspect import inspect_gguf

    vocab = inspect_gguf(target).vocab_size
    if not vocab:
        raise ValueError(f"{target.name} has no vocabulary")
    return vocab
