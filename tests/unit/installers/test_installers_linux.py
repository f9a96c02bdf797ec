"""The Linux packages' layout, checked without PyInstaller: the .deb tree, its control file and desktop entry.

The packages themselves are built and run in clean environments by installers/smoke.py (`make test`).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from installers import bundle, debian
from installers.entry import main as entry_main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_app(tmp_path: Path) -> Path:
    """A one-folder app as PyInstaller lays it out, with a program that says who it is."""
    folder = tmp_path / "dist" / "fastmtp-chat"
    (folder / "_internal").mkdir(parents=True)
    program = folder / "fastmtp-chat"
    program.write_text("#!/bin/sh\necho \"fastmtp-chat $*\"\n")
    program.chmod(0o755)
    return folder


def test_the_package_tree_has_the_app_launcher_menu_entry_and_icons(fake_app: Path, tmp_path: Path) -> None:
    root = debian.package_tree(fake_app, tmp_path / "root", "1.2.3", "amd64")
    launcher = root / "usr" / "bin" / "fastmtp-chat"
    assert launcher.is_symlink() and not Path(os.readlink(launcher)).is_absolute()
    assert launcher.resolve() == (root / "opt" / "fastmtp-chat" / "fastmtp-chat").resolve()
    assert subprocess.run([str(launcher), "--help"], capture_output=True, text=True).stdout.strip() \
        == "fastmtp-chat --help"
    for size in debian.ICON_SIZES:
        assert (root / f"usr/share/icons/hicolor/{size}x{size}/apps/fastmtp-chat.png").is_file()
    assert (root / "usr/share/icons/hicolor/scalable/apps/fastmtp-chat.svg").is_file()
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(root / "usr/share/applications/fastmtp-chat.desktop")
    desktop = entry["Desktop Entry"]
    assert desktop["Exec"] == "fastmtp-chat" and desktop["Icon"] == "fastmtp-chat"
    assert desktop["StartupWMClass"] == "fastmtp-chat" and desktop["Type"] == "Application"
    assert not list((root / "DEBIAN").glob("*inst")) and not list((root / "DEBIAN").glob("*rm"))


def test_the_control_file_names_the_qt_libraries_the_makefile_installs(fake_app: Path, tmp_path: Path) -> None:
    root = debian.package_tree(fake_app, tmp_path / "root", "1.2.3", "amd64")
    fields = dict(line.split(": ", 1) for line in (root / "DEBIAN" / "control").read_text().splitlines()
                  if ": " in line and not line.startswith(" "))
    assert fields["Package"] == "fastmtp-chat" and fields["Version"] == "1.2.3" and fields["Architecture"] == "amd64"
    depends = [item.split(" ")[0] for item in fields["Depends"].split(", ")]
    assert set(debian.qt_packages()) <= set(depends) and "libgomp1" in depends
    assert "libxcb-cursor0" in debian.qt_packages()
    makefile = (ROOT / "Makefile").read_text()
    assert "QT_DEB_PACKAGES := $(shell cat installers/debian-qt-packages.txt)" in makefile
    assert int(fields["Installed-Size"]) >= 1


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is Debian's")
def test_dpkg_deb_builds_the_tree_and_lists_the_launcher(fake_app: Path, tmp_path: Path) -> None:
    root = debian.package_tree(fake_app, tmp_path / "root", "1.2.3", "amd64")
    deb = debian.build_deb(root, tmp_path / "fastmtp-chat_1.2.3_amd64.deb")
    contents = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True,
                              check=True).stdout
    assert "./usr/bin/fastmtp-chat -> ../../opt/fastmtp-chat/fastmtp-chat" in contents
    assert "root/root" in contents and "./opt/fastmtp-chat/fastmtp-chat" in contents


def test_debian_architecture_names() -> None:
    assert debian.debian_arch("x86_64") == "amd64" and debian.debian_arch("aarch64") == "arm64"


def test_the_prebuilt_backend_archive_goes_into_the_bundle(tmp_path: Path) -> None:
    assert bundle.backend_files(tmp_path) == []
    archive = tmp_path / "fastmtp-backend-x.tar.xz"
    archive.write_bytes(b"x")
    assert bundle.backend_files(tmp_path) == [(str(archive), bundle.BACKENDS_FOLDER)]
    spec = (ROOT / "installers" / "fastmtp-chat.spec").read_text()
    assert "bundle.backend_files()" in spec


def test_the_frozen_entry_runs_a_probe_given_with_dash_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "ran"
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    monkeypatch.setattr(sys, "argv", ["fastmtp-chat", "-c", f"open({str(out)!r}, 'w').write('probe')"])
    assert entry_main() == 0
    assert out.read_text() == "probe"


def test_the_packaged_app_says_it_cannot_pip_the_cuda_toolkit(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.backend import cuda_wheels
    from app.core.cancel import CancelToken
    from app.core.errors import ToolchainError

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(ToolchainError) as failure:
        cuda_wheels._run([sys.executable, "-m", "pip", "--version"], lambda _line: None, CancelToken())
    assert "no pip" in failure.value.message and "backend install" in failure.value.advice


def test_a_windowed_program_without_streams_gets_the_null_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from installers.entry import _no_missing_streams

    monkeypatch.setattr(sys, "stdin", None)
    monkeypatch.setattr(sys, "stdout", None)
    _no_missing_streams()
    assert sys.stdin is not None and not sys.stdin.isatty() and sys.stdin.read() == ""
    assert sys.stdout is not None and sys.stdout.write("nothing") == len("nothing")
