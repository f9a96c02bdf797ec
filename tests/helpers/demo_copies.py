"""The default demo model (English, ``scaled``), written once per test session and copied into each module's folder.

Writing one takes 10-30 s on a 2-core machine and dozens of modules want it; a copy takes under a second
and keeps each module's folder its own, as a freshly written demo would be. The copy keeps the files' holes:
the demo's zero matrices are holes of sparse files (the GGUF writer seeks past them), and a plain copy would
write every zero out, half a gigabyte a module.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel

_CHUNK = 1 << 20


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
