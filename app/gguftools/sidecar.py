"""Build a FastMTP draft sidecar from a qwen35 target: its MTP head alone, optionally d2t-trimmed.

A sidecar is an "mtp_only" qwen35 file: no trunk layers, the MTP block at index ``n_trunk``, the token
embedding, the output norm and an LM head. The d2t kind keeps only the LM-head rows of a draft
vocabulary (the ``vocab_size`` most frequent tokens plus the tokens a chat needs) and stores their
target ids in an I64 tensor ``d2t``. Rows are copied as raw bytes of any tensor type, never requantized.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor

from app.core import defaults
from app.core.errors import SidecarError
from app.gguftools.counts import TokenCounts
from app.gguftools.d2t import check_d2t
from app.gguftools.inspect import GgufReport
from app.gguftools.qwen35 import ARCH
from app.gguftools.reader import architecture, field_value, open_gguf, tensors_by_name
from app.gguftools.tokenizer import Tokenizer, TokenType, tokenizer_from_reader
from app.gguftools.writer import KVItem, TensorPlan, kv_from_reader, kv_str, kv_u32, plan_array, write_gguf

WriteProgress = Callable[[str, int, int], None]
_CHUNK_BYTES = 1 << 26
SIDECAR_KEY_PREFIX = "fastmtp.sidecar."


@dataclass(frozen=True)
class SidecarReport:
    """What :func:`build_sidecar` wrote; ``to_dict()`` is JSON-ready."""

    path: str
    kind: Literal["mtp_sidecar_full", "mtp_sidecar_d2t"]
    target: str
    n_vocab: int
    n_draft: int
    n_embd: int
    mtp_layer: int
    head_type: str
    file_size: int
    tensors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SidecarSource:
    """An opened, checked qwen35 target (or full sidecar) to build sidecars from."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.reader: GGUFReader = open_gguf(self.path)
        name = self.path.name
        arch = architecture(self.reader)
        if arch != ARCH:
            raise SidecarError(
                f"{name} is a '{arch or 'unknown'}' model; FastMTP sidecars are built from Qwen3.5 (qwen35) models.",
                "Choose the Qwen3.8-27B target GGUF (or another qwen35 model with an MTP head).",
                kind="wrong-architecture",
            )
        self.tensors = tensors_by_name(self.reader)
        if "d2t" in self.tensors:
            raise SidecarError(
                f"{name} is already a trimmed (d2t) sidecar.",
                "Build from the target model or from an untrimmed (--full) sidecar.",
                kind="already-trimmed",
            )
        block_count = _int(field_value(self.reader, f"{ARCH}.block_count"))
        nextn = _int(field_value(self.reader, f"{ARCH}.nextn_predict_layers")) or 0
        self.mtp_layer = (block_count or 0) - nextn
        if nextn <= 0 or f"blk.{self.mtp_layer}.nextn.eh_proj.weight" not in self.tensors:
            raise SidecarError(
                f"{name} has no MTP (nextn) block, so there is no draft head to extract.",
                "Use a GGUF converted with its MTP layer (llama.cpp keeps it unless --no-mtp was given).",
                kind="no-mtp-head",
            )
        self.tokenizer: Tokenizer = tokenizer_from_reader(self.reader, name)
        self.n_vocab = self.tokenizer.n_vocab
        embd = self.tensors.get("token_embd.weight")
        if embd is None or len(embd.shape) != 2 or int(embd.shape[1]) != self.n_vocab:
            raise SidecarError(
                f"{name} has no token embedding matching its {self.n_vocab}-token vocabulary.",
                "The file is not a complete model; fetch it again.",
                kind="no-token-embedding",
            )
        self.n_embd = int(embd.shape[0])

    def mtp_tensor_names(self) -> list[str]:
        prefix = f"blk.{self.mtp_layer}."
        return [t.name for t in self.reader.tensors if t.name.startswith(prefix)]


