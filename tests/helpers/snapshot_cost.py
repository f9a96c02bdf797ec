"""A/B, not a test: does a context's ``n_rs_seq`` (recurrent snapshots kept for rollback) change a pass's cost?

Adaptive depth's contexts keep as many snapshots as its deepest depth (8) where a fixed depth k keeps k. Two contexts
on one model (the default demo's target), the same tokens, interleaved pass by pass and rolled back after each;
decoding-thread CPU time, so a busy machine inflates both sides alike. docs/benchmarks.md quotes the result.

    PYTHONPATH=. .venv/bin/python -m tests.helpers.snapshot_cost [BATCH] [PASSES]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from app.gguftools.builtin_demo import ensure_demo_model
from app.native.handles import Context, Model
from tests.helpers.demo_copies import master_folder


def compare(batch: int, passes: int) -> dict[str, float]:
    """Median milliseconds of a ``batch``-token pass with the fewest snapshots it needs and with 8."""
    kept = {f"n_rs_seq={r}": r for r in ((0, 8) if batch == 1 else (batch - 1, 8))}
    demo = ensure_demo_model(master_folder())
    prompt = [int(t) for t in 1000 + np.arange(256) % 3000]
    tokens = [int(t) for t in 1000 + np.arange(batch)]
    with Model(demo.target) as model:
        contexts = {name: Context(model, n_ctx=2048, n_batch=512, n_threads=1, n_rs_seq=r, nextn_outputs=True)
                    for name, r in kept.items()}
        try:
            for context in contexts.values():
                context.decode(prompt, 0, logits="last")
            times: dict[str, list[float]] = {name: [] for name in contexts}
            position = len(prompt)
            for i in range(passes):
                order = list(contexts.items())
                for name, context in order if i % 2 == 0 else order[::-1]:
                    started = time.thread_time()
                    context.decode(tokens, position, logits="all")
                    times[name].append(time.thread_time() - started)
                    if batch > 1 and not context.truncate(position + 1):  # keep one token, as a round does
                        raise RuntimeError("the rollback failed")
                position += 1
        finally:
            for context in contexts.values():
                context.close()
    return {name: statistics.median(t[10:]) * 1000 for name, t in times.items()}


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    found = compare(batch, passes)
    for name, ms in found.items():
        print(f"{batch}-token pass, {name}: median {ms:.3f} ms")
    few, many = found.values()
    print(f"ratio {many / few:.3f}")


if __name__ == "__main__":
    main()
