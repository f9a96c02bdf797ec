"""``bench threads``: one-token passes at one thread, at all of them, and at the count each context measures.

llama.cpp runs a one-token pass with ``n_threads`` and a bigger batch with ``n_threads_batch``; the engine keeps every
batch at the decode threads and lets each context (target, draft head) measure which count its one-token passes run
faster with (``engine.one_token_threads``). This bench decodes the same prompts with that count pinned to one thread,
pinned to all of them (llama.cpp's default, and ours before) and measured, for plain decoding and for d2t drafting,
interleaved prompt by prompt (the order rotating) in fresh engines each run, so the machine's drifts fall on every
variant alike. It reports decode tokens per second (medians over the runs), each variant against the all-threads
one, and what the measuring variant chose.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from app.bench.report import round_or_none
from app.engine.config import EngineConfig, Mode
from app.engine.speculative import SpeculativeDecoder
from app.engine.stats import pooled_decode_tps

WARM_UP_TOKENS = 8  # a short reply per engine before the timed ones: first-pass allocations


@dataclass(frozen=True)
class Variant:
    mode: Mode  # "off" or "sidecar" (d2t)
    pinned: int | None  # one-token threads: a count, or None to measure

    def label(self, threads: int) -> str:
        drafting = "plain decoding" if self.mode == "off" else "d2t sidecar"
        if self.pinned is None:
            return f"{drafting}, measured"
        return f"{drafting}, {self.pinned} thread" + ("s" if self.pinned > 1 else "") + \
            (" (all)" if self.pinned == threads else "")


@dataclass
class VariantResult:
    variant: Variant
    label: str
    tps: list[float] = field(default_factory=list)  # decode tokens per second (``pooled_decode_tps``), per run
    chosen: list[tuple[int | None, int | None]] = field(default_factory=list)  # (target, draft) counts, per run

    @property
    def median(self) -> float:
        return statistics.median(self.tps) if self.tps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "mode": self.variant.mode, "pinned": self.variant.pinned,
                "tps_median": round(self.median, 2), "tps_runs": [round(t, 2) for t in self.tps],
                "chosen": [list(c) for c in self.chosen]}


@dataclass
class ThreadsBench:
    model: str
    threads: int
    tokens: int
    runs: int
    prompts: int
    load_average: float
    results: list[VariantResult]

    def against_all(self, result: VariantResult) -> float | None:
        """A variant's median against the same mode's all-threads one."""
        base = next((r for r in self.results if r.variant == Variant(result.variant.mode, self.threads)), None)
        return result.median / base.median if base is not None and base.median > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "threads": self.threads, "tokens": self.tokens, "runs": self.runs,
                "prompts": self.prompts, "load_average": self.load_average,
                "results": [dict(r.to_dict(), vs_all_threads=round_or_none(self.against_all(r), 4))
                            for r in self.results]}

    def markdown(self) -> str:
        lines = [f"One-token passes' threads ({self.model}; {self.threads} decode threads; {self.prompts} prompts x "
                 f"{self.tokens} tokens, {self.runs} runs; load average {self.load_average:.2f})", "",
                 "| variant | tok/s (median) | runs | vs all threads | chosen (target / draft) |",
                 "|---|---|---|---|---|"]
        for r in self.results:
            ratio = self.against_all(r)
            chosen = ", ".join(f"{t or '-'} / {d or '-'}" for t, d in r.chosen) if r.variant.pinned is None else ""
            runs = ", ".join(f"{t:.1f}" for t in r.tps)
            lines.append(f"| {r.label} | {r.median:.1f} | {runs} | "
                         f"{f'{ratio:.3f}x' if ratio is not None else '-'} | {chosen} |")
        return "\n".join(lines)


def variants(threads: int, modes: list[Mode]) -> list[Variant]:
    """One thread, all of them (when that is more than one) and measured, for each mode."""
    pins: list[int | None] = [1, threads, None] if threads > 1 else [1]
    return [Variant(mode, pin) for mode in modes for pin in pins]


def run(config: EngineConfig, name: str, threads: int, modes: list[Mode], prompts: list[list[int]],
        tokens: int = 64, runs: int = 3) -> ThreadsBench:
    """Decode every prompt with every variant, ``runs`` times, each run in fresh engines (``config`` gives the
    model files, the draft depth and the context; its mode and one-token threads are set per variant)."""
    chosen_variants = variants(threads, modes)
    results = [VariantResult(v, v.label(threads)) for v in chosen_variants]
    for run_index in range(runs):
        decoders = [SpeculativeDecoder(replace(config, mode=v.mode, draft=config.draft if v.mode != "off" else None,
                                               n_threads=threads, one_token_threads=v.pinned, adaptive=False))
                    for v in chosen_variants]
        try:
            replies: list[list[tuple[int, float]]] = [[] for _ in decoders]  # (tokens, decode span) per reply
            for decoder in decoders:
                decoder.generate(prompts[0], WARM_UP_TOKENS)  # greedy, as every reply here
            for index, prompt in enumerate(prompts):
                shift = (run_index + index) % len(decoders)
                for slot in [*range(shift, len(decoders)), *range(shift)]:
                    decoder = decoders[slot]
                    decoder.reset()
                    stats = decoder.generate(prompt, tokens).stats
                    replies[slot].append((stats.generated, stats.decode_span_seconds))
            for slot, result in enumerate(results):
                result.tps.append(pooled_decode_tps(replies[slot]))
                result.chosen.append(decoders[slot].one_token_threads)
        finally:
            for decoder in decoders:
                decoder.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return ThreadsBench(name, threads, tokens, runs, len(prompts), round(load, 2), results)
