"""What the Linux binaries we ship ask of the system: their NEEDED libraries and the newest glibc symbol version.

Read with binutils' ``readelf`` (``-d`` for the dynamic section's NEEDED entries, ``-V`` for the version needs),
which every Linux build machine we use has. Used by ``installers/debian.py`` to compute the ``.deb``'s
``libc6 (>= X)`` floor from the binaries it carries (including those inside the bundled backend archives),
and by the tests that check a backend archive is self-contained apart from the system's base libraries.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_GLIBC = re.compile(r"Name: GLIBC_(\d+(?:\.\d+)+)\b")

# The system's base libraries a Linux binary may need without carrying them: glibc's own (libc, libm,
# libpthread, libdl, librt, the loader), the C++ runtime (libstdc++, libgcc_s) and OpenMP (libgomp), each
# declared by the .deb (BASE_DEPENDS in installers/debian.py).
BASE_LIBRARIES = re.compile(r"^(libc|libm|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libgomp)"
                            r"\.so(\.\d+)*$|^ld-linux(-x86-64|-aarch64)?\.so\.\d+$")


def readelf() -> str:
    tool = shutil.which("readelf")
    if tool is None:
        raise RuntimeError("readelf (binutils) is needed to read what the bundled binaries need; install binutils")
    return tool


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as handle:
        return handle.read(4) == ELF_MAGIC


def _read(flag: str, path: Path) -> str:
    return subprocess.run([readelf(), flag, "-W", str(path)], capture_output=True, text=True, check=True).stdout


def needed(path: Path) -> list[str]:
    """The shared libraries ``path`` names in its dynamic section (``DT_NEEDED``), in order."""
    return _NEEDED.findall(_read("-d", path))


def glibc_versions(path: Path) -> set[tuple[int, ...]]:
    """The ``GLIBC_x.y`` symbol versions ``path`` requires, as number tuples: ``{(2, 2, 5), (2, 34)}``."""
    return {tuple(int(part) for part in name.split(".")) for name in _GLIBC.findall(_read("-V", path))}


def elf_files(folder: Path) -> Iterator[Path]:
    """Every ELF file under ``folder`` (links not followed: their targets are listed themselves)."""
    for path in sorted(folder.rglob("*")):
        if is_elf(path):
            yield path


def unpack(archive: Path, into: Path) -> Path:
    """A backend ``.tar.xz`` unpacked into ``into`` (regular files and folders only, no link leaves it)."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def glibc_floor(folder: Path, base: str) -> str:
    """The newest glibc symbol version any ELF file under ``folder`` (or inside a ``.tar.xz`` there) requires,
    never below ``base``: what the ``.deb`` must declare as ``libc6 (>= …)``."""
    found = {tuple(int(part) for part in base.split("."))}
    for path in elf_files(folder):
        found |= glibc_versions(path)
    for archive in sorted(folder.rglob("*.tar.xz")):
        with tempfile.TemporaryDirectory() as scratch:
            for path in elf_files(unpack(archive, Path(scratch))):
                found |= glibc_versions(path)
    return ".".join(str(part) for part in max(found))


def unresolved(folder: Path) -> dict[str, list[str]]:
    """Per ELF file under ``folder`` (relative path), the NEEDED libraries that are neither a file (or link) of
    that name anywhere under ``folder`` nor one of the system's :data:`BASE_LIBRARIES`: what would fail to load
    on a machine with only the base system. Empty when the folder is self-contained."""
    carried = {path.name for path in folder.rglob("*") if path.is_file() or path.is_symlink()}
    missing: dict[str, list[str]] = {}
    for path in elf_files(folder):
        lacking = [lib for lib in needed(path) if lib not in carried and not BASE_LIBRARIES.match(lib)]
        if lacking:
            missing[str(path.relative_to(folder))] = lacking
    return missing
