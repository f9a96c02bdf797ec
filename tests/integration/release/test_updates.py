"""App updates: the signed app-release feed, served by a real HTTP server on 127.0.0.1, checked through the
trust chain; versions compared as versions; every failure a result in words; the once-a-day rule.

Every feed is made by ``update sign`` (or its function) with a key made in the test. The clock is a
parameter: no test waits for time to pass.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app import __version__
from app.cli import main
from app.core.errors import FastMTPError, VerificationError
from app.release import trust, updates
from app.release.app_feed import (
    FEED_NAME,
    current_platform,
    parse_app_version,
    parse_feed,
    sign_feed,
)
from app.release.publish import KeyPair, keygen
from app.release.updates import UpdateCheck, UpdateSource, check_due, check_for_update, check_if_due, last_check
from tests.helpers.release_server import Fault, ReleaseServer

REPO = "test-publisher/fastmtp-chat"
CATALOG_REPO = updates.default_source().repo  # what `update check` without --url options trusts
KEY_NAME = "fastmtp-chat-Ed25519-PUBLIC.pem"
PLATFORM = "linux-x86_64"
NOW = datetime(2025, 7, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Own config folder per test: trusted keys and the update state start empty."""
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))  # the rollback floor
    monkeypatch.delenv(updates.URL_ENV, raising=False)


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


def make_feed(folder: Path, key: KeyPair, version: str = "0.2.0", *, notes: str = "Faster drafting.",
              platforms: tuple[str, ...] = (PLATFORM,), repo: str = REPO, now: datetime = NOW,
              page: str | None = None) -> dict[str, bytes]:
    """Sign ``version`` into the feed in ``folder`` (earlier versions there are kept); the files to serve."""
    files = {}
    for platform in platforms:
        archive = folder.parent / f"archives-{version}" / f"fastmtp-chat-{version}-{platform}.tar.gz"
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(f"app {version} for {platform}".encode() * 100)
        files[platform] = archive
    sign_feed(folder, key.private, version=version, notes=notes, files=files, repo=repo, page=page,
              public_key_name=KEY_NAME, now=now)
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def server(tmp_path: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    with ReleaseServer(make_feed(tmp_path / "feed", key)) as srv:
        yield srv


def source_of(server: ReleaseServer) -> UpdateSource:
    return UpdateSource(url=server.url(FEED_NAME), repo=REPO, public_key=KEY_NAME)


def check(server: ReleaseServer, current: str = "0.1.0", **kwargs: Any) -> UpdateCheck:
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("platform", PLATFORM)
    kwargs.setdefault("timeout", 10.0)
    return check_for_update(current, source=source_of(server), **kwargs)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# ----------------------------------------------------------------------------- versions


def test_versions_compare_as_numbers_and_prereleases_come_before_their_release() -> None:
    v = parse_app_version
    assert v("1.10.0") > v("1.9.0") and v("1.9.9") < v("1.10")
    assert v("1.2").same(v("1.2.0")) and v("v1.2.0").same(v("1.2"))
    assert v("2.0.0-rc.1") < v("2.0.0") and v("2.0.0-rc.1") > v("1.99.0")
    assert v("2.0.0rc1").same(v("2.0.0-rc.1"))
    assert v("2.0.0.dev1") < v("2.0.0a1") < v("2.0.0-beta.2") < v("2.0.0-rc.1") < v("2.0.0-rc.2") < v("2.0.0")
    assert v("2.0.0-rc.1").is_prerelease and not v("2.0.0").is_prerelease
    for bad in ("", "latest", "1.2.3+local", "1..2", "1.2.3-evil", "9" * 20, 3):
        with pytest.raises(VerificationError):
            v(bad)


def test_platform_names_follow_the_feed() -> None:
    assert current_platform("linux", "x86_64") == "linux-x86_64"
    assert current_platform("win32", "AMD64") == "windows-x86_64"
    assert current_platform("darwin", "arm64") == "macos-arm64"
    assert current_platform("linux", "aarch64") == "linux-arm64"


# ----------------------------------------------------------------------------- the check


def test_a_newer_version_is_found_with_this_platforms_download(server: ReleaseServer, key: KeyPair) -> None:
    result = check(server, trust_fingerprint=key.fingerprint)
    assert result.status == "available" and result.newer_available
    assert result.latest_version == "0.2.0" and result.current_version == "0.1.0"
    assert result.notes == "Faster drafting."
    assert result.download is not None and result.download.platform == PLATFORM
    assert result.download_url == server.url(result.download.name)
    assert result.fingerprint == key.fingerprint and result.checked_at == NOW
    assert result.summary() == f"FastMTP Chat 0.2.0 is available: {result.download_url}"
    assert [k.fingerprint for k in trust.user_keys(REPO)] == [key.fingerprint]  # pinned once it verified
    assert not server.gets(result.download.name)  # told, never downloaded


def test_the_same_version_is_up_to_date_and_so_is_a_newer_build(server: ReleaseServer, key: KeyPair) -> None:
    trust.pin_key(REPO, trust.signing.load_public_key(key.public.read_bytes(), "test key"))
    for current in ("0.2.0", "0.2", "v0.2.0", "0.3.0", "0.2.1"):
        result = check(server, current)
        assert result.status == "up_to_date" and not result.newer_available, current
        assert result.latest_version == "0.2.0" and result.download_url is None
    assert check(server, "0.2.0-rc.3").status == "available"  # the release after its own pre-release


def test_1_10_is_newer_than_1_9(tmp_path: Path, key: KeyPair) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key, "1.10.0")) as srv:
        result = check(srv, "1.9.0", trust_fingerprint=key.fingerprint)
    assert result.status == "available" and result.latest_version == "1.10.0"


