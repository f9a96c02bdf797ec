"""The pinned sdist unpacked once into the cache, even when two first builds start together (a fresh machine's test
run with two workers failed 262 tests on "Directory not empty" when both unpacked the same tree)."""

from __future__ import annotations

import tarfile
import threading
from pathlib import Path

from app.backend.source import PinnedSource, unpack
from app.core import folder_lock

PIN = PinnedSource(version="9.9.9", sha256="0" * 64, llama_cpp_commit="abc1234")


def _sdist(folder: Path) -> Path:
    """A small sdist with the shape the builder unpacks: a versioned root with a vendored tree and its .git file."""
    root = folder / "content" / f"llama_cpp_python-{PIN.version}"
    (root / "vendor" / "llama.cpp").mkdir(parents=True)
    (root / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("project(x)\n")
    (root / "vendor" / "llama.cpp" / ".git").write_text("gitdir: ../../.git/modules/llama.cpp\n")
    sdist = folder / f"llama_cpp_python-{PIN.version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(root, arcname=root.name)
    return sdist


def test_unpack_makes_the_tree_once_without_the_submodule_pointer(tmp_path: Path) -> None:
    dest = tmp_path / "src" / "pristine"
    assert unpack(PIN, _sdist(tmp_path), dest) == dest
    assert (dest / "vendor" / "llama.cpp" / "CMakeLists.txt").read_text() == "project(x)\n"
    assert not (dest / "vendor" / "llama.cpp" / ".git").exists()
    (dest / "kept").write_text("a file the second call must not remove")
    unpack(PIN, _sdist(tmp_path / "again"), dest)
    assert (dest / "kept").is_file()  # complete: reused untouched


def test_a_second_unpack_waits_for_the_first_and_takes_its_tree(tmp_path: Path) -> None:
    """While another process holds the tree's lock with the tree half written, a second unpack neither removes it
    nor writes beside it: it waits, then finds the first one's finished tree."""
    sdist, dest = _sdist(tmp_path), tmp_path / "src" / "pristine"
    waiting, done = threading.Event(), threading.Event()
    result: list[Path | BaseException] = []

    def second() -> None:
        try:
            result.append(unpack(PIN, sdist, dest, log=lambda _line: waiting.set()))
        except BaseException as exc:  # handed to the test below
            result.append(exc)
        done.set()

    with folder_lock.locked(dest):
        (dest / "vendor").mkdir(parents=True)
        (dest / "first-unpacker").write_text("half written")
        thread = threading.Thread(target=second)
        thread.start()
        assert waiting.wait(timeout=60), "the second unpack did not wait for the lock"
        assert (dest / "first-unpacker").is_file() and not done.is_set()
        (dest / ".fastmtp-unpacked").write_text(PIN.sha256 + "\n")  # the first one finishes
    assert done.wait(timeout=60)
    thread.join()
    assert result == [dest]
    assert (dest / "first-unpacker").is_file()  # its tree, not a second unpacking
