"""Our patch keeps the graphs of small batches, one per shape, each with its own scheduler: passes that alternate
batch sizes (a verify pass at another draft depth, a draft's catch-up pass and its one-token steps) reuse a graph
instead of building one, with the same logits as a graph built for the pass; larger batches (a prompt) are built by
the scheduler reserved for them, and ``LLAMA_GRAPH_POOL=0`` keeps llama.cpp's one graph. Samplers in the graph keep
llama.cpp's one graph too (a sampler holds the inputs of the graph built last): test_native_sampling.py's
``test_sampling_inside_the_graph_is_lossless_too`` replays a seeded reply there."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.native.handles import Context, Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

PROMPT = [int(t) for t in 1000 + np.arange(40) * 7]
# verify passes of depths 2, 3 and 5 in turn, a prompt-sized pass among them (40 tokens: beyond the kept sizes)
SIZES = [3, 4, 6] * 4 + [40] + [3, 4, 6] * 2


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("pool-demo"), size="tiny", acceptance=0.9, seed=8, language="words")


def _passes(model: Model) -> tuple[list[np.ndarray], list[int]]:
    """Each pass's logits (every row) and whether it reused a graph; the small passes are rolled back but their first
    token, as after a rejected draft."""
    logits, reused = [], []
    with Context(model, n_ctx=256, n_batch=64, n_threads=1, n_rs_seq=8) as ctx:
        ctx.decode(PROMPT, 0, logits="last")
        position = len(PROMPT)
        for i, size in enumerate(SIZES):
            before = ctx.graphs_reused
            ctx.decode([PROMPT[(i + j) % len(PROMPT)] for j in range(size)], position, logits="all")
            reused.append(ctx.graphs_reused - before)
            logits.append(np.stack([ctx.logits(row) for row in range(size)]))
            if size < len(PROMPT):
                assert ctx.truncate(position + 1)
            position += 1 if size < len(PROMPT) else size
    return logits, reused


def test_alternating_batch_sizes_reuse_their_graphs_with_the_same_logits(demo: DemoModel,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with Model(demo.target) as model:
        kept, reused = _passes(model)
        monkeypatch.setenv("LLAMA_GRAPH_POOL", "0")  # read when a context is made
        built, rebuilt = _passes(model)
    # the first pass of each size builds its graph (the prompt-sized one too); every later one reuses it, also
    # after the prompt-sized pass, which the main scheduler built without dropping the small ones
    assert reused == [0, 0, 0] + [1] * 9 + [0] + [1] * 6
    # with one graph, every change of size builds one
    assert rebuilt == [0] * len(SIZES)
    for i, (a, b) in enumerate(zip(kept, built, strict=True)):
        assert np.array_equal(a, b), f"pass {i} ({SIZES[i]} tokens): a reused graph read other logits"


def _fresh_pages(ctx: Context, tokens: list[int], position: int) -> int:
    """Pages the process touched for the first time (minor faults) during one pass."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ctx.decode(tokens, position, logits="all")
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_the_first_pass_of_each_small_batch_size_finds_its_memory_ready(demo: DemoModel) -> None:
    # the kept graphs' schedulers are made with the context, sized for the largest small batch with their buffers
    # touched, and the output rows reserved for it: made at the first pass of each size, the fresh pages (6-17 MB
    # here, a page fault each) cost that pass more than building its graph, and each deeper verify pass than any
    # before reallocated the output buffer mid-reply
    with Model(demo.target) as model, Context(model, n_ctx=256, n_batch=64, n_threads=1, n_rs_seq=8) as ctx:
        ctx.decode(PROMPT, 0, logits="last")
        position = len(PROMPT)
        for size in (3, 4, 6, 9, 16):
            fresh = _fresh_pages(ctx, PROMPT[:size], position)
            assert fresh < 256, f"the first {size}-token pass touched {fresh} fresh pages (its buffers were not ready)"
            if size <= 9:  # rolled back as after a rejected draft (the rollback window is 8 tokens)
                assert ctx.truncate(position + 1)
                position += 1
