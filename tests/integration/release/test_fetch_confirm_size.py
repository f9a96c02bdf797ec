"""Confirm before a big download: once the signed manifest verified, ``fetch_release`` asks ``confirm_size`` (the
bytes still to fetch, the destination, the free bytes there) when they reach ``BIG_DOWNLOAD_BYTES``; a no stops
with no model file requested. ``python -m app fetch`` asks y/N on a terminal, refuses in words without one, and
``--yes`` skips the question.

A real signed release on 127.0.0.1 (``tests.helpers.release_server``); the threshold is lowered per test so the small
test files count as big. The CLI runs in-process (``app.cli.main``) so the lowered threshold applies.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.core.units import format_bytes
from app.models.installed import default_destination
from app.release import download
from app.release.catalog import Endpoint, load_catalog
from app.release.download import DownloadDeclined, FetchPlan, fetch_release
from app.release.publish import KeyPair, keygen
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_release_server import signed_release_files

CATALOG = load_catalog()
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PAYLOAD = {MODEL: os.urandom(120_000), SIDECAR: os.urandom(20_000),
           CATALOG.integrity.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
PAYLOAD_BYTES = sum(len(data) for data in PAYLOAD.values())


class Terminal(io.StringIO):
    """Typed answers on a stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KeyPair:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return keygen(tmp_path / "keys")


@pytest.fixture
def server(tmp_path: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    with ReleaseServer(signed_release_files(tmp_path / "release", PAYLOAD, key.private)) as srv:
        yield srv


@pytest.fixture
def big(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test release counts as a big download."""
    monkeypatch.setattr(download, "BIG_DOWNLOAD_BYTES", 1024)


def plan_for(server: ReleaseServer, key: KeyPair) -> FetchPlan:
    return FetchPlan("Q4_K_P", CATALOG.repo, "main", [Endpoint("plain", server.url("").rstrip("/"))],
                     default_destination(CATALOG.repo), trust_fingerprint=key.fingerprint)


def installed_files() -> list[Path]:
    dest = default_destination(CATALOG.repo)
    return sorted(p for p in dest.rglob("*") if p.is_file()) if dest.exists() else []


def nothing_requested(server: ReleaseServer) -> bool:
    return all(server.gets(name) == [] for name in (MODEL, SIDECAR))


def test_a_small_download_is_not_asked_about(server: ReleaseServer, key: KeyPair) -> None:
    asked: list[int] = []

    def ask(needed: int, _dest: Path, _free: int) -> bool:
        asked.append(needed)
        return False

    installed = fetch_release(plan_for(server, key), confirm_size=ask)
    assert asked == [] and MODEL in installed.files


def test_declining_a_big_download_requests_no_model_file(server: ReleaseServer, key: KeyPair, big: None) -> None:
    asked: list[tuple[int, Path, int]] = []

    def no(needed: int, dest: Path, free: int) -> bool:
        asked.append((needed, dest, free))
        return False

    with pytest.raises(DownloadDeclined) as caught:
        fetch_release(plan_for(server, key), confirm_size=no)
    [(needed, dest, free)] = asked
    assert needed == PAYLOAD_BYTES  # the signed manifest's sizes, nothing kept yet
    assert dest == default_destination(CATALOG.repo) and free > 0
    assert caught.value.kind == "download-declined" and "Nothing was downloaded." in caught.value.message
    assert nothing_requested(server)  # asked after the integrity files, before any payload byte
    assert installed_files() == []


def test_accepting_a_big_download_installs_it(server: ReleaseServer, key: KeyPair, big: None) -> None:
    installed = fetch_release(plan_for(server, key), confirm_size=lambda _needed, _dest, _free: True)
    assert sorted(installed.files) == sorted(PAYLOAD)
    assert (installed.folder / MODEL).read_bytes() == PAYLOAD[MODEL]


# ----------------------------------------------------------------------------- the command line


def fetch_args(server: ReleaseServer, key: KeyPair, *extra: str) -> list[str]:
    return ["fetch", "--base-url", server.url(""), "--trust-fingerprint", key.fingerprint, *extra]


def test_cli_refuses_a_big_download_without_a_terminal_unless_yes(server: ReleaseServer, key: KeyPair, big: None,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(fetch_args(server, key)) == 2
    err = capsys.readouterr().err
    assert "no terminal to ask you, so nothing was downloaded" in err and "--yes" in err
    assert "Download Q4_K_P: about" in err
    assert nothing_requested(server) and installed_files() == []

    assert main(fetch_args(server, key, "--yes")) == 0
    assert "Installed release 1" in capsys.readouterr().out
    assert (default_destination(CATALOG.repo) / MODEL).read_bytes() == PAYLOAD[MODEL]


def test_cli_json_without_yes_is_refused_too(server: ReleaseServer, key: KeyPair, big: None,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(""))
    monkeypatch.setattr("sys.stderr", Terminal())
    assert main(fetch_args(server, key, "--json")) == 2
    assert '"kind": "download-declined"' in capsys.readouterr().out
    assert nothing_requested(server)


@pytest.mark.parametrize(("typed", "code"), [("n\n", 1), ("\n", 1), ("y\n", 0)])
def test_cli_asks_on_a_terminal(server: ReleaseServer, key: KeyPair, big: None, monkeypatch: pytest.MonkeyPatch,
                                typed: str, code: int) -> None:
    stderr = Terminal()
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    monkeypatch.setattr("sys.stderr", stderr)
    assert main(fetch_args(server, key)) == code
    assert f"Download Q4_K_P: about {format_bytes(PAYLOAD_BYTES)} into " in stderr.getvalue()
    if code:
        assert "Nothing was downloaded." in stderr.getvalue()
        assert nothing_requested(server) and installed_files() == []
    else:
        assert (default_destination(CATALOG.repo) / MODEL).read_bytes() == PAYLOAD[MODEL]
