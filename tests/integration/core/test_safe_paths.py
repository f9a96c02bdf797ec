"""Names from outside are names, never paths: the one validator and the one unpacker, attacked by generated input.

Hypothesis throws generated names (separators, dots, drive letters, control and look-alike characters, very
long ones) at :func:`app.core.safe_paths.child`, and generated tar archives (``..`` and absolute member names, links
in and out of the folder, hard links, FIFOs and devices, too many bytes or members) at
:func:`app.core.safe_paths.extract_tar`, each in a sandbox with a file of ours beside the destination. Whatever
passes must stay inside its folder; whatever fails must fail with a clear error (exit code 4), never a
traceback; and the file beside the destination is never touched.
"""

from __future__ import annotations

import io
import ntpath
import os
import posixpath
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.core.errors import FastMTPError, UnsafeInputError
from app.core.safe_paths import MAX_NAME, UnpackLimits, check_name, child, extract_tar, inside

PIECES = ["", ".", "..", "/", "\\", "a", "b", "lib", "model.gguf", "C:", "c:\\", "~", " ", "\x00", "\n", "\t",
          "CON", "nul.txt", "x.", "-", "%2e%2e", "\u2024\u2024", "\uff0e\uff0e", "\uff0f", "\u202e", ":", "*", "?"]
NAMES = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(PIECES), max_size=6).map("".join),
    st.from_regex(r"[A-Za-z0-9._+-]{0,260}", fullmatch=True),
)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["0.3.35-cpu-d2t-b1613c16", "previous-backend", "model-Q4_K_M.gguf",
                                  "Qwen3.5-27B-FastMTP-32K.gguf", "fastmtp-backend-cpu.tar.xz", "libstdc++.so.6",
                                  "a", "x" * MAX_NAME])
def test_plain_names_pass(name: str) -> None:
    assert check_name(name, "file name", "the test") == name


@pytest.mark.parametrize("name", ["", ".", "..", "../models", "../../x", "/etc/passwd", "a/b", "a\\b", "C:x",
                                  "c:\\x", ".hidden", ".staging-1", "x" * (MAX_NAME + 1), "nul", "CON.txt", "x.",
                                  "a\x00b", "tab\there", "\uff0e\uff0e", "caf\u00e9", None, 3, ["a"]])
def test_names_that_are_paths_or_not_names_are_refused_in_words(name: object) -> None:
    with pytest.raises(UnsafeInputError) as caught:
        check_name(name, "backend id", "fastmtp-backend.json")
    error = caught.value
    assert error.exit_code == 4 and "fastmtp-backend.json" in error.message and "backend id" in error.message
    assert error.advice


@FAST
@given(NAMES)
def test_a_name_that_passes_is_one_plain_entry_inside_its_folder(name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        parent = Path(tmp) / "parent"
        parent.mkdir()
        try:
            path = child(parent, name, "test name", "the test")
        except UnsafeInputError as exc:
            assert exc.exit_code == 4 and exc.message and exc.advice
            return
        assert path == parent / name and path.parent == parent
        assert name not in ("", ".", "..") and not name.startswith(".")
        assert not any(sep in name for sep in ("/", "\\", ":", "\x00"))
        assert PurePosixPath(name).name == name == PureWindowsPath(name).name
        assert not PureWindowsPath(name).drive and not ntpath.isabs(name) and not posixpath.isabs(name)
        assert name.isascii() and name.isprintable() and 0 < len(name) <= MAX_NAME
        assert not name.endswith((".", " "))
        path.write_text("x")
        assert [p.name for p in parent.iterdir()] == [name]
        assert os.path.realpath(path).startswith(os.path.realpath(parent) + os.sep)


def test_inside_refuses_a_link_that_leads_out(tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "out").symlink_to(tmp_path)
    with pytest.raises(UnsafeInputError, match="outside"):
        inside(parent, parent / "out", "backend folder")
    with pytest.raises(UnsafeInputError, match="outside"):
        inside(parent, parent / ".." / "x", "backend folder")
    with pytest.raises(UnsafeInputError, match="outside"):
        inside(parent, parent, "backend folder")  # the folder itself is not inside it
    assert inside(parent, parent / "fine", "backend folder") == parent / "fine"


# ----------------------------------------------------------------------------- the unpacker

KINDS = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
         "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "cont": tarfile.CONTTYPE}
GOOD = ["a", "b", "lib", "root", "libggml.so.0"]
BAD = ["..", ".", "", "x\\y", "C:", ".hidden"]
TARGETS = ["../a", "../../outside.txt", "/etc/passwd", "..", ".", "b/../../c", "", "root/../..", "../dest/a",
           "x/../../../", "C:\\x", "\\\\server\\share"]


@dataclass(frozen=True)
class Member:
    kind: str
    name: str
    linkname: str
    size: int


GOOD_PATHS = st.lists(st.sampled_from(GOOD), min_size=1, max_size=4).map("/".join)
HOSTILE_PATHS = st.one_of(
    st.lists(st.sampled_from(GOOD + BAD), min_size=1, max_size=4).map("/".join),
    st.lists(st.sampled_from(GOOD + BAD), min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)),
)
MEMBER_PATHS = st.tuples(st.sampled_from([False] * 11 + [True]), GOOD_PATHS, HOSTILE_PATHS).map(
    lambda pick: pick[2] if pick[0] else pick[1])  # mostly plain paths, so that links and limits are reached too