def build_sidecar(
    target: str | os.PathLike[str] | SidecarSource,
    out: str | os.PathLike[str],
    vocab_size: int = defaults.DRAFT_VOCAB,
    counts: TokenCounts | None = None,
    full: bool = False,
    *,
    draft_ids: Sequence[int] | None = None,
    on_write: WriteProgress | None = None,
) -> SidecarReport:
    """Write the MTP sidecar of ``target`` to ``out``.

    Args:
        target: the qwen35 target model (or an untrimmed sidecar), or an already opened source.
        out: the sidecar file to write (written as ``<out>.partial``, then renamed).
        vocab_size: draft vocabulary size of the d2t sidecar.
        counts: token frequencies; without them the lowest ids are taken (BPE ids follow merge order,
            which roughly follows frequency).
        full: write the untrimmed sidecar (whole LM head, no ``d2t``).
        draft_ids: the draft vocabulary itself instead of ``vocab_size``/``counts`` (chat tokens are added).
        on_write: ``on_write(tensor, bytes_done, bytes_total)`` after each chunk written (the LM-head rows are
            sliced as they are written); an exception it raises stops the build and no file is left.

    Raises:
        SidecarError: the target is not a qwen35 model with an MTP block, or the vocabulary request is invalid.
        GGUFError: a file cannot be read or written.
    """
    source = target if isinstance(target, SidecarSource) else SidecarSource(target)
    out = Path(out)
    if out.resolve() == source.path.resolve():
        raise SidecarError("The sidecar would overwrite its target model.", "Choose another output file name.",
                           kind="would-overwrite-target")

    mtp_names = source.mtp_tensor_names()
    shared_head = f"blk.{source.mtp_layer}.nextn.shared_head_head.weight"
    plans: list[TensorPlan] = [_copy_plan(source.tensors["token_embd.weight"])]
    if "output_norm.weight" in source.tensors:
        plans.append(_copy_plan(source.tensors["output_norm.weight"]))

    if full:
        ids = None
        head = source.tensors.get("output.weight")
        if head is not None:
            plans.append(_copy_plan(head))
        plans += [_copy_plan(source.tensors[n]) for n in mtp_names]
        head_type = (head or source.tensors["token_embd.weight"]).tensor_type.name
    else:
        if draft_ids is not None:
            ids = explicit_draft_vocab(draft_ids, source.n_vocab, source.tokenizer)
        else:
            ids = select_draft_vocab(source.tokenizer, vocab_size, counts)
        # The MTP graph uses nextn.shared_head_head as its LM head when present, else output, else the embedding.
        head_name = next(n for n in (shared_head, "output.weight", "token_embd.weight") if n in source.tensors)
        head = source.tensors[head_name]
        plans.append(_rows_plan("output.weight", head, ids))
        plans.append(plan_array("d2t", ids.astype(np.int64), GGMLQuantizationType.I64))
        plans += [_copy_plan(source.tensors[n]) for n in mtp_names if n != shared_head]
        head_type = head.tensor_type.name

    kind: Literal["mtp_sidecar_full", "mtp_sidecar_d2t"] = "mtp_sidecar_full" if full else "mtp_sidecar_d2t"
    n_draft = source.n_vocab if ids is None else int(ids.size)
    kv: list[KVItem] = kv_from_reader(source.reader, skip=lambda key: key.startswith(SIDECAR_KEY_PREFIX))
    kv += [
        kv_str(SIDECAR_KEY_PREFIX + "kind", "full" if full else "d2t"),
        kv_u32(SIDECAR_KEY_PREFIX + "draft_vocab_size", n_draft),
    ]
    path = write_gguf(out, ARCH, kv, plans if on_write is None else _watched(plans, on_write))
    return SidecarReport(
        path=str(path),
        kind=kind,
        target=str(source.path),
        n_vocab=source.n_vocab,
        n_draft=n_draft,
        n_embd=source.n_embd,
        mtp_layer=source.mtp_layer,
        head_type=head_type,
        file_size=path.stat().st_size,
        tensors=[p.name for p in plans],
    )


