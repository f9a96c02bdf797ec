"""A built backend (and its llama-server) as one ``.tar.xz``, to carry to a machine that cannot build it.

A CUDA build takes about an hour on a small machine and a GPU machine is often lent for minutes,
offline, with little room for luggage: the backend is built where there is time, packed, carried
and installed there in seconds. The archive holds the backend folder as installed (manifest, Python
bindings, shared libraries) and, when it was built, ``server/``: the ``llama-server`` binary plus
the shared libraries it needs beyond the backend's own.

An installed backend that was not built here carries ``fastmtp-origin.json``, which says so (and, for
a signed archive, which key signed it); the Backend page and ``backend install`` show it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.backend import elf, registry, runtime_libs
from app.core import paths, safe_paths
from app.core.errors import BackendError
from app.core.safe_paths import UnpackLimits

SERVER_DIR = "server"
SERVER_BINARY = "llama-server"
SERVER_RUNPATH = "$ORIGIN:$ORIGIN/../llama_cpp/lib"  # the server's own folder, then the backend's libraries
ORIGIN = "fastmtp-origin.json"
_SHARED = re.compile(r"^lib[\w.+-]*\.(so(\.\d+)*|dylib)$|^[\w.+-]*\.dll$")
REFUSED_ADVICE = ("This looks like a path-traversal attempt or a broken archive; nothing was installed. Do not use it, "
                  "and tell whoever published it.")


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


@dataclass(frozen=True)
class Packed:
    """What :func:`pack` wrote: the archive, the libraries it carries from outside the build, the RUNPATHs set."""

    archive: Path
    bundled: tuple[str, ...] = ()
    runpaths_fixed: tuple[str, ...] = ()


def archive_name(manifest: registry.BackendManifest, platform: str | None = None, machine: str | None = None,
                 app: str | None = None) -> str:
    """The versioned file name of a backend's archive: the app's version (which pins llama-cpp-python and the
    patch) and what it runs on, as the release names them (``installers/release_steps.backend_archive_name``):
    ``fastmtp-backend-0.9.0-cuda13.0-linux-x86_64.tar.xz``, ``fastmtp-backend-0.9.0-cpu-windows-x86_64.tar.xz``.
    A CPU build tuned to the machine that built it is ``cpu-native``, an unpatched one says so; two releases or two
    CUDA versions never share a name.
    """
    import platform as platform_module

    from app import __version__

    if manifest.flavor == "cuda":
        kind = "cuda" + ".".join((manifest.cuda_version or "0.0").split(".")[:2])
    else:
        kind = "cpu" if manifest.portable else "cpu-native"
    if not manifest.patched:
        kind += "-unpatched"
    system = (platform or sys.platform).lower()
    system = "windows" if system.startswith("win") else "macos" if system == "darwin" else \
        system.rstrip("0123456789")
    arch = (machine or platform_module.machine() or "unknown").lower().replace("amd64", "x86_64")
    arch = "arm64" if arch == "aarch64" and system == "macos" else arch
    return f"fastmtp-backend-{app or __version__}-{kind}-{system}-{arch}.tar.xz"


def pack(backend_id: str, out: Path, server_binary: Path | None = None) -> Path:
    """:func:`pack_archive`, for callers that want only the archive's path."""
    return pack_archive(backend_id, out, server_binary).archive


