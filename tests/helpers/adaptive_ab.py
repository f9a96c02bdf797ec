"""Two versions of adaptive depth, closed loop, side by side on the real engine: the A/B a change needs before it ships.

``python -m tests.helpers.adaptive_ab A.py B.py [--threads 2] [--tokens 128] [--runs 18] [--size scaled]
[NAME=VALUE ...]`` decodes ``bench spec``'s 8 prompts with two d2t decoders (adaptive, up to depth 8), one driven by
each version, prompt by prompt in turns (the first to go alternates), fresh decoders each run. Runs come in cycles of
three, as ``bench spec``'s: the first starts cold, the next two start from what the run before learned (``snapshot`` /
``restore``, the depth memory's record, without its files). ``shipped`` names the shipped module; ``NAME=VALUE``
overrides set B's constants (B is then a fresh copy, the shipped module untouched). ``--graph-pool 0,4`` makes A's
contexts without our patch's graph pool and B's with it (``shipped shipped --graph-pool 0,4``: what the pool buys);
``--fixed 3`` plays both sides at fixed depth 3 instead of adaptive depth. It prints each run's tok/s ratio
B/A per prompt set, and their mean with its standard error, cold and warm apart.

Why paired and many: on the 2-core EPYC a version's ratio to the fastest fixed depth swings +-4% from run to run even
interleaved, because its choices follow the timing noise: two versions that make the same decisions came out 0.96x to
1.09x of each other run by run (2026-12-05), so a 1% change needs ~20 paired runs to show. The open-loop
study of the same logs is ``tests.helpers.adaptive_replay``; the simulation, ``tests.helpers.adaptive_sim``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from app.engine import adaptive as shipped
from app.gguftools.demo_model import Size
from tests.helpers.adaptive_replay import load_module

CYCLE = 3  # runs per cold start: one cold, then warm ones (bench spec's three runs)


@dataclass
class Run:
    index: int
    warm: bool
    tps: dict[str, dict[str, float]] = field(default_factory=dict)  # by prompt set: {"A": tok/s, "B": tok/s}

    def ratio(self, prompt_set: str) -> float:
        return self.tps[prompt_set]["B"] / self.tps[prompt_set]["A"]


def version(name: str, overrides: Sequence[str] = ()) -> ModuleType:
    """``shipped`` (a fresh copy of it when there are overrides) or a changed adaptive.py."""
    if name == "shipped":
        return load_module(Path(shipped.__file__), overrides) if overrides else shipped
    return load_module(Path(name), overrides)


def run(a: ModuleType, b: ModuleType, *, threads: int = 2, tokens: int = 128, runs: int = 18,
        size: Size = "scaled", acceptance: float = 0.8, fixed: int = 0,
        graph_pool: tuple[str | None, str | None] = (None, None)) -> list[Run]:
    """Decode every prompt with both versions, ``runs`` times (see the module's docstring). ``fixed``: both sides
    at that fixed depth instead (the versions unused); ``graph_pool``: ``LLAMA_GRAPH_POOL`` for A's and B's contexts
    (None: the patch's default), read when a context is made."""
    from app.bench import spec
    from app.cli.bench import bench_demo
    from app.engine.config import EngineConfig
    from app.engine.speculative import SpeculativeDecoder
    from app.engine.stats import pooled_decode_tps

    demo = bench_demo(size, acceptance)
    prompts = spec.tokenize_prompts(demo.target, {name: spec.load_prompts(name) for name in spec.PROMPT_SETS})
    modules = {"A": a, "B": b}
    memory: dict[str, dict[str, Any] | None] = {"A": None, "B": None}
    results = []
    for index in range(runs):
        if index % CYCLE == 0:
            memory = {"A": None, "B": None}
        decoders = {}
        try:
            for (name, module), pool in zip(modules.items(), graph_pool, strict=True):
                with _graph_pool(pool):
                    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t,
                                                              draft_depth=fixed or 8, adaptive=not fixed,
                                                              n_ctx=2048, n_threads=threads))
                if not fixed:
                    learner = module.AdaptiveDepth(8)
                    if memory[name] is not None:
                        learner.restore(memory[name])
                    decoder.adaptive = learner
                decoders[name] = decoder
                decoder.generate(prompts[spec.PROMPT_SETS[0]][0], 8)  # warm-up: first-pass allocations
            spans: dict[str, dict[str, list[tuple[int, float]]]] = {n: {s: [] for s in prompts} for n in modules}
            turn = index
            for prompt_set, token_prompts in prompts.items():
                for prompt in token_prompts:
                    order = ["A", "B"] if turn % 2 == 0 else ["B", "A"]
                    for name in order:
                        decoders[name].reset()
                        stats = decoders[name].generate(prompt, tokens).stats
                        spans[name][prompt_set].append((stats.generated, stats.decode_span_seconds))
                    turn += 1
            done = Run(index, warm=index % CYCLE != 0)
            for prompt_set in prompts:
                done.tps[prompt_set] = {name: pooled_decode_tps(spans[name][prompt_set]) for name in modules}
            for name, decoder in decoders.items():
                if decoder.adaptive is not None:
                    memory[name] = decoder.adaptive.snapshot()
            results.append(done)
        finally:
            for decoder in decoders.values():
                decoder.close()
    return results


