"""``backend install --feed`` against a real HTTP server on 127.0.0.1: a rolled-back, an expired and an unversioned
feed are refused with exit 4 before any archive is fetched, and the floor is kept per repository in
``backend-feed-floor.json`` (data folder), raised by a verified feed (a pinned key) or by an install (a key trusted
by fingerprint on first use).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.backend.feed import FEED_NAME, FLOOR_FILE, write_feed
from app.backend.registry import BackendManifest
from app.backend.signing import backend_repo
from app.release import signing
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_backend import (
    PREVIOUS,
    Signed,
    SignedFeed,
    last_json,
    other_machine,
    run_app,
    sign_feed,
    sign_packed,
)
from tests.helpers.signed_backend import installed as installed_in


@pytest.fixture(scope="module")
def signed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Signed:
    return sign_packed(patched_backend, module_tmp.mktemp("publisher"))


@pytest.fixture(scope="module")
def feed(signed: Signed, module_tmp: ModuleFolders) -> SignedFeed:
    return sign_feed(signed, module_tmp.mktemp("feed"))


@pytest.fixture
def machine(tmp_path: Path, signed: Signed) -> dict[str, str]:
    env = other_machine(tmp_path, signed.backend)
    env.pop("FASTMTP_BACKEND_FEED_URL", None)
    return env


def served(feed: SignedFeed, signed: Signed, folder: Path, **kwargs: object) -> dict[str, bytes]:
    """The feed's archives with a feed re-signed by the same key with ``kwargs`` (version, expires)."""
    write_feed(list(feed.archives.values()), signing.load_private_key(signed.private), folder,
               **kwargs)  # type: ignore[arg-type]
    return dict(feed.served(), **{p.name: p.read_bytes() for p in folder.iterdir()})


def install(env: dict[str, str], files: dict[str, bytes], *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                                              list[str]]:
    with ReleaseServer(files) as server:
        done = run_app(env, "backend", "install", "--feed", server.url(FEED_NAME), "--json", *args)
        got = [r.path.rsplit("/", 1)[-1] for r in server.requests if r.method == "GET"]
    return done, got


def refused(done: subprocess.CompletedProcess[str], got: list[str], words: str) -> None:
    assert done.returncode == 4, done.stdout + done.stderr
    error = last_json(done)
    assert error["error"] == "VerificationError" and words in error["message"], error
    assert "Nothing was installed" in error["advice"]
    assert not [name for name in got if name.endswith((".tar.xz", ".manifest.json"))]


def floor(env: dict[str, str]) -> int:
    return int(json.loads((Path(env["FASTMTP_DATA_DIR"]) / FLOOR_FILE).read_text())[backend_repo()]["version"])


def test_rolled_back_expired_and_unversioned_feeds_exit_4_before_any_archive(
        feed: SignedFeed, signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    assert run_app(machine, "trust", "add", str(signed.public), "--repo", backend_repo(), "--json").returncode == 0
    no_fit = ("--gpu-arch", "61", "--driver", "590")  # the feed verifies, then nothing fits: no install needed
    done, _ = install(machine, served(feed, signed, tmp_path / "v200", version=200), *no_fit)
    assert done.returncode == 1 and last_json(done)["kind"] == "no-fitting-archive", done.stdout + done.stderr
    assert floor(machine) == 200

    done, got = install(machine, served(feed, signed, tmp_path / "v100", version=100), *no_fit)
    refused(done, got, "version 100, older than version 200 verified before")
    assert "rolled back" in last_json(done)["message"]

    stale = served(feed, signed, tmp_path / "stale", version=300, expires=datetime.now(UTC) - timedelta(days=1))
    done, got = install(machine, stale, *no_fit)
    refused(done, got, "expired on")
    assert floor(machine) == 200  # a refused feed raises nothing

    body = json.loads(feed.feed.read_bytes())
    del body["version"], body["expires"]
    old = json.dumps(body).encode()
    unversioned = dict(feed.served(), **{FEED_NAME: old, FEED_NAME + ".sig": signing.sign(
        signing.load_private_key(signed.private), old)})
    done, got = install(machine, unversioned, *no_fit)
    refused(done, got, "carries no version or expiry")
    assert installed_in(Path(machine["FASTMTP_DATA_DIR"])) == ([PREVIOUS], PREVIOUS)


def test_a_first_use_install_raises_the_floor_then_an_older_feed_is_refused(
        feed: SignedFeed, signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    trust = ("--trust-fingerprint", feed.fingerprint, "--gpu-arch", "none", "--no-activate")
    done, _ = install(machine, served(feed, signed, tmp_path / "v50", version=50), *trust)
    assert done.returncode == 0, done.stdout + done.stderr
    assert last_json(done)["selection"]["archive"]["flavor"] == "cpu" and floor(machine) == 50
    done, got = install(machine, served(feed, signed, tmp_path / "v49", version=49), "--gpu-arch", "none")
    refused(done, got, "version 49, older than version 50")
