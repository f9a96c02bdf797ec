"""What a GGUF file is: a target model, an MTP sidecar (full or d2t-trimmed), or something else."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gguf import GGUFReader

from app.gguftools.reader import architecture, array_length, field_value, open_gguf, tensors_by_name

Kind = Literal["target", "mtp_sidecar_full", "mtp_sidecar_d2t", "other"]


@dataclass(frozen=True)
class GgufReport:
    """Facts about one GGUF file; ``to_dict()`` is JSON-ready. Shapes are in ggml order (row length first)."""

    path: str
    file_size: int
    n_tensors: int
    architecture: str
    kind: Kind
    vocab_size: int | None
    n_embd: int | None
    block_count: int | None
    trunk_layers: int | None
    nextn_layers: int
    output_shape: list[int] | None
    tensor_types: dict[str, int] = field(default_factory=dict)
    d2t_length: int | None = None
    d2t_min: int | None = None
    d2t_max: int | None = None
    d2t_unique: bool | None = None

    @property
    def is_sidecar(self) -> bool:
        return self.kind in ("mtp_sidecar_full", "mtp_sidecar_d2t")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def inspect_gguf(path: str | os.PathLike[str]) -> GgufReport:
    """Read a GGUF file's header and classify it.

    Raises:
        GGUFError: the file is missing, not GGUF, or truncated.
    """
    reader = open_gguf(path)
    return report_from_reader(reader, Path(path))


def report_from_reader(reader: GGUFReader, path: Path) -> GgufReport:
    arch = architecture(reader)
    tensors = tensors_by_name(reader)

    def hparam(key: str) -> int | None:
        value = field_value(reader, f"{arch}.{key}")
        return int(value) if isinstance(value, int) else None

    vocab = array_length(reader, "tokenizer.ggml.tokens")
    block_count = hparam("block_count")
    nextn = hparam("nextn_predict_layers") or 0
    head = tensors.get("output.weight") or tensors.get("token_embd.weight")
    output_shape = [int(d) for d in head.shape] if head is not None else None

    d2t = tensors.get("d2t")
    d2t_facts: dict[str, Any] = {}
    if d2t is not None:
        ids = np.asarray(d2t.data).reshape(-1)
        d2t_facts = {
            "d2t_length": int(ids.size),
            "d2t_min": int(ids.min()) if ids.size else None,
            "d2t_max": int(ids.max()) if ids.size else None,
            "d2t_unique": bool(np.unique(ids).size == ids.size),
        }

    mtp_only = nextn > 0 and "blk.0.attn_norm.weight" not in tensors
    kind: Kind
    if "blk.0.attn_norm.weight" in tensors:
        kind = "target"
    elif mtp_only and d2t is not None:
        kind = "mtp_sidecar_d2t"
    elif mtp_only and output_shape is not None and len(output_shape) == 2 and output_shape[1] == vocab:
        kind = "mtp_sidecar_full"
    else:
        kind = "other"

    return GgufReport(
        path=str(path),
        file_size=path.stat().st_size,
        n_tensors=len(reader.tensors),
        architecture=arch,
        kind=kind,
        vocab_size=vocab,
        n_embd=hparam("embedding_length"),
        block_count=block_count,
        trunk_layers=None if block_count is None else block_count - nextn,
        nextn_layers=nextn,
        output_shape=output_shape,
        tensor_types=dict(sorted(Counter(t.tensor_type.name for t in reader.tensors).items())),
        **d2t_facts,
    )
