"""The attention kernel chosen when the user has not set one (``engine.attention``): the plain kernel on a CPU while
its scores fit under the cap, llama.cpp's own choice on a GPU, over RPC, or past the cap; a set value always wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.attention import SCRATCH_CAP_BYTES, flash_attention, plain_attention_scratch
from app.engine.config import EngineConfig

TARGET = Path("target.gguf")


def test_a_cpu_run_at_the_demos_context_takes_the_plain_kernel() -> None:
    assert flash_attention(EngineConfig(TARGET, n_ctx=8192), n_head=4) is False


@pytest.mark.parametrize("config", [EngineConfig(TARGET, n_gpu_layers=-1), EngineConfig(TARGET, n_gpu_layers=20),
                                    EngineConfig(TARGET, rpc=("10.0.0.2:50052",))],
                         ids=["all-on-gpu", "some-on-gpu", "rpc"])
def test_layers_off_this_cpu_leave_the_choice_to_llama_cpp(config: EngineConfig) -> None:
    assert flash_attention(config, n_head=4) is None


def test_a_long_context_of_a_many_headed_model_keeps_flash_attention_for_its_memory() -> None:
    # the 27B's 24 heads: 5,461 tokens of context fit the cap at a 512-token batch, 32,768 would take 1.5 GiB
    assert plain_attention_scratch(32768, 512, 24) == 1536 * 1024 * 1024
    assert flash_attention(EngineConfig(TARGET, n_ctx=32768), n_head=24) is None
    largest = SCRATCH_CAP_BYTES // (512 * 24 * 4)
    assert flash_attention(EngineConfig(TARGET, n_ctx=largest), n_head=24) is False
    assert flash_attention(EngineConfig(TARGET, n_ctx=largest + 1), n_head=24) is None
    # a smaller batch holds fewer scores: the same context fits again
    assert flash_attention(EngineConfig(TARGET, n_ctx=32768, n_batch=64), n_head=24) is False


@pytest.mark.parametrize("chosen", [True, False])
def test_a_set_kernel_is_kept_everywhere(chosen: bool) -> None:
    assert flash_attention(EngineConfig(TARGET, flash_attn=chosen, n_ctx=262144), n_head=24) is chosen
    assert flash_attention(EngineConfig(TARGET, flash_attn=chosen, n_gpu_layers=-1), n_head=4) is chosen
