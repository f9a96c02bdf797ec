"""``fetch --dest`` never writes through a link planted in its destination (issue 37 item 1): with the old fixed
temporary name, the final names and a resumed ``.part`` all planted as links to files outside, the release lands as
files of its own, every outside file is unchanged and no link is left. The writers themselves (``safe_paths``)
refuse a link, a hard link or a FIFO where they create a file, in words. A real release server on 127.0.0.1, the
real CLI in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import safe_paths
from app.core.errors import UnsafeInputError
from app.release.catalog import load_catalog, repo_slug
from app.release.publish import KeyPair, keygen, sign_release
from tests.helpers.release_server import ReleaseServer

CATALOG = load_catalog()
INTEG = CATALOG.integrity
MODEL = CATALOG.quant("Q4_K_P").file
PAYLOAD = {MODEL: os.urandom(200_000), CATALOG.sidecar.file: os.urandom(30_000),
           INTEG.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("data", "config", "cache"):
        env[f"XDG_{name.upper()}_HOME"] = str(tmp_path / f"xdg-{name}")
    env.update(FASTMTP_DATA_DIR=str(tmp_path / "data"), FASTMTP_CONFIG_DIR=str(tmp_path / "config"))
    env.pop("HF_TOKEN", None)
    return env


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


@pytest.fixture
def server(tmp_path: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    folder = tmp_path / "release"
    folder.mkdir()
    for name, data in PAYLOAD.items():
        (folder / name).write_bytes(data)
    sign_release(folder, key.private, version="1")
    with ReleaseServer({p.name: p.read_bytes() for p in folder.iterdir()}) as srv:
        yield srv


def _fetch(env: dict[str, str], server: ReleaseServer, key: KeyPair, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "fetch", "--base-url", server.url(""), "--json",
                           "--trust-fingerprint", key.fingerprint, "--dest", str(dest)], cwd=REPO_ROOT, env=env,
                          text=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def test_links_planted_in_dest_are_never_written_through(env: dict[str, str], server: ReleaseServer, key: KeyPair,
                                                        tmp_path: Path) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    planted = {f".{INTEG.checksums}.incoming": "a", INTEG.checksums: "b", f".{INTEG.manifest}.incoming": "c",
               MODEL: "d", f".{MODEL}.incoming-{os.getpid()}": "e"}
    for name, tag in planted.items():
        (outside / tag).write_text(f"precious {tag}\n")
        (dest / name).symlink_to(outside / tag)
    staged = Path(env["FASTMTP_DATA_DIR"]) / "downloads" / repo_slug(CATALOG.repo) / "files"
    staged.mkdir(parents=True)
    (outside / "part").write_text("precious part\n")
    (staged / f"{MODEL}.part").symlink_to(outside / "part")  # a resumed download planted as a link

    done = _fetch(env, server, key, dest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for tag in [*planted.values(), "part"]:
        assert (outside / tag).read_text() == f"precious {tag}\n"  # nothing outside was written
    for name, data in PAYLOAD.items():
        assert not (dest / name).is_symlink() and (dest / name).read_bytes() == data
    assert not (dest / INTEG.checksums).is_symlink() and (dest / INTEG.checksums).read_bytes().strip()
    assert not [p.name for p in dest.iterdir() if p.is_symlink() and not p.name.startswith(".")]
    assert json.loads(done.stdout.splitlines()[-1])["kind"] == "result"


def test_the_writers_refuse_a_link_a_hard_link_or_a_fifo_in_words(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    (tmp_path / "link").symlink_to(outside)
    os.link(outside, tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    for name, words in [("link", "symbolic link"), ("hard", "hard link"), ("fifo", "not a regular file")]:
        with pytest.raises(UnsafeInputError, match=words) as caught:
            safe_paths.open_new(tmp_path / name, "state file").close()
        assert "does not write through it" in caught.value.message
        with pytest.raises(UnsafeInputError, match=words):  # a FIFO: refused at once, not waited on for a reader
            os.close(safe_paths.open_existing_or_new(tmp_path / name, "partial download"))
    assert outside.read_text() == "precious\n"

    (tmp_path / "left").write_bytes(b"an interrupted run's")  # a plain leftover is replaced
    with safe_paths.open_new(tmp_path / "left", "state file") as handle:
        handle.write(b"new")
    assert (tmp_path / "left").read_bytes() == b"new"

    safe_paths.write_replacing(tmp_path / "link", b"fresh")  # a link at the final name is replaced, not followed
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_bytes() == b"fresh"
    assert outside.read_text() == "precious\n"
    assert not list(tmp_path.glob(".*.incoming"))


def test_gguf_counts_and_release_writers_refuse_or_replace_planted_links(tmp_path: Path, key: KeyPair) -> None:
    from app.gguftools.counts import TokenCounts
    from app.gguftools.writer import write_gguf

    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    out = tmp_path / "out" / "model.gguf"
    out.parent.mkdir()
    (out.parent / "model.gguf.partial").symlink_to(outside)
    with pytest.raises(UnsafeInputError, match="symbolic link"):
        write_gguf(out, "llama", [], [])
    (tmp_path / "counts.json.partial").symlink_to(outside)
    with pytest.raises(UnsafeInputError, match="symbolic link"):
        TokenCounts({1: 2}).save(tmp_path / "counts.json")

    release = tmp_path / "release"
    release.mkdir()
    for name, data in PAYLOAD.items():
        (release / name).write_bytes(data)
    (release / f".{INTEG.checksums}.tmp").symlink_to(outside)  # the old fixed temporary name
    (release / INTEG.manifest).symlink_to(outside)
    sign_release(release, key.private, version="1")
    assert not (release / INTEG.manifest).is_symlink() and (release / INTEG.checksums).is_file()
    assert outside.read_text() == "precious\n"


def test_state_files_are_never_written_through_a_planted_temporary_name(tmp_path: Path) -> None:
    from app.core import settings_file

    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    target = tmp_path / "serve.json"  # the cache folder is writable by whoever could forge serve.json
    (tmp_path / f".serve.json.{os.getpid()}.tmp").symlink_to(outside)
    settings_file.write_json(target, {"pid": 2})
    assert outside.read_text() == "precious\n"
    assert json.loads(target.read_text()) == {"pid": 2} and not target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "serve.json"]


@pytest.mark.skipif(not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(Path.cwd()).st_dev,
                    reason="needs a second file system")
def test_a_move_across_file_systems_copies_under_a_unique_name(tmp_path: Path) -> None:
    import hashlib
    import tempfile

    from app.release.install import _move

    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        dest = Path(other)
        outside = tmp_path / "outside"
        outside.write_text("precious\n")
        (dest / f".{MODEL}.incoming-{os.getpid()}").symlink_to(outside)  # the old fixed temporary name
        (dest / MODEL).symlink_to(outside)
        src = tmp_path / MODEL
        src.write_bytes(PAYLOAD[MODEL])
        _move(src, dest / MODEL, hashlib.sha256(PAYLOAD[MODEL]).hexdigest())
        assert (dest / MODEL).read_bytes() == PAYLOAD[MODEL] and not (dest / MODEL).is_symlink()
        assert outside.read_text() == "precious\n" and not src.exists()
        assert not list(dest.glob("*.incoming"))