MEMBER_KINDS = st.sampled_from(["file", "dir", "symlink", "hardlink"] * 4 + list(KINDS))
MEMBERS = st.builds(Member, MEMBER_KINDS, MEMBER_PATHS,
                    st.one_of(GOOD_PATHS, st.sampled_from(TARGETS), HOSTILE_PATHS), st.integers(0, 3000))


def write_tar(path: Path, members: list[Member]) -> None:
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type = KINDS[m.kind]
            info.mode = 0o755 if m.kind == "dir" else 0o644
            data = b""
            if m.kind in ("file", "cont"):
                data = bytes(m.size)
                info.size = m.size
            if m.kind in ("symlink", "hardlink"):
                info.linkname = m.linkname
            tar.addfile(info, io.BytesIO(data) if data else None)


REASONS = [("hard link", "hard link"), ("the link", "link out"), ("members", "member count"), ("bytes", "size"),
           ("not a regular file", "special member"), ("would not stay inside", "member path"),
           ("through", "written through a file or link"), ("twice", "duplicate")]


def check_contained(dest: Path, limits: UnpackLimits) -> None:
    """Everything under ``dest`` is a folder, a regular file or a link that resolves inside ``dest``."""
    real = os.path.realpath(dest)
    total = 0
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():  # points down from its own folder; a loop or a dangling link leads nowhere
                target = os.readlink(path)
                assert not os.path.isabs(target) and ".." not in target.split("/"), (path, target)
                try:
                    resolved = os.path.realpath(path, strict=True)
                except OSError:
                    continue
                assert resolved == real or resolved.startswith(real + os.sep), (path, resolved)
                continue
            resolved = os.path.realpath(path)
            assert resolved.startswith(real + os.sep), (path, resolved)
            assert path.is_dir() or path.is_file(), path  # no FIFO, no device
            if path.is_file():
                total += path.stat().st_size
    assert total <= limits.max_bytes


@FAST
@given(st.lists(MEMBERS, max_size=8), st.integers(0, 30_000), st.integers(1, 12))
def test_no_generated_archive_writes_outside_its_folder(members: list[Member], max_bytes: int,
                                                        max_members: int) -> None:
    limits = UnpackLimits(max_bytes=max_bytes, max_members=max_members)
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = Path(tmp) / "sandbox"
        dest = sandbox / "dest"
        dest.mkdir(parents=True)
        outside = sandbox / "outside.txt"
        outside.write_text("mine")
        archive = Path(tmp) / "archive.tar.gz"
        write_tar(archive, members)
        try:
            got = extract_tar(archive, dest, limits, "archive.tar.gz")
            event(f"unpacked {min(got.members, 4)}{'+' if got.members >= 4 else ''} members")
        except FastMTPError as exc:
            assert exc.message and exc.advice
            event("refused: " + next((why for words, why in REASONS if words in exc.message), exc.message))
        check_contained(dest, limits)
        assert sorted(p.name for p in sandbox.iterdir()) == ["dest", "outside.txt"]
        assert outside.read_text() == "mine" and outside.stat().st_nlink == 1 and not outside.is_symlink()
        assert not Path("/etc/passwd").is_symlink()


def test_the_limits_count_bytes_and_members(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    write_tar(archive, [Member("dir", "root", "", 0), Member("file", "root/f", "", 1000)])
    got = extract_tar(archive, tmp_path / "ok", UnpackLimits(max_bytes=1000, max_members=2), "a.tar.gz")
    assert (got.bytes, got.members) == (1000, 2)
    with pytest.raises(UnsafeInputError, match="unpacks to more than 999 bytes"):
        extract_tar(archive, tmp_path / "big", UnpackLimits(max_bytes=999, max_members=2), "a.tar.gz")
    with pytest.raises(UnsafeInputError, match="more than 1 members"):
        extract_tar(archive, tmp_path / "many", UnpackLimits(max_bytes=1000, max_members=1), "a.tar.gz")


def test_default_limits_follow_the_archive_size() -> None:
    """A 2.5 MB archive may not unpack to 3 GiB; a large CUDA archive may unpack to several times its size."""
    small = UnpackLimits.for_archive(2_500_000)
    assert small.max_bytes < 3 << 30
    large = UnpackLimits.for_archive(400_000_000)
    assert large.max_bytes >= 4 * 400_000_000


@FAST
@given(st.one_of(NAMES, st.tuples(NAMES, NAMES).map("/".join)))
def test_a_repository_that_passes_makes_a_plain_folder_name(repo: str) -> None:
    from app.release.catalog import repo_slug

    try:
        slug = repo_slug(repo)
    except UnsafeInputError as exc:
        assert exc.exit_code == 4 and "repository" in exc.message
        return
    assert check_name(slug, "folder", "the test") == slug and repo.count("/") <= 1