def select_draft_vocab(
    tokenizer: Tokenizer, vocab_size: int, counts: TokenCounts | None = None
) -> npt.NDArray[np.int64]:
    """The draft vocabulary: chat tokens, then the most frequent tokens, then the lowest ids; sorted.

    Raises:
        SidecarError: ``vocab_size`` is out of range, or the counts name tokens the target does not have.
    """
    n_vocab = tokenizer.n_vocab
    if not 0 < vocab_size <= n_vocab:
        raise SidecarError(
            f"A draft vocabulary of {vocab_size} tokens is impossible for a {n_vocab}-token model.",
            f"Choose a size between 1 and {n_vocab} ({defaults.DRAFT_VOCAB} is the usual FastMTP size).",
            kind="bad-draft-vocab",
        )
    if counts is not None and counts.max_id() >= n_vocab:
        raise SidecarError(
            f"The token counts name token {counts.max_id()}, but the model has only {n_vocab} tokens.",
            "The counts come from another model: count the corpus again with this model's tokenizer.",
            kind="bad-draft-vocab",
        )
    specials = tokenizer.special_ids()
    if len(specials) > vocab_size:
        raise SidecarError(
            f"A draft vocabulary of {vocab_size} tokens cannot hold the model's {len(specials)} chat tokens.",
            f"Choose a size of at least {len(specials)}.",
            kind="bad-draft-vocab",
        )
    chosen = dict.fromkeys(specials)
    for token in _candidates(tokenizer, counts):
        if len(chosen) >= vocab_size:
            break
        chosen.setdefault(token)
    return _checked(np.array(sorted(chosen), dtype=np.int64), n_vocab)


def _candidates(tokenizer: Tokenizer, counts: TokenCounts | None) -> Iterator[int]:
    if counts is not None:
        yield from counts.ranked()
    unused = int(TokenType.UNUSED)
    yield from (i for i, t in enumerate(tokenizer.token_types) if t != unused)
    yield from (i for i, t in enumerate(tokenizer.token_types) if t == unused)


def explicit_draft_vocab(ids: Sequence[int], n_vocab: int, tokenizer: Tokenizer) -> npt.NDArray[np.int64]:
    """A caller-given draft vocabulary, checked, plus the chat tokens; sorted.

    Raises:
        SidecarError: an id repeats or lies outside the vocabulary.
    """
    arr = np.asarray(list(ids), dtype=np.int64)
    if arr.size == 0:
        raise SidecarError("The draft vocabulary is empty.", "Give at least one token id.", kind="bad-draft-vocab")
    uniq = np.unique(arr)
    if uniq.size != arr.size:
        raise SidecarError("The draft vocabulary lists a token more than once.", "Give each token id once.",
                           kind="bad-draft-vocab")
    _checked(uniq, n_vocab)
    return _checked(np.union1d(uniq, np.array(tokenizer.special_ids(), dtype=np.int64)), n_vocab)


def _checked(ids: npt.NDArray[np.int64], n_vocab: int) -> npt.NDArray[np.int64]:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n_vocab):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise SidecarError(
            f"The draft vocabulary names token {bad}, outside the model's {n_vocab} tokens.",
            "Use token ids of this model (0 to vocabulary size - 1).",
            kind="bad-draft-vocab",
        )
    if np.any(np.diff(ids) <= 0):
        raise SidecarError("The draft vocabulary has repeated or unsorted ids.", "This is a bug in FastMTP Chat.",
                           kind="bad-draft-vocab")
    return ids


