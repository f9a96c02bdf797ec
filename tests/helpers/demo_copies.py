"""The default demo model (English, ``scaled``), written once and copied into each module's folder.

Writing one takes 10-30 s on a 2-core machine and dozens of modules want it; a copy takes under a second
and keeps each module's folder its own, as a freshly written demo would be. The copy keeps the files' holes:
the demo's zero matrices are holes of sparse files (the GGUF writer seeks past them), and a plain copy would
write every zero out, half a gigabyte a module.

The one written (the master) is kept in the cache folder between test runs, under a key made of the demo
writer's sources (app/gguftools and the defaults it reads, app/core/defaults.py) and numpy's and gguf's
versions, so each xdist worker of each run does not write it again; a change to any of them makes a new key and a
fresh write. The tests of the writer itself (tests/integration/gguftools) write their own. ``ensure_demo_model``
checks the master as it would a user's: a damaged one is written again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

import app.gguftools
from app.core import defaults, paths
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel

_CHUNK = 1 << 20
_STALE = 7 * 24 * 3600  # seconds: masters of other keys older than this are removed (an older writer's)


def master_folder() -> Path:
    """Where the default demo's master is kept for this writer: the cache folder, keyed by the writer's sources."""
    digest = hashlib.sha256(f"{np.__version__} {version('gguf')}".encode())
    sources = [*sorted(Path(app.gguftools.__file__).parent.glob("*.py")), Path(defaults.__file__)]
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    root = paths.cache_dir() / "test-demos"
    folder = root / f"default-{digest.hexdigest()[:16]}"
    if root.is_dir():
        for other in root.iterdir():
            if other != folder and other.name.startswith("default-") and \
                    time.time() - other.stat().st_mtime > _STALE:
                shutil.rmtree(other, ignore_errors=True)
    return folder


def copy_sparse(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target``, seeking past all-zero chunks so the copy is as sparse as the original."""
    zero = bytes(_CHUNK)
    with source.open("rb") as reader, target.open("wb") as writer:
        while chunk := reader.read(_CHUNK):
            if chunk == zero[: len(chunk)]:
                writer.seek(len(chunk), os.SEEK_CUR)
            else:
                writer.write(chunk)
        writer.truncate()  # a trailing hole still counts in the size


class DemoCopies:
    """Copies of the default demo model from one written in ``master``."""

    def __init__(self, master: Path) -> None:
        self.master = master
        self._written = False

    def copy_to(self, folder: Path) -> DemoModel:
        """The default demo model in ``folder``, exactly as ``ensure_demo_model(folder)`` would leave it."""
        if not self._written:  # once: later copies need not re-read the master's marker and table
            ensure_demo_model(self.master)
            self._written = True
        folder.mkdir(parents=True, exist_ok=True)
        for path in self.master.iterdir():
            if path.is_file():
                copy_sparse(path, folder / path.name)
        return ensure_demo_model(folder)  # finds the copy's marker: nothing written
