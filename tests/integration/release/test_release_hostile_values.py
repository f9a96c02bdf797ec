"""Issue 37, items 3, 7 and 11: values of the right type and the wrong size from servers, URLs and the rollback floor.

Real servers on 127.0.0.1 (tests/helpers/release_server.py), the real command line, real files in the data folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from app.cli import main
from app.core.bounded_http import header_int
from app.core.netaddr import BadUrl, web_url
from app.release import updates
from app.release.fetcher import FetchEvent, FileRequest, fetch_files
from app.release.publish import KeyPair, keygen
from tests.helpers.release_server import Fault, ReleaseServer
from tests.integration.release.test_updates import FEED_NAME, NOW, check, make_feed

NAME = "model.gguf"
DATA = bytes(range(256)) * 2048  # 512 KiB
FAST = {"backoff_base": 0.01, "stall_timeout": 2.0, "connect_timeout": 2.0}
HOSTILE_URLS = ["http://127.0.0.1:99999/x", "http://[::1/x", "http://127.0.0.1:0/x", "http://127.0.0.1:²/x",
                "http://[zz]/x", "http://::1:80/x"]


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(updates.URL_ENV, raising=False)


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


@pytest.fixture
def server() -> Iterator[ReleaseServer]:
    with ReleaseServer({NAME: DATA}) as srv:
        yield srv


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------------------ headers (item 7)


def test_header_numbers_are_ascii_digits_only() -> None:
    assert header_int("120") == 120 and header_int(" 7 ") == 7
    for value in ("²", "٣", "１２", "-1", "+5", "1e3", "", None, "9" * 20, "1 2", "0x10"):
        assert header_int(value) is None, value


def test_a_503_with_a_superscript_retry_after_is_retried_in_words(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(status=503, retry_after="²", times=2))
    events: list[FetchEvent] = []
    fetch_files([FileRequest(NAME, [server.url(NAME)], len(DATA), hashlib.sha256(DATA).hexdigest())], tmp_path,
                on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    assert [e.message.split(";")[0] for e in events if e.kind == "retry"] == [
        f"127.0.0.1:{server.port} had a server error (HTTP 503)"] * 2


def test_a_resume_answered_with_a_superscript_content_range_restarts_from_zero(server: ReleaseServer,
                                                                               tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(reset_after=200_000))
    server.set_fault(NAME, Fault(content_range="bytes ²-1/²"))
    events: list[FetchEvent] = []
    fetch_files([FileRequest(NAME, [server.url(NAME)], len(DATA), hashlib.sha256(DATA).hexdigest())], tmp_path,
                on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    ranges = [r.headers.get("range") for r in server.gets(NAME)]
    assert ranges[0] is None and ranges[1] is not None and ranges[2] is None
    assert any("wrong range" in e.message for e in events)


# ------------------------------------------------------------------------------------------ URLs (item 3)


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_the_one_url_parser_refuses_bad_ports_and_hosts_in_words(url: str) -> None:
    with pytest.raises(BadUrl) as caught:
        web_url(url)
    assert "port" in str(caught.value) or "host" in str(caught.value)


def test_the_one_url_parser_accepts_real_addresses() -> None:
    for url, port in (("https://huggingface.co", None), ("http://127.0.0.1:65535/a", 65535),
                      ("http://[::1]:8080/x", 8080), ("http://user@host:1/", 1)):
        assert web_url(url).port == port


def test_a_port_above_65535_is_refused_not_wrapped_onto_a_real_server(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, key: KeyPair) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key)) as srv:
        port = int(srv.url(FEED_NAME).split(":")[2].split("/")[0])
        wrapped = srv.url(FEED_NAME).replace(f":{port}/", f":{port + 65536}/")
        code, _, stderr = run_cli(capsys, "update", "check", "--url", wrapped, "--trust-fingerprint",
                                  key.fingerprint)
        assert code == 2 and "is not a number from 1 to 65535" in stderr and "Traceback" not in stderr
        code, _, stderr = run_cli(capsys, "backend", "install", "--feed", wrapped.replace(FEED_NAME, "feed.json"))
        assert code == 2 and "is not a number from 1 to 65535" in stderr
        code, _, stderr = run_cli(capsys, "backend", "install", wrapped.replace(FEED_NAME, "b.tar.xz"))
        assert code == 2 and "is not a number from 1 to 65535" in stderr
        assert srv.requests == []  # nothing reached the server the wrapped port would have hit


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/x", "http://[::1/x"])
def test_every_command_taking_a_url_refuses_it_in_words(url: str, capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    for args in (["update", "check", "--url", url], ["backend", "install", "--feed", url],
                 ["backend", "install", url + ".tar.xz"], ["fetch", "--base-url", url, "--dest", str(tmp_path / "d")],
                 ["fetch", "--endpoint", url, "--dest", str(tmp_path / "d")], ["mirror", "add", "--plain", url],
                 ["mirror", "add", "--hf", url], ["verify", str(model), "--repo", "o/n", "--endpoint", url],
                 ["remote", "add", "box", url]):
        code, _, stderr = run_cli(capsys, *args)
        assert code in (1, 2, 3, 4), (args, code, stderr)
        assert "error:" in stderr and ("65535" in stderr or "malformed" in stderr), (args, stderr)
        assert "Traceback" not in stderr
    assert not (tmp_path / "config" / "endpoints.json").exists()


# ------------------------------------------------------------------------------------------ the floor (item 11)


def floor_file() -> Path:
    from app.core import paths

    return paths.data_dir() / updates.FLOOR_FILE


@pytest.mark.parametrize("damage", ["not json", "list", "bad date", "fifo"])
def test_a_damaged_floor_is_set_aside_and_said_never_dropped_in_silence(damage: str, tmp_path: Path,
                                                                        key: KeyPair) -> None:
    with ReleaseServer(make_feed(tmp_path / "feed", key)) as srv:
        assert check(srv, trust_fingerprint=key.fingerprint).warning == ""
    path = floor_file()
    floors = json.loads(path.read_text())
    other = {"date": (NOW + timedelta(days=400)).isoformat(), "sha256": ""}  # another repository's floor
    path.unlink()
    if damage == "not json":
        path.write_text("{ nope")
    elif damage == "list":
        path.write_text("[]")
    elif damage == "bad date":
        path.write_text(json.dumps({**{r: {"date": "abc"} for r in floors}, "someone/else": other}))
    else:
        os.mkfifo(path)
    old = make_feed(tmp_path / "old", key, "0.2.0", now=NOW - timedelta(days=30))
    with ReleaseServer(old) as srv:
        result = check(srv, trust_fingerprint=key.fingerprint)
    assert "was damaged" in result.warning and "update-floor.json.bad" in result.warning
    assert "Warning:" in result.summary()
    assert os.path.lexists(path.with_name(updates.FLOOR_FILE + ".bad"))
    assert updates.last_check() is not None and updates.last_check().warning == result.warning  # type: ignore[union-attr]
    kept = json.loads(path.read_text())
    if damage == "bad date":  # the whole entries are kept: the other repository's floor did not become lower
        assert kept["someone/else"] == other and "kept" in result.warning
    # the next check has nothing left to say
    with ReleaseServer(old) as srv:
        assert check(srv, trust_fingerprint=key.fingerprint).warning == ""


def test_update_check_prints_the_floor_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               key: KeyPair) -> None:
    floor_file().parent.mkdir(parents=True, exist_ok=True)
    floor_file().write_text("{ nope")
    with ReleaseServer(make_feed(tmp_path / "feed", key)) as srv:
        code, stdout, stderr = run_cli(capsys, "update", "check", "--url", srv.url(FEED_NAME), "--trust-fingerprint",
                                       key.fingerprint)
    assert code in (0, 4) and "Warning: The record of the last update information verified" in stdout + stderr