def test_prereleases_are_ignored_unless_asked_for(tmp_path: Path, key: KeyPair) -> None:
    make_feed(tmp_path / "feed", key, "0.2.0")
    files = make_feed(tmp_path / "feed", key, "0.3.0-rc.1", notes="Try the new engine.")
    assert [r.version.text for r in parse_feed(files[FEED_NAME]).releases] == ["0.3.0-rc.1", "0.2.0"]
    with ReleaseServer(files) as srv:
        stable = check(srv, trust_fingerprint=key.fingerprint)
        pre = check(srv, include_prereleases=True)
        on_latest_stable = check(srv, "0.2.0")
    assert stable.status == "available" and stable.latest_version == "0.2.0"
    assert pre.status == "available" and pre.latest_version == "0.3.0-rc.1" and pre.notes == "Try the new engine."
    assert on_latest_stable.status == "up_to_date"


def test_a_platform_without_a_download_points_to_the_release_page(tmp_path: Path, key: KeyPair) -> None:
    page = "https://example.org/fastmtp-chat/releases/0.2.0"
    with ReleaseServer(make_feed(tmp_path / "feed", key, page=page)) as srv:
        result = check(srv, platform="windows-x86_64", trust_fingerprint=key.fingerprint)
    assert result.status == "available" and result.download is None and result.download_url == page


def test_a_tampered_feed_is_never_shown_as_an_update(server: ReleaseServer, key: KeyPair, tmp_path: Path) -> None:
    data = (tmp_path / "feed" / FEED_NAME).read_bytes()
    server.put(FEED_NAME, data.replace(b"0.2.0", b"9.9.9"))
    result = check(server, trust_fingerprint=key.fingerprint)
    assert result.status == "unverified" and not result.newer_available
    assert result.latest_version is None and result.download_url is None and result.notes == ""
    assert result.summary().startswith("The update information could not be verified: The signature of the update "
                                       "information does not verify")
    assert not trust.user_keys(REPO)  # a key is pinned only once its signature held


def test_an_unsigned_feed_is_refused(tmp_path: Path, key: KeyPair) -> None:
    files = make_feed(tmp_path / "feed", key)
    del files[FEED_NAME + ".sig"]
    with ReleaseServer(files) as srv:
        result = check(srv, trust_fingerprint=key.fingerprint)
        assert srv.gets(FEED_NAME + ".sig.b64")  # both signature names were tried
    assert result.status == "unverified" and "is not signed" in result.message


