"""On a CPU the engine runs llama.cpp's plain attention kernel unless told otherwise (``engine.attention``): both
contexts are made with it, a reply says which kernel it ran, a kept state is keyed by it, and flash attention, when
set, gives the same tokens over a long context.

Real parts only: the patched CPU backend and the tiny demo model with its d2t sidecar; which kernel llama.cpp took
is read from its own log line for each context."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from app.core.errors import EngineError
from app.engine.config import EngineConfig
from app.engine.speculative import SpeculativeDecoder
from app.engine.state_cache import key_for
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.native.handles import LOG, Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

_KERNEL_LINE = re.compile(r"flash_attn\s*=\s*(\w+)")
LONG_PROMPT = 600  # tokens of the table before the reply: enough context for attention to matter


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("attention-demo"), size="tiny", acceptance=0.9, seed=6,
                             language="words")


def _loaded(config: EngineConfig) -> tuple[SpeculativeDecoder, list[str]]:
    """The decoder and llama.cpp's word for the kernel of each context it made (target, then draft)."""
    mark = LOG.mark()
    decoder = SpeculativeDecoder(config)
    return decoder, [m.group(1) for line in LOG.since(mark) if (m := _KERNEL_LINE.search(line))]


def _long_prompt(demo: DemoModel) -> list[int]:
    assert demo.table is not None
    cycle = list(demo.table.cycle)
    return (cycle * (LONG_PROMPT // len(cycle) + 1))[:LONG_PROMPT]


def test_a_cpu_run_takes_the_plain_kernel_in_both_contexts_and_says_so(demo: DemoModel) -> None:
    decoder, kernels = _loaded(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3,
                                            n_ctx=2048, n_threads=1))
    try:
        assert decoder.flash_attn is False
        assert kernels == ["disabled", "disabled"], kernels
        reply = decoder.generate(_long_prompt(demo), 32)
        assert reply.stats.to_dict()["flash_attn"] is False
        assert decoder.keyed_config.flash_attn is False and decoder.config.flash_attn is None  # as asked, kept
    finally:
        decoder.close()


def test_flash_attention_when_set_gives_the_same_tokens_and_its_own_state_key(demo: DemoModel) -> None:
    base = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3, n_ctx=2048,
                        n_threads=1)
    plain, plain_kernels = _loaded(base)
    flash, flash_kernels = _loaded(replace(base, flash_attn=True))
    try:
        assert plain_kernels == ["disabled", "disabled"] and flash_kernels == ["enabled", "enabled"]
        prompt = _long_prompt(demo)
        a, b = plain.generate(prompt, 48), flash.generate(prompt, 48)
        assert a.tokens == b.tokens and len(a.tokens) == 48
        assert a.stats.drafted > 0 and b.stats.drafted > 0
        assert b.stats.to_dict()["flash_attn"] is True
        # a state kept under one kernel's cache layout is never offered to the other
        assert key_for(plain.keyed_config, "backend") != key_for(flash.keyed_config, "backend")
    finally:
        plain.close()
        flash.close()


def test_a_vocabulary_only_model_says_it_has_no_heads_instead_of_aborting(demo: DemoModel) -> None:
    """llama.cpp aborts the whole process when asked for the heads of a model loaded for its vocabulary only (the
    sidecar maker's tokenizer): the count is read only when asked, and refused there in words."""
    with Model(demo.target, vocab_only=True) as vocab, pytest.raises(EngineError, match="vocabulary only"):
        _ = vocab.n_head
    with Model(demo.target) as full:
        assert full.n_head == 2  # the tiny demo's heads
