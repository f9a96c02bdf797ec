"""Hostile backend archives, signed with a trusted key and installed by the real CLI: names are names, never paths.

A publisher key the user trusted (``--trust-fingerprint``) signs small archives whose ``fastmtp-backend.json``
names a path instead of an id (``../models``, ``../../x``, ``.``, an absolute path), that unpack to more than
the signed size, or that hold links out of the folder. ``backend install`` and ``backend unpack`` must refuse
each with exit code 4 (verification) before anything is moved, and leave the data folder (the models folder
above all) byte for byte as it was. The archives are real ``.tar.gz``/``.tar.xz`` files signed with the
project's own signing code; the backend inside is a manifest only, so a refusal that came after the
self-test would show as exit 1 instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.backend import registry
from app.backend.signing import CLAIMED, FORMAT, backend_repo, manifest_name, signature_name
from app.release import signing
from tests.helpers.signed_backend import last_json, run_app

REPO = backend_repo()  # the app's own repository: what backend archives and feeds are signed for
PREVIOUS = "previous-backend"
Extra = Callable[[tarfile.TarFile, str], None]


def fake_manifest(backend_id: str) -> dict[str, Any]:
    """A backend manifest that says its self-test passed (so ``backend unpack`` would make it active)."""
    return {"id": backend_id, "llama_cpp_python_version": "0.3.35", "llama_cpp_commit": "0" * 40,
            "sdist_sha256": "1" * 64, "patch_name": "d2t.patch", "patch_sha256": "2" * 64, "flavor": "cpu",
            "cmake_args": ["-DGGML_NATIVE=OFF"], "cuda_version": None, "cuda_archs": [], "compiler": "cc",
            "built_at": "2026-01-01T00:00:00+00:00", "build_seconds": 1.0, "selftest": {"ok": True}}


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def backend_tar(path: Path, backend_id: str, *, root: str = "hostile", extra: Extra | None = None) -> Path:
    """A backend archive as ``backend pack`` lays it out (one folder with the manifest), plus ``extra`` members."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz" if path.name.endswith(".gz") else "w:xz") as tar:
        add_dir(tar, root)
        add_bytes(tar, f"{root}/{registry.MANIFEST}", json.dumps(fake_manifest(backend_id)).encode())
        if extra is not None:
            extra(tar, root)
    return path


def unpacked_size(path: Path) -> tuple[int, int]:
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    return sum(m.size for m in members if m.isfile()), len(members)


