"""Reading what a server we do not control sends: the one home of the bounds on every answer's size and time.

A remote chat server, the hub's file listing and the update feed are read through :class:`BoundedRead`:

- a **maximum body** (``max_body`` bytes of the whole answer, after any gzip/deflate decoding, which is done in
  bounded steps so a small compressed answer cannot expand in one go);
- a **maximum line** (``max_line`` bytes of one line, for streamed answers read with :meth:`BoundedRead.lines`);
  the memory held is one line, never the stream;
- a **total deadline** (``deadline_at``, a ``time.monotonic()`` moment): past it the connection is shut, also while
  a read waits on a silent or trickling server, so the answer cannot take longer however it is paced;
- **cancel** from any thread (:meth:`BoundedRead.cancel`): the socket is shut at once, so a reader blocked in a
  read returns now and the server sees the connection close, rather than the reader going on until its next byte.

Going past a bound raises a :class:`ReadLimitError` (:class:`TooLarge`, :class:`LineTooLong`, :class:`TooSlow`)
whose message names ``what`` was read; callers re-raise it as their own kind (a remote server's
``RemoteError``, the hub's ``VerificationError``) when their exit code differs. A cancelled read raises
:class:`ReadCancelled`. :func:`loads` parses JSON from such an answer: nesting too deep to parse is a
``ValueError`` like any other malformed answer, never a ``RecursionError``. Qt-free.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx

from app.core.errors import FastMTPError
from app.core.units import format_bytes

KIB = 1 << 10
MIB = 1 << 20
_PIECE = 64 * KIB  # the most one decompression step may produce


class ReadLimitError(FastMTPError):
    """An answer went past one of its bounds; nothing of it was used."""

    kind = "read-limit"


class TooLarge(ReadLimitError):
    """The body is larger than ``max_body``."""

    kind = "too-large"


class LineTooLong(ReadLimitError):
    """One line of a streamed answer is longer than ``max_line``."""

    kind = "line-too-long"


class TooSlow(ReadLimitError):
    """The answer did not end before its deadline."""

    kind = "too-slow"


class TooDeep(ValueError):
    """JSON nested deeper than the parser goes (:func:`loads`)."""


class ReadCancelled(Exception):
    """:meth:`BoundedRead.cancel` was called: the connection is closed, the answer abandoned."""


def deadline_in(seconds: float) -> float:
    """The ``deadline_at`` for an answer that must end within ``seconds`` from now."""
    return time.monotonic() + seconds


class BoundedRead:
    """One answer (or several, one after another: a feed, its signature, its key) read within bounds.

    ``what`` names the answer in messages ("box's answer to /props"); ``advice`` is what the user is told to do
    when a bound is hit. Pass :attr:`extensions` to the request so the socket is known from the moment it connects
    (a cancel or the deadline can then shut it while the server has not answered at all); :meth:`attach` is
    enough for a response already open.
    """

    def __init__(self, what: str, *, max_body: int, max_line: int = 0, deadline_at: float | None = None,
                 advice: str = "Check the server; nothing was used.") -> None:
        self.what = what
        self.max_body = max_body
        self.max_line = max_line
        self.deadline_at = deadline_at
        self.advice = advice
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._cancelled = False
        self._expired = False
        self._timer: threading.Timer | None = None
        if deadline_at is not None:
            # a deadline beyond a month is none at all (a huge one overflows threading's wait: issue 37)
            self._timer = threading.Timer(min(max(0.0, deadline_at - time.monotonic()), 30 * 86400.0), self._expire)
            self._timer.daemon = True
            self._timer.start()

    # ------------------------------------------------------------------ the connection

    @property
    def extensions(self) -> dict[str, Any]:
        """httpx request extensions: httpcore's trace hook tells us the socket as soon as it connects."""
        return {"trace": self._trace}

    def attach(self, response: httpx.Response) -> None:
        """Remember the socket ``response`` is read from (so cancel and the deadline can shut it)."""
        stream = response.extensions.get("network_stream")
        get_extra_info = getattr(stream, "get_extra_info", None)
        self._set_socket(get_extra_info("socket") if get_extra_info is not None else None)

    def cancel(self) -> None:
        """Abandon the answer from any thread: the connection is shut now; the reader raises ReadCancelled."""
        with self._lock:
            self._cancelled = True
            sock = self._sock
        self._shut(sock)
        self.finish()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def finish(self) -> None:
        """The reading is over (also after an error): the deadline's timer stops."""
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
            sock = self._sock
        self._shut(sock)

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            get_extra_info = getattr(stream, "get_extra_info", None)
            self._set_socket(get_extra_info("socket") if get_extra_info is not None else None)

    def _set_socket(self, sock: object) -> None:
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sock = sock
            stop = self._cancelled or self._expired
        if stop:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket | None) -> None:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ------------------------------------------------------------------ errors

    def check(self) -> None:
        """Raise when cancelled or past the deadline (between pieces, and after a read failed)."""
        if self._cancelled:
            raise ReadCancelled(self.what)
        if self._expired or (self.deadline_at is not None and time.monotonic() > self.deadline_at):
            self._expired = True
            raise TooSlow(f"{self.what} did not arrive in time (the whole answer has a deadline).",
                          self.advice)

    def explain(self, exc: BaseException) -> None:
        """After an ``httpx`` error: raise ReadCancelled or TooSlow when it was our own doing (the socket was shut
        for a cancel or the deadline); return otherwise, for the caller to report the network error."""
        if self._cancelled or self._expired:
            self.check()

    def too_large(self) -> TooLarge:
        return TooLarge(f"{self.what} is larger than {format_bytes(self.max_body)}, far more than it should "
                        "be; it was not read further.", self.advice)

    # ------------------------------------------------------------------ reading

    def pieces(self, response: httpx.Response, *, enforce: bool = True) -> Iterator[bytes]:
        """The body as it arrives, decoded (gzip, deflate) in steps of at most 64 KiB; raises TooLarge past
        ``max_body`` (``enforce=False``: the caller stops reading there itself)."""
        self.attach(response)
        announced = header_int(response.headers.get("content-length"))
        if enforce and announced is not None and announced > self.max_body:
            raise self.too_large()
        decoder = _decoder(response.headers.get("content-encoding", ""), self)
        total = 0
        try:
            for raw in itertools.chain(response.iter_raw(), [None]):
                self.check()
                for piece in decoder(raw):
                    total += len(piece)
                    if enforce and total > self.max_body:
                        raise self.too_large()
                    yield piece
        except httpx.HTTPError as exc:
            self.explain(exc)
            raise

    def body(self, response: httpx.Response, *, truncate: bool = False) -> bytes:
        """The whole body; with ``truncate`` its first ``max_body`` bytes (an error page, read for its words), the
        rest left unread (the connection is closed with the response)."""
        data = bytearray()
        for piece in self.pieces(response, enforce=not truncate):
            data += piece[: self.max_body - len(data)] if truncate else piece
            if truncate and len(data) >= self.max_body:
                break
        return bytes(data)

    def lines(self, response: httpx.Response) -> Iterator[str]:
        """The body's lines (``\\n`` or ``\\r\\n``), decoded as UTF-8; one line may hold at most ``max_line``."""
        limit = self.max_line or self.max_body
        buffer = bytearray()
        for piece in self.pieces(response):
            start = len(buffer)
            buffer += piece
            begin = 0
            while True:
                end = buffer.find(b"\n", max(begin, start))
                if end < 0:
                    break
                yield _line(buffer[begin:end])
                begin = end + 1
                start = begin
            if begin:
                del buffer[:begin]
            if len(buffer) > limit:
                raise LineTooLong(f"{self.what} has a line longer than {format_bytes(limit)}, far more than any "
                                  "line should hold; it was not read further.", self.advice)
        if buffer:
            yield _line(buffer)


