"""The release workflow's signing and verify steps (installers/release_steps.py) on a small release folder: the
real patched CPU backend packed under its release name, a small stand-in app download, every signature made for
the app's own repository with a throwaway key, then checked as a user's app would: ``verify``, ``backend install
--feed`` from a 127.0.0.1 server and ``update check`` (issue 35). ``make release-dry-run`` runs the same steps on the
real packaged app."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app import __version__
from app.backend import archive
from app.backend.registry import BackendManifest
from app.release.publish import keygen
from installers import release_steps
from installers.release_steps import StepFailed
from tests.helpers.module_folders import ModuleFolders

APP_REPO = "fastmtp-chat/fastmtp-chat"
TARBALL = f"fastmtp-chat-{__version__}-linux-x86_64.tar.gz"


def _signed_release(folder: Path, keys: Path, backend: BackendManifest) -> tuple[Path, str]:
    folder.mkdir(parents=True)
    archive.pack(backend.id, folder / release_steps.backend_archive_name(__version__, "cpu", "linux"))
    (folder / TARBALL).write_bytes(b"a small stand-in for the app tarball\n" * 100)
    pair = keygen(keys)
    release_steps.public_key(pair.private)
    release_steps.sign_backends(folder, pair.private)
    release_steps.sign_feed(folder, pair.private)
    release_steps.app_feed(folder, pair.private, version=__version__)
    release_steps.sign_app(folder, pair.private, version=__version__)
    release_steps.check_sums(folder)
    return pair.private, pair.fingerprint


@pytest.fixture(scope="module")
def release(module_tmp: ModuleFolders, patched_backend: BackendManifest) -> tuple[Path, str]:
    base = module_tmp.mktemp("release")
    _private, fingerprint = _signed_release(base / "release", base / "keys", patched_backend)
    return base / "release", fingerprint


def test_every_signature_is_for_the_apps_repository(release: tuple[Path, str]) -> None:
    folder, _ = release
    claims = [json.loads(p.read_text()) for p in folder.glob("*.manifest.json")]
    feeds = [json.loads((folder / name).read_text()) for name in ("fastmtp-backends.json", "fastmtp-chat-release.json")]
    manifest = json.loads((folder / "HauhauCS-RELEASE-MANIFEST.json").read_text())
    assert claims and {c["repo"] for c in claims} | {f["repo"] for f in feeds} | {manifest["repo"]} == {APP_REPO}
    listed = {f["name"] for f in manifest["files"]}
    assert {"fastmtp-backends.json", "fastmtp-chat-release.json", TARBALL} <= listed  # SHA256SUMS covers the feeds


def test_a_user_app_verifies_installs_and_finds_the_release(release: tuple[Path, str], tmp_path: Path) -> None:
    folder, fingerprint = release
    got = release_steps.verify(folder, fingerprint=fingerprint, version=__version__, home=tmp_path / "user")
    assert got.release_files >= 5 and got.update_status == "up_to_date" and got.latest == __version__
    assert got.backend.startswith("0.3.35-cpu-")
    assert (tmp_path / "user" / "data" / "backends" / got.backend).is_dir()  # in the throwaway user's folders


def test_another_key_than_the_release_key_stops_the_check(release: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = release
    stranger = keygen(tmp_path / "stranger")
    with pytest.raises(StepFailed, match=r"`python -m app verify .*` failed \(exit 4\)"):
        release_steps.verify(folder, fingerprint=stranger.fingerprint, version=__version__, home=tmp_path / "user")


def test_a_changed_download_after_signing_is_found(release: tuple[Path, str], tmp_path: Path) -> None:
    signed, fingerprint = release
    folder = tmp_path / "release"
    shutil.copytree(signed, folder)
    data = bytearray((folder / TARBALL).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / TARBALL).write_bytes(bytes(data))
    with pytest.raises(StepFailed, match=rf"{TARBALL.replace('.', '[.]')}: sha256 differs"):
        release_steps.check_sums(folder)
    with pytest.raises(StepFailed, match=r"\(exit 4\)"):
        release_steps.verify(folder, fingerprint=fingerprint, version=__version__, home=tmp_path / "user")