def test_a_key_not_trusted_is_refused_without_a_question(server: ReleaseServer, key: KeyPair) -> None:
    result = check(server)  # no pinned key, no fingerprint, nobody to ask
    assert result.status == "unverified" and "not trusted yet" in result.message
    assert key.fingerprint in result.message and "--trust-fingerprint" in result.advice
    asked: list[str] = []
    refused = check(server, confirm=lambda repo, fp: asked.append(fp) is not None)
    assert asked == [key.fingerprint] and refused.status == "unverified" and not trust.user_keys(REPO)
    accepted = check(server, confirm=lambda repo, fp: True)  # a first use the user confirmed
    assert accepted.status == "available" and [k.fingerprint for k in trust.user_keys(REPO)] == [key.fingerprint]


def test_a_feed_signed_by_another_key_is_a_hard_stop(server: ReleaseServer, key: KeyPair, tmp_path: Path) -> None:
    assert check(server, trust_fingerprint=key.fingerprint).status == "available"
    attacker = keygen(tmp_path / "attacker")
    with ReleaseServer(make_feed(tmp_path / "forged", attacker, "6.6.6")) as evil:
        result = check(evil)
        wanted = check(evil, trust_fingerprint=attacker.fingerprint)
    assert result.status == "unverified" and "THE PUBLISHER KEY HAS CHANGED" in result.message
    assert wanted.status == "unverified" and result.latest_version is None


def test_a_feed_signed_for_another_repository_is_refused(tmp_path: Path, key: KeyPair) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key, repo="someone/else")) as srv:
        result = check(srv, trust_fingerprint=key.fingerprint)
    assert result.status == "unverified" and "is for someone/else, not" in result.message


def test_an_older_feed_after_a_newer_one_is_refused(tmp_path: Path, key: KeyPair) -> None:
    old = make_feed(tmp_path / "old", key, "0.2.0", now=NOW - timedelta(days=30))
    with ReleaseServer(make_feed(tmp_path / "new", key, "0.3.0")) as srv:
        assert check(srv, trust_fingerprint=key.fingerprint).latest_version == "0.3.0"
        for name, data in old.items():
            srv.put(name, data)
        result = check(srv)
    assert result.status == "unverified" and "older than the one verified before" in result.message


def test_the_rollback_floor_lives_in_the_data_folder_moves_there_once_and_survives_damaged_state(
        tmp_path: Path, key: KeyPair) -> None:
    from app.core import paths

    old = make_feed(tmp_path / "old", key, "0.2.0", now=NOW - timedelta(days=30))
    config, data = paths.config_dir(), paths.data_dir()
    # an older version kept the floor in the update state: it moves to the data folder on first use
    (config / updates.STATE_FILE).write_text(json.dumps({"feeds": {REPO: {"date": NOW.isoformat(), "sha256": ""}}}))
    with ReleaseServer(old) as srv:
        result = check(srv, trust_fingerprint=key.fingerprint)
    assert result.status == "unverified" and "older than the one verified before" in result.message
    assert REPO in json.loads((data / updates.FLOOR_FILE).read_text())
    assert "feeds" not in json.loads((config / updates.STATE_FILE).read_text())
    # a damaged update state (a FIFO) is set aside and does not drop the floor
    (config / updates.STATE_FILE).unlink()
    os.mkfifo(config / updates.STATE_FILE)
    with ReleaseServer(old) as srv:
        again = check(srv, trust_fingerprint=key.fingerprint)
    assert again.status == "unverified" and "older than the one verified before" in again.message
    assert (config / (updates.STATE_FILE + ".bad")).is_fifo()


def test_an_oversized_or_endless_feed_is_not_read(server: ReleaseServer, key: KeyPair) -> None:
    server.put(FEED_NAME, b" " * 300_000)
    big = check(server, trust_fingerprint=key.fingerprint)
    assert big.status == "unverified" and "larger than 262144 bytes" in big.message
    server.put(FEED_NAME, b"{}")
    server.set_fault(FEED_NAME, Fault(endless=True))  # close-delimited, never ends: cut off at the cap
    endless = check(server, trust_fingerprint=key.fingerprint)
    assert endless.status == "unverified" and "was not read further" in endless.message