@contextmanager
def _graph_pool(value: str | None) -> Iterator[None]:
    """``LLAMA_GRAPH_POOL`` set to ``value`` (None: unset) while a decoder's contexts are made."""
    before = os.environ.pop("LLAMA_GRAPH_POOL", None)
    if value is not None:
        os.environ["LLAMA_GRAPH_POOL"] = value
    try:
        yield
    finally:
        os.environ.pop("LLAMA_GRAPH_POOL", None)
        if before is not None:
            os.environ["LLAMA_GRAPH_POOL"] = before


def summary(results: list[Run]) -> list[str]:
    """Each prompt set's mean ratio B/A with its standard error, and the cold and warm runs' means apart."""
    lines = []
    for prompt_set in results[0].tps:
        ratios = [r.ratio(prompt_set) for r in results]
        error = statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else float("nan")
        cold = [r.ratio(prompt_set) for r in results if not r.warm]
        warm = [r.ratio(prompt_set) for r in results if r.warm]
        lines.append(f"{prompt_set}: B/A mean {statistics.mean(ratios):.4f} +- {error:.4f} over {len(ratios)} runs; "
                     f"cold {statistics.mean(cold):.3f}" + (f", warm {statistics.mean(warm):.3f}" if warm else ""))
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.adaptive_ab", description=__doc__.split("\n")[0])
    parser.add_argument("a", help="adaptive.py of version A, or 'shipped'")
    parser.add_argument("b", help="adaptive.py of version B, or 'shipped'")
    parser.add_argument("overrides", nargs="*", help="NAME=VALUE: B's constants")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=18)
    parser.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="scaled")
    parser.add_argument("--fixed", type=int, default=0, metavar="K", help="both sides at fixed depth K instead")
    parser.add_argument("--graph-pool", default="", metavar="A,B",
                        help="LLAMA_GRAPH_POOL for A's and B's contexts, e.g. 0,4 (empty: the patch's default)")
    args = parser.parse_args(argv)
    pools = [value or None for value in args.graph_pool.split(",")] if args.graph_pool else [None, None]
    if len(pools) != 2:
        parser.error("--graph-pool takes two values, A's and B's: e.g. 0,4")
    results = run(version(args.a), version(args.b, args.overrides), threads=args.threads, tokens=args.tokens,
                  runs=args.runs, size=args.size, fixed=args.fixed, graph_pool=(pools[0], pools[1]))
    for r in results:
        print(f"run {r.index + 1} {'w' if r.warm else 'c'} " + " | ".join(
            f"{name}: A {t['A']:.1f} B {t['B']:.1f} B/A {t['B'] / t['A']:.3f}" for name, t in r.tps.items()))
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main(sys.argv[1:])
