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

from app.engine.config import CHAT_SAMPLING, SamplingParams
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
        values = self.per_token_ms
        return {"label": self.label, "sampling": self.sampling, "median_ms": round(self.median_ms, 4),
                "min_ms": round(min(values), 4) if values else 0.0, "max_ms": round(max(values), 4) if values else 0.0,
                "samples": len(values)}


@dataclass
class SamplerBench:
    model: str
    n_vocab: int
    rows: int
    runs: int
    load_average: float
    timings: list[SamplerTiming]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "n_vocab": self.n_vocab, "rows": self.rows, "runs": self.runs,
                "load_average": self.load_average, "timings": [t.to_dict() for t in self.timings]}

    def markdown(self) -> str:
        lines = [f"Host time per emitted token over {self.n_vocab:,} logits ({self.model}; {self.runs} runs of "
                 f"{self.rows} rows, interleaved; load average {self.load_average:.2f})", "",
                 "| pick | sampling | median ms/token | min | max |", "|---|---|---|---|---|"]
        for t in self.timings:
            d = t.to_dict()
            lines.append(f"| {t.label} | {t.sampling} | {d['median_ms']:.3f} | {d['min_ms']:.3f} | {d['max_ms']:.3f} |")
        return "\n".join(lines)


def run(target: Path, *, runs: int = 15, rows: int = 16, n_threads: int | None = None) -> SamplerBench:
    """Time the native chain at the chat's sampling and greedy, and the numpy argmax floor, on ``rows`` real
    logit rows of ``target`` (one batched pass), ``runs`` rounds each, interleaved."""
    with Model(target) as model, Context(model, n_ctx=max(64, rows + 8), n_batch=max(32, rows),
                                         n_threads=n_threads) as ctx:
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
                            load_average=os.getloadavg()[0], timings=timings)