def test_a_server_that_is_down_is_could_not_reach(tmp_path: Path, key: KeyPair) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key)) as srv:
        source = source_of(srv)
    result = check_for_update("0.1.0", source=source, now=NOW, trust_fingerprint=key.fingerprint)
    assert result.status == "unreachable" and not result.newer_available
    assert result.summary().startswith("Could not reach the update server: 127.0.0.1:")
    assert "refused the connection" in result.summary() and "Error" not in result.summary()  # words, not a class
    assert "offline" in result.advice
    assert last_check() == result  # remembered: the Settings page shows it, the daily rule counts it


def test_a_server_that_never_answers_times_out(server: ReleaseServer, key: KeyPair) -> None:
    server.set_fault(FEED_NAME, Fault(silent=True))
    result = check(server, trust_fingerprint=key.fingerprint, timeout=0.5)
    assert result.status == "unreachable" and "timed out" in result.message


def test_a_missing_feed_is_could_not_reach(server: ReleaseServer, key: KeyPair) -> None:
    server.set_fault(FEED_NAME, Fault(status=404))
    result = check(server, trust_fingerprint=key.fingerprint)
    assert result.status == "unreachable" and "HTTP 404" in result.message


# ----------------------------------------------------------------------------- the once-a-day rule


def remembered_at(when: datetime) -> None:
    """A state file whose last check happened at ``when`` (what an earlier start left behind)."""
    path = updates._state_path()
    entry = UpdateCheck("up_to_date", "0.1.0", when, "http://127.0.0.1:9/feed.json").to_dict()
    path.write_text(json.dumps({"last_check": entry}), encoding="utf-8")


def test_the_automatic_check_runs_at_most_once_in_24_hours() -> None:
    assert not check_due(False, NOW)  # not allowed: never, whatever the state
    assert check_due(True, NOW)  # allowed, never checked
    remembered_at(NOW - timedelta(hours=23, minutes=59))
    assert not check_due(True, NOW)
    remembered_at(NOW - timedelta(hours=24))
    assert check_due(True, NOW)
    remembered_at(NOW + timedelta(days=3))  # the clock was set back since: a wrong clock cannot stop checks
    assert check_due(True, NOW)
    updates._state_path().write_text("{damaged", encoding="utf-8")
    assert check_due(True, NOW) and last_check() is None


def test_check_if_due_asks_the_server_only_when_allowed_and_due(server: ReleaseServer, key: KeyPair) -> None:
    trust.pin_key(REPO, trust.signing.load_public_key(key.public.read_bytes(), "test key"))
    source = source_of(server)
    assert check_if_due(False, "0.1.0", now=NOW, source=source) is None
    assert server.requests == []  # off: no network at all
    first = check_if_due(True, "0.1.0", now=NOW, source=source)
    assert first is not None and first.status == "available"
    seen = len(server.requests)
    assert check_if_due(True, "0.1.0", now=NOW + timedelta(hours=23), source=source) is None
    assert len(server.requests) == seen
    again = check_if_due(True, "0.1.0", now=NOW + timedelta(hours=25), source=source)
    assert again is not None and again.checked_at == NOW + timedelta(hours=25) and len(server.requests) > seen
    assert last_check() == again


# ----------------------------------------------------------------------------- the feed format and publishing


def test_the_feed_refuses_what_we_never_write(key: KeyPair, tmp_path: Path) -> None:
    good = json.loads(make_feed(tmp_path / "feed", key)[FEED_NAME])
    variants: list[tuple[Any, str]] = [
        (dict(good, format="hauhaucs-release-manifest/1"), "not a FastMTP Chat release feed"),
        (dict(good, releases=[]), "lists no releases"),
        (dict(good, releases=good["releases"] * 2), "lists a version twice"),
        (dict(good, releases=[dict(good["releases"][0], downloads=[
            dict(good["releases"][0]["downloads"][0], name="../../bin/fastmtp-chat")])]), "not a plain file name"),
        (dict(good, releases=[dict(good["releases"][0], page="javascript:alert(1)")]), "is not an http(s) URL"),
        (["not", "an", "object"], "expected an object"),
    ]
    for variant, words in variants:
        with pytest.raises(VerificationError, match=words.replace("(", r"\(").replace(")", r"\)")):
            parse_feed(json.dumps(variant).encode())


