"""The suite's own disk use: a demo model is 272 MB, and a CI disk once filled up part-way through the suite.

A passed test's ``tmp_path`` is removed when it ends (pyproject's retention policy) and a module's fixture
folders when the module ends (``module_tmp``); these tests keep both true. Modules wanting the default demo
model get a copy of one written once (``default_demo``).
"""

from __future__ import annotations

import filecmp
import re
from pathlib import Path

import pytest

from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

TESTS = Path(__file__).resolve().parents[2]


def test_a_passed_tests_folder_is_removed_when_it_ends(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("tmp_path_retention_policy") == "failed"


def test_module_fixtures_write_into_folders_removed_with_the_module() -> None:
    """``tmp_path_factory`` folders live as long as the session: only conftest's session fixtures may use it."""
    users = sorted(p.name for p in TESTS.rglob("*.py")
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


def test_a_demo_copy_is_the_written_demo_in_a_folder_of_its_own(default_demo: DemoCopies, tmp_path: Path) -> None:
    first = default_demo.copy_to(tmp_path / "a")
    master = default_demo.master / "target.gguf"
    written = master.stat().st_mtime_ns
    second = default_demo.copy_to(tmp_path / "b")
    assert master.stat().st_mtime_ns == written  # written once for the session, not per copy
    assert first.target == tmp_path / "a" / "target.gguf" and second.target == tmp_path / "b" / "target.gguf"
    for name in ("target.gguf", "sidecar-d2t.gguf", "sidecar-full.gguf", "demo.json"):
        assert filecmp.cmp(default_demo.master / name, tmp_path / "a" / name, shallow=False), name
    assert first.table == second.table and first.table is not None
    first.target.write_bytes(b"a test that damages its copy")  # leaves the master and other copies alone
    assert master.stat().st_size == second.target.stat().st_size > 100_000_000
