"""Which attention kernel a context runs: flash attention or llama.cpp's plain one, when the user has not said.

On a GPU llama.cpp's own choice stands (its "auto": flash attention where the device has it, which is where it pays).
On a CPU the pinned llama.cpp's flash-attention kernel walks the cache one query row and one head at a time, so its
cost grows with the context far faster than the plain kernel's matrix products: on the scaled demo (one thread, the
Xeon; ``bench attention``) d2t drafting at depth 3 decodes 113 against 129 tok/s with 150 tokens of context, 71
against 116 at 1,000 and 39 against 101 at 3,000 (plain decoding 41 against 54 there); a verify pass's four rows pay
it four times over. A real chat thinks for thousands of tokens, so on a CPU the plain kernel is the default.

What the plain kernel costs instead is memory: it holds every head's scores for a whole batch against the whole
context (``n_ctx x n_batch x n_head`` floats in the compute buffer that llama.cpp reserves at load). Where that
would pass :data:`SCRATCH_CAP_BYTES` (a large model at a long context) llama.cpp's choice stands; below it, the CPU's
context arithmetic (``models.context_size``) counts the scores of a target and a draft context.
"""

from __future__ import annotations

from pathlib import Path

from app.core.units import MIB
from app.engine.config import EngineConfig

SCRATCH_CAP_BYTES = 256 * MIB  # the most the plain kernel's scores may take per context
_FLOAT_BYTES = 4


def plain_attention_scratch(n_ctx: int, n_batch: int, n_head: int) -> int:
    """Bytes of the scores the plain kernel keeps for one batch against the whole context."""
    return n_ctx * n_batch * n_head * _FLOAT_BYTES


def flash_attention(config: EngineConfig, n_head: int) -> bool | None:
    """``config``'s choice when it makes one; else :func:`default_kernel` for where and how it runs."""
    if config.flash_attn is not None:
        return config.flash_attn
    return default_kernel(n_ctx=config.n_ctx, n_batch=config.n_batch, n_head=n_head,
                          on_cpu=config.n_gpu_layers == 0 and not config.rpc)


def default_kernel(*, n_ctx: int, n_batch: int, n_head: int, on_cpu: bool) -> bool | None:
    """Off (the plain kernel) where the model runs on this machine's CPU and the plain kernel's scratch stays under
    the cap; else None (llama.cpp decides)."""
    if on_cpu and plain_attention_scratch(n_ctx, n_batch, n_head) <= SCRATCH_CAP_BYTES:
        return False
    return None


def head_count(model: Path) -> int | None:
    """The attention heads a GGUF model's header gives (``{arch}.attention.head_count``), None when it gives none
    or one per layer."""
    from app.gguftools.header import gguf_header

    header = gguf_header(model)
    value = header.value(f"{header.architecture}.attention.head_count")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
