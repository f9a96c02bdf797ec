"""The backend feed's monotonic version, expiry and per-repository rollback floor (``backend-feed-floor.json``).

An old signed feed replays forever unless the app remembers the newest it verified: a feed below that floor,
past its signed expiry, or without either (signed before they existed) is refused in words; the floor file
follows the state-file rules of ``app.core.settings_file.load_floors`` (a damaged one is set aside, never
dropped in silence, and the other repositories' floors are kept).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.backend.feed import FLOOR_FILE, FeedArchive, parse_feed, verify_feed, write_feed
from app.backend.signing import backend_repo
from app.core import settings_file
from app.core.errors import VerificationError
from app.release import signing, trust

REPO = backend_repo()  # the app's own repository: what backend archives and feeds are signed for
CPU = FeedArchive("cpu-linux.tar.xz", 1000, "ab" * 32, "cpu", "linux", None, None, (), "0.3.35", "cd" * 32)
URL = "http://127.0.0.1/fastmtp-backends.json"


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ed25519PrivateKey:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    private = signing.generate_key()
    trust.pin_key(REPO, private.public_key())
    return private


def signed(key: Ed25519PrivateKey, folder: Path, **kwargs: object) -> tuple[bytes, bytes]:
    written = write_feed([CPU], key, folder, **kwargs)  # type: ignore[arg-type]
    return written.feed.read_bytes(), written.signature.read_bytes()


def floor_file(tmp_path: Path) -> Path:
    return tmp_path / "data" / FLOOR_FILE


def test_version_and_expiry_are_signed_and_read_back(key: Ed25519PrivateKey, tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    data, _ = signed(key, tmp_path / "a", valid_days=10)
    body = json.loads(data)
    assert isinstance(body["version"], int) and body["version"] >= int(before.timestamp())
    feed = parse_feed(data)
    assert feed.expires is not None and timedelta(days=9) < feed.expires - before <= timedelta(days=10, seconds=5)
    assert feed.to_dict()["version"] == body["version"] and feed.to_dict()["expires"] == body["expires"]


def test_a_rolled_back_feed_is_refused_and_the_floor_only_rises(key: Ed25519PrivateKey,
                                                                tmp_path: Path) -> None:
    newer, older = signed(key, tmp_path / "new", version=200), signed(key, tmp_path / "old", version=100)
    assert verify_feed(*older, URL).feed.version == 100  # no floor yet: accepted, floor 100
    assert verify_feed(*newer, URL).feed.version == 200  # floor 200
    with pytest.raises(VerificationError, match=r"version 100, older than version 200 verified before .*rolled "
                                                r"back") as refused:
        verify_feed(*older, URL)
    assert refused.value.exit_code == 4 and "Nothing was installed" in refused.value.advice
    assert verify_feed(*newer, URL).feed.version == 200  # the same version again is fine
    assert json.loads(floor_file(tmp_path).read_text())[REPO]["version"] == 200


def test_an_expired_feed_is_refused_as_stale(key: Ed25519PrivateKey, tmp_path: Path) -> None:
    data, sig = signed(key, tmp_path / "a", version=5, expires=datetime.now(UTC) - timedelta(minutes=1))
    with pytest.raises(VerificationError, match=r"expired on .*stale") as refused:
        verify_feed(data, sig, URL)
    assert refused.value.exit_code == 4
    assert not floor_file(tmp_path).exists()  # a refused feed raises no floor


def test_a_feed_without_version_or_expiry_is_refused_as_unversioned(key: Ed25519PrivateKey,
                                                                    tmp_path: Path) -> None:
    data, _ = signed(key, tmp_path / "a")
    for dropped in ("version", "expires"):
        body = json.loads(data)
        del body[dropped]
        old = json.dumps(body).encode()
        with pytest.raises(VerificationError, match="carries no version or expiry") as refused:
            verify_feed(old, signing.sign(key, old), URL)
        assert refused.value.exit_code == 4 and "sign it again" in refused.value.advice


@pytest.mark.parametrize(("field", "value", "words"), [
    ("version", "7", "version"), ("version", 0, "version"), ("version", True, "version"),
    ("expires", "soon", "expiry"), ("expires", "2026-01-01T00:00:00", "expiry"),  # no time zone
])
def test_a_malformed_version_or_expiry_is_refused_in_words(key: Ed25519PrivateKey, tmp_path: Path,
                                                           field: str, value: object, words: str) -> None:
    data, _ = signed(key, tmp_path / "a")
    body = dict(json.loads(data), **{field: value})
    with pytest.raises(VerificationError, match=words):
        parse_feed(json.dumps(body).encode())


def test_a_damaged_floor_is_set_aside_in_words_and_other_repositories_kept(
        key: Ed25519PrivateKey, tmp_path: Path) -> None:
    path = floor_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"other/repo": {"version": 9}, REPO: {"version": "high"}}))
    verified = verify_feed(*signed(key, tmp_path / "a", version=3), URL)
    assert "cannot be refused" in verified.warning and FLOOR_FILE + ".bad" in verified.warning
    assert "other repositories were kept" in verified.warning and verified.to_dict()["warning"] == verified.warning
    assert (path.parent / (FLOOR_FILE + ".bad")).is_file()
    floors = json.loads(path.read_text())
    assert floors["other/repo"] == {"version": 9} and floors[REPO]["version"] == 3


def test_load_floors_reads_a_missing_file_as_none_and_refuses_a_non_object(tmp_path: Path) -> None:
    path = tmp_path / "floor.json"
    assert settings_file.load_floors(path, lambda entry: True) == ({}, "")
    path.write_text("[1, 2]")
    floors, reason = settings_file.load_floors(path, lambda entry: True)
    assert floors == {} and "not a JSON object" in reason and not path.exists()
