"""A real, hostile HTTP server on 127.0.0.1 for download tests: Range, ETag, and faults on demand.

The fetcher must be proven against a real socket, not a mock transport: resets, stalls, trickles and
servers that ignore ``Range`` only show their teeth on a real connection. Each ``ReleaseServer``
listens on its own port in a background thread; ``set_fault`` makes the next request(s) for one path
misbehave, and ``requests`` records what the client sent (to assert on ``Range`` or ``Authorization``).

    with ReleaseServer({"model.gguf": data}) as server:
        server.set_fault("model.gguf", Fault(reset_after=4096))
        fetch_files([FileRequest("model.gguf", [server.url("model.gguf")])], tmp_path)
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import BinaryIO
from urllib.parse import quote, unquote, urlsplit

_SEND_PIECE = 64 * 1024


@dataclass
class Fault:
    """How the next ``times`` GET requests for one path misbehave; later requests are served normally.

    Several fields may be combined (e.g. ``reset_after`` with ``replace_with`` for a file that changes
    between attempts). Byte positions count from the first byte of the response body.
    """

    times: int = 1
    status: int | None = None  # answer with this status and a short body (404, 403, 500, ...)
    retry_after: int | str | None = None  # with ``status``: a Retry-After header in seconds (or any text)
    content_range: str | None = None  # a 206's Content-Range as given instead of the true one (a hostile server)
    reset_after: int | None = None  # send this many body bytes, then reset the connection (RST)
    stall_after: int | None = None  # send this many body bytes, then go silent until the server closes
    trickle_after: int | None = None  # send this many body bytes at full speed, then trickle the rest
    trickle_piece: int = 1024  # ... this many bytes ...
    trickle_delay: float = 0.02  # ... every this many seconds
    ignore_range: bool = False  # answer a Range request with 200 and the full body
    ignore_if_range: bool = False  # honour Range even when If-Range names an older version
    bad_416: bool = False  # answer a Range request with 416 although the range is satisfiable
    redirect_to: str | None = None  # answer 302 with this Location
    tamper_at: int | None = None  # flip the byte at this file offset (same size, different content)
    corrupt: bool = False  # serve different bytes of the same size
    extra_bytes: int = 0  # send this many bytes more than the file holds ...
    declare_length: bool = True  # ... and say so in Content-Length (False: close-delimited body)
    replace_with: bytes | None = None  # after this response the file's content becomes this (new ETag)
    endless: bool = False  # after the file (and any extra bytes) the body never ends; close-delimited unless ...
    claim_length: int | None = None  # ... this Content-Length is sent, whatever the body holds (a lie)
    silent: bool = False  # read the request, then answer nothing at all (no status line) until the server closes
    hook: Callable[[], None] | None = None  # run before the body is sent (e.g. a Barrier to prove concurrency)


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it; header names are lower case."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class _Entry:
    data: bytes | None
    path: Path | None
    etag: str
    last_modified: str
    faults: list[Fault] = field(default_factory=list)

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.path is not None
        return self.path.stat().st_size


class ReleaseServer:
    """Serve ``files`` (name -> bytes; a name may contain ``/``) and/or every file under ``root``."""

    def __init__(self, files: dict[str, bytes] | None = None, *, root: Path | None = None,
                 host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._version = 0
        self._closing = threading.Event()
        self.root = root
        self.requests: list[RequestRecord] = []
        for name, data in (files or {}).items():
            self.put(name, data)
        self._httpd = _QuietServer((host, 0), self._handler_class())
        self._httpd.daemon_threads = True
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"release-server-{self.port}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the fixture-facing API

    def url(self, name: str, *, host: str | None = None) -> str:
        """The URL of ``name``; ``host="localhost"`` gives the same file under another host name."""
        return f"{self.scheme}://{host or self.host}:{self.port}/{quote(name)}"

    def put(self, name: str, data: bytes) -> None:
        """Add or replace a file; a replaced file gets a new ETag and Last-Modified."""
        with self._lock:
            self._version += 1
            etag = '"' + hashlib.sha256(data).hexdigest()[:24] + '"'
            faults = self._entries[name].faults if name in self._entries else []
            self._entries[name] = _Entry(data, None, etag, _http_date(self._version), faults)

    def set_fault(self, name: str, fault: Fault) -> None:
        """Queue a fault for the next ``fault.times`` requests of ``name`` (after any queued before)."""
        with self._lock:
            entry = self._entry(name)
            if entry is None:
                raise KeyError(name)
            entry.faults.append(fault)

    def gets(self, name: str) -> list[RequestRecord]:
        """The GET requests the server received for ``name``."""
        path = "/" + quote(name)
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and r.path == path]

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ReleaseServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _entry(self, name: str) -> _Entry | None:
        """Look a name up in the dict, then under ``root`` (caller holds the lock)."""
        if name in self._entries:
            return self._entries[name]
        if self.root is not None and name and ".." not in name.split("/"):
            candidate = self.root / name
            if candidate.is_file():
                stat = candidate.stat()
                entry = _Entry(None, candidate, f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"',
                               formatdate(stat.st_mtime, usegmt=True))
                self._entries[name] = entry
                return entry
        return None

    def _entry_locked(self, name: str) -> _Entry | None:
        with self._lock:
            return self._entry(name)

    def _take_fault(self, name: str) -> tuple[_Entry | None, Fault | None]:
        with self._lock:
            entry = self._entry(name)
            if entry is None or not entry.faults:
                return entry, None
            fault = entry.faults[0]
            fault.times -= 1
            if fault.times <= 0:
                entry.faults.pop(0)
            return entry, fault

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(_Handler):
            owner = server

        return Handler


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that hang up or fail a TLS handshake are what the tests provoke: no tracebacks."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: ReleaseServer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log is ``ReleaseServer.requests``."""

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, *, head: bool) -> None:
        owner = self.owner
        headers = {k.lower(): v for k, v in self.headers.items()}
        with owner._lock:
            owner.requests.append(RequestRecord(self.command, urlsplit(self.path).path, headers))
        name = unquote(urlsplit(self.path).path.lstrip("/"))
        entry, fault = owner._take_fault(name) if not head else (owner._entry_locked(name), None)
        try:
            self._respond(entry, fault or Fault(), headers, head=head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if fault is not None and fault.replace_with is not None:
                owner.put(name, fault.replace_with)

    def _respond(self, entry: _Entry | None, fault: Fault, headers: dict[str, str], *, head: bool) -> None:
        if fault.silent:
            self.owner._closing.wait(timeout=120)
            self._reset()
            return
        if fault.redirect_to is not None:
            self._short(302, "moved", {"Location": fault.redirect_to})
            return
        if fault.status is not None:
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            self._short(fault.status, f"fault {fault.status}", extra)
            return
        if entry is None:
            self._short(404, "not found")
            return
        size = entry.size
        start, end = 0, size - 1
        status = 200
        wanted = _parse_range(headers.get("range"), size)
        if_range = headers.get("if-range")
        range_valid = if_range is None or fault.ignore_if_range or if_range in (entry.etag, entry.last_modified)
        if wanted is not None and range_valid and not fault.ignore_range:
            if wanted == "unsatisfiable" or fault.bad_416:
                self._short(416, "range not satisfiable", {"Content-Range": f"bytes */{size}"})
                return
            start, end = wanted
            status = 206
        length = end - start + 1 + fault.extra_bytes
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", entry.etag)
        self.send_header("Last-Modified", entry.last_modified)
        if status == 206:
            self.send_header("Content-Range", fault.content_range or f"bytes {start}-{end}/{size}")
        if fault.claim_length is not None:
            self.send_header("Content-Length", str(fault.claim_length))
            self.close_connection = True
        elif fault.declare_length and not fault.endless:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if head:
            return
        if fault.hook is not None:
            fault.hook()
        self._send_body(entry, fault, start, end + 1)

    def _send_body(self, entry: _Entry, fault: Fault, start: int, stop: int) -> None:
        if entry.path is not None and fault == Fault(times=fault.times):
            with entry.path.open("rb") as handle:  # the kernel copies: a server as fast as nginx, for benchmarks
                self.connection.sendfile(handle, start, stop - start)
            return
        sent = 0
        for piece in _pieces(entry, start, stop, fault):
            if self.owner._closing.is_set():  # an endless body ends with the server
                self._reset()
                return
            if fault.reset_after is not None and sent + len(piece) >= fault.reset_after:
                self.wfile.write(piece[: max(0, fault.reset_after - sent)])
                self.wfile.flush()
                self._reset()
                return
            if fault.stall_after is not None and sent + len(piece) >= fault.stall_after:
                self.wfile.write(piece[: max(0, fault.stall_after - sent)])
                self.wfile.flush()
                self.owner._closing.wait(timeout=60)
                self._reset()
                return
            if fault.trickle_after is not None and sent + len(piece) > fault.trickle_after:
                self._trickle(piece, max(0, fault.trickle_after - sent), fault)
            else:
                self.wfile.write(piece)
            sent += len(piece)
        self.wfile.flush()

    def _trickle(self, piece: bytes, fast: int, fault: Fault) -> None:
        self.wfile.write(piece[:fast])
        self.wfile.flush()
        view = memoryview(piece)[fast:]
        while view:
            if self.owner._closing.wait(timeout=fault.trickle_delay):
                raise BrokenPipeError("server closing")
            self.wfile.write(view[: fault.trickle_piece])
            self.wfile.flush()
            view = view[fault.trickle_piece:]

    def _reset(self) -> None:
        """Close with RST, not FIN: what a dropped link or a crashed proxy looks like to the client."""
        self.close_connection = True
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()

    def _short(self, status: int, text: str, extra: dict[str, str] | None = None) -> None:
        body = text.encode()
        self.send_response(status)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _pieces(entry: _Entry, start: int, stop: int, fault: Fault) -> Iterator[bytes]:
    """The body from ``start`` to ``stop`` in pieces, with the fault's tampering and extra bytes."""
    position = start
    handle: BinaryIO | None = entry.path.open("rb") if entry.path is not None else None
    try:
        if handle is not None:
            handle.seek(start)
        while position < stop:
            count = min(_SEND_PIECE, stop - position)
            if handle is not None:
                piece = handle.read(count)
            else:
                assert entry.data is not None
                piece = entry.data[position: position + count]
            if fault.corrupt:
                piece = bytes(b ^ 0x5A for b in piece)
            if fault.tamper_at is not None and position <= fault.tamper_at < position + len(piece):
                i = fault.tamper_at - position
                piece = piece[:i] + bytes([piece[i] ^ 0xFF]) + piece[i + 1:]
            yield piece
            position += len(piece)
    finally:
        if handle is not None:
            handle.close()
    remaining = fault.extra_bytes
    while remaining > 0:
        count = min(_SEND_PIECE, remaining)
        yield b"X" * count
        remaining -= count
    filler = b"X" * _SEND_PIECE
    while fault.endless:
        yield filler


def _parse_range(value: str | None, size: int) -> tuple[int, int] | str | None:
    """A single ``bytes=`` range as (first, last), ``"unsatisfiable"``, or None when absent or unusable."""
    if not value or not value.startswith("bytes=") or "," in value:
        return None
    first_text, _, last_text = value[len("bytes="):].strip().partition("-")
    try:
        if first_text == "":
            suffix = int(last_text)
            return (max(0, size - suffix), size - 1) if suffix > 0 and size > 0 else "unsatisfiable"
        first = int(first_text)
        last = int(last_text) if last_text else size - 1
    except ValueError:
        return None
    if first >= size or last < first:
        return "unsatisfiable"
    return first, min(last, size - 1)


def _http_date(version: int) -> str:
    """A distinct Last-Modified per content version, so a replaced file looks changed."""
    return formatdate(1_700_000_000 + version, usegmt=True)

