"""Backend archives and the backend feed are signed for the app's own repository (``[app_updates] repo``), not the
model publisher's: one key is pinned per repository, so the app's CI key no longer collides with the model
publisher's. Older archives and feeds that claim the model publisher's repository are still checked, under that
repository's trusted keys as before (a key a user trusted for them keeps working). Real keys, real files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.backend.feed import FEED_NAME, FeedArchive, verify_feed, write_feed
from app.backend.signing import (
    CLAIMED,
    FORMAT,
    backend_repo,
    legacy_repo,
    manifest_name,
    signature_name,
    verify_claim,
)
from app.core.errors import TrustError, VerificationError
from app.release import signing, trust
from app.release.updates import default_source

FEED = (FeedArchive("fastmtp-backend-1.0.0-cpu-linux-x86_64.tar.xz", 1000, "ab" * 32, "cpu", "linux", None,
                    None, (), "0.3.35", "cd" * 32),)


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


def _claim(folder: Path, key: Ed25519PrivateKey, repo: str) -> Path:
    """A signed manifest as ``release sign-backend`` writes it, claiming ``repo``."""
    archive = folder / "fastmtp-backend-1.0.0-cpu-linux-x86_64.tar.xz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"not unpacked here")
    body = {"format": FORMAT, "repo": repo, "date": "2026-12-01T00:00:00Z",
            "archive": {"name": archive.name, "size": archive.stat().st_size,
                        "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()},
            "backend": {name: "0.3.35-cpu-x" if name == "id" else None for name in CLAIMED},
            "public_key": signing.public_key_pem(key.public_key()).decode("ascii")}
    data = (json.dumps(body) + "\n").encode()
    archive.with_name(manifest_name(archive.name)).write_bytes(data)
    archive.with_name(signature_name(archive.name)).write_bytes(signing.sign(key, data))
    return archive


def _verify(archive: Path, repo: str | None = None) -> str:
    got = verify_claim(archive.with_name(manifest_name(archive.name)), archive.with_name(signature_name(archive.name)),
                       repo=repo)
    return got.claim.repo


def test_the_backend_repository_is_the_apps_own() -> None:
    assert backend_repo() == default_source().repo == "fastmtp-chat/fastmtp-chat"
    assert legacy_repo() != backend_repo()


def test_archives_and_feeds_are_signed_and_checked_for_the_apps_repository(tmp_path: Path) -> None:
    key = signing.generate_key()
    written = write_feed(FEED, key, tmp_path / "feed", version=5)
    assert json.loads(written.feed.read_bytes())["repo"] == backend_repo()
    trust.pin_key(backend_repo(), key.public_key())
    verified = verify_feed(written.feed.read_bytes(), written.signature.read_bytes(), "http://127.0.0.1/" + FEED_NAME)
    assert verified.feed.repo == backend_repo() and verified.key_source == "user"
    assert _verify(_claim(tmp_path / "new", key, backend_repo())) == backend_repo()


def test_a_key_trusted_for_the_model_publisher_does_not_vouch_for_the_apps_files(tmp_path: Path) -> None:
    """The collision issue 35 names: trusting one repository's key says nothing about the other's."""
    key = signing.generate_key()
    trust.pin_key(legacy_repo(), key.public_key())
    written = write_feed(FEED, key, tmp_path / "feed", version=5)
    with pytest.raises(TrustError, match="not trusted yet"):
        verify_feed(written.feed.read_bytes(), written.signature.read_bytes(), "http://127.0.0.1/" + FEED_NAME)
    with pytest.raises(TrustError, match="not trusted yet"):
        _verify(_claim(tmp_path / "a", key, backend_repo()))


def test_older_files_claiming_the_model_publishers_repository_still_verify_under_its_trusted_key(
        tmp_path: Path) -> None:
    key, app_key = signing.generate_key(), signing.generate_key()
    trust.pin_key(legacy_repo(), key.public_key())  # what a user trusted before issue 35
    trust.pin_key(backend_repo(), app_key.public_key())
    assert _verify(_claim(tmp_path / "old", key, legacy_repo())) == legacy_repo()
    old = write_feed(FEED, key, tmp_path / "feed", repo=legacy_repo(), version=3)
    verified = verify_feed(old.feed.read_bytes(), old.signature.read_bytes(), "http://127.0.0.1/" + FEED_NAME)
    assert verified.feed.repo == legacy_repo()
    # the legacy claim gets the legacy repository's keys only: the app's key cannot sign as the model publisher
    with pytest.raises(TrustError, match="HAS CHANGED"):
        _verify(_claim(tmp_path / "forged", app_key, legacy_repo()))
    # --repo names the repository outright: a claim for another one is refused in words
    with pytest.raises(VerificationError, match=f"signed for the repository {legacy_repo()}"):
        _verify(_claim(tmp_path / "other", app_key, legacy_repo()), repo=backend_repo())


def test_an_older_feed_of_the_model_publishers_repository_after_the_apps_own_is_a_rollback(tmp_path: Path) -> None:
    key = signing.generate_key()
    trust.pin_key(legacy_repo(), key.public_key())
    trust.pin_key(backend_repo(), key.public_key())
    old = write_feed(FEED, key, tmp_path / "old", repo=legacy_repo(), version=3)
    own = write_feed(FEED, key, tmp_path / "own", version=4)
    url = "http://127.0.0.1/" + FEED_NAME
    assert verify_feed(own.feed.read_bytes(), own.signature.read_bytes(), url).feed.repo == backend_repo()
    with pytest.raises(VerificationError, match="rolled back") as refused:
        verify_feed(old.feed.read_bytes(), old.signature.read_bytes(), url)
    assert refused.value.exit_code == 4
    # named outright with --repo, it is the user's choice and checked as before
    assert verify_feed(old.feed.read_bytes(), old.signature.read_bytes(), url, repo=legacy_repo()).feed.version == 3
