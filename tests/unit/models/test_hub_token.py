"""The hub token goes to the hub's own https origin only, and the hub's answer comes from that origin only.

``verify FILE`` asks a hub for a file's LFS sha256 (``app.release.hub_hash``). Real servers on 127.0.0.1
record the headers they receive: an ``--endpoint`` over plain http, or any endpoint that is not the hub,
never sees the stored token, and a ``Link: rel="next"`` that points to another origin is refused instead of
being read as the hub's answer. The hub itself (``HF_ENDPOINT``, here an https server with a certificate
made for the test) still gets the token, on every page of a listing.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import pytest

from app.cli import main

TOKEN = "hf_test_token_never_to_leave_the_hub"
REPO = "someone/Qwen3.8-GGUF"
NAME = "model-Q4_K_M.gguf"
DATA = b"GGUF" + bytes(range(256)) * 64
SHA = hashlib.sha256(DATA).hexdigest()


@dataclass
class Page:
    entries: list[dict[str, Any]]
    link: str | None = None  # the Link header's next URL


@dataclass
class HubServer:
    """A hub's tree API on 127.0.0.1 (optionally https) that records every request's headers."""

    pages: dict[str, Page] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                page = owner.pages.get(self.path)
                body = json.dumps(page.entries if page else {"error": "not found"}).encode()
                self.send_response(200 if page else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if page and page.link:
                    self.send_header("Link", f'<{page.link}>; rel="next"')
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if self.tls is not None:
            self.httpd.socket = self.tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def tokens(self) -> list[str | None]:
        return [headers.get("authorization") for _path, headers in self.received]

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tree_path(revision: str = "main") -> str:
    return f"/api/models/{REPO}/tree/{revision}"


def listing(name: str = NAME, sha: str = SHA) -> list[dict[str, Any]]:
    return [{"type": "file", "oid": "a" * 40, "size": 134, "path": name,
             "lfs": {"oid": sha, "size": len(DATA), "pointerSize": 134}}]


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the token a user stored: secrets.get_token() returns it
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    path = tmp_path / NAME
    path.write_bytes(DATA)
    yield path


def verify(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, Any]:
    code = main(["verify", str(path), "--repo", REPO, "--revision", "main", *extra, "--json"])
    out = capsys.readouterr().out.strip()
    return code, json.loads(out) if out else None  # the result, or the error as one JSON object


def test_an_http_endpoint_never_gets_the_token(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with HubServer({tree_path(): Page(listing())}) as hub:
        code, check = verify(capsys, model, "--endpoint", hub.origin)
    assert code == 0 and check["state"] == "hub-hash-matches"  # the check itself still works, without a token
    assert hub.tokens() == [None]


def test_a_plain_http_hub_endpoint_never_gets_the_token(model: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Even HF_ENDPOINT, the hub the user named, gets no token over plain http: anyone on the way could read it."""
    with HubServer({tree_path(): Page(listing())}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.origin)
        code, check = verify(capsys, model)
    assert code == 0 and check["state"] == "hub-hash-matches"
    assert hub.tokens() == [None]


def test_a_link_to_another_origin_is_refused_not_read_as_the_hubs_answer(
        model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Page one lists other files and points its next page at another server, which vouches for the local
    file's hash: the app must not take that answer, nor ask that server at all."""
    with HubServer() as other, HubServer() as hub:
        other.pages[tree_path() + "?cursor=2"] = Page(listing())
        hub.pages[tree_path()] = Page(listing("README.gguf", "c" * 64), link=f"{other.origin}{tree_path()}?cursor=2")
        code, error = verify(capsys, model, "--endpoint", hub.origin)
    assert code == 4, error
    assert error["error"] == "VerificationError"
    assert other.origin in error["message"] and "another origin" in error["message"], error
    assert other.received == []
    assert hub.tokens() == [None]


def test_a_link_from_https_down_to_http_on_the_same_host_is_refused(
        model: Path, capsys: pytest.CaptureFixture[str], tls: tuple[ssl.SSLContext, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    context, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with HubServer(tls=context) as hub, HubServer() as plain:
        monkeypatch.setenv("HF_ENDPOINT", hub.origin)
        hub.pages[tree_path()] = Page([], link=f"{plain.origin}{tree_path()}?cursor=2")
        plain.pages[tree_path() + "?cursor=2"] = Page(listing())
        code, error = verify(capsys, model)
    assert code == 4 and "another origin" in error["message"], error
    assert plain.received == [] and hub.tokens() == [f"Bearer {TOKEN}"]


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A certificate for 127.0.0.1 made for the test; SSL_CERT_FILE makes the client trust it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


def test_the_https_hub_gets_the_token_on_every_page_of_its_own_origin(
        model: Path, capsys: pytest.CaptureFixture[str], tls: tuple[ssl.SSLContext, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    context, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with HubServer(tls=context) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.origin)
        hub.pages[tree_path()] = Page(listing("README.gguf", "c" * 64), link=f"{hub.origin}{tree_path()}?cursor=2")
        hub.pages[tree_path() + "?cursor=2"] = Page(listing())
        code, check = verify(capsys, model)
        # the same hub named again with --endpoint is still the hub
        code_again, _ = verify(capsys, model, "--endpoint", hub.origin + "/")
    assert code == 0 and check["state"] == "hub-hash-matches", check
    assert code_again == 0
    assert hub.tokens() == [f"Bearer {TOKEN}"] * 4
    assert [urlsplit(path).query for path, _ in hub.received] == ["", "cursor=2"] * 2


def test_an_https_endpoint_that_is_not_the_hub_gets_no_token(
        model: Path, capsys: pytest.CaptureFixture[str], tls: tuple[ssl.SSLContext, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    context, cert = tls
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with HubServer({tree_path(): Page(listing())}, tls=context) as elsewhere:
        code, check = verify(capsys, model, "--endpoint", elsewhere.origin)
    assert code == 0 and check["state"] == "hub-hash-matches"
    assert elsewhere.tokens() == [None]
    assert os.environ.get("HF_ENDPOINT") is None  # the hub is huggingface.co: another https host is not it
