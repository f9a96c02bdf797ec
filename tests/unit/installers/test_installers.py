"""The PyInstaller bundle description, checked without running PyInstaller (that takes a minute or more).

The real build is ``python installers/build.py`` (installers/README.md records its size and time).
"""

from __future__ import annotations

import ast
import os
import runpy
import sys
from pathlib import Path

import pytest

from app.core import resources
from installers import bundle
from installers.entry import _prepare_frozen_environment

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "installers" / "fastmtp-chat.spec"


def test_every_resource_file_is_bundled_where_the_app_looks_for_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    files = bundle.resource_files()
    assert files and all(Path(source).is_file() for source, _ in files)
    bundled = {Path(dest) / Path(source).name for source, dest in files}
    for needed in ("catalog.toml", "patches/qwen35-d2t-4df29be.patch"):
        assert Path("resources") / needed in bundled
    shipped = {p.relative_to(ROOT) for p in (ROOT / "resources").rglob("*") if p.is_file()
               and "__pycache__" not in p.parts}
    assert bundled == shipped
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)  # as in the frozen app
    assert resources.resources_dir() == tmp_path / "resources"


def test_the_bundled_build_tools_exist_in_this_environment() -> None:
    tools = bundle.tool_files()
    names = {Path(source).name for source, _ in tools}
    assert {"cmake", "ninja"} <= names or {"cmake.exe", "ninja.exe"} <= names
    assert all(Path(source).is_file() for source, _ in tools)
    executables = {Path(source).name for source, dest in tools if Path(dest).name in ("bin", "ninja")}
    assert executables in ({"cmake", "ninja"}, {"cmake.exe", "ninja.exe"})
    assert not any("Help" in Path(dest).parts for _, dest in tools)


def test_hidden_imports_exist_and_the_spec_uses_the_bundle_lists() -> None:
    import importlib.util

    missing = [name for name in bundle.HIDDEN_IMPORTS if importlib.util.find_spec(name) is None]
    assert missing == []
    tree = ast.parse(SPEC.read_text())  # the spec is Python run by PyInstaller; it must at least parse
    text = SPEC.read_text()
    assert tree.body and "bundle.resource_files()" in text and "bundle.HIDDEN_IMPORTS" in text
    assert (ROOT / "installers" / "entry.py").is_file()


def test_the_frozen_entry_runs_child_modules_and_finds_the_bundled_tools(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tools" / "cmake" / "bin").mkdir(parents=True)
    (tmp_path / "sdist").mkdir()
    monkeypatch.delenv("FASTMTP_WHEELHOUSE", raising=False)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    _prepare_frozen_environment(tmp_path)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(tmp_path / "tools" / "cmake" / "bin")
    assert os.environ["FASTMTP_WHEELHOUSE"] == str(tmp_path / "sdist")

    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setattr(sys, "argv", ["fastmtp-chat", "-m", "app", "--help"])
    with pytest.raises(SystemExit) as exit_info:  # `-m app --help`, as a child process of the frozen app runs it
        runpy.run_path(str(ROOT / "installers" / "entry.py"), run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out
