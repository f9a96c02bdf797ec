"""``bench draft-head``: one MTP draft step with the full LM head vs the d2t head, side by side.

The step is what the drafting loop does per draft token: decode one token in the MTP context (with
its hidden row), read the full-vocabulary logits and take the argmax. The head matmul alone is timed
inside the same step with llama.cpp's eval callback: from the end of the node before the LM head
(``mtp_shared_head_norm``) to the end of the head itself (``result_output``). Variants are interleaved
run by run so machine noise hits both alike.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.report import device_description, median_ms
from app.native.draft_probe import draft_inputs
from app.native.handles import Context, Model, NodeTimer

PROMPT_TOKENS = 32
HEAD_INPUT, HEAD_OUTPUT = "mtp_shared_head_norm", "result_output"


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
        lines = ["| variant | head rows | whole draft step, median (ms) | head matmul, median (ms) |",
                 "|---|---|---|---|"]
        for name, v in self.variants.items():
            lines.append(f"| {name} | {v['head_rows']} | {v['step_ms']:.3f} | {v['head_ms']:.3f} |")
        lines.append(f"| **full / d2t** | | **{self.ratio('step_ms')}x** | **{self.ratio('head_ms')}x** |")
        return "\n".join(lines)


def run(target_path: Path, sidecars: dict[str, Path], runs: int = 50, warmup: int = 5,
        n_threads: int | None = None, n_gpu_layers: int = 0) -> DraftHeadResult:
    """Time the draft step and its head for each sidecar (keys: full, d2t) against one target context."""
    steps: dict[str, list[float]] = {name: [] for name in sidecars}
    heads: dict[str, list[float]] = {name: [] for name in sidecars}
    with Model(target_path, n_gpu_layers=n_gpu_layers) as target, \
            Context(target, n_ctx=256, n_batch=PROMPT_TOKENS, n_threads=n_threads, nextn_outputs=True) as tctx:
        prompt = [int(t) for t in np.arange(1000, 1000 + PROMPT_TOKENS)]
        tctx.decode(prompt, 0, logits="all")
        hidden, shifted = draft_inputs(tctx, PROMPT_TOKENS)
        models = {name: Model(path, load_mtp=True, n_gpu_layers=n_gpu_layers) for name, path in sidecars.items()}
        timers = {name: NodeTimer(target.lib, {HEAD_INPUT, HEAD_OUTPUT}) for name in sidecars}
        contexts = {name: Context(m, n_ctx=256, n_batch=PROMPT_TOKENS, n_threads=n_threads, draft_for=tctx,
                                  timer=timers[name]) for name, m in models.items()}
        try:
            for ctx in contexts.values():
                ctx.decode(prompt, 0, hidden=shifted, logits="last")  # the catch-up a real loop does first
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
                        steps[name].append(elapsed)
                        heads[name].append(timers[name].between(HEAD_INPUT, HEAD_OUTPUT))
        finally:
            for ctx in contexts.values():
                ctx.close()
            for m in models.values():
                m.close()
    variants = {name: {"step_ms": median_ms(steps[name]), "head_ms": median_ms(heads[name]),
                       "step_ms_stdev": round(statistics.pstdev(steps[name]) * 1000.0, 3),
                       "head_rows": m.n_vocab if name == "full" else _head_rows(sidecars[name]),
                       "file": str(sidecars[name])} for name, m in models.items()}
    return DraftHeadResult(variants, runs, device_description())


def _head_rows(path: Path) -> int:
    from app.gguftools.inspect import inspect_gguf

    shape = inspect_gguf(path).output_shape
    return int(shape[1]) if shape else 0
