"""The suite's own disk use: a demo model is 272 MB, and a CI disk once filled up part-way through the suite.

A passed test's ``tmp_path`` is removed when it ends (pyproject's retention policy) and a module's fixture
folders when the module ends (``module_tmp``); these tests keep both true.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.module_folders import ModuleFolders

TESTS = Path(__file__).parent


def test_a_passed_tests_folder_is_removed_when_it_ends(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"


def test_module_fixtures_write_into_folders_removed_with_the_module() -> None:
    """``tmp_path_factory`` folders live as long as the session: only conftest's session fixtures may use it."""
    users = sorted(p.name for p in TESTS.glob("*.py")
                   if p.name not in ("conftest.py", "module_folders.py", Path(__file__).name)
                   and re.search(r"\btmp_path_factory\b", p.read_text(encoding="utf-8")))
    assert users == []


def test_module_folders_removes_what_it_made_and_only_that(tmp_path_factory: pytest.TempPathFactory) -> None:
    folders = ModuleFolders(tmp_path_factory)
    made = [folders.mktemp("one"), folders.mktemp("one")]
    for folder in made:
        (folder / "sub").mkdir()
        (folder / "sub" / "big.bin").write_bytes(b"x" * 1024)
    kept = tmp_path_factory.mktemp("kept")
    assert made[0] != made[1] and all(f.is_dir() for f in made)
    folders.remove_all()
    assert not any(f.exists() for f in made) and kept.is_dir() and folders.made == []