def pack_archive(backend_id: str, out: Path, server_binary: Path | None = None) -> Packed:
    """Write ``out`` (``.tar.xz``; a folder: the :func:`archive_name` inside it) with the installed backend
    ``backend_id`` and, if given, its llama-server, made to run with only the NVIDIA driver and a base system.

    The backend is staged beside ``out`` first: the libraries its binaries need from outside it (the CUDA
    runtime) are copied in (:func:`runtime_libs.bundle`), every RUNPATH is made ``$ORIGIN``-relative, and the
    staged copy is checked; the packed manifest lists no build-machine folders (``runtime_lib_dirs``).

    Raises:
        BackendError: the backend failed its self-test, a needed library is found nowhere, or a RUNPATH points
            outside the archive and cannot be rewritten; nothing is written then.
    """
    folder = registry.backend_dir(backend_id)
    manifest = registry.BackendManifest.read(folder)
    if not manifest.selftest_ok:
        raise BackendError(f"Backend {backend_id} did not pass its self-test; it is not worth carrying.",
                           "Build it again, or pick another with `backend list`.")
    if out.is_dir() or not out.name.endswith(".tar.xz"):
        out = out / archive_name(manifest)
    lib_names = {p.name for p in (folder / "llama_cpp" / "lib").iterdir()}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".pack-") as scratch:
        staged = Path(scratch) / backend_id
        shutil.copytree(folder, staged, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ORIGIN))
        lib_dir = staged / "llama_cpp" / "lib"
        server_dir = staged / SERVER_DIR
        if server_binary is not None:
            server_dir.mkdir(exist_ok=True)
            shutil.copy2(server_binary, server_dir / SERVER_BINARY)
            for lib in sorted(server_binary.parent.iterdir()):
                if _SHARED.match(lib.name) and lib.name not in lib_names:
                    if lib.is_symlink():
                        (server_dir / lib.name).symlink_to(os.readlink(lib))
                    else:
                        shutil.copy2(lib, server_dir / lib.name)
        bundled: list[str] = []
        fixed: list[str] = []
        if sys.platform.startswith("linux"):
            try:
                bundled = runtime_libs.bundle(staged, lib_dir, manifest.runtime_lib_dirs)
                fixed = runtime_libs.fix_runpaths(staged, {server_dir: SERVER_RUNPATH})
                problems = runtime_libs.runpath_problems(staged)
                lacking = runtime_libs.unreachable(staged)
            except elf.ElfError as exc:
                raise BackendError(f"A binary of {backend_id} cannot be read: {exc}.",
                                   "Nothing was packed. Build the backend again.", kind="backend-damaged") from exc
            if problems or lacking:
                raise BackendError(f"The packed {backend_id} would not run with only the driver: "
                                   + "; ".join([*(f"{k} looks in {v!r}" for k, v in problems.items()),
                                                *(f"{k} needs {', '.join(v)}" for k, v in lacking.items())]),
                                   "Nothing was packed. Build it again with this version of the app.",
                                   kind="backend-not-self-contained")
        elif sys.platform == "win32":
            bundled = runtime_libs.bundle_windows(lib_dir, manifest.runtime_lib_dirs)
        if manifest.runtime_lib_dirs:
            replace(manifest, runtime_lib_dirs=[]).write(staged)  # carried inside now: no build-machine folders
        partial, handle = safe_paths.new_temporary(out)  # a unique name: a link planted beside out is never used
        try:
            with handle, tarfile.open(fileobj=handle, mode="w:xz", preset=6) as archive:
                archive.add(staged, arcname=backend_id)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
    return Packed(out, tuple(bundled), tuple(fixed))