def sign(path: Path, key: Ed25519PrivateKey, backend_id: str, unpacked: tuple[int, int] | None = None) -> None:
    """The signed manifest and signature ``release sign-backend`` writes, for whatever the archive says."""
    data = path.read_bytes()
    inner = fake_manifest(backend_id)
    body: dict[str, Any] = {
        "format": FORMAT, "repo": REPO, "date": "2026-01-01T00:00:00Z",
        "archive": {"name": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        "backend": {name: inner.get(name) for name in CLAIMED},
        "public_key": signing.public_key_pem(key.public_key()).decode("ascii")}
    if unpacked is not None:
        body["unpacked"] = {"bytes": unpacked[0], "members": unpacked[1]}
    text = (json.dumps(body, indent=2) + "\n").encode()
    path.with_name(manifest_name(path.name)).write_bytes(text)
    path.with_name(signature_name(path.name)).write_bytes(signing.sign(key, text))


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return signing.generate_key()


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """Fresh data and config folders: a models folder with files in it, and a previous backend, active."""
    data = tmp_path / "data"
    models = data / "models"
    (models / "someone--Qwen3.8-GGUF").mkdir(parents=True)
    (models / "someone--Qwen3.8-GGUF" / "model-Q4_K_M.gguf").write_bytes(b"GGUF" + os.urandom(4096))
    (models / "local").mkdir()
    (models / "local" / "mine.gguf").write_bytes(b"GGUF" + os.urandom(1024))
    previous = data / "backends" / PREVIOUS
    previous.mkdir(parents=True)
    (previous / registry.MANIFEST).write_text(json.dumps(fake_manifest(PREVIOUS)))
    (data / "backends" / "active.json").write_text(json.dumps({"id": PREVIOUS}))
    env = dict(os.environ, FASTMTP_DATA_DIR=str(data), FASTMTP_CONFIG_DIR=str(tmp_path / "config"))
    env.pop("FASTMTP_BACKEND_DIR", None)
    return env


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's sha256, a link's target, or "dir"."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def fingerprint(key: Ed25519PrivateKey) -> str:
    return signing.fingerprint(key.public_key())


def install(env: dict[str, str], archive: Path, key: Ed25519PrivateKey) -> Any:
    return run_app(env, "backend", "install", str(archive), "--trust-fingerprint", fingerprint(key), "--json")


def unpack(env: dict[str, str], archive: Path) -> Any:
    return run_app(env, "backend", "unpack", str(archive), "--json")


def assert_refused(done: Any, *words: str) -> dict[str, Any]:
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    error = last_json(done)
    text = error["message"] + " " + error["advice"]
    for word in words:
        assert word in text, text
    return error


def hostile_ids(tmp_path: Path) -> list[str]:
    return ["../models", "../../x", ".", str(tmp_path / "absolute-target"), "..", "a/b", "a\\b", ".staging-x"]


# ----------------------------------------------------------------------------- ids that are paths


@pytest.mark.parametrize("how", ["install", "unpack"])
def test_a_backend_id_that_names_a_path_is_refused_and_the_data_folder_is_unchanged(
        how: str, key: Ed25519PrivateKey, machine: dict[str, str], tmp_path: Path) -> None:
    data = Path(machine["FASTMTP_DATA_DIR"])
    before = snapshot(data)
    for n, backend_id in enumerate(hostile_ids(tmp_path)):
        archive = backend_tar(tmp_path / "dist" / f"n{n}" / "fastmtp-backend-cpu.tar.gz", backend_id)
        sign(archive, key, backend_id)
        done = install(machine, archive, key) if how == "install" else unpack(machine, archive)
        error = assert_refused(done, "backend id", "nothing was installed")
        assert error["error"] == "UnsafeInputError"
        shown = repr(backend_id)[1:-1]  # a long one is cut in the message, with its length
        assert shown[:40] in error["message"] or backend_id[:40] in error["message"], error
        assert snapshot(data) == before, backend_id  # models, backends and active.json byte for byte
        assert {p.name for p in tmp_path.iterdir()} <= {"data", "config", "dist"}  # nothing beside the data folder
        assert not (tmp_path / "config" / "trusted-keys.json").exists()  # nor the key trusted
    assert not (tmp_path / "x").exists() and not (tmp_path / "absolute-target").exists()
    assert json.loads(run_app(machine, "backend", "list", "--json").stdout)[0]["id"] == PREVIOUS


def test_a_signed_manifest_naming_a_path_is_refused_before_the_archive_is_downloaded(
        key: Ed25519PrivateKey, machine: dict[str, str], tmp_path: Path) -> None:
    """The signed manifest's own id is checked as soon as its signature holds: from a URL, the archive's bytes
    are never fetched."""
    from tests.helpers.release_server import ReleaseServer

    archive = backend_tar(tmp_path / "dist" / "fastmtp-backend-cpu.tar.gz", "../models")
    sign(archive, key, "../models")
    served = {p.name: p.read_bytes() for p in archive.parent.iterdir()}
    with ReleaseServer(served) as server:
        done = run_app(machine, "backend", "install", server.url(archive.name), "--trust-fingerprint",
                       fingerprint(key), "--json")
        fetched = [r.path.rsplit("/", 1)[-1] for r in server.requests]
    assert_refused(done, "backend id", "'../models'")
    assert archive.name not in fetched and manifest_name(archive.name) in fetched


def test_active_json_naming_a_path_is_not_followed(machine: dict[str, str]) -> None:
    """A damaged or planted active.json names no active backend instead of a folder outside the backends."""
    data = Path(machine["FASTMTP_DATA_DIR"])
    (data / "models" / registry.MANIFEST).write_text(json.dumps(fake_manifest("../models")))
    (data / "backends" / "active.json").write_text(json.dumps({"id": "../models"}))
    done = run_app(machine, "backend", "list", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(b["id"], b["active"]) for b in json.loads(done.stdout)] == [(PREVIOUS, False)]
    removed = run_app(machine, "backend", "remove", "../models", "--json")
    assert removed.returncode == 4 and (data / "models" / "local" / "mine.gguf").is_file()


# ----------------------------------------------------------------------------- sizes and members


def test_an_archive_unpacking_to_more_than_its_signed_size_is_refused(
        key: Ed25519PrivateKey, machine: dict[str, str], tmp_path: Path) -> None:
    """8 MiB of zeros compress to a few KiB; the signed manifest says what the archive unpacks to, and one byte
    more is refused before it is written."""
    def zeros(tar: tarfile.TarFile, root: str) -> None:
        add_bytes(tar, f"{root}/llama_cpp/lib/libbomb.so", bytes(8 << 20))

    archive = backend_tar(tmp_path / "dist" / "fastmtp-backend-cpu.tar.gz", "bomb-backend", extra=zeros)
    assert archive.stat().st_size < 100_000
    real_bytes, real_members = unpacked_size(archive)
    data = Path(machine["FASTMTP_DATA_DIR"])
    before = snapshot(data)
    sign(archive, key, "bomb-backend", unpacked=(real_bytes - 1, real_members))
    assert_refused(install(machine, archive, key), "unpacks to more than", str(real_bytes - 1))
    sign(archive, key, "bomb-backend", unpacked=(real_bytes, real_members - 1))
    assert_refused(install(machine, archive, key), "more than", "members")
    assert snapshot(data) == before
    assert not list((data / "backends").glob(".staging-*"))


# ----------------------------------------------------------------------------- links and odd members


def _symlink(target: str) -> Extra:
    def add(tar: tarfile.TarFile, root: str) -> None:
        info = tarfile.TarInfo(f"{root}/llama_cpp/lib/libggml.so")
        info.type = tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)
    return add


