"""The installed backends under ``<data>/backends/<id>/``, each with a manifest, and which one is active."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core import paths, processes, safe_paths, settings_file
from app.core.errors import BackendError

MANIFEST = "fastmtp-backend.json"
_ACTIVE = "active.json"
STAGING_PREFIX = ".staging-"


@dataclass
class BackendManifest:
    """What a build is: enough to reproduce it and to know whether it can run d2t sidecars."""

    id: str
    llama_cpp_python_version: str
    llama_cpp_commit: str
    sdist_sha256: str
    patch_name: str | None
    patch_sha256: str | None
    flavor: str  # "cpu" | "cuda"
    cmake_args: list[str]
    cuda_version: str | None
    cuda_archs: list[str]
    compiler: str
    built_at: str
    build_seconds: float
    selftest: dict[str, Any] = field(default_factory=dict)
    runtime_lib_dirs: list[str] = field(default_factory=list)  # e.g. a pip cuBLAS, preloaded before import
    cpu_variants: list[str] = field(default_factory=list)  # extra CPU modules next to the x86-64-v2 base one

    @property
    def loads_backends_at_start(self) -> bool:
        """ggml's backends are modules (GGML_BACKEND_DL) that the loader must load from the lib folder."""
        return "-DGGML_BACKEND_DL=ON" in self.cmake_args

    @property
    def patched(self) -> bool:
        return self.patch_sha256 is not None

    @property
    def portable(self) -> bool:
        """Built without -march=native, so it runs on other machines' processors too."""
        return "-DGGML_NATIVE=OFF" in self.cmake_args

    @property
    def has_rpc(self) -> bool:
        """llama.cpp's RPC backend is built in (every build since it joined the common CMake arguments)."""
        return "-DGGML_RPC=ON" in self.cmake_args

    @property
    def selftest_ok(self) -> bool:
        return bool(self.selftest.get("ok"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, folder: Path) -> None:
        settings_file.write_json(folder / MANIFEST, self.to_dict())

    @classmethod
    def read(cls, folder: Path) -> BackendManifest:
        try:
            data = json.loads((folder / MANIFEST).read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise BackendError(f"The backend in {folder} has no readable manifest ({exc}).",
                               "Remove it with `backend remove` and build again.") from exc


def backend_dir(backend_id: str) -> Path:
    """``<data>/backends/<id>``; an id that is not a plain name (``../models``, ``.``, an absolute path) is refused.

    Raises:
        UnsafeInputError: the id would name a path instead of a folder among the backends.
    """
    return safe_paths.child(paths.backends_dir(), backend_id, "backend id", "The request",
                            "Backend ids are plain names (`python -m app backend list` shows them); nothing was "
                            "changed.")


def cleanup_stale_staging() -> list[Path]:
    """Remove staging folders left by a build that was killed; they were never usable."""
    removed: list[Path] = []
    for entry in paths.backends_dir().glob(STAGING_PREFIX + "*"):
        pid = processes.parse_pid(entry.name.rsplit("-", 1)[-1])  # a stray name's 20 digits: no process, stale
        if pid is not None and processes.pid_alive(pid):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def list_backends() -> list[BackendManifest]:
    found: list[BackendManifest] = []
    for entry in sorted(paths.backends_dir().iterdir()):
        if entry.is_dir() and not entry.name.startswith(".") and (entry / MANIFEST).is_file():
            try:
                manifest = BackendManifest.read(entry)
            except BackendError:
                continue
            if manifest.id == entry.name and safe_paths.is_name(manifest.id):  # else not a backend we installed
                found.append(manifest)
    return found


def get(backend_id: str) -> BackendManifest:
    folder = backend_dir(backend_id)
    if not (folder / MANIFEST).is_file():
        known = ", ".join(m.id for m in list_backends()) or "none"
        raise BackendError(f"No backend named {backend_id!r} is installed (installed: {known}).",
                           "Run `python -m app backend list` to see them, or `backend build`.")
    return BackendManifest.read(folder)


def active_id() -> str | None:
    data = settings_file.load_json_object(paths.backends_dir() / _ACTIVE)  # None: missing or damaged
    backend_id = data.get("id") if data is not None else None
    if safe_paths.is_name(backend_id) and (backend_dir(str(backend_id)) / MANIFEST).is_file():
        return backend_id
    return None


def active() -> BackendManifest | None:
    backend_id = active_id()
    return get(backend_id) if backend_id else None


def set_active(backend_id: str, allow_unpatched: bool = False) -> BackendManifest:
    """Make a backend the one the engine uses; only self-tested, patched builds unless told otherwise."""
    manifest = get(backend_id)
    if not manifest.selftest_ok:
        raise BackendError(f"Backend {backend_id} did not pass its self-test, so it cannot be made active.",
                           "Rebuild it with `python -m app backend build`.")
    if not manifest.patched and not allow_unpatched:
        raise BackendError(f"Backend {backend_id} was built without the FastMTP d2t patch.",
                           "It cannot load d2t sidecars. Pass --allow-unpatched if you really want it.")
    settings_file.write_json(paths.backends_dir() / _ACTIVE, {"id": backend_id})
    return manifest


def remove(backend_id: str) -> None:
    get(backend_id)
    if active_id() == backend_id:
        (paths.backends_dir() / _ACTIVE).unlink(missing_ok=True)
    trash = paths.backends_dir() / f".removing-{backend_id}-{os.getpid()}"
    os.replace(backend_dir(backend_id), trash)
    shutil.rmtree(trash, ignore_errors=True)
