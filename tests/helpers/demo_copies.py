"""The default demo model (English, tiny), written once per test session and copied into each module's folder.

Writing one takes 6-11 s on a 2-core machine and about twenty modules want it; a copy takes under a second
and keeps each module's folder its own, as a freshly written demo would be.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel


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
        shutil.copytree(self.master, folder, dirs_exist_ok=True)
        return ensure_demo_model(folder)  # finds the copy's marker: nothing written
