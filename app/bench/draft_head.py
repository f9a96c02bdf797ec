"""``bench draft-head``: one MTP draft step with the full LM head vs the d2t head, side by side.

The step is what the drafting loop does per draft token: decode one token in the MTP context (with
its hidden row), read the full-vocabulary logits and take the argmax. Variants are interleaved run by
run so machine noise hits all of them alike. The head matmul alone is estimated as the step time
minus the step time of a *base* sidecar whose head has only a few hundred rows (same graph otherwise).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.report import device_description, median_ms
from app.native.handles import Context, Model

PROMPT_TOKENS = 32


@dataclass
class DraftHeadResult:
    variants: dict[str, dict[str, Any]]
    runs: int
    device: str

    def ratio(self, key: str) -> float:
        full, d2t = self.variants["full"][key], self.variants["d2t"][key]
        return round(full / d2t, 2) if d2t > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"variants": self.variants, "runs": self.runs, "device": self.device,
                "ratio_step": self.ratio("step_ms"), "ratio_head": self.ratio("head_ms")}

    def markdown(self) -> str:
        lines = ["| variant | head rows | step median (ms) | head matmul est. (ms) |", "|---|---|---|---|"]
        for name, v in self.variants.items():
            head = f"{v['head_ms']:.3f}" if name != "base" else "(baseline)"
            lines.append(f"| {name} | {v['head_rows']} | {v['step_ms']:.3f} | {head} |")
        lines.append(f"| **full / d2t** | | **{self.ratio('step_ms')}x** | **{self.ratio('head_ms')}x** |")
        return "\n".join(lines)


def run(target_path: Path, sidecars: dict[str, Path], runs: int = 50, warmup: int = 5,
        n_threads: int | None = None, n_gpu_layers: int = 0) -> DraftHeadResult:
    """Time the draft step for each sidecar (keys: full, d2t, base) against one target context."""
    samples: dict[str, list[float]] = {name: [] for name in sidecars}
    rows: dict[str, int] = {}
    with Model(target_path, n_gpu_layers=n_gpu_layers) as target, \
            Context(target, n_ctx=256, n_batch=PROMPT_TOKENS, n_threads=n_threads, nextn_outputs=True) as tctx:
        prompt = [int(t) for t in np.arange(1000, 1000 + PROMPT_TOKENS)]
        tctx.decode(prompt, 0, logits="all")
        hidden = np.stack([tctx.nextn_hidden(i) for i in range(PROMPT_TOKENS)])
        shifted = np.zeros_like(hidden)
        shifted[1:] = hidden[:-1]
        models = {name: Model(path, load_mtp=True, n_gpu_layers=n_gpu_layers) for name, path in sidecars.items()}
        contexts = {name: Context(m, n_ctx=256, n_batch=PROMPT_TOKENS, n_threads=n_threads, draft_for=tctx)
                    for name, m in models.items()}
        try:
            for name, ctx in contexts.items():
                ctx.decode(prompt, 0, hidden=shifted, logits="last")  # the catch-up a real loop does first
                rows[name] = _head_rows(path=sidecars[name])
            order = list(contexts)
            for r in range(warmup + runs):
                for name in order[r % len(order):] + order[: r % len(order)]:
                    ctx = contexts[name]
                    started = time.perf_counter()
                    ctx.decode([prompt[-1]], PROMPT_TOKENS, hidden=hidden[-1:], logits="last")
                    int(np.argmax(ctx.logits(0)))
                    elapsed = time.perf_counter() - started
                    ctx.truncate(PROMPT_TOKENS)
                    if r >= warmup:
                        samples[name].append(elapsed)
        finally:
            for ctx in contexts.values():
                ctx.close()
            for m in models.values():
                m.close()
    base = median_ms(samples["base"]) if "base" in samples else 0.0
    variants = {name: {"step_ms": median_ms(s), "head_ms": round(median_ms(s) - base, 3), "head_rows": rows[name],
                       "file": str(sidecars[name])} for name, s in samples.items()}
    return DraftHeadResult(variants, runs, device_description())


def _head_rows(path: Path) -> int:
    from app.gguftools.inspect import inspect_gguf

    shape = inspect_gguf(path).output_shape
    return int(shape[1]) if shape else 0
