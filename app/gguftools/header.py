"""One lazy reader for GGUF headers: the KV pairs and tensor infos, without reading what nobody asked for.

``gguf``'s ``GGUFReader`` turns every item of every array into numpy views: the 248,320 vocabulary strings and
as many merges of a Qwen file take seconds on a small machine, while the app only wants a few scalars, an
array's length and the tensor infos. Here scalars and strings are decoded, arrays are stepped over (a string
array by its lengths alone, in a tight loop: about 25-40 ms for the two big arrays of Qwen's vocabulary on a
2-core Xeon) and kept as (item type, count, offset), so their values are read later and only on demand.

Headers are cached per process by (resolved path, size, mtime_ns, inode, ctime) (:class:`FileCache`): an
unchanged file is read once; a changed one is read again.

Hostile input is refused in words (:class:`GGUFError`), never with a MemoryError or a bare traceback: every
count and length is checked against the bytes the file has left before it is used, and against what a real
header holds (:data:`LIMITS`): a sparse file makes its size free, so a 3 GiB "string" in a file of holes must
be refused by its claim, not read (issue 37).
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from app.core.errors import GGUFError
from app.core.regular_files import kind_of

VERSIONS = (2, 3)  # what llama.cpp and the gguf package read
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NESTING = 8  # arrays of arrays: deeper than any real file, shallow enough for the stack


@dataclass(frozen=True)
class Limits:
    """What a real GGUF header holds, with room to spare: Qwen's vocabulary is 248,320 strings (about 3 MiB of
    tokens, 4 MiB of merges), its chat template about 10 KiB, its KV pairs about 50 and its tensors a few
    thousand. A claim beyond these is a damaged or hostile file, whatever the file's (possibly sparse) size."""

    string: int = 1 << 20  # one string value or array item: 1 MiB
    template: int = 8 << 20  # tokenizer.chat_template (and its named variants): 8 MiB
    name: int = 64 << 10  # a key or a tensor name: 64 KiB (ggml's tensor names are under 64 bytes)
    array: int = 1 << 23  # items of one array: 8,388,608
    nested: int = 1 << 16  # arrays inside arrays, all of a file's together: 65,536 (real files have none)
    metadata: int = 256 << 20  # all KV pairs together: 256 MiB
    kv: int = 1 << 16  # KV pairs: 65,536
    tensors: int = 1 << 20  # tensor infos: 1,048,576


LIMITS = Limits()

_SCALARS: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"), GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"), GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"), GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"), GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"), GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}  # fmt: skip
_DTYPES: dict[int, str] = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2", GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4", GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8", GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}  # fmt: skip
_TENSOR_DTYPES: dict[int, str] = {
    GGMLQuantizationType.F32: "<f4", GGMLQuantizationType.F16: "<f2", GGMLQuantizationType.F64: "<f8",
    GGMLQuantizationType.I8: "<i1", GGMLQuantizationType.I16: "<i2", GGMLQuantizationType.I32: "<i4",
    GGMLQuantizationType.I64: "<i8",
}  # fmt: skip
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MIN_KV = 8 + 4 + 1  # an empty key, the type, a one-byte value
_MIN_TENSOR = 8 + 4 + 4 + 8  # an empty name, no dimensions, the type, the offset
_CUT_ADVICE = "The download or copy was probably cut short, or the file was not fully written: fetch or build it again."


@dataclass(frozen=True)
class ArrayRef:
    """An array value left in the file: what its items are, how many, and where they start."""

    item_type: GGUFValueType
    count: int
    offset: int  # absolute offset of the first item
    nbytes: int  # bytes its items take, up to the next KV pair


@dataclass(frozen=True)
class Field:
    """One KV pair's type and value: a decoded scalar or string, or an :class:`ArrayRef` for an array."""

    type: GGUFValueType
    value: Any


