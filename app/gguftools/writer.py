"""Stream a GGUF file to disk: header, KV and tensor infos through ``GGUFWriter``, then tensor data.

Tensor data is written chunk by chunk after the header, so a model far larger than memory (a 27B at
15+ GB) can be written. The file appears under its final name only when complete: it is written to
``<out>.partial`` and renamed; on any error the partial file is removed. An all-zero chunk (a demo model's
zero matrices; zero bytes are zero values in every ggml type) is seeked past instead of written, so it is a
hole of a sparse file: the file's apparent size stays, the disk holds only the non-zero data.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

from app.core import safe_paths
from app.core.errors import GGUFError
from app.gguftools.reader import HEADER_KEYS

Chunk = npt.NDArray[Any] | bytes | memoryview
ChunkSource = Callable[[], Iterable[Chunk]]

_PLAIN_TYPES: dict[GGMLQuantizationType, type[np.generic]] = {
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


@dataclass(frozen=True)
class KVItem:
    """One metadata pair; ``sub_type`` is the item type of an array."""

    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


def kv_u32(key: str, value: int) -> KVItem:
    return KVItem(key, int(value), GGUFValueType.UINT32)


def kv_f32(key: str, value: float) -> KVItem:
    return KVItem(key, float(value), GGUFValueType.FLOAT32)


def kv_bool(key: str, value: bool) -> KVItem:
    return KVItem(key, bool(value), GGUFValueType.BOOL)


def kv_str(key: str, value: str) -> KVItem:
    return KVItem(key, value, GGUFValueType.STRING)


def kv_array(key: str, values: Sequence[Any], item_type: GGUFValueType) -> KVItem:
    return KVItem(key, list(values), GGUFValueType.ARRAY, item_type)


def row_bytes(ggml_type: GGMLQuantizationType, n_per_row: int) -> int:
    """Bytes of one row of ``n_per_row`` values: a whole number of quant blocks."""
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if n_per_row % block_size:
        raise GGUFError(
            f"A row of {n_per_row} values cannot be stored as {ggml_type.name} (blocks of {block_size}).",
            "Choose a tensor type whose block size divides the row length.",
        )
    return n_per_row // block_size * type_size


@dataclass(frozen=True)
class TensorPlan:
    """A tensor to write: name, type, shape in ggml order (``ne``: row length first) and its bytes.

    ``chunks`` is called once, while writing, and yields the raw data in order (numpy arrays are
    written as their bytes), so data can be produced or copied piece by piece.
    """

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]
    chunks: ChunkSource

    @property
    def nbytes(self) -> int:
        n_rows = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 else 1
        return n_rows * row_bytes(self.ggml_type, self.shape[0])


def plan_array(name: str, array: npt.NDArray[Any], ggml_type: GGMLQuantizationType | None = None) -> TensorPlan:
    """A plan for an in-memory numpy array (F32/F16/I32/I64...: the array's own type by default)."""
    if ggml_type is None:
        matches = [t for t, np_type in _PLAIN_TYPES.items() if array.dtype == np.dtype(np_type)]
        if not matches:
            raise GGUFError(f"Tensor {name} has unsupported dtype {array.dtype}.", "This is a bug in FastMTP Chat.")
        ggml_type = matches[0]
    elif ggml_type in _PLAIN_TYPES:
        array = array.astype(_PLAIN_TYPES[ggml_type], copy=False)
    data = np.ascontiguousarray(array)
    shape = tuple(reversed(data.shape)) if ggml_type in _PLAIN_TYPES else _quant_ne(data.shape, ggml_type)
    return TensorPlan(name, ggml_type, tuple(int(d) for d in shape), lambda: (data,))


def _quant_ne(byte_shape: tuple[int, ...], ggml_type: GGMLQuantizationType) -> tuple[int, ...]:
    """ggml shape of raw quantized bytes given as ``(rows..., bytes_per_row)``."""
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if byte_shape[-1] % type_size:
        raise GGUFError(f"{byte_shape[-1]} bytes are not whole {ggml_type.name} blocks.", "This is a bug.")
    return (byte_shape[-1] // type_size * block_size, *reversed(byte_shape[:-1]))


def kv_from_reader(reader: GGUFReader, skip: Callable[[str], bool] = lambda _key: False) -> list[KVItem]:
    """All KV pairs of an open file, in file order, ready to write into another (empty arrays dropped)."""
    items: list[KVItem] = []
    for key, field in reader.fields.items():
        if key in HEADER_KEYS or key == "general.architecture" or skip(key):
            continue
        vtype = GGUFValueType(field.types[0])
        if vtype == GGUFValueType.ARRAY:
            if len(field.data) == 0:
                continue
            items.append(KVItem(key, field.contents(), vtype, GGUFValueType(field.types[-1])))
        else:
            items.append(KVItem(key, field.contents(), vtype))
    return items


def write_gguf(out: str | os.PathLike[str], arch: str, kv: Iterable[KVItem], tensors: Sequence[TensorPlan]) -> Path:
    """Write a complete GGUF file atomically and return its path.

    Raises:
        GGUFError: a tensor produced the wrong number of bytes, or the disk write failed.
    """
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        safe_paths.open_new(partial, "partial GGUF file").close()  # a link planted here: refused, not followed
        writer = GGUFWriter(partial, arch)
        for item in kv:
            writer.add_key_value(item.key, item.value, item.vtype, item.sub_type)
        for plan in tensors:
            _add_info(writer, plan)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        alignment = int(writer.data_alignment)
        with open(partial, "r+b") as fout:  # not "ab": appending would ignore the seeks past holes
            fout.seek(0, os.SEEK_END)
            _pad(fout, alignment)
            for plan in tensors:
                _write_data(fout, plan)
                _pad(fout, alignment)
            fout.truncate()  # a hole at the very end: the file still ends where its data does
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise GGUFError(f"Could not write {out}: {exc}.", "Check free disk space and write permission.") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return out


def _add_info(writer: GGUFWriter, plan: TensorPlan) -> None:
    np_shape = tuple(reversed(plan.shape))
    np_type = _PLAIN_TYPES.get(plan.ggml_type)
    if np_type is not None:
        writer.add_tensor_info(plan.name, np_shape, np.dtype(np_type), plan.nbytes)
    else:
        byte_shape = (*np_shape[:-1], row_bytes(plan.ggml_type, plan.shape[0]))
        writer.add_tensor_info(plan.name, byte_shape, np.dtype(np.uint8), plan.nbytes, raw_dtype=plan.ggml_type)


def _pad(fout: Any, alignment: int) -> None:
    pos = fout.tell()
    fout.write(b"\0" * (-pos % alignment))


def _as_bytes(chunk: Chunk) -> memoryview:
    if isinstance(chunk, np.ndarray):
        return np.ascontiguousarray(chunk).data.cast("B")
    return memoryview(chunk).cast("B")


def _all_zero(view: memoryview) -> bool:
    """Whether every byte is zero (the first byte decides most real data at once)."""
    return view.nbytes > 0 and view[0] == 0 and not np.frombuffer(view, dtype=np.uint8).any()


def _write_data(fout: Any, plan: TensorPlan) -> None:
    written = 0
    for chunk in plan.chunks():
        view = _as_bytes(chunk)
        if _all_zero(view):
            fout.seek(view.nbytes, os.SEEK_CUR)  # a hole; the final truncate() makes a trailing one part of the file
        else:
            fout.write(view)
        written += view.nbytes
    if written != plan.nbytes:
        raise GGUFError(
            f"Tensor {plan.name} produced {written:,} bytes, expected {plan.nbytes:,}.",
            "This is a bug in FastMTP Chat; the partial file was removed.",
        )


def repeat_bytes(pattern: bytes, total: int, chunk_size: int = 1 << 26) -> Iterator[memoryview]:
    """``total`` bytes made of ``pattern`` repeated, in chunks of about ``chunk_size`` bytes."""
    if total % len(pattern):
        raise GGUFError("A repeated pattern does not fill the tensor exactly.", "This is a bug.")
    reps = max(1, min(chunk_size, total) // len(pattern))
    block = memoryview(pattern * reps)
    remaining = total
    while remaining:
        n = min(remaining, len(block))
        yield block[:n]
        remaining -= n
