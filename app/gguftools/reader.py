"""Open GGUF files whole with the ``gguf`` package, with errors a user understands.

``GGUFReader`` parses every array item (a 248,320-token vocabulary and its merges: seconds per file), so it is
kept for the jobs that need a file's full contents: building a sidecar, loading the tokenizer, copying KV pairs
and tensors with the writer. Everything that only asks what a file is (``gguf inspect``, ``models add|scan``,
the sidecar and pair checks, the d2t check, the demo table) reads the lazy, cached header of
``app.gguftools.header`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader, GGUFValueType, ReaderField, ReaderTensor

from app.core.errors import GGUFError
from app.gguftools.header import gguf_header

# Keys the reader synthesises from the file header; they are not KV pairs of the file.
HEADER_KEYS = frozenset({"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"})


class _Reader(GGUFReader):
    """``GGUFReader`` whose byte-fetch helper slices a plain ndarray view of the memory map.

    The stock helper slices the ``np.memmap`` itself, and every slice pays numpy's memmap bookkeeping:
    a file with a 248320-token vocabulary takes 15 s to open on a small machine instead of 3 s.
    Parsing stays entirely the package's; only the view its helper slices changes.
    """

    def _get(
        self,
        offset: int,
        dtype: npt.DTypeLike,
        count: int = 1,
        override_order: Literal["I", "S", "<"] | None = None,
    ) -> npt.NDArray[Any]:
        plain: npt.NDArray[np.uint8] | None = self.__dict__.get("_plain")
        if plain is None:
            plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
        dt = np.dtype(dtype)
        order = self.byte_order if override_order is None else override_order
        if order != "I":
            dt = dt.newbyteorder(order)
        count = int(count)
        return plain[offset : offset + dt.itemsize * count].view(dt)


def open_gguf(path: str | os.PathLike[str]) -> GGUFReader:
    """Open a GGUF file for reading (memory-mapped), every KV array parsed: only where the full contents are
    needed (sidecar building, the tokenizer, the writer's copies); ``app.gguftools.header`` reads headers.

    Raises:
        GGUFError: the file is missing, not a GGUF file, or cut short.
    """
    p = Path(path)
    if not p.is_file():
        raise GGUFError(f"The model file {p} does not exist.", "Check the path, or download the file again.",
                        kind="not-found")
    gguf_header(p)  # the bounded reader first: a header claiming more than a real one holds is refused in words
    size = p.stat().st_size
    try:
        reader = _Reader(p)
    except Exception as exc:  # the package raises ValueError, IndexError, KeyError, ... on bad bytes
        if size < 4 or p.read_bytes()[:4] != b"GGUF":
            raise GGUFError(
                f"{p.name} is not a GGUF model file.",
                "Choose a .gguf file (llama.cpp's model format).",
                kind="not-gguf",
            ) from exc
        raise GGUFError(
            f"{p.name} is damaged or incomplete: its header cannot be read ({exc}).",
            "The download or copy was probably cut short: fetch the file again.",
            kind="truncated",
        ) from exc
    data_end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if data_end > size:
        raise GGUFError(
            f"{p.name} is incomplete: it is {size:,} bytes but its tensors need {data_end:,}.",
            "The download or copy was cut short: fetch the file again.",
            kind="truncated",
        )
    return reader


def field_value(reader: GGUFReader, key: str) -> Any:
    """The Python value of a KV field (str, int, float, bool or a list), or None when absent."""
    field: ReaderField | None = reader.get_field(key)
    if field is None:
        return None
    return field.contents()


def array_length(reader: GGUFReader, key: str) -> int | None:
    """Number of items of an array field without decoding them, or None when absent."""
    field: ReaderField | None = reader.get_field(key)
    if field is None or not field.types or field.types[0] != GGUFValueType.ARRAY:
        return None
    return len(field.data)


def tensors_by_name(reader: GGUFReader) -> dict[str, ReaderTensor]:
    return {t.name: t for t in reader.tensors}


def architecture(reader: GGUFReader) -> str:
    value = field_value(reader, "general.architecture")
    return value if isinstance(value, str) else ""