@dataclass(frozen=True)
class Tensor:
    """One tensor info. Shapes are in ggml order (row length first)."""

    name: str
    type: int  # a GGMLQuantizationType value
    shape: tuple[int, ...]
    offset: int  # as stored: from the start of the data section
    data_offset: int  # absolute, in the file
    n_elements: int
    n_bytes: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.type).name


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF file's header: its KV pairs in file order (arrays not read) and its tensor infos."""

    path: Path
    file_size: int
    mtime_ns: int
    version: int
    alignment: int
    data_offset: int  # where the data section starts (aligned)
    fields: dict[str, Field]
    tensors: tuple[Tensor, ...]
    _by_name: dict[str, Tensor] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update((t.name, t) for t in self.tensors)

    @property
    def kv_count(self) -> int:
        return len(self.fields)

    @property
    def tensor_count(self) -> int:
        return len(self.tensors)

    @property
    def architecture(self) -> str:
        value = self.value("general.architecture")
        return value if isinstance(value, str) else ""

    def value(self, key: str) -> Any:
        """A scalar's or string's value, an :class:`ArrayRef` for an array, None when the key is absent."""
        item = self.fields.get(key)
        return None if item is None else item.value

    def array_length(self, key: str) -> int | None:
        """Items of an array field (nothing read), or None when the key is absent or not an array."""
        item = self.fields.get(key)
        return item.value.count if item is not None and isinstance(item.value, ArrayRef) else None

    def contents(self, key: str) -> Any:
        """What ``GGUFReader``'s ``field.contents()`` gives: the value, an array's items read now; None if absent."""
        item = self.fields.get(key)
        if item is None:
            return None
        return self.read_array(key) if isinstance(item.value, ArrayRef) else item.value

    def read_array(self, key: str) -> list[Any]:
        """The items of the array field ``key``, read from the file now (strings decoded, numbers as Python's).

        Raises:
            GGUFError: ``key`` is not an array of this file, or the file changed since its header was read.
        """
        ref = self.value(key)
        if not isinstance(ref, ArrayRef):
            raise GGUFError(f"{self.path.name} has no array {key!r}.", "This is a bug in FastMTP Chat.",
                            kind="internal-error")
        raw = self._read(ref.offset, ref.nbytes)
        values, _end = _decode_array(raw, 0, ref.item_type, ref.count, self.path.name, key)
        return values

    def tensor(self, name: str) -> Tensor | None:
        return self._by_name.get(name)

    def read_tensor(self, name: str) -> npt.NDArray[Any]:
        """A tensor's data, read now (meant for small ones such as ``d2t``): plain types shaped in numpy order,
        quantized ones as their raw bytes.

        Raises:
            GGUFError: no such tensor, or the file changed since its header was read.
        """
        tensor = self.tensor(name)
        if tensor is None:
            raise GGUFError(f"{self.path.name} has no tensor {name!r}.", "This is a bug in FastMTP Chat.",
                            kind="internal-error")
        raw = self._read(tensor.data_offset, tensor.n_bytes)
        dtype = _TENSOR_DTYPES.get(tensor.type)
        if dtype is None:
            return np.frombuffer(raw, dtype=np.uint8)
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(reversed(tensor.shape)))

    def _read(self, offset: int, nbytes: int) -> bytes:
        """Bytes of the file as it was when its header was read (a changed file is refused, not misread)."""
        try:
            with self.path.open("rb") as f:
                now = os.fstat(f.fileno())
                if (now.st_size, now.st_mtime_ns) != (self.file_size, self.mtime_ns):
                    raise GGUFError(f"{self.path.name} changed while it was being read.", "Try again.",
                                    kind="file-changed")
                f.seek(offset)
                raw = f.read(nbytes)
        except OSError as exc:
            raise GGUFError(f"{self.path} cannot be read: {exc.strerror or exc}.",
                            "Check that the file is still there and readable.", kind="unreadable-file") from exc
        if len(raw) != nbytes:
            raise GGUFError(f"{self.path.name} changed while it was being read.", "Try again.", kind="file-changed")
        return raw


# ----------------------------------------------------------------------------- reading