def test_sign_keeps_earlier_releases_only_from_its_own_key(tmp_path: Path, key: KeyPair) -> None:
    make_feed(tmp_path / "feed", key, "0.2.0")
    files = make_feed(tmp_path / "feed", key, "0.2.0", notes="Re-signed notes.")  # the same version is replaced
    feed = parse_feed(files[FEED_NAME])
    assert [(r.version.text, r.notes) for r in feed.releases] == [("0.2.0", "Re-signed notes.")]
    other = keygen(tmp_path / "other")
    with pytest.raises(FastMTPError, match="does not verify with this key"):
        make_feed(tmp_path / "feed", other, "0.3.0")
    with pytest.raises(FastMTPError, match="inside the feed folder"):
        sign_feed(key.private.parent, key.private, version="1.0.0", notes="", files={}, repo=REPO,
                  public_key_name=KEY_NAME)


# ----------------------------------------------------------------------------- the command


def test_update_sign_then_update_check_on_the_command_line(tmp_path: Path, key: KeyPair,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "NOTES.md"
    notes.write_text("New: daily update check.\nFixed: everything.", encoding="utf-8")
    archive = tmp_path / "dist" / "fastmtp-chat-99.0.0.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(b"the app" * 1000)
    out = tmp_path / "publish"
    code, stdout, _ = run_cli(capsys, "update", "sign", "--version", "99.0.0", "--notes", str(notes),
                              "--file", f"{current_platform()}={archive}", "--file", f"other-arm64={archive}",
                              "--key", str(key.private), "--out", str(out), "--json")
    assert code == 0 and json.loads(stdout)["fingerprint"] == key.fingerprint
    served = {p.name: p.read_bytes() for p in out.iterdir()} | {archive.name: archive.read_bytes()}
    with ReleaseServer(served) as srv:
        code, stdout, stderr = run_cli(capsys, "update", "check", "--url", srv.url(FEED_NAME),
                                       "--trust-fingerprint", key.fingerprint)
        assert code == 0, stderr
        assert stdout.startswith(f"FastMTP Chat 99.0.0 is available: {srv.url(archive.name)}\n")
        assert "New: daily update check." in stdout and f"Signed by {key.fingerprint}." in stdout
        assert "does not update itself" in stdout
        code, stdout, _ = run_cli(capsys, "update", "check", "--url", srv.url(FEED_NAME), "--json")
        assert code == 0 and json.loads(stdout)["status"] == "available"


def test_update_check_exit_codes(tmp_path: Path, key: KeyPair, capsys: pytest.CaptureFixture[str]) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key, __version__, repo=CATALOG_REPO)) as srv:
        url = srv.url(FEED_NAME)
        code, stdout, _ = run_cli(capsys, "update", "check", "--url", url, "--trust-fingerprint", key.fingerprint)
        assert code == 0 and stdout.startswith(f"FastMTP Chat {__version__} is up to date.")
        other = keygen(tmp_path / "other")
        code, _, stderr = run_cli(capsys, "update", "check", "--url", url, "--trust-fingerprint", other.fingerprint)
        assert code == 4 and "error: The update information could not be verified" in stderr
        srv.put(FEED_NAME, (tmp_path / "feed" / FEED_NAME).read_bytes() + b" ")
        code, stdout, _ = run_cli(capsys, "update", "check", "--url", url, "--json")
        assert code == 4 and json.loads(stdout)["status"] == "unverified"
    code, stdout, _ = run_cli(capsys, "update", "check", "--url", url, "--json")  # the server is gone
    assert code == 3 and json.loads(stdout)["status"] == "unreachable"
    code, _, stderr = run_cli(capsys, "update", "check", "--url", "file:///etc/passwd")
    assert code == 2 and "not an http(s) URL" in stderr


def test_the_catalog_names_the_feed_and_the_environment_replaces_its_address(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = updates.default_source()
    assert source.url.startswith("https://") and source.url.endswith("/" + FEED_NAME)
    assert source.repo and source.max_bytes == 262_144 and source.public_key.endswith(".pem")
    monkeypatch.setenv(updates.URL_ENV, "http://127.0.0.1:1/feed/" + FEED_NAME)
    assert updates.default_source().url == "http://127.0.0.1:1/feed/" + FEED_NAME
    assert updates.default_source("http://127.0.0.1:2/x.json").url == "http://127.0.0.1:2/x.json"
