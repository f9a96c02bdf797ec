"""The ``qwen35`` GGUF schema (llama.cpp's Qwen3.5 dense family) and a writer for it.

Names and shapes follow llama.cpp's loader (``src/models/qwen35.cpp``, ``src/llama-arch.cpp``): shapes are in
ggml order (``ne``: row length first). The file holds ``n_trunk`` decoder layers, gated-delta-net layers
with a full-attention layer every ``full_attention_interval``-th, and one MTP ("nextn") block appended at
index ``n_trunk``; ``block_count`` counts both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, LlamaFileType

from app.core.errors import GGUFError
from app.gguftools.writer import (
    ChunkSource,
    KVItem,
    TensorPlan,
    kv_array,
    kv_f32,
    kv_str,
    kv_u32,
    repeat_bytes,
    row_bytes,
    write_gguf,
)

ARCH = "qwen35"
N_VOCAB = 248320


@dataclass(frozen=True)
class Qwen35Shape:
    """Hyperparameters that fix every tensor shape of a qwen35 model."""

    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_trunk: int
    ssm_state: int  # S: key/value head dim of the gated-delta-net layers
    ssm_groups: int  # G: key heads
    ssm_dt_rank: int  # Vh: value heads (a multiple of G)
    ssm_conv_kernel: int = 4
    full_attention_interval: int = 4
    n_vocab: int = N_VOCAB
    context_length: int = 262144
    rope_freq_base: float = 10_000_000.0
    rms_eps: float = 1e-6
    rope_sections: tuple[int, int, int, int] = field(default=(0, 0, 0, 0))

    def __post_init__(self) -> None:
        if self.ssm_dt_rank % self.ssm_groups:
            raise GGUFError("ssm_dt_rank must be a multiple of ssm_groups.", "Fix the model shape.")
        if self.head_dim % 4 or self.n_head % self.n_head_kv:
            raise GGUFError("head_dim must be a multiple of 4, n_head of n_head_kv.", "Fix the model shape.")
        if self.rope_sections == (0, 0, 0, 0):
            # Qwen3.5's interleaved M-RoPE sections [11, 11, 10, 0] out of 32 rotary pairs, scaled.
            pairs = self.n_rot // 2
            first = round(pairs * 11 / 32)
            object.__setattr__(self, "rope_sections", (first, first, pairs - 2 * first, 0))

    @property
    def block_count(self) -> int:
        return self.n_trunk + 1

    @property
    def mtp_layer(self) -> int:
        return self.n_trunk

    @property
    def n_rot(self) -> int:
        return self.head_dim // 4  # partial_rotary_factor 0.25

    @property
    def ssm_inner(self) -> int:
        return self.ssm_state * self.ssm_dt_rank

    @property
    def conv_dim(self) -> int:
        return 2 * self.ssm_state * self.ssm_groups + self.ssm_inner

    def is_recurrent(self, layer: int) -> bool:
        return layer < self.n_trunk and (layer + 1) % self.full_attention_interval != 0


QWEN35_27B = Qwen35Shape(
    n_embd=5120,
    n_ff=17408,
    n_head=24,
    n_head_kv=4,
    head_dim=256,
    n_trunk=64,
    ssm_state=128,
    ssm_groups=16,
    ssm_dt_rank=48,
)


def _attention_shapes(s: Qwen35Shape, il: int) -> dict[str, tuple[int, ...]]:
    p = f"blk.{il}."
    return {
        p + "attn_q.weight": (s.n_embd, 2 * s.head_dim * s.n_head),  # query and gate
        p + "attn_k.weight": (s.n_embd, s.head_dim * s.n_head_kv),
        p + "attn_v.weight": (s.n_embd, s.head_dim * s.n_head_kv),
        p + "attn_output.weight": (s.head_dim * s.n_head, s.n_embd),
        p + "attn_q_norm.weight": (s.head_dim,),
        p + "attn_k_norm.weight": (s.head_dim,),
    }


def _recurrent_shapes(s: Qwen35Shape, il: int) -> dict[str, tuple[int, ...]]:
    p = f"blk.{il}."
    return {
        p + "attn_qkv.weight": (s.n_embd, s.conv_dim),
        p + "attn_gate.weight": (s.n_embd, s.ssm_inner),
        p + "ssm_conv1d.weight": (s.ssm_conv_kernel, s.conv_dim),
        p + "ssm_dt.bias": (s.ssm_dt_rank,),
        p + "ssm_a": (s.ssm_dt_rank,),
        p + "ssm_beta.weight": (s.n_embd, s.ssm_dt_rank),
        p + "ssm_alpha.weight": (s.n_embd, s.ssm_dt_rank),
        p + "ssm_norm.weight": (s.ssm_state,),
        p + "ssm_out.weight": (s.ssm_inner, s.n_embd),
    }


def _block_shapes(s: Qwen35Shape, il: int, recurrent: bool) -> dict[str, tuple[int, ...]]:
    p = f"blk.{il}."
    shapes: dict[str, tuple[int, ...]] = {
        p + "attn_norm.weight": (s.n_embd,),
        p + "post_attention_norm.weight": (s.n_embd,),
    }
    shapes.update(_recurrent_shapes(s, il) if recurrent else _attention_shapes(s, il))
    shapes[p + "ffn_gate.weight"] = (s.n_embd, s.n_ff)
    shapes[p + "ffn_up.weight"] = (s.n_embd, s.n_ff)
    shapes[p + "ffn_down.weight"] = (s.n_ff, s.n_embd)
    return shapes


def global_shapes(s: Qwen35Shape, tied_output: bool = False) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (s.n_embd, s.n_vocab),
        "output_norm.weight": (s.n_embd,),
    }
    if not tied_output:
        shapes["output.weight"] = (s.n_embd, s.n_vocab)
    return shapes


def trunk_shapes(s: Qwen35Shape) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for il in range(s.n_trunk):
        shapes.update(_block_shapes(s, il, s.is_recurrent(il)))
    return shapes


def mtp_shapes(s: Qwen35Shape, embed_tokens: bool = False) -> dict[str, tuple[int, ...]]:
    """The MTP block: a full-attention decoder block plus the nextn projections and norms."""
    il = s.mtp_layer
    p = f"blk.{il}.nextn."
    shapes = _block_shapes(s, il, recurrent=False)
    shapes[p + "eh_proj.weight"] = (2 * s.n_embd, s.n_embd)
    shapes[p + "enorm.weight"] = (s.n_embd,)
    shapes[p + "hnorm.weight"] = (s.n_embd,)
    if embed_tokens:
        shapes[p + "embed_tokens.weight"] = (s.n_embd, s.n_vocab)
    return shapes


def model_shapes(s: Qwen35Shape, embed_tokens: bool = False, tied_output: bool = False) -> dict[str, tuple[int, ...]]:
    """Every tensor of a full qwen35 model with its MTP block, in file order."""
    return {**global_shapes(s, tied_output), **trunk_shapes(s), **mtp_shapes(s, embed_tokens)}


def hparams_kv(s: Qwen35Shape, file_type: LlamaFileType, name: str = "") -> list[KVItem]:
    a = ARCH + "."
    items = [
        kv_u32("general.file_type", int(file_type)),
        kv_u32("general.quantization_version", 2),
        kv_u32(a + "context_length", s.context_length),
        kv_u32(a + "embedding_length", s.n_embd),
        kv_u32(a + "feed_forward_length", s.n_ff),
        kv_u32(a + "block_count", s.block_count),
        kv_u32(a + "attention.head_count", s.n_head),
        kv_u32(a + "attention.head_count_kv", s.n_head_kv),
        kv_u32(a + "attention.key_length", s.head_dim),
        kv_u32(a + "attention.value_length", s.head_dim),
        kv_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps),
        kv_u32(a + "rope.dimension_count", s.n_rot),
        kv_array(a + "rope.dimension_sections", s.rope_sections, GGUFValueType.INT32),
        kv_f32(a + "rope.freq_base", s.rope_freq_base),
        kv_u32(a + "ssm.conv_kernel", s.ssm_conv_kernel),
        kv_u32(a + "ssm.state_size", s.ssm_state),
        kv_u32(a + "ssm.group_count", s.ssm_groups),
        kv_u32(a + "ssm.time_step_rank", s.ssm_dt_rank),
        kv_u32(a + "ssm.inner_size", s.ssm_inner),
        kv_u32(a + "full_attention_interval", s.full_attention_interval),
        kv_u32(a + "nextn_predict_layers", 1),
    ]
    if name:
        items.insert(0, kv_str("general.name", name))
    return items


MatrixFill = Callable[[str, GGMLQuantizationType, tuple[int, ...]], ChunkSource]


def zeros(ggml_type: GGMLQuantizationType, ne: tuple[int, ...]) -> ChunkSource:
    """All-zero data of a tensor (zero bytes are zero values in every ggml type)."""
    n_rows = int(np.prod(ne[1:], dtype=np.int64)) if len(ne) > 1 else 1
    size = row_bytes(ggml_type, ne[0])
    return lambda: repeat_bytes(b"\0" * size, size * n_rows)


def constant(data: np.ndarray[Any, Any]) -> ChunkSource:
    """In-memory data as a chunk source."""
    return lambda: (data,)


def neutral_plans(
    shape: Qwen35Shape,
    matrix_type: GGMLQuantizationType = GGMLQuantizationType.F16,
    *,
    embed_tokens: bool = False,
    matrix_fill: MatrixFill | None = None,
    overrides: Mapping[str, TensorPlan] | None = None,
) -> list[TensorPlan]:
    """Plans for every tensor of a model that passes each token's embedding through unchanged.

    Matrices are ``matrix_type`` zeros (or ``matrix_fill``'s data), norms one, ``ssm_a`` minus one,
    ``ssm_dt.bias`` and ``ssm_conv1d`` (F32) zero. ``overrides`` replace tensors by name.
    """
    overrides = dict(overrides or {})
    plans: list[TensorPlan] = []
    for name, ne in model_shapes(shape, embed_tokens=embed_tokens).items():
        if name in overrides:
            plan = overrides.pop(name)
            if tuple(plan.shape) != ne:
                raise GGUFError(f"{name} must have shape {ne}, not {plan.shape}.", "This is a bug.")
            plans.append(plan)
        elif len(ne) == 1:
            value = -1.0 if name.endswith("ssm_a") else 0.0 if name.endswith("ssm_dt.bias") else 1.0
            data = np.full(ne[0], value, dtype=np.float32)
            plans.append(TensorPlan(name, GGMLQuantizationType.F32, ne, constant(data)))
        elif "ssm_conv1d" in name:
            plans.append(TensorPlan(name, GGMLQuantizationType.F32, ne, zeros(GGMLQuantizationType.F32, ne)))
        else:
            fill = matrix_fill(name, matrix_type, ne) if matrix_fill else zeros(matrix_type, ne)
            plans.append(TensorPlan(name, matrix_type, ne, fill))
    if overrides:
        raise GGUFError(f"Unknown tensors {sorted(overrides)} for this model.", "This is a bug.")
    return plans


def check_plans(s: Qwen35Shape, plans: Sequence[TensorPlan]) -> None:
    """Raise GGUFError unless ``plans`` are exactly a valid qwen35 model of shape ``s``."""
    names = [p.name for p in plans]
    if len(set(names)) != len(names):
        raise GGUFError("A tensor name appears twice.", "This is a bug in the model writer.")
    given = {p.name: p.shape for p in plans}
    expected = model_shapes(
        s,
        embed_tokens=f"blk.{s.mtp_layer}.nextn.embed_tokens.weight" in given,
        tied_output="output.weight" not in given,
    )
    missing = sorted(set(expected) - set(given))
    unknown = sorted(set(given) - set(expected))
    wrong = sorted(n for n in set(expected) & set(given) if tuple(given[n]) != expected[n])
    if missing or unknown or wrong:
        detail = "; ".join(
            f"{label}: {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}"
            for label, items in (("missing", missing), ("unknown", unknown), ("wrong shape", wrong))
            if items
        )
        raise GGUFError(f"The tensors do not form a qwen35 model ({detail}).", "This is a bug in the model writer.")


def write_qwen35(
    out: str | os.PathLike[str],
    shape: Qwen35Shape,
    tokenizer_kv: Iterable[KVItem],
    tensors: Sequence[TensorPlan],
    *,
    file_type: LlamaFileType = LlamaFileType.MOSTLY_F16,
    name: str = "",
    extra_kv: Iterable[KVItem] = (),
) -> Path:
    """Write a qwen35 model with its MTP block, checked against the schema, atomically.

    ``tensors`` must hold every tensor of :func:`model_shapes` (``output.weight`` and
    ``nextn.embed_tokens`` are optional); their data is produced while writing.
    """
    check_plans(shape, tensors)
    kv = [*hparams_kv(shape, file_type, name), *tokenizer_kv, *extra_kv]
    return write_gguf(out, ARCH, kv, tensors)