def file_key(path: Path) -> tuple[str, int, int, int, int, int]:
    """(resolved path, size, mtime_ns, device, inode, ctime_ns) of a regular file: what the caches key on (a file
    replaced by one of the same size and mtime is another inode, or a later ctime).

    Raises:
        GGUFError: the path is missing, a folder, not a regular file, or cannot be looked at.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise GGUFError(f"The model file {path} does not exist.",
                        "Check the path, or download the file again.", kind="not-found") from None
    except OSError as exc:
        raise GGUFError(f"{path} cannot be read: {exc.strerror or exc}.",
                        "Check the file's permissions (and those of its folders).", kind="unreadable-file") from None
    if stat.S_ISDIR(st.st_mode):
        raise GGUFError(f"{path} is a folder, not a GGUF model file.", "Choose the .gguf file inside it.",
                        kind="not-a-file")
    if not stat.S_ISREG(st.st_mode):
        raise GGUFError(f"{path} is not a regular file ({kind_of(st.st_mode)}), so not a GGUF model file.",
                        "Choose a .gguf file (llama.cpp's model format).", kind="not-a-file")
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns


def read_gguf_header(path: str | os.PathLike[str]) -> GgufHeader:
    """Parse a GGUF file's header (uncached; :func:`gguf_header` is the cached way).

    Raises:
        GGUFError: the file is missing or unreadable, not GGUF, its header is damaged or cut short, or its
            tensors reach past the end of the file.
    """
    p = Path(path)
    file_key(p)
    try:
        with p.open("rb") as f:
            st = os.fstat(f.fileno())
            head = f.read(24)
            if len(head) < 4 or head[:4] != b"GGUF":
                raise GGUFError(f"{p.name} is not a GGUF model file.",
                                "Choose a .gguf file (llama.cpp's model format).", kind="not-gguf")
            if len(head) < 24:
                raise GGUFError(f"{p.name} is damaged or incomplete: it ends inside its first 24 bytes.", _CUT_ADVICE,
                                kind="truncated")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _Walk(data, len(data), p.name).header(p, st.st_mtime_ns)
    except OSError as exc:
        raise GGUFError(f"{p} cannot be read: {exc.strerror or exc}.",
                        "Check the file's permissions, or copy it somewhere readable.", kind="unreadable-file") from exc


class _Walk:
    """A cursor over the mapped file; every read is checked against the bytes the file has left."""

    def __init__(self, data: mmap.mmap, size: int, name: str) -> None:
        self.data = data
        self.size = size
        self.name = name
        self.pos = 0
        self.nested = 0  # arrays seen inside arrays so far (LIMITS.nested)

    def damaged(self, what: str) -> GGUFError:
        return GGUFError(f"{self.name} is damaged or incomplete: {what}.", _CUT_ADVICE)

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.damaged(f"its header ends inside {what} (at byte {self.pos:,} of {self.size:,})")

    def u32(self, what: str) -> int:
        self.need(4, what)
        value: int = _U32.unpack_from(self.data, self.pos)[0]
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        value: int = _U64.unpack_from(self.data, self.pos)[0]
        self.pos += 8
        return value

    def string(self, what: str, cap: int) -> str:
        n = self.u64(what)
        if n > self.size - self.pos:
            raise self.damaged(f"{what} claims {n:,} bytes at byte {self.pos:,}, but only {self.size - self.pos:,} "
                               "are left in the file")
        if n > cap:  # a sparse file makes its size free: the claim itself is bounded
            raise self.damaged(f"{what} claims {n:,} bytes, more than the {cap:,} any real GGUF file holds there")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.damaged(f"{what} is not UTF-8 text") from None

    def header(self, path: Path, mtime_ns: int) -> GgufHeader:
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.data, 4)
        if version & 0xFFFF == 0 and version:
            raise GGUFError(f"{self.name} is a big-endian GGUF file; llama.cpp on this machine reads little-endian "
                            "ones only.", "Convert the model again without --bigendian.", kind="big-endian")
        if version not in VERSIONS:
            raise GGUFError(f"{self.name} is GGUF version {version}; FastMTP Chat reads versions 2 and 3.",
                            "Convert the model again with a current llama.cpp (convert_hf_to_gguf.py).",
                            kind="unsupported-gguf-version")
        self.pos = 24
        left = self.size - self.pos
        if n_kv > left // _MIN_KV:
            raise self.damaged(f"its header claims {n_kv:,} metadata pairs, more than a file of {self.size:,} bytes "
                               "can hold")
        if n_tensors > left // _MIN_TENSOR:
            raise self.damaged(f"its header claims {n_tensors:,} tensors, more than a file of {self.size:,} bytes "
                               "can hold")
        if n_kv > LIMITS.kv:
            raise self.damaged(f"its header claims {n_kv:,} metadata pairs; real files have a few dozen (at most "
                               f"{LIMITS.kv:,} are read)")
        if n_tensors > LIMITS.tensors:
            raise self.damaged(f"its header claims {n_tensors:,} tensors; real files have a few thousand (at most "
                               f"{LIMITS.tensors:,} are read)")
        fields: dict[str, Field] = {}
        for i in range(n_kv):
            key = self.string(f"the name of metadata pair {i}", LIMITS.name)
            if key in fields:
                raise self.damaged(f"the metadata key {key!r} appears twice")
            vtype = self.u32(f"the type of {key!r}")
            fields[key] = self.value(vtype, key)
            if self.pos - 24 > LIMITS.metadata:
                raise self.damaged(f"its metadata takes more than {LIMITS.metadata:,} bytes (at {key!r}), far more "
                                   "than any real model's")
        alignment = self.alignment(fields.get("general.alignment"))
        tensors = self.tensor_infos(n_tensors)
        data_offset = self.pos + (-self.pos % alignment)
        placed = tuple(Tensor(name, ttype, shape, offset, data_offset + offset, n, nbytes)
                       for name, ttype, shape, offset, n, nbytes in tensors)
        data_end = max((t.data_offset + t.n_bytes for t in placed), default=0)
        if data_end > self.size:
            raise GGUFError(f"{self.name} is incomplete: it is {self.size:,} bytes but its tensors need {data_end:,}.",
                            "The download or copy was cut short: fetch the file again.", kind="truncated")
        return GgufHeader(path, self.size, mtime_ns, version, alignment, data_offset, fields, placed)

    def value(self, vtype: int, key: str) -> Field:
        scalar = _SCALARS.get(vtype)
        if scalar is not None:
            self.need(scalar.size, f"the value of {key!r}")
            value = scalar.unpack_from(self.data, self.pos)[0]
            self.pos += scalar.size
            return Field(GGUFValueType(vtype), value)
        if vtype == GGUFValueType.STRING:
            cap = LIMITS.template if key.startswith("tokenizer.chat_template") else LIMITS.string
            return Field(GGUFValueType.STRING, self.string(f"the value of {key!r}", cap))
        if vtype == GGUFValueType.ARRAY:
            return Field(GGUFValueType.ARRAY, self.array(key, 0))
        raise self.damaged(f"the metadata value {key!r} has the unknown type {vtype} (GGUF's types are 0 to 12)")

    def array(self, key: str, depth: int) -> ArrayRef:
        if depth >= MAX_NESTING:
            raise self.damaged(f"the array {key!r} nests arrays more than {MAX_NESTING} deep")
        item = self.u32(f"the item type of the array {key!r}")
        count = self.u64(f"the length of the array {key!r}")
        start = self.pos
        left = self.size - start
        scalar = _SCALARS.get(item)
        least = scalar.size if scalar is not None else 8 if item == GGUFValueType.STRING else 12
        if item not in _SCALARS and item not in (GGUFValueType.STRING, GGUFValueType.ARRAY):
            raise self.damaged(f"the array {key!r} has items of the unknown type {item} (GGUF's types are 0 to 12)")
        if count > left // least:
            raise self.damaged(f"the array {key!r} claims {count:,} items, more than the {left:,} bytes left in the "
                               "file can hold")
        if count > LIMITS.array:
            raise self.damaged(f"the array {key!r} claims {count:,} items; real files have at most a few hundred "
                               f"thousand (at most {LIMITS.array:,} are read)")
        if item == GGUFValueType.ARRAY:
            self.nested += count
            if self.nested > LIMITS.nested:
                raise self.damaged(f"the array {key!r} holds more than {LIMITS.nested:,} arrays inside arrays; real "
                                   "files hold none")
        if count * least > LIMITS.metadata - (start - 24):
            raise self.damaged(f"its metadata takes more than {LIMITS.metadata:,} bytes (at the array {key!r}), far "
                               "more than any real model's")
        if scalar is not None:
            self.pos += count * scalar.size
        elif item == GGUFValueType.STRING:
            self.pos = self.skip_strings(start, count, key)
        else:
            for _ in range(count):
                self.array(key, depth + 1)
        return ArrayRef(GGUFValueType(item), count, start, self.pos - start)

    def skip_strings(self, pos: int, count: int, key: str) -> int:
        """Step over ``count`` length-prefixed strings without building them: the hot loop of the whole reader."""
        data, unpack, cap, longest = self.data, _U64.unpack_from, LIMITS.string, 0
        try:
            for _ in range(count):
                n = unpack(data, pos)[0]
                pos += 8 + n
                longest = n if n > longest else longest
        except (struct.error, OverflowError):  # a length ran past the end (or past any offset at all)
            pos = self.size + 1
        if pos > self.size:
            raise self.damaged(f"the strings of the array {key!r} run past the end of the file")
        if longest > cap:
            raise self.damaged(f"a string of the array {key!r} claims {longest:,} bytes, more than the {cap:,} any "
                               "real GGUF file holds there")
        return pos

    def alignment(self, item: Field | None) -> int:
        if item is None:
            return DEFAULT_ALIGNMENT
        value = item.value
        if item.type != GGUFValueType.UINT32 or value == 0 or value & (value - 1):
            raise self.damaged(f"general.alignment is {value!r} ({item.type.name}); it must be a power of two "
                               "stored as UINT32")
        return int(value)

    def tensor_infos(self, count: int) -> list[tuple[str, int, tuple[int, ...], int, int, int]]:
        infos: list[tuple[str, int, tuple[int, ...], int, int, int]] = []
        seen: set[str] = set()
        for i in range(count):
            name = self.string(f"the name of tensor {i}", LIMITS.name)
            if name in seen:
                raise self.damaged(f"the tensor {name!r} appears twice")
            seen.add(name)
            n_dims = self.u32(f"the dimensions of tensor {name!r}")
            if n_dims > MAX_DIMS:
                raise self.damaged(f"the tensor {name!r} claims {n_dims:,} dimensions; GGUF tensors have at most "
                                   f"{MAX_DIMS}")
            self.need(8 * n_dims + 12, f"the info of tensor {name!r}")
            shape = struct.unpack_from(f"<{n_dims}Q", self.data, self.pos)
            ttype, offset = struct.unpack_from("<IQ", self.data, self.pos + 8 * n_dims)
            self.pos += 8 * n_dims + 12
            try:
                block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
            except (ValueError, KeyError):
                raise GGUFError(f"{self.name}: the tensor {name!r} has the type {ttype}, which this version of "
                                "FastMTP Chat does not know.", "The file is damaged, or newer than the app: update "
                                "FastMTP Chat, or fetch the file again.", kind="unknown-tensor-type") from None
            n = math.prod(shape)
            infos.append((name, ttype, tuple(int(d) for d in shape), offset, n, n * type_size // block_size))
        return infos


def _decode_array(raw: bytes, pos: int, item: GGUFValueType, count: int, name: str, key: str) -> tuple[list[Any], int]:
    """Items of an array from ``raw`` at ``pos`` (checked once already by the walk) and where they end."""
    dtype = _DTYPES.get(item)
    if dtype is not None:
        size = np.dtype(dtype).itemsize
        values: list[Any] = np.frombuffer(raw, dtype=dtype, count=count, offset=pos).tolist()
        return values, pos + size * count
    out: list[Any] = []
    try:
        if item == GGUFValueType.STRING:
            unpack = _U64.unpack_from
            for _ in range(count):
                n = unpack(raw, pos)[0]
                out.append(raw[pos + 8 : pos + 8 + n].decode("utf-8"))
                pos += 8 + n
            return out, pos
        for _ in range(count):  # arrays of arrays
            sub, n = struct.unpack_from("<IQ", raw, pos)
            values, pos = _decode_array(raw, pos + 12, GGUFValueType(sub), n, name, key)
            out.append(values)
        return out, pos
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise GGUFError(f"{name} is damaged: the array {key!r} cannot be read ({exc}).", _CUT_ADVICE,
                        kind="truncated") from None


# ----------------------------------------------------------------------------- the caches

T = TypeVar("T")
_CACHES: list[FileCache[Any]] = []


class FileCache(Generic[T]):
    """Values computed from a file, kept while its (resolved path, size, mtime_ns, inode, ctime) stays the same
    (small LRU).

    Thread-safe: the window inspects files on worker threads. A value is kept only when the file did not change
    while it was computed and its mtime is at least ``RACY_NS`` old: file systems stamp mtimes in coarse ticks
    (a jiffy on Linux, 1-2 s on HFS+ and FAT), so a file rewritten at the same size within one tick would
    otherwise look unchanged (git's "racily clean" problem). Errors are never kept.
    """

    RACY_NS = 2_000_000_000

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[tuple[str, int, int, int, int, int], T] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _CACHES.append(self)

    def get(self, path: Path, build: Callable[[Path], T]) -> T:
        """The value for ``path`` as it is now: cached for an unchanged file, else ``build(path)``.

        Raises:
            GGUFError: the path is missing, a folder or not a regular file (and whatever ``build`` raises).
        """
        key = file_key(path)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
        value = build(path)
        if file_key(path) == key and time.time_ns() - key[2] >= self.RACY_NS:
            with self._lock:
                self._items[key] = value
                self._items.move_to_end(key)
                while len(self._items) > self.maxsize:
                    self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def clear_caches() -> None:
    """Forget every cached header and report (benchmarks time cold reads; tests start clean)."""
    for cache in _CACHES:
        cache.clear()


_HEADERS: FileCache[GgufHeader] = FileCache(32)


def gguf_header(path: str | os.PathLike[str]) -> GgufHeader:
    """The header of ``path``, read once per unchanged file (see :func:`read_gguf_header`).

    Raises:
        GGUFError: as :func:`read_gguf_header`.
    """
    return _HEADERS.get(Path(path), read_gguf_header)
