"""What a GGUF file is: a target model, an MTP sidecar (full or d2t-trimmed), or something else."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from app.core.errors import GGUFError
from app.gguftools.header import LIMITS, FileCache, GgufHeader, gguf_header

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
    problem: str | None = None  # what makes the file unusable although its header reads (a d2t id out of range)

    @property
    def is_sidecar(self) -> bool:
        return self.kind in ("mtp_sidecar_full", "mtp_sidecar_d2t")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def inspect_gguf(path: str | os.PathLike[str]) -> GgufReport:
    """Read a GGUF file's header (lazily: arrays are not read) and classify it.

    Reports are kept per process while the file's (resolved path, size, mtime_ns, inode, ctime) stays the same, so the
    window, ``models add|scan``, the sidecar checks and the engine's pair check read each file once.

    Raises:
        GGUFError: the file is missing, not GGUF, or truncated.
    """
    p = Path(path)
    report = _REPORTS.get(p, lambda q: report_from_header(gguf_header(q)))
    return report if report.path == str(p) else replace(report, path=str(p))


def report_from_header(header: GgufHeader) -> GgufReport:
    """Classify a file from its header; only a ``d2t`` tensor's values (small) are read."""
    arch = header.architecture
    tensors = header.tensors

    def hparam(key: str) -> int | None:
        value = header.value(f"{arch}.{key}")
        return int(value) if isinstance(value, int) else None

    vocab = header.array_length("tokenizer.ggml.tokens")
    block_count = hparam("block_count")
    nextn = hparam("nextn_predict_layers") or 0
    head = header.tensor("output.weight") or header.tensor("token_embd.weight")
    output_shape = list(head.shape) if head is not None else None

    d2t = header.tensor("d2t")
    d2t_facts: dict[str, Any] = {}
    problem: str | None = None
    if d2t is not None:
        if d2t.n_bytes > 8 * LIMITS.array:  # a draft vocabulary is at most a real one: never read gigabytes of ids
            raise GGUFError(f"{header.path.name} is damaged: its d2t map claims {d2t.n_bytes:,} bytes, more than "
                            "any draft vocabulary takes.", "Download the sidecar again, or build it again.",
                            kind="bad-d2t-map")
        ids = header.read_tensor("d2t").reshape(-1)
        d2t_facts = {
            "d2t_length": int(ids.size),
            "d2t_min": int(ids.min()) if ids.size else None,
            "d2t_max": int(ids.max()) if ids.size else None,
            "d2t_unique": bool(np.unique(ids).size == ids.size),
        }
        problem = _d2t_problem(ids, vocab, d2t_facts["d2t_unique"])

    has_trunk = header.tensor("blk.0.attn_norm.weight") is not None
    mtp_only = nextn > 0 and not has_trunk
    kind: Kind
    if has_trunk:
        kind = "target"
    elif mtp_only and d2t is not None:
        kind = "mtp_sidecar_d2t"
    elif mtp_only and output_shape is not None and len(output_shape) == 2 and output_shape[1] == vocab:
        kind = "mtp_sidecar_full"
    else:
        kind = "other"

    return GgufReport(
        path=str(header.path),
        file_size=header.file_size,
        n_tensors=len(tensors),
        architecture=arch,
        kind=kind,
        vocab_size=vocab,
        n_embd=hparam("embedding_length"),
        block_count=block_count,
        trunk_layers=None if block_count is None else block_count - nextn,
        nextn_layers=nextn,
        output_shape=output_shape,
        tensor_types=dict(sorted(Counter(t.type_name for t in tensors).items())),
        problem=problem,
        **d2t_facts,
    )


def _d2t_problem(ids: np.ndarray[Any, Any], vocab: int | None, unique: bool) -> str | None:
    """Why a d2t map cannot be drafted with (llama.cpp aborts on an id outside the vocabulary), or None."""
    if ids.dtype.kind not in "iu":
        return f"its d2t map holds {ids.dtype} values, not token ids"
    if vocab is not None and ids.size:
        bad = np.flatnonzero((ids < 0) | (ids >= vocab))
        if bad.size:
            i = int(bad[0])
            return (f"its d2t map sends draft row {i} to token {int(ids[i])}, outside its vocabulary of {vocab} "
                    f"tokens ({bad.size} of {ids.size} ids out of range); llama.cpp would abort on it")
    if not unique:
        return "its d2t map sends two draft rows to the same token"
    return None


_REPORTS: FileCache[GgufReport] = FileCache(64)
