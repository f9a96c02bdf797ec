"""The first pass of each verify-sized batch against the steady ones, on a bare target context: what a new shape of
pass costs (its graph, its buffers) with and without the patch's graph pool.

``python -m tests.helpers.first_pass_cost [--size scaled] [--threads 1]`` decodes a prompt, then passes of 3 tokens
with visits of 5, 2, 4, 6, 7 and 1 tokens among them, and prints each size's first, steady and switched-to passes in
ms. Set ``LLAMA_GRAPH_POOL=0`` for llama.cpp's one graph. A study, not a test: tests/integration/native/
test_graph_pool.py holds the behaviour (each size's graph built once, its first pass finding its memory ready).
"""

from __future__ import annotations

import argparse
import sys
import time

from app.gguftools.demo_model import Size

PATTERN = ([3] * 20 + [5] * 3 + [3] * 5 + [2] * 3 + [3] * 5 + [4] * 3 + [3] * 5 + [6] * 3 + [3] * 5 + [7] * 3
           + [3] * 5 + [1] * 3 + [3] * 5 + [5] * 3 + [3] * 5 + [4] * 3)


def measure(size: Size = "scaled", threads: int = 1) -> dict[tuple[int, str], list[float]]:
    """Each (batch size, "first" / "same" / "switch") pass's times in ms."""
    from app.cli.bench import bench_demo
    from app.native.handles import Context, Model

    demo = bench_demo(size, 0.8)
    with Model(demo.target, load_mtp=True) as model, Context(model, n_ctx=4096, n_threads=threads) as ctx:
        tokens = model.tokenize("The quick brown fox jumps over the lazy dog. " * 20)
        ctx.decode(tokens[:100], 0, logits="all")
        position, seen, previous = 100, set(), 0
        times: dict[tuple[int, str], list[float]] = {}
        for batch in PATTERN:
            started = time.perf_counter()
            ctx.decode(tokens[100:100 + batch], position, logits="all")
            elapsed = (time.perf_counter() - started) * 1e3
            position += batch
            kind = "first" if batch not in seen else ("switch" if batch != previous else "same")
            seen.add(batch)
            previous = batch
            times.setdefault((batch, kind), []).append(elapsed)
    return times


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.first_pass_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="scaled")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    for (batch, kind), values in sorted(measure(args.size, args.threads).items()):
        print(f"{batch:2d} tokens {kind:6s} x{len(values):2d}: " + " ".join(f"{v:.2f}" for v in values[:6]))


if __name__ == "__main__":
    main(sys.argv[1:])
