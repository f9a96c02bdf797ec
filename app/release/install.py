"""Put verified release files in place: only after every check passed, each by an atomic rename.

Payload files move first and the integrity files last, so a folder interrupted half-way still holds
the old manifest, which then fails the new files loudly instead of vouching for them.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import safe_paths
from app.core.errors import DiskSpaceError, FastMTPError, VerificationError
from app.core.hashing import sha256_file
from app.release import trust
from app.release.verify import ReleaseMetadata


@dataclass
class Installed:
    folder: Path
    files: list[str]
    version: str
    fingerprint: str
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "files": self.files, "version": self.version,
                "fingerprint": self.fingerprint, "warnings": self.warnings}


def _move(src: Path, target: Path, expected_sha256: str | None) -> None:
    """Atomic rename; across file systems, copy to a hidden temporary name, check the copy, then rename."""
    try:
        os.replace(src, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    free = shutil.disk_usage(target.parent).free
    if src.stat().st_size > free:
        raise DiskSpaceError(f"Not enough free space in {target.parent} for {src.name} "
                             f"({src.stat().st_size} bytes needed, {free} free).",
                             "Free some space or pick another folder with --dest.", kind="install-no-room")
    tmp, handle = safe_paths.new_temporary(target)  # a unique name: a link planted in --dest is never written
    try:
        with handle as writer, src.open("rb") as reader:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        if expected_sha256 is not None and sha256_file(tmp) != expected_sha256:
            raise VerificationError(f"{src.name} failed the sha256 check after copying it to {target.parent}.",
                                    "The disk may be failing; nothing was put in place.", kind="sha256-mismatch",
                                    file=src.name)
        os.replace(tmp, target)
        src.unlink()
    finally:
        tmp.unlink(missing_ok=True)


def install(meta: ReleaseMetadata, files: dict[str, Path], dest: Path) -> Installed:
    """Move verified payload ``files`` (name -> staged path) and the release's integrity files into ``dest``
    (the caller says where: :func:`app.models.installed.default_destination` is the Settings' models folder).

    Every payload file's size is checked again right before the first move (a staged file touched after
    verification is refused with nothing moved); the version is recorded for rollback protection last.
    """
    for name, path in files.items():  # cheap re-check: nothing was swapped or truncated since verification
        size = meta.entry(name).size
        if path.is_symlink() or not path.is_file() or (size is not None and path.stat().st_size != size):
            raise VerificationError(f"{name} changed in {path.parent} after it was verified.",
                                    "Nothing was put in place; fetch or verify again.", kind="file-changed")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FastMTPError(f"Cannot create the model folder {dest}: {exc}", "Pick a writable folder with --dest.",
                           kind="unwritable-folder") \
            from exc
    for name, path in files.items():
        _move(path, dest / name, meta.entry(name).sha256)
    for name, path in meta.metadata_files.items():
        if path.resolve() != (dest / name).resolve():
            safe_paths.copy_replacing(path, dest / name)  # never through a link planted in --dest
    trust.record_verified(meta.repo, meta.manifest, meta.manifest_sha256)
    return Installed(folder=dest, files=sorted(files), version=meta.manifest.version.text,
                     fingerprint=meta.fingerprint, warnings=meta.warnings)
