"""The packed CPU backend archive runs on a bare Debian: every library its binaries need is inside it, where their
RUNPATH looks, or one of the system's base libraries, no RUNPATH leaves the archive, and the .deb's ``libc6 (>= X)``
floor covers the newest glibc symbol version any of its binaries requires.

The archives are real ones: the d2t-patched CPU backend packed by ``python -m app backend pack`` (the same code the
release and the one-folder app's bundled archive use), alone and with its llama-server (whose build-tree RUNPATH
the pack rewrites to ``$ORIGIN``). The ELF headers are read with ``readelf`` through ``installers/elf_needs.py``,
which ``installers/debian.py`` uses to compute the floor. (A CUDA archive: tests/integration/backend/
test_pack_self_contained.py, with NVIDIA's runtime from the cached wheels.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__
from app.backend import archive
from app.backend.registry import BackendManifest
from installers import debian, elf_needs
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.skipif(sys.platform != "linux" or shutil.which("readelf") is None,
                                reason="ELF binaries and binutils' readelf")


def _pack(backend_id: str, out: Path, *extra: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "app", "backend", "pack", backend_id, "--out", str(out), "--json",
                           *extra], env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads(done.stdout)["archive"])


@pytest.fixture(scope="module")
def packed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Path:
    out = _pack(patched_backend.id, module_tmp.mktemp("packed"))  # a folder: the name comes from the manifest
    assert out.name == f"fastmtp-backend-{__version__}-cpu-native-linux-x86_64.tar.xz"
    return out


@pytest.fixture(scope="module")
def unpacked(packed: Path, module_tmp: ModuleFolders) -> Path:
    return elf_needs.unpack(packed, module_tmp.mktemp("unpacked"))


def test_every_library_the_archives_binaries_need_is_inside_or_a_base_library(unpacked: Path) -> None:
    binaries = list(elf_needs.elf_files(unpacked))
    names = {path.name for path in binaries}
    assert any(name.startswith("libllama") for name in names) and any(name.startswith("libggml") for name in names)
    assert elf_needs.unresolved(unpacked) == {} and elf_needs.outside_runpaths(unpacked) == {}
    needs = {lib for path in binaries for lib in elf_needs.needed(path)}
    assert "libc.so.6" in needs  # the reading works: every binary here needs libc
    if any(lib.startswith("libgomp") for lib in needs):  # OpenMP from the system: the .deb must declare it
        assert "libgomp1" in debian.BASE_DEPENDS


def test_the_packed_llama_server_runs_from_the_unpacked_archive_alone(patched_backend: BackendManifest,
                                                                      module_tmp: ModuleFolders) -> None:
    """Built in the backend's tree, its RUNPATH names that tree; packed, it looks beside itself and in the backend's
    lib folder ($ORIGIN), and runs with no LD_LIBRARY_PATH from wherever the archive was unpacked."""
    with_server = _pack(patched_backend.id, module_tmp.mktemp("with-server") / "backend.tar.xz", "--server")
    assert with_server.name == "backend.tar.xz"  # a file name given: kept
    assert elf_needs.check_archive(with_server) == []
    root = elf_needs.unpack(with_server, module_tmp.mktemp("server-unpacked")) / patched_backend.id
    server = root / archive.SERVER_DIR / archive.SERVER_BINARY
    assert elf_needs.runpath(server) == archive.SERVER_RUNPATH
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run([str(server), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "version:" in done.stdout + done.stderr, done.stdout + done.stderr
    ldd = subprocess.run(["ldd", str(server)], env=env, capture_output=True, text=True).stdout
    assert f"libllama.so.0 => {root / archive.SERVER_DIR}/../llama_cpp/lib/libllama.so.0" in ldd


def test_a_library_missing_from_the_archive_is_named(unpacked: Path, tmp_path: Path) -> None:
    """The check above can fail: without libggml-base, everything linking it is named."""
    copy = tmp_path / "copy"
    shutil.copytree(unpacked, copy, symlinks=True)
    removed = [path for path in copy.rglob("libggml-base.so*")]
    assert removed
    for path in removed:
        path.unlink()
    missing = elf_needs.unresolved(copy)
    assert missing and all(any(lib.startswith("libggml-base.so") for lib in libs) for libs in missing.values())
    assert any("libllama" in name or "libggml" in name for name in missing)


def test_the_debs_libc6_floor_covers_the_newest_glibc_any_bundled_binary_needs(
        packed: Path, unpacked: Path, tmp_path: Path) -> None:
    newest = max(version for path in elf_needs.elf_files(unpacked) for version in elf_needs.glibc_versions(path))
    assert newest >= (2, 2, 5)  # the reading works: x86-64 binaries need at least the first glibc version
    app = tmp_path / "dist" / "fastmtp-chat"
    (app / "_internal" / "backends").mkdir(parents=True)
    (app / "fastmtp-chat").write_text("#!/bin/sh\n")
    shutil.copy2(packed, app / "_internal" / "backends" / packed.name)  # as the one-folder app bundles it
    root = debian.package_tree(app, tmp_path / "root", "1.2.3", "amd64")
    depends = next(line for line in (root / "DEBIAN" / "control").read_text().splitlines()
                   if line.startswith("Depends: ")).removeprefix("Depends: ").split(", ")
    floor = next(item for item in depends if item.startswith("libc6 ")).removeprefix("libc6 (>= ").rstrip(")")
    assert tuple(int(part) for part in floor.split(".")) >= newest, (floor, newest)
    assert floor == debian.libc_floor(app) and tuple(map(int, debian.GLIBC_BASE.split("."))) <= \
        tuple(map(int, floor.split(".")))


def test_the_floor_rises_with_what_a_binary_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A binary needing a newer glibc than Debian 12's raises the floor above the base (a stand-in reading)."""
    (tmp_path / "prog").write_bytes(elf_needs.ELF_MAGIC + b"\0" * 60)
    monkeypatch.setattr(elf_needs, "glibc_versions", lambda path: {(2, 2, 5), (2, 38)})
    assert debian.libc_floor(tmp_path) == "2.38"
    monkeypatch.setattr(elf_needs, "glibc_versions", lambda path: {(2, 17)})
    assert debian.libc_floor(tmp_path) == debian.GLIBC_BASE
