"""What the Linux binaries we ship ask of the system: their NEEDED libraries, where they look for them, and the
newest glibc symbol version.

Read with binutils' ``readelf`` (``-d`` for the dynamic section's NEEDED and RUNPATH entries, ``-V`` for the
version needs), which every Linux build machine we use has: a reader of its own, apart from the pure-Python one
``backend pack`` uses (``app/backend/elf.py``), so the check does not share the packer's mistakes. Used by
``installers/debian.py`` to compute the ``.deb``'s ``libc6 (>= X)`` floor from the binaries it carries (including
those inside the bundled backend archives), by the tests that check real backend archives, and on the command
line for a release's archives: ``python -m installers.elf_needs ARCHIVE.tar.xz...`` (exit 1 and each problem
named when one would not run with only the NVIDIA driver and a base system).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app.backend import runtime_libs

ELF_MAGIC = b"\x7fELF"
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_GLIBC = re.compile(r"Name: GLIBC_(\d+(?:\.\d+)+)\b")

_RUNPATH = re.compile(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]")

# What a binary may need without carrying it, one list with ``backend pack`` (app/backend/runtime_libs.py, where
# each is justified): glibc's libraries and the loader, libstdc++, libgcc_s and libgomp (declared by the .deb,
# BASE_DEPENDS in installers/debian.py), and the NVIDIA driver's own (libcuda.so.1), never carried.
BASE_LIBRARIES = runtime_libs.BASE_LIBRARIES
DRIVER_LIBRARIES = runtime_libs.DRIVER_LIBRARIES


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


def runpath(path: Path) -> str | None:
    """``path``'s RUNPATH (or RPATH), as written: ``$ORIGIN`` unexpanded."""
    found = _RUNPATH.findall(_read("-d", path))
    return found[0] if found else None


def _allowed(lib: str) -> bool:
    return bool(BASE_LIBRARIES.match(lib) or DRIVER_LIBRARIES.match(lib))


def unresolved(folder: Path) -> dict[str, list[str]]:
    """Per ELF file under ``folder`` (relative path), the NEEDED libraries that are neither one of the system's
    base libraries or the driver's nor found, as the loader looks, in a folder its own RUNPATH names inside
    ``folder`` (``$ORIGIN`` expanded): what would fail to load on a machine with only the driver and a base
    system. Empty when the folder is self-contained."""
    top = folder.resolve()
    missing: dict[str, list[str]] = {}
    for path in elf_files(folder):
        dirs = []
        value = runpath(path)
        for entry in value.split(":") if value is not None else []:
            expanded = entry.replace("${ORIGIN}", str(path.parent)).replace("$ORIGIN", str(path.parent))
            if expanded.startswith("/") and Path(expanded).resolve().is_relative_to(top):
                dirs.append(Path(expanded))
        lacking = [lib for lib in needed(path) if not _allowed(lib) and not any((d / lib).exists() for d in dirs)]
        if lacking:
            missing[str(path.relative_to(folder))] = lacking
    return missing


def outside_runpaths(folder: Path) -> dict[str, str]:
    """Per ELF file under ``folder``, its RUNPATH when an entry leaves ``folder`` (an absolute folder of the build
    machine, an empty entry: the current folder, or ``$ORIGIN/..`` past the top)."""
    top = folder.resolve()
    found: dict[str, str] = {}
    for path in elf_files(folder):
        value = runpath(path)
        for entry in value.split(":") if value is not None else []:
            if not entry.startswith(("$ORIGIN", "${ORIGIN}")):
                found[str(path.relative_to(folder))] = value or ""
                break
            expanded = Path(entry.replace("${ORIGIN}", str(path.parent)).replace("$ORIGIN", str(path.parent)))
            if not expanded.resolve().is_relative_to(top):
                found[str(path.relative_to(folder))] = value or ""
                break
    return found


def check_archive(archive: Path) -> list[str]:
    """Why the backend ``archive`` would not run with only the NVIDIA driver and a base system; empty if it would."""
    with tempfile.TemporaryDirectory() as scratch:
        root = unpack(archive, Path(scratch))
        problems = [f"{name} needs {', '.join(libs)}, which is not inside the archive where its RUNPATH looks"
                    for name, libs in unresolved(root).items()]
        problems += [f"{name} looks for libraries in {value!r}, outside the archive"
                     for name, value in outside_runpaths(root).items()]
        if not any(True for _ in elf_files(root)):
            problems.append("it holds no ELF binary at all (not a Linux backend archive?)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check that backend archives run with only the NVIDIA driver and "
                                                 "a base system (every NEEDED library inside or a base one).")
    parser.add_argument("archive", nargs="+", type=Path)
    args = parser.parse_args(argv)
    failed = 0
    for archive in args.archive:
        problems = check_archive(archive)
        print(f"{archive.name}: " + ("self-contained" if not problems else "NOT self-contained"))
        for line in problems:
            print(f"  {line}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
