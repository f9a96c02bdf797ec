"""A built backend (and its llama-server) as one ``.tar.xz``, to carry to a machine that cannot build it.

A CUDA build takes about an hour on a small machine and a GPU machine is often lent for minutes,
offline, with little room for luggage: the backend is built where there is time, packed, carried
and installed there in seconds. The archive holds the backend folder as installed (manifest, Python
bindings, shared libraries) and, when it was built, ``server/``: the ``llama-server`` binary plus
the shared libraries it needs beyond the backend's own.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app import paths
from app.backend import registry
from app.errors import BackendError

SERVER_DIR = "server"
SERVER_BINARY = "llama-server"
_SHARED = re.compile(r"^lib[\w.+-]*\.(so(\.\d+)*|dylib)$|^[\w.+-]*\.dll$")


@dataclass(frozen=True)
class Unpacked:
    manifest: registry.BackendManifest
    folder: Path
    server: Path | None


def installed_server(folder: Path) -> Path | None:
    """The ``llama-server`` that came with an unpacked backend, if any."""
    binary = folder / SERVER_DIR / SERVER_BINARY
    return binary if binary.is_file() else None


def server_library_path(binary: Path) -> list[str]:
    """Folders a carried ``llama-server`` loads its libraries from: its own, then the backend's."""
    return [str(binary.parent), str(binary.parent.parent / "llama_cpp" / "lib")]


def pack(backend_id: str, out: Path, server_binary: Path | None = None) -> Path:
    """Write ``out`` (``.tar.xz``) with the installed backend ``backend_id`` and, if given, its llama-server."""
    folder = registry.backend_dir(backend_id)
    manifest = registry.BackendManifest.read(folder)
    if not manifest.selftest_ok:
        raise BackendError(f"Backend {backend_id} did not pass its self-test; it is not worth carrying.",
                           "Build it again, or pick another with `backend list`.")
    lib_names = {p.name for p in (folder / "llama_cpp" / "lib").iterdir()}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w:xz", preset=6) as archive:
        archive.add(folder, arcname=backend_id, filter=_no_caches)
        if server_binary is not None:
            archive.add(server_binary, arcname=f"{backend_id}/{SERVER_DIR}/{SERVER_BINARY}")
            for lib in sorted(server_binary.parent.iterdir()):
                if _SHARED.match(lib.name) and lib.name not in lib_names:
                    archive.add(lib, arcname=f"{backend_id}/{SERVER_DIR}/{lib.name}")
    os.replace(partial, out)
    return out


def _no_caches(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if "__pycache__" in info.name else info


def unpack(archive_path: Path, activate: bool = True) -> Unpacked:
    """Install the backend of an archive made by :func:`pack` (replacing one with the same id).

    Raises:
        BackendError: the file is not such an archive, or it is damaged.
    """
    try:
        with tempfile.TemporaryDirectory(dir=paths.backends_dir(), prefix=f"{registry.STAGING_PREFIX}unpack",
                                         suffix=f"-{os.getpid()}") as tmp:
            with tarfile.open(archive_path, "r:*") as archive:
                archive.extractall(tmp, filter="data")
            roots = [p for p in Path(tmp).iterdir() if p.is_dir()]
            if len(roots) != 1 or not (roots[0] / registry.MANIFEST).is_file():
                raise BackendError(f"{archive_path} is not a backend archive (no single folder with a manifest).",
                                   "Make one with `python -m app backend pack`.")
            manifest = registry.BackendManifest.read(roots[0])
            final = registry.backend_dir(manifest.id)
            old = final.with_name(f".old-{final.name}-{os.getpid()}")
            if final.exists():
                os.replace(final, old)
            os.replace(roots[0], final)
            shutil.rmtree(old, ignore_errors=True)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackendError(f"Could not unpack the backend archive {archive_path}: {exc}",
                           "The file is damaged or incomplete; copy it again.") from exc
    if activate:
        registry.set_active(manifest.id, allow_unpatched=not manifest.patched)
    return Unpacked(manifest, final, installed_server(final))
