"""Native time includes the device's work (llama_synchronize), and each round splits into verify, draft and host.

On a GPU ``llama_decode`` returns before the device has finished; time read right after it is not the
pass's time. These run on the CPU backend, where the device is the CPU, so they check what can be seen
there: that ``Context.decode`` has synchronized the context when it returns, and that the split the
engine reports adds up and is where it should be.
"""

from __future__ import annotations

import time

import pytest

from app.engine.config import EngineConfig
from app.engine.speculative import SpeculativeDecoder
from app.engine.stats import ReplyStats
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.native.handles import Context, Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("timing-demo"), size="tiny", acceptance=0.9, seed=4)


def test_decode_returns_with_the_context_synchronized(demo: DemoModel) -> None:
    """llama.cpp counts an evaluation in its perf counters only inside ``llama_synchronize``: if they count
    the passes right after ``decode`` returned, with no output read, decode waited for the device."""
    with Model(demo.target) as model, Context(model, n_ctx=64, n_batch=8) as ctx:
        lib = model.lib
        ctx.decode([1000, 1001, 1002, 1003], 0, logits="none")
        assert lib.llama_perf_context(ctx.ptr).n_p_eval == 4  # a 4-token pass counts as prompt tokens
        for step in range(3):
            ctx.decode([1004 + step], 4 + step, logits="none")
        assert lib.llama_perf_context(ctx.ptr).n_eval == 3  # three single-token passes, each already counted
        # and the counters would not move for a pass left unsynchronized: llama_decode alone does not count
        lib.llama_decode(ctx.ptr, _one_token_batch(ctx, 1007, 7))
        assert lib.llama_perf_context(ctx.ptr).n_eval == 3
        lib.llama_synchronize(ctx.ptr)
        assert lib.llama_perf_context(ctx.ptr).n_eval == 4


def _one_token_batch(ctx: Context, token: int, pos: int) -> object:
    ctx._batch.fill([token], pos, logits="none")
    return ctx._batch.struct


def test_rollback_is_native_time_and_synchronized(demo: DemoModel) -> None:
    with Model(demo.target) as model, Context(model, n_ctx=64, n_batch=8, n_rs_seq=4) as ctx:
        ctx.decode([1000, 1001, 1002, 1003], 0, logits="all")
        before = ctx.native_seconds
        assert ctx.truncate(2)
        assert ctx.native_seconds > before


def _split_ms(stats: ReplyStats) -> tuple[float, float, float]:
    data = stats.to_dict()
    return data["verify_ms_per_round"], data["draft_ms_per_round"], data["python_ms_per_round"]


@pytest.mark.parametrize("mode", ["off", "sidecar"])
def test_the_round_splits_into_verify_draft_and_host_that_add_up_to_the_decode_time(demo: DemoModel,
                                                                                     mode: str) -> None:
    config = EngineConfig(demo.target, mode="sidecar" if mode == "sidecar" else "off",
                          draft=demo.sidecar_d2t if mode == "sidecar" else None, draft_depth=3, n_ctx=1024)
    decoder = SpeculativeDecoder(config)
    live: list[dict[str, object]] = []
    try:
        prompt = table_prompt(demo)
        decoder.generate(prompt, 8)  # warm-up
        decoder.reset()
        started = time.perf_counter()
        reply = decoder.generate(prompt, 64, on_token=lambda _t, _p, s: live.append(s.to_dict()))
        wall = time.perf_counter() - started
    finally:
        decoder.close()
    stats = reply.stats
    data = stats.to_dict()
    verify, draft, host = _split_ms(stats)
    rounds = stats.target_passes - 1
    assert rounds > 0
    # the three parts make up the decode time, and prompt + decode make up the call
    assert (verify + draft + host) * rounds == pytest.approx(stats.decode_seconds * 1000.0, rel=1e-6)
    assert stats.prompt_seconds + stats.decode_seconds == pytest.approx(wall, rel=0.05, abs=0.005)
    assert verify > 0 and host > 0
    # the host share is the loop's own cost: on this small model it is well under the whole round
    assert host * rounds < stats.decode_seconds * 1000.0
    if mode == "off":
        assert draft == 0.0 and data["draft_ms_per_step"] == 0.0
        assert stats.tokens_per_pass == pytest.approx(1.0, abs=0.02)
    else:
        assert draft > 0 and data["draft_ms_per_step"] > 0
        assert data["draft_ms_per_step"] * stats.proposed == pytest.approx(draft * rounds, rel=1e-6)
        assert stats.tokens_per_pass is not None and stats.tokens_per_pass > 1.5
    # the split streams with the tokens (the HUD and `chat` see it live), not only at the end
    assert any(isinstance(d["verify_ms_per_round"], float) and d["verify_ms_per_round"] > 0 for d in live[:16])
