"""Folders for one test module's fixtures, deleted when the module is done.

A demo model is 272 MB and about forty modules write their own; kept for the whole session (as
``tmp_path_factory`` folders are) they filled a CI disk part-way through the suite. The suite's peak
disk use is now the session's fixtures plus one module's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


class ModuleFolders:
    """``tmp_path_factory.mktemp`` for module-scoped fixtures, remembering what it made."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self.made: list[Path] = []

    def mktemp(self, basename: str) -> Path:
        folder = self._factory.mktemp(basename)
        self.made.append(folder)
        return folder

    def remove_all(self) -> None:
        for folder in self.made:
            shutil.rmtree(folder, ignore_errors=True)
        self.made.clear()