def read_d2t_ids(sidecar: Path) -> npt.NDArray[np.int64] | None:
    """The absolute target ids of a d2t sidecar's draft vocabulary; None for a full sidecar (lazy header: the
    vocabulary is not read)."""
    from app.gguftools.header import gguf_header

    header = gguf_header(sidecar)
    if header.tensor("d2t") is None:
        return None
    return np.asarray(header.read_tensor("d2t"), dtype=np.int64).reshape(-1)


def check_pair(target: GgufReport, sidecar: GgufReport) -> None:
    """Raise SidecarError unless ``sidecar`` is an MTP sidecar that fits ``target`` (a d2t map included:
    distinct ids of the target's vocabulary, see ``check_d2t``)."""
    if not sidecar.is_sidecar:
        raise SidecarError(
            f"{Path(sidecar.path).name} is not an MTP draft sidecar (it looks like: {sidecar.kind}).",
            "Choose the FastMTP sidecar GGUF, or build one from the target.",
            kind="not-a-sidecar",
        )
    problems = []
    if sidecar.architecture != target.architecture:
        problems.append(f"architecture {sidecar.architecture} vs {target.architecture}")
    if sidecar.n_embd != target.n_embd:
        problems.append(f"embedding width {sidecar.n_embd} vs {target.n_embd}")
    if sidecar.vocab_size != target.vocab_size:
        problems.append(f"vocabulary {sidecar.vocab_size} vs {target.vocab_size} tokens")
    if problems:
        raise SidecarError(
            f"The sidecar {Path(sidecar.path).name} was not made for the model {Path(target.path).name} "
            f"({'; '.join(problems)}).",
            "Use the sidecar released for this model, or build one from it.",
            kind="sidecar-mismatch",
        )
    check_d2t(sidecar.path, target.vocab_size)


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _rows(tensor: ReaderTensor) -> npt.NDArray[Any]:
    """The tensor's data as (rows, bytes or values per row), still memory-mapped."""
    data = np.asarray(tensor.data)
    n_rows = int(np.prod(tensor.shape[1:], dtype=np.int64)) if len(tensor.shape) > 1 else 1
    return data.reshape(n_rows, -1)


def _copy_plan(tensor: ReaderTensor) -> TensorPlan:
    def chunks() -> Iterator[npt.NDArray[Any]]:
        rows = _rows(tensor)
        step = max(1, _CHUNK_BYTES // max(1, rows[:1].nbytes))
        for start in range(0, rows.shape[0], step):
            yield rows[start : start + step]

    return TensorPlan(tensor.name, tensor.tensor_type, tuple(int(d) for d in tensor.shape), chunks)


def _rows_plan(name: str, tensor: ReaderTensor, ids: npt.NDArray[np.int64]) -> TensorPlan:
    """The rows ``ids`` of a 2-D tensor, copied as raw bytes (a row is a whole number of quant blocks)."""
    if len(tensor.shape) != 2:
        raise SidecarError(f"The LM head {tensor.name} is not a matrix.", "The target model is damaged.",
                           kind="damaged-model")

    def chunks() -> Iterator[npt.NDArray[Any]]:
        rows = _rows(tensor)
        step = max(1, _CHUNK_BYTES // max(1, rows[:1].nbytes))
        for start in range(0, ids.size, step):
            yield rows[ids[start : start + step]]

    return TensorPlan(name, tensor.tensor_type, (int(tensor.shape[0]), int(ids.size)), chunks)


def _watched(plans: list[TensorPlan], on_write: WriteProgress) -> list[TensorPlan]:
    """The same plans, reporting the bytes written after every chunk."""
    total = sum(plan.nbytes for plan in plans)
    done = [0]

    def watch(plan: TensorPlan) -> TensorPlan:
        def chunks() -> Iterator[Any]:
            for chunk in plan.chunks():
                yield chunk
                done[0] += chunk.nbytes if isinstance(chunk, np.ndarray) else memoryview(chunk).nbytes
                on_write(plan.name, done[0], total)

        return replace(plan, chunks=chunks)

    return [watch(plan) for plan in plans]
