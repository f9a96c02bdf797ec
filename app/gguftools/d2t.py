"""Check a d2t sidecar's draft-to-target map before llama.cpp sees it.

The MTP graph scatters draft row ``i`` to token ``d2t[i]`` with ``ggml_set_rows``: an id outside the
vocabulary aborts the process on the CPU (``GGML_ASSERT``) and writes out of bounds on CUDA, and a repeated
id silently loses a row. ``check_d2t`` refuses such a file with the file, the first bad id and its
position, and what to do; every native load of a sidecar runs it first (``Model(load_mtp=True)``, the
pair check, llama-server). The patched loader refuses the same files on its own (the backstop).

The GGUF header is read by the lazy reader (``app.gguftools.header``), without decoding the 248320 vocabulary
strings that ``GGUFReader`` turns into arrays (seconds per file): the check costs milliseconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from app.core.errors import GGUFError, SidecarError
from app.gguftools.header import LIMITS, gguf_header


@dataclass(frozen=True)
class TensorInfo:
    type: int
    shape: tuple[int, ...]  # ggml order: row length first
    offset: int  # absolute, in the file


@dataclass(frozen=True)
class SidecarHeader:
    n_vocab: int | None  # entries of tokenizer.ggml.tokens
    d2t: TensorInfo | None
    output: TensorInfo | None  # output.weight


def read_header(path: str | os.PathLike[str]) -> SidecarHeader:
    """The vocabulary size and the ``d2t`` / ``output.weight`` tensor infos of a GGUF file (its cached header).

    Raises:
        GGUFError: the file is missing, not GGUF, or its header is damaged.
    """
    header = gguf_header(path)

    def info(name: str) -> TensorInfo | None:
        tensor = header.tensor(name)
        return None if tensor is None else TensorInfo(tensor.type, tensor.shape, tensor.data_offset)

    return SidecarHeader(header.array_length("tokenizer.ggml.tokens"), info("d2t"), info("output.weight"))


D2T_ADVICE = ("The sidecar is damaged or was not made for this model. Download the model's FastMTP sidecar again, "
           "or build one from the target (`python -m app sidecar build --target TARGET.gguf --out SIDECAR.gguf`); "
           "until then chat with drafting off or the embedded MTP head.")


def check_d2t(path: str | os.PathLike[str], n_vocab: int | None = None) -> int | None:
    """Refuse a d2t sidecar llama.cpp cannot draft with; the number of draft ids, None without ``d2t``.

    ``n_vocab`` is the target's vocabulary size (default: the sidecar's own): every id must be in
    ``[0, n_vocab)`` and appear once, ``d2t`` must be a 1-D I64 tensor with one id per ``output.weight`` row.

    Raises:
        SidecarError: naming the file, the first bad id and its position, and what to do.
        GGUFError: the file cannot be read.
    """
    p = Path(path)
    header = read_header(p)
    d2t = header.d2t
    if d2t is None:
        return None
    vocab = n_vocab if n_vocab is not None else header.n_vocab
    if d2t.type != GGMLQuantizationType.I64:
        raise SidecarError(f"The d2t sidecar {p} stores its d2t map as {_type_name(d2t.type)}; llama.cpp needs "
                           "I64 (one 64-bit token id per draft row).", D2T_ADVICE, kind="bad-d2t-map")
    if not d2t.shape or any(d != 1 for d in d2t.shape[1:]):
        raise SidecarError(f"The d2t sidecar {p} has a d2t map of shape {list(d2t.shape)}; it must be 1-D "
                           "(one token id per draft row).", D2T_ADVICE, kind="bad-d2t-map")
    count = d2t.shape[0]
    if header.output is None or len(header.output.shape) != 2:
        raise SidecarError(f"The d2t sidecar {p} has a d2t map but no 2-D LM head (output.weight).", D2T_ADVICE,
                           kind="bad-d2t-map")
    rows = header.output.shape[1]
    if count != rows:
        raise SidecarError(f"The d2t sidecar {p} maps {count} draft rows, but its LM head (output.weight) has "
                           f"{rows} rows: there must be one id per row.", D2T_ADVICE, kind="bad-d2t-map")
    if count > LIMITS.array:  # a sparse file makes size free: never read gigabytes of ids (issue 37)
        raise SidecarError(f"The d2t sidecar {p} claims {count:,} draft rows, more than any vocabulary has.",
                           D2T_ADVICE, kind="bad-d2t-map")
    if d2t.offset + 8 * count > p.stat().st_size:
        raise GGUFError(f"{p} is incomplete: its d2t map ends past the end of the file.",
                        "The download or copy was cut short: fetch the file again.", kind="truncated")
    ids = np.fromfile(p, dtype="<i8", count=count, offset=d2t.offset)
    if vocab is not None:
        bad = np.flatnonzero((ids < 0) | (ids >= vocab))
        if bad.size:
            i = int(bad[0])
            raise SidecarError(
                f"The d2t sidecar {p} maps draft row {i} to token {int(ids[i])}, outside the target's "
                f"vocabulary of {vocab} tokens (ids 0 to {vocab - 1}); {bad.size} of its {count} ids are out "
                "of range. llama.cpp would abort on it.", D2T_ADVICE, kind="bad-d2t-map")
    order = np.argsort(ids, kind="stable")
    repeats = order[1:][ids[order[1:]] == ids[order[:-1]]]  # every later position of an id seen before
    if repeats.size:
        i = int(repeats.min())
        first = int(np.flatnonzero(ids == ids[i])[0])
        raise SidecarError(
            f"The d2t sidecar {p} maps draft rows {first} and {i} to the same token {int(ids[i])}; every draft "
            f"row needs its own token ({repeats.size} repeated ids).", D2T_ADVICE, kind="bad-d2t-map")
    return count


def _type_name(ggml_type: int) -> str:
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


def check_sidecars_for(target: str | os.PathLike[str], *sidecars: str | os.PathLike[str] | None) -> None:
    """``check_d2t`` of each sidecar given against ``target``'s vocabulary: for commands handed both files,
    before anything runs (a benchmark would otherwise fail halfway)."""
    n_vocab = read_header(target).n_vocab
    for sidecar in sidecars:
        if sidecar is not None:
            check_d2t(sidecar, n_vocab)
