"""A measurement, not a test: how a verify pass's cost grows with its tokens at 1 and at 2 decode threads.

The engine re-picks its thread count from the idle cores at each reply when none is set; adaptive depth's estimates
assume the cost's shape across batch sizes stays put. The default demo's target, one context per thread count,
passes of 1-4 tokens rolled back after each; decoding-thread CPU time and wall time side by side (the calling thread
spins while ggml's workers run, so the two agree). docs/benchmarks.md quotes the result.

    PYTHONPATH=. .venv/bin/python -m tests.helpers.thread_cost_shape [PASSES]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from app.gguftools.builtin_demo import ensure_demo_model
from app.native.handles import Context, Model
from tests.helpers.demo_copies import master_folder


def shape(passes: int) -> dict[int, dict[int, tuple[float, float]]]:
    """Per thread count, per batch size: median (thread-time ms, wall ms) after 5 warm-up passes."""
    demo = ensure_demo_model(master_folder())
    prompt = [int(t) for t in 1000 + np.arange(256) % 3000]
    found: dict[int, dict[int, tuple[float, float]]] = {}
    with Model(demo.target) as model:
        for threads in (1, 2):
            context = Context(model, n_ctx=2048, n_batch=512, n_threads=threads, n_rs_seq=8, nextn_outputs=True)
            try:
                context.decode(prompt, 0, logits="last")
                position = len(prompt)
                found[threads] = {}
                for batch in (1, 2, 3, 4):
                    tokens = [int(t) for t in 1000 + np.arange(batch)]
                    cpu, wall = [], []
                    for _ in range(passes):
                        c0, w0 = time.thread_time(), time.perf_counter()
                        context.decode(tokens, position, logits="all")
                        cpu.append(time.thread_time() - c0)
                        wall.append(time.perf_counter() - w0)
                        if batch > 1 and not context.truncate(position + 1):
                            raise RuntimeError("the rollback failed")
                        position += 1
                    found[threads][batch] = (statistics.median(cpu[5:]) * 1000, statistics.median(wall[5:]) * 1000)
            finally:
                context.close()
    return found


def main() -> None:
    for threads, by_batch in shape(int(sys.argv[1]) if len(sys.argv) > 1 else 40).items():
        base = by_batch[2][0]
        print(f"{threads} thread(s): " + ", ".join(f"{b} tok {cpu:.1f} ms cpu / {wall:.1f} ms wall ({cpu / base:.3f}x "
                                                   f"of 2 tok)" for b, (cpu, wall) in by_batch.items()))


if __name__ == "__main__":
    main()
