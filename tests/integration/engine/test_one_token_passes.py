"""One-token passes run with one thread or all of them, whichever each context measured faster (issue 39); bigger
batches keep every decode thread, and the reply is the same as with one thread.

Real parts only: the patched CPU backend and the tiny demo model with its d2t sidecar. The assertions are on the
counts the engine reports and llama.cpp holds, never on timing (which count wins depends on the machine)."""

from __future__ import annotations

import pytest

from app.engine.config import EngineConfig
from app.engine.one_token_threads import TRIALS
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.native.handles import Context
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

TOKENS = 4 * TRIALS + 8  # more one-token passes than the measurement takes, in plain decoding and in draft steps


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("one-token-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")


def _held(ctx: Context) -> tuple[int, int]:
    """The thread counts llama.cpp holds for ``ctx``: one-token passes, bigger batches."""
    return ctx.lib.llama_n_threads(ctx.ptr), ctx.lib.llama_n_threads_batch(ctx.ptr)


def test_plain_decoding_settles_its_one_token_count_and_keeps_every_thread_for_batches(demo: DemoModel) -> None:
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode="off", n_threads=2))
    single = SpeculativeDecoder(EngineConfig(demo.target, mode="off", n_threads=1))
    try:
        reply = decoder.generate(table_prompt(demo), TOKENS)
        chosen = reply.stats.one_token_threads
        assert chosen in (1, 2), reply.stats.to_dict()
        assert reply.stats.to_dict()["one_token_threads"] == chosen and reply.stats.threads == 2
        assert _held(decoder.tctx) == (chosen, 2)  # the prompt and every bigger batch: both threads
        # the thread count changes how the work is split, not the result
        assert single.generate(table_prompt(demo), TOKENS).tokens == reply.tokens
        assert _held(single.tctx) == (1, 1)
    finally:
        decoder.close()
        single.close()


def test_the_draft_measures_its_own_steps_and_a_new_thread_count_measures_again(demo: DemoModel) -> None:
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3,
                                              n_threads=2))
    try:
        reply = decoder.generate(table_prompt(demo), TOKENS)
        assert decoder.dctx is not None
        draft_count = reply.stats.draft_one_token_threads
        assert draft_count in (1, 2), reply.stats.to_dict()
        assert _held(decoder.dctx) == (draft_count, 2)
        assert _held(decoder.tctx)[1] == 2  # the verify passes (4 tokens) run with both threads
        decoder.use_threads(1)
        assert _held(decoder.tctx) == (1, 1) and _held(decoder.dctx) == (1, 1)
        assert decoder.one_token_threads == (1, 1)  # one thread: nothing to measure
        decoder.use_threads(2)
        assert decoder.one_token_threads == (None, None)  # another count: measured afresh
        again = decoder.generate(table_prompt(demo), TOKENS)
        assert again.stats.draft_one_token_threads in (1, 2)
    finally:
        decoder.close()


@pytest.mark.parametrize("pinned", [1, 2])
def test_a_pinned_count_is_held_from_the_first_pass_and_never_measured(demo: DemoModel, pinned: int) -> None:
    """``EngineConfig.one_token_threads``: what ``bench threads`` compares the measured choice with."""
    plain = SpeculativeDecoder(EngineConfig(demo.target, mode="off", n_threads=2, one_token_threads=pinned))
    drafting = SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3,
                                               n_threads=2, one_token_threads=pinned))
    try:
        assert plain.one_token_threads[0] == pinned and drafting.one_token_threads == (pinned, pinned)
        reply = plain.generate(table_prompt(demo), TOKENS)
        assert reply.stats.one_token_threads == pinned
        assert _held(plain.tctx) == (pinned, 2)  # every one-token pass at the pinned count, batches at both
        drafted = drafting.generate(table_prompt(demo), TOKENS)
        assert drafting.dctx is not None and drafted.stats.draft_one_token_threads == pinned
        assert _held(drafting.dctx) == (pinned, 2)  # the draft steps too
        assert drafted.tokens == reply.tokens  # greedy: the same reply whatever the counts
    finally:
        plain.close()
        drafting.close()