def _line(raw: bytearray) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")


def _decoder(encoding: str, reader: BoundedRead) -> Any:
    """A function from a raw piece (None at the end) to decoded pieces of at most 64 KiB each."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return lambda raw: [raw] if raw else []
    if name not in ("gzip", "x-gzip", "deflate"):
        raise ReadLimitError(f"{reader.what} is compressed with {encoding[:40]!r}, which is not read.",
                             reader.advice)
    state: dict[str, Any] = {"z": zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in name else zlib.MAX_WBITS),
                             "first": name == "deflate"}

    def steps(data: bytes) -> Iterator[bytes]:
        z = state["z"]
        try:
            out = z.decompress(data, _PIECE)
        except zlib.error:
            if not state["first"]:
                raise ReadLimitError(f"{reader.what} is not valid {name} data.", reader.advice) from None
            state["z"] = z = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without its zlib header, as some send
            out = z.decompress(data, _PIECE)
        state["first"] = False
        while True:
            if out:
                yield out
            if not z.unconsumed_tail:
                return
            out = z.decompress(z.unconsumed_tail, _PIECE)

    def decode(raw: bytes | None) -> Iterator[bytes]:
        if raw is None:
            tail = state["z"].flush()
            return iter([tail] if tail else [])
        return steps(raw)

    return decode


# ----------------------------------------------------------------------------- parsing what was read


def loads(data: bytes | str) -> Any:
    """JSON from an outside answer. ``ValueError`` for anything malformed; :class:`TooDeep` (a ``ValueError``) for
    nesting too deep for the parser (a ``RecursionError`` inside ``json``); ``Infinity``/``NaN`` parse as floats:
    check numbers with :func:`finite`."""
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep("nested deeper than any answer should be") from None


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a real, finite number (not a bool); else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value) if isinstance(value, float) or abs(value) < 1 << 1023 else math.inf
    return number if math.isfinite(number) else None


HEADER_DIGITS_MAX = 19  # an int64's digits: no size, offset or delay a server sends needs more


def header_int(value: str | None) -> int | None:
    """A header's number (``Content-Length``, ``Retry-After``, a ``Content-Range`` part): ASCII digits only, at most
    ``HEADER_DIGITS_MAX`` of them; None for anything else. ``str.isdigit`` and ``int`` also accept other scripts'
    digits and superscripts (``'²'.isdigit()`` is true, ``int('²')`` raises), so neither is used on a header."""
    if value is None:
        return None
    text = value.strip(" \t")
    if not 0 < len(text) <= HEADER_DIGITS_MAX or not text.isascii() or not text.isdigit():
        return None
    return int(text)
