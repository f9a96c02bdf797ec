"""``bench sampler``: the host time of one target pick, per emitted token, over the model's whole vocabulary.

On a GPU a verified token costs 4-5 ms, so every millisecond the host spends choosing it is a fifth of
the speed. This times the pick itself, nothing else: one batched pass leaves ``rows`` logit rows in the
context, and each sample is one native chain picking every row in order (as the verify loop does), at
the chat's default sampling, with a repetition penalty, and greedy, interleaved run by run.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.bench.report import spread
from app.engine.config import CHAT_SAMPLING, EngineConfig, SamplingParams
from app.engine.sampling import Sampler
from app.native.handles import Context, Model

GREEDY = SamplingParams()


@dataclass
class SamplerTiming:
    label: str
    sampling: str
    params: SamplingParams
    per_token_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.per_token_ms) if self.per_token_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "sampling": self.sampling, **spread(self.per_token_ms, "ms", 4),
                "samples": len(self.per_token_ms)}


@dataclass
class DecodeTiming:
    """Plain decoding at the chat's sampling, the picks made on the host or inside the graph."""

    where: str
    tps: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, **spread(self.tps, "tps", 2), "samples": len(self.tps)}


@dataclass
class SamplerBench:
    model: str
    n_vocab: int
    rows: int
    runs: int
    load_average: float
    timings: list[SamplerTiming]
    gpu_layers: int = 0
    decode: list[DecodeTiming] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "n_vocab": self.n_vocab, "rows": self.rows, "runs": self.runs,
                "gpu_layers": self.gpu_layers, "load_average": self.load_average,
                "timings": [t.to_dict() for t in self.timings], "decode": [d.to_dict() for d in self.decode]}

    def markdown(self) -> str:
        lines = [f"Host time per emitted token over {self.n_vocab:,} logits ({self.model}; {self.runs} runs of "
                 f"{self.rows} rows, interleaved; load average {self.load_average:.2f})", "",
                 "| pick | sampling | median ms/token | min | max |", "|---|---|---|---|---|"]
        for t in self.timings:
            d = t.to_dict()
            lines.append(f"| {t.label} | {t.sampling} | {d['median_ms']:.3f} | {d['min_ms']:.3f} | {d['max_ms']:.3f} |")
        if self.decode:
            lines += ["", "Plain decoding at the chat's default sampling (decode tok/s, interleaved):", "",
                      "| picks made | median tok/s | min | max |", "|---|---|---|---|"]
            for timing in self.decode:
                e = timing.to_dict()
                lines.append(f"| {timing.where} | {e['median_tps']:.1f} | {e['min_tps']:.1f} | {e['max_tps']:.1f} |")
        return "\n".join(lines)


def run(target: Path, *, runs: int = 15, rows: int = 16, n_threads: int | None = None, gpu_layers: int = 0,
        decode_tokens: int = 0) -> SamplerBench:
    """Time the native chain at the chat's sampling, with a penalty and greedy on ``rows`` real logit rows of
    ``target`` (one batched pass), ``runs`` rounds each, interleaved; with ``decode_tokens``, also plain decoding
    with the picks on the host against inside the graph (what a GPU uses)."""
    bench = _host_picks(target, runs, rows, n_threads, gpu_layers)
    if decode_tokens > 0:
        bench.decode = _decode(target, max(3, runs // 3), decode_tokens, n_threads, gpu_layers)
    return bench


def _decode(target: Path, runs: int, tokens: int, n_threads: int | None, gpu_layers: int) -> list[DecodeTiming]:
    from app.engine.speculative import SpeculativeDecoder
    from app.engine.stats import decode_tps

    timings = {False: DecodeTiming("on the host"), True: DecodeTiming("inside the graph (backend sampling)")}
    decoders = {on: SpeculativeDecoder(EngineConfig(target, n_ctx=max(256, tokens + 64), n_threads=n_threads,
                                                    n_gpu_layers=gpu_layers, backend_sampling=on))
                for on in timings}
    try:
        prompt = decoders[False].target.tokenize("FastMTP drafts several tokens and the target checks them.")
        for run_index in range(runs + 1):  # the first round warms both up and is not counted
            for on, decoder in decoders.items():
                stats = decoder.generate(prompt, tokens, Sampler(CHAT_SAMPLING)).stats
                if run_index and stats.first_token_at is not None and stats.last_token_at is not None:
                    timings[on].tps.append(decode_tps(stats.generated, stats.last_token_at - stats.first_token_at))
    finally:
        for decoder in decoders.values():
            decoder.close()
    return list(timings.values())


def _host_picks(target: Path, runs: int, rows: int, n_threads: int | None, gpu_layers: int) -> SamplerBench:
    with Model(target, n_gpu_layers=gpu_layers) as model, Context(model, n_ctx=max(64, rows + 8),
                                                                   n_batch=max(32, rows), n_threads=n_threads) as ctx:
        tokens = model.tokenize("FastMTP drafts several tokens and the target checks them in one pass.")
        batch = (tokens * rows)[:rows]
        ctx.decode(batch, 0, logits="all")
        c = CHAT_SAMPLING
        chat_label = f"temperature {c.temperature:g}, top-k {c.top_k}, top-p {c.top_p:g}, min-p {c.min_p:g}"
        penalised = replace(CHAT_SAMPLING, repeat_penalty=1.1)
        timings = [SamplerTiming("chat default", chat_label, CHAT_SAMPLING),
                   SamplerTiming("chat default + repeat penalty", f"{chat_label}, repeat penalty 1.1 over 64",
                                 penalised),
                   SamplerTiming("greedy", "temperature 0 (argmax in place)", GREEDY)]

        def one_run(timing: SamplerTiming) -> None:
            with Sampler(timing.params).chain(model.n_vocab) as chain:
                chain.remember(batch)
                started = time.perf_counter()
                for i in range(rows):
                    chain.sample(ctx, i)
                timing.per_token_ms.append((time.perf_counter() - started) * 1000 / rows)

        for timing in timings:  # warm-up: first touches of the rows and the chains' buffers
            one_run(timing)
            timing.per_token_ms.clear()
        for _ in range(runs):
            for timing in timings:
                one_run(timing)
        return SamplerBench(model=target.name, n_vocab=model.n_vocab, rows=rows, runs=runs,
                            load_average=os.getloadavg()[0], timings=timings, gpu_layers=gpu_layers)
