"""``tests.helpers.adaptive_ab``: two versions of adaptive depth side by side on the real engine, cold and warm."""

from __future__ import annotations

import os

import pytest

from app.engine import adaptive
from app.engine.speculative import SpeculativeDecoder
from tests.helpers.adaptive_ab import run, summary, version

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_two_versions_run_side_by_side_each_with_its_own_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = version("shipped", ["PROBE_EVERY=12"])
    assert changed is not adaptive and changed.PROBE_EVERY == 12 and adaptive.PROBE_EVERY == 24  # a copy changed
    learners: list[object] = []
    generate = SpeculativeDecoder.generate

    def noting(self: SpeculativeDecoder, *args: object, **kwargs: object) -> object:
        learners.append(type(self.adaptive))
        return generate(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SpeculativeDecoder, "generate", noting)
    results = run(adaptive, changed, threads=1, tokens=8, runs=2, size="tiny")
    assert [r.warm for r in results] == [False, True]  # a cycle starts cold, the next run from what it learned
    for r in results:
        assert set(r.tps) == {"document", "reasoning"}
        assert all(t["A"] > 0 and t["B"] > 0 for t in r.tps.values()), r.tps
    assert set(learners) == {adaptive.AdaptiveDepth, changed.AdaptiveDepth}  # each decoder played its own version
    lines = summary(results)
    assert len(lines) == 2 and all("B/A mean" in line and "warm" in line for line in lines)


def test_the_graph_pool_a_b_makes_each_side_s_contexts_with_its_own_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str | None, int, bool]] = []
    init = SpeculativeDecoder.__init__

    def noting(self: SpeculativeDecoder, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append((os.environ.get("LLAMA_GRAPH_POOL"), self.config.draft_depth, self.adaptive is None))

    monkeypatch.setattr(SpeculativeDecoder, "__init__", noting)
    monkeypatch.setenv("LLAMA_GRAPH_POOL", "7")
    results = run(adaptive, adaptive, threads=1, tokens=8, runs=1, size="tiny", fixed=3, graph_pool=("0", None))
    # (the demo's tokenizer makes a decoder first, in the caller's setting) A without the pool, B with the patch's
    # default, both at the fixed depth
    assert made[-2:] == [("0", 3, True), (None, 3, True)]
    assert os.environ["LLAMA_GRAPH_POOL"] == "7"  # the caller's setting back afterwards
    assert all(t["A"] > 0 and t["B"] > 0 for t in results[0].tps.values())