@dataclass(frozen=True)
class Origin:
    """Where an installed backend came from when it was not built on this machine (``fastmtp-origin.json``).

    ``kind`` is "signed" (a prebuilt archive whose signed manifest checked out, ``backend install``),
    "bundled" (the archive the packaged app carries) or "unsigned" (``backend unpack``, which checks no
    signature). A backend without the file was built here.
    """

    kind: str
    archive: str
    sha256: str | None = None
    repo: str | None = None
    fingerprint: str | None = None
    key_source: str | None = None  # "shipped" (the app's publisher key), "user" or "new" (trusted at install)
    installed_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One plain line: prebuilt and signed by whom, or prebuilt and unchecked."""
        if self.kind == "bundled":
            return f"prebuilt, shipped inside the app ({self.archive})"
        if self.kind != "signed":
            return f"prebuilt, unpacked from {self.archive} (no signature checked)"
        who = "the publisher key shipped with the app" if self.key_source == "shipped" else "a key you trusted"
        return f"prebuilt, signed by {who} ({self.fingerprint}) for {self.repo}"


def read_origin(folder: Path) -> Origin | None:
    """The backend's origin note, or None when it was built here (or the note is unreadable)."""
    try:
        data = json.loads((folder / ORIGIN).read_text(encoding="utf-8"))
        return Origin(**data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def origin_label(origin: Origin | None) -> str:
    """The short answer to "where did this backend come from?": the Backend page's column and ``backend list``."""
    if origin is None:
        return "built here"
    if origin.kind == "bundled":
        return "prebuilt, shipped with the app"
    if origin.kind != "signed":
        return "prebuilt, unsigned"
    return "prebuilt, publisher-signed" if origin.key_source == "shipped" else "prebuilt, signed by your trusted key"


def describe_origin(folder: Path) -> str:
    origin = read_origin(folder)
    return origin.describe() if origin is not None else "built here"


def read_manifest(archive_path: Path) -> registry.BackendManifest:
    """The backend manifest inside an archive made by :func:`pack`, read without unpacking the rest.

    Raises:
        BackendError: the file is not such an archive, or it is damaged.
    """
    try:
        with tarfile.open(archive_path, "r:*") as archive:
            for member in archive:
                parts = member.name.split("/")
                if len(parts) == 2 and parts[1] == registry.MANIFEST and member.isfile():
                    handle = archive.extractfile(member)
                    data = json.loads(handle.read()) if handle is not None else None
                    if isinstance(data, dict):
                        manifest = registry.BackendManifest(**data)
                        safe_paths.check_name(manifest.id, "backend id", f"{archive_path.name} ({member.name})",
                                              REFUSED_ADVICE)
                        return manifest
    except (*safe_paths.DAMAGED_ARCHIVE, ValueError, TypeError) as exc:
        raise BackendError(f"Could not read the backend manifest in {archive_path}: {exc}",
                           "The file is damaged or not a backend archive; make it with `backend pack`.") from exc
    raise BackendError(f"{archive_path} is not a backend archive (no {registry.MANIFEST} in its folder).",
                       "Make one with `python -m app backend pack`.")


def contents(archive_path: Path) -> safe_paths.Extracted:
    """What an archive unpacks to (bytes of its files, members), read without unpacking: the signed manifest
    records it so that ``backend install`` can refuse an archive that unpacks to more."""
    try:
        with tarfile.open(archive_path, "r:*") as archive:
            members = archive.getmembers()
    except safe_paths.DAMAGED_ARCHIVE as exc:  # xz broken mid-stream or cut short: words, not a traceback
        raise BackendError(f"Could not read the backend archive {archive_path}: it is damaged or incomplete ({exc}).",
                           "Make it again with `backend pack`, or copy it again.") from exc
    return safe_paths.Extracted(sum(m.size for m in members if m.isfile()), len(members))


@contextmanager
def staged(archive_path: Path, limits: UnpackLimits | None = None) -> Iterator[Path]:
    """Unpack the archive into a staging folder beside the installed backends; yields the backend folder.

    Nothing is installed: :func:`place` moves the folder into place, and whatever is still staged when the
    block ends is removed. The archive unpacks within ``limits`` (by default, what
    :meth:`UnpackLimits.for_archive` allows for its size), and its members and links stay inside the staging
    folder (:func:`app.core.safe_paths.extract_tar`); the backend's id must be a plain name.

    Raises:
        BackendError: the file is not a backend archive, or it is damaged.
        UnsafeInputError: a member, a link or the id would reach outside the folder, or the archive unpacks to
            more than ``limits`` (exit code 4).
    """
    with tempfile.TemporaryDirectory(dir=paths.backends_dir(), prefix=f"{registry.STAGING_PREFIX}unpack",
                                     suffix=f"-{os.getpid()}") as tmp:
        try:
            limits = limits or UnpackLimits.for_archive(archive_path.stat().st_size)
            safe_paths.extract_tar(archive_path, Path(tmp), limits, archive_path.name, REFUSED_ADVICE)
        except safe_paths.DAMAGED_ARCHIVE as exc:
            raise BackendError(f"Could not unpack the backend archive {archive_path}: {exc}",
                               "The file is damaged or incomplete; copy it again.") from exc
        roots = list(Path(tmp).iterdir())
        if (len(roots) != 1 or roots[0].is_symlink() or not roots[0].is_dir()
                or not (roots[0] / registry.MANIFEST).is_file()):
            raise BackendError(f"{archive_path} is not a backend archive (no single folder with a manifest).",
                               "Make one with `python -m app backend pack`.")
        manifest = registry.BackendManifest.read(roots[0])
        safe_paths.check_name(manifest.id, "backend id", f"{archive_path.name} ({roots[0].name}/{registry.MANIFEST})",
                              REFUSED_ADVICE)
        yield roots[0]


def place(folder: Path, origin: Origin) -> registry.BackendManifest:
    """Move a staged backend folder into place (replacing one with the same id), with its origin note."""
    manifest = registry.BackendManifest.read(folder)
    (folder / ORIGIN).write_text(json.dumps(origin.to_dict(), indent=2) + "\n", encoding="utf-8")
    final = registry.backend_dir(manifest.id)  # a plain name, inside the backends folder (or refused)
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    try:
        if final.exists():
            os.replace(final, old)
        os.replace(folder, final)
    except OSError as exc:
        raise BackendError(f"Could not move the backend {manifest.id} into {final.parent}: {exc}",
                           "Check that the data folder is writable and the disk is not full.") from exc
    shutil.rmtree(old, ignore_errors=True)
    return manifest


def now_text() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def unpack(archive_path: Path, activate: bool = True, kind: str = "unsigned",
           limits: UnpackLimits | None = None) -> Unpacked:
    """Install the backend of an archive made by :func:`pack` (replacing one with the same id); no signature
    is checked (``backend install`` checks one). ``kind`` goes into its origin note: "unsigned", or "bundled"
    for the archive inside the packaged app.

    Raises:
        BackendError: the file is not such an archive, or it is damaged.
        UnsafeInputError: it would write outside its folder or unpack beyond ``limits`` (see :func:`staged`).
    """
    with staged(archive_path, limits) as folder:
        manifest = place(folder, Origin(kind, archive_path.name, installed_at=now_text()))
    if activate:
        registry.set_active(manifest.id, allow_unpatched=not manifest.patched)
    final = registry.backend_dir(manifest.id)
    return Unpacked(manifest, final, installed_server(final))
