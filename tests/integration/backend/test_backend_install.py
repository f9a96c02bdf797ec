"""Prebuilt backends as a trusted channel: ``release sign-backend`` and ``backend install``, end to end.

The real patched CPU backend is packed, signed with a key made by ``release keygen`` and installed by the
real CLI into fresh data and config folders, from a file and from a local HTTP server on 127.0.0.1.
Every way the chain can break (a changed byte, a wrong signature, an untrusted or changed key, a manifest
that describes another backend) must end with exit code 4, nothing installed and the backend that was
active before still active.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from app.backend import archive, registry
from app.backend.registry import BackendManifest
from app.backend.signing import backend_repo, manifest_name, signature_name
from app.release import signing
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import Fault, ReleaseServer
from tests.helpers.signed_backend import PREVIOUS, Signed, last_json, other_machine, run_app, sign_packed
from tests.helpers.signed_backend import installed as installed_in

REPO = backend_repo()  # the app's own repository: what backend archives and feeds are signed for


@pytest.fixture(scope="module")
def signed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Signed:
    return sign_packed(patched_backend, module_tmp.mktemp("publisher"))


@pytest.fixture
def machine(tmp_path: Path, signed: Signed) -> dict[str, str]:
    return other_machine(tmp_path, signed.backend)


def installed(env: dict[str, str]) -> tuple[list[str], str | None]:
    return installed_in(Path(env["FASTMTP_DATA_DIR"]))


def assert_refused(done: subprocess.CompletedProcess[str], env: dict[str, str], *words: str) -> dict[str, Any]:
    """Exit code 4, the error in words, nothing installed, the previous backend still active."""
    assert done.returncode == 4, done.stdout + done.stderr
    error = last_json(done)
    text = error["message"] + " " + error["advice"]
    for word in words:
        assert word in text, text
    assert installed(env) == ([PREVIOUS], PREVIOUS)
    return error


# ----------------------------------------------------------------------------- signing


def test_sign_backend_writes_a_manifest_that_names_the_archive_and_the_backend_inside(signed: Signed) -> None:
    data = signed.manifest.read_bytes()
    body = json.loads(data)
    assert signed.manifest.name == signed.archive.name + ".manifest.json"
    assert signed.signature.name == signed.manifest.name + ".sig"
    assert body["repo"] == REPO and body["format"] == "fastmtp-backend-archive/1"
    assert body["archive"] == {"name": signed.archive.name, "size": signed.archive.stat().st_size,
                               "sha256": hashlib.sha256(signed.archive.read_bytes()).hexdigest()}
    backend = signed.backend
    assert body["backend"]["id"] == backend.id and body["backend"]["flavor"] == "cpu"
    assert body["backend"]["cuda_archs"] == backend.cuda_archs == []
    assert body["backend"]["llama_cpp_commit"] == backend.llama_cpp_commit
    assert body["backend"]["patch_sha256"] == backend.patch_sha256 is not None
    # an Ed25519 signature of exactly these bytes, by the key keygen made
    public = signing.load_public_key(signed.public.read_bytes(), "public.pem")
    signing.verify(public, data, signing.decode_signature(signed.signature.read_bytes(), "sig"), "manifest")
    assert signing.fingerprint(public) == signed.fingerprint


def test_sign_backend_refuses_a_key_kept_beside_the_archive(signed: Signed, tmp_path: Path) -> None:
    copy = signed.copy_to(tmp_path / "dist")
    shutil.copy2(signed.private, tmp_path / "dist" / "private.pem")
    done = run_app(dict(os.environ), "release", "sign-backend", "--archive", str(copy), "--key",
                   str(tmp_path / "dist" / "private.pem"), "--json")
    assert done.returncode == 1 and "same folder as the archive" in last_json(done)["message"]


# ----------------------------------------------------------------------------- installing


def test_install_from_a_file_checks_self_tests_and_activates_it(signed: Signed, machine: dict[str, str]) -> None:
    done = run_app(machine, "backend", "install", str(signed.archive), "--trust-fingerprint", signed.fingerprint,
                   "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    got = last_json(done)
    assert got["kind"] == "result" and got["backend"] == signed.backend.id and got["active"] is True
    assert got["signed_by"] == signed.fingerprint and got["publisher_signed"] is False
    assert got["origin"]["kind"] == "signed" and got["origin"]["key_source"] == "new"
    assert got["selftest"]["ok"] is True  # run here, on the staged copy, before it was moved into place
    steps = [json.loads(line)["message"] for line in done.stdout.splitlines()[:-1]]
    assert any(s.startswith("self-testing") for s in steps)
    assert installed(machine) == (sorted([PREVIOUS, signed.backend.id]), signed.backend.id)
    folder = Path(got["folder"])
    assert archive.read_origin(folder) is not None and (folder / "llama_cpp").is_dir()
    # `backend list` says where each came from, as the Backend page's origin column does
    listed = {b["id"]: b for b in json.loads(run_app(machine, "backend", "list", "--json").stdout)}
    assert listed[signed.backend.id]["origin_label"] == "prebuilt, signed by your trusted key"
    assert listed[signed.backend.id]["origin"]["fingerprint"] == signed.fingerprint
    assert listed[PREVIOUS]["origin"] is None and listed[PREVIOUS]["origin_label"] == "built here"
    table = run_app(machine, "backend", "list").stdout.splitlines()
    assert any(row.startswith("*") and signed.backend.id in row and "signed by your trusted key" in row
               for row in table), table
    assert any(PREVIOUS in row and "built here" in row for row in table), table
    # the key is pinned now: the same archive installs again without being told the fingerprint
    trusted = json.loads(run_app(machine, "trust", "list", "--json").stdout)
    assert [(k["repo"], k["fingerprint"]) for k in trusted] == [(REPO, signed.fingerprint)]
    again = run_app(machine, "backend", "install", str(signed.archive), "--no-activate", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert last_json(again)["origin"]["key_source"] == "user"


def test_install_from_a_url_fetches_the_manifest_first_and_resumes_the_archive(
        signed: Signed, machine: dict[str, str]) -> None:
    with ReleaseServer(signed.served()) as server:
        # the archive's first attempt breaks off part-way: the downloader resumes it with a Range request
        server.set_fault(signed.archive.name, Fault(reset_after=signed.archive.stat().st_size // 3))
        done = run_app(machine, "backend", "install", server.url(signed.archive.name), "--trust-fingerprint",
                       signed.fingerprint, "--no-activate", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        order = [r.path.rsplit("/", 1)[-1] for r in server.requests]
        gets = server.gets(signed.archive.name)
    assert order.index(signed.manifest.name) < order.index(signed.archive.name)  # bytes only once vouched for
    assert len(gets) == 2 and gets[1].headers.get("range", "").startswith("bytes=")
    got = last_json(done)
    assert got["backend"] == signed.backend.id and got["active"] is False
    assert installed(machine) == (sorted([PREVIOUS, signed.backend.id]), PREVIOUS)  # --no-activate
    downloads = Path(machine["FASTMTP_DATA_DIR"]) / "downloads" / "backends"
    assert not list(downloads.glob("*.part")) and not list(downloads.glob("integrity-*"))


# ----------------------------------------------------------------------------- refusals: exit 4, nothing installed


def test_an_archive_with_one_changed_byte_is_refused(signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    copy = signed.tampered_copy(tmp_path / "tampered")
    done = run_app(machine, "backend", "install", str(copy), "--trust-fingerprint", signed.fingerprint, "--json")
    assert_refused(done, machine, "failed the sha256 check", "nothing was installed")
    assert json.loads(run_app(machine, "trust", "list", "--json").stdout) == []  # nor the key trusted


def test_a_tampered_download_is_refused_and_not_kept(signed: Signed, machine: dict[str, str]) -> None:
    with ReleaseServer(signed.served()) as server:
        server.set_fault(signed.archive.name, Fault(tamper_at=1000))
        done = run_app(machine, "backend", "install", server.url(signed.archive.name), "--trust-fingerprint",
                       signed.fingerprint, "--json")
    assert_refused(done, machine, "sha256")
    downloads = Path(machine["FASTMTP_DATA_DIR"]) / "downloads" / "backends"
    assert not [p for p in downloads.iterdir() if p.name.startswith(signed.archive.name)]


def test_a_wrong_signature_is_refused(signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    copy = signed.copy_to(tmp_path / "resigned")
    other = signing.generate_key()  # the right key's manifest, signed by someone else
    sig = copy.with_name(signature_name(copy.name))
    sig.write_bytes(signing.sign(other, copy.with_name(manifest_name(copy.name)).read_bytes()))
    done = run_app(machine, "backend", "install", str(copy), "--trust-fingerprint", signed.fingerprint, "--json")
    assert_refused(done, machine, "does not verify", signed.fingerprint)


def test_an_untrusted_key_is_refused_without_a_terminal(signed: Signed, machine: dict[str, str]) -> None:
    done = run_app(machine, "backend", "install", str(signed.archive), "--json")
    error = assert_refused(done, machine, "is not trusted yet", signed.fingerprint, "--trust-fingerprint")
    assert error["error"] == "TrustError"


def test_a_key_other_than_the_trusted_one_is_a_hard_stop(signed: Signed, machine: dict[str, str],
                                                         tmp_path: Path) -> None:
    keys = json.loads(run_app(machine, "release", "keygen", "--out", str(tmp_path / "k2"), "--json").stdout)
    assert run_app(machine, "trust", "add", keys["public"], "--repo", REPO, "--json").returncode == 0
    done = run_app(machine, "backend", "install", str(signed.archive), "--json")
    assert_refused(done, machine, "THE PUBLISHER KEY HAS CHANGED", signed.fingerprint)
    wrong = run_app(machine, "backend", "install", str(signed.archive), "--trust-fingerprint", keys["fingerprint"],
                    "--json")
    assert_refused(wrong, machine, "not the")


def test_a_manifest_describing_another_backend_is_refused(signed: Signed, machine: dict[str, str],
                                                          tmp_path: Path) -> None:
    """Signed by the right key and naming the right bytes, but claiming another patch: the archive's own
    manifest must agree with the signed one."""
    copy = signed.copy_to(tmp_path / "mismatch")
    manifest = copy.with_name(manifest_name(copy.name))
    body = json.loads(manifest.read_text())
    body["backend"]["patch_sha256"] = "0" * 64
    data = (json.dumps(body, indent=2) + "\n").encode()
    manifest.write_bytes(data)
    key = signing.load_private_key(signed.private)
    copy.with_name(signature_name(copy.name)).write_bytes(signing.sign(key, data))
    done = run_app(machine, "backend", "install", str(copy), "--trust-fingerprint", signed.fingerprint, "--json")
    assert_refused(done, machine, "is not the one its signed manifest describes", "patch_sha256")


def test_an_archive_without_a_signed_manifest_is_refused(signed: Signed, machine: dict[str, str],
                                                         tmp_path: Path) -> None:
    bare = tmp_path / "bare" / signed.archive.name
    bare.parent.mkdir()
    shutil.copy2(signed.archive, bare)
    done = run_app(machine, "backend", "install", str(bare), "--json")
    assert_refused(done, machine, "has no signed manifest", "backend unpack")


# ----------------------------------------------------------------------------- where a backend came from


def test_unpack_notes_an_unchecked_origin_which_pack_leaves_out(signed: Signed, machine: dict[str, str],
                                                                 tmp_path: Path) -> None:
    """``backend unpack`` checks no signature and says so; a re-packed backend carries no origin claim, so a
    note cannot travel from one install to the next."""
    done = run_app(machine, "backend", "unpack", str(signed.archive), "--no-activate", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = Path(json.loads(done.stdout)["folder"])
    origin = archive.read_origin(folder)
    assert origin is not None and origin.kind == "unsigned" and origin.archive == signed.archive.name
    assert archive.describe_origin(folder).endswith("(no signature checked)")
    repacked = tmp_path / "repacked.tar.xz"
    assert run_app(machine, "backend", "pack", signed.backend.id, "--out", str(repacked)).returncode == 0
    with tarfile.open(repacked) as tar:
        names = tar.getnames()
    assert f"{signed.backend.id}/{registry.MANIFEST}" in names
    assert not [n for n in names if n.endswith(archive.ORIGIN)]