def _hardlink(target: str) -> Extra:
    def add(tar: tarfile.TarFile, root: str) -> None:
        info = tarfile.TarInfo(f"{root}/llama_cpp/lib/libggml.so")
        info.type = tarfile.LNKTYPE
        info.linkname = target
        tar.addfile(info)
    return add


def _fifo(tar: tarfile.TarFile, root: str) -> None:
    info = tarfile.TarInfo(f"{root}/pipe")
    info.type = tarfile.FIFOTYPE
    tar.addfile(info)


def _dotdot_member(tar: tarfile.TarFile, root: str) -> None:
    add_bytes(tar, f"{root}/../../escaped.txt", b"out")


@pytest.mark.parametrize(("case", "extra", "words"), [
    ("symlink up and out", _symlink("../../../../models"), ("link",)),
    ("absolute symlink", _symlink("/etc/passwd"), ("link",)),
    ("hardlink out", _hardlink("../../outside.txt"), ("link",)),
    ("absolute hardlink", _hardlink("/etc/passwd"), ("link",)),
    ("fifo", _fifo, ("not a regular file",)),
    ("member path with ..", _dotdot_member, ("..",)),
])
@pytest.mark.parametrize("how", ["install", "unpack"])
def test_links_leaving_the_folder_and_odd_members_are_refused(
        how: str, case: str, extra: Extra, words: tuple[str, ...], key: Ed25519PrivateKey,
        machine: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("mine")
    data = Path(machine["FASTMTP_DATA_DIR"])
    before = snapshot(data)
    archive = backend_tar(tmp_path / "dist" / "fastmtp-backend-cpu.tar.gz", "linky-backend", extra=extra)
    sign(archive, key, "linky-backend")
    done = install(machine, archive, key) if how == "install" else unpack(machine, archive)
    error = assert_refused(done, *words)
    assert error["error"] == "UnsafeInputError", case
    assert snapshot(data) == before
    assert (tmp_path / "outside.txt").read_text() == "mine" and not (tmp_path / "escaped.txt").exists()


def test_links_inside_the_folder_still_unpack(machine: dict[str, str], tmp_path: Path) -> None:
    """A shared library's version links (libggml.so -> libggml.so.0) are what a real backend holds."""
    def libs(tar: tarfile.TarFile, root: str) -> None:
        add_dir(tar, f"{root}/llama_cpp")
        add_dir(tar, f"{root}/llama_cpp/lib")
        add_bytes(tar, f"{root}/llama_cpp/lib/libggml.so.0.20.0", b"\x7fELF")
        _symlink("libggml.so.0.20.0")(tar, root)

    archive = backend_tar(tmp_path / "dist" / "fine.tar.gz", "fine-backend", extra=libs)
    done = run_app(machine, "backend", "unpack", str(archive), "--no-activate", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    lib = Path(machine["FASTMTP_DATA_DIR"]) / "backends" / "fine-backend" / "llama_cpp" / "lib"
    assert os.readlink(lib / "libggml.so") == "libggml.so.0.20.0" and (lib / "libggml.so").read_bytes() == b"\x7fELF"
