"""Resumable downloads whose sha256 is computed while the bytes stream in; nothing unverified is kept in place.

``fetch_files`` is the one entry point. For each file it reads top-down: resume what a ``.part`` file
holds (re-hashing the kept prefix once), ask the mirror for the rest with ``Range``, stream into the
part while hashing, then check size and sha256 and rename into place. Every way a server or a link can
misbehave ends in a retry, the next mirror, or an error that names the file, the URL and what to do.
Qt-free: the GUI drives it through ``FetchEvent`` callbacks and a ``FetchControl``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx

from app import __version__
from app.core import net_failures, processes, safe_paths
from app.core.bounded_http import header_int
from app.core.errors import DiskSpaceError, DownloadError, FastMTPError, VerificationError
from app.core.hashing import BackgroundSha256
from app.core.net_failures import NetFailure, NetKind
from app.core.units import format_bytes
from app.release import part_state
from app.release.part_state import PartState
from app.release.progress import FetchEvent, Progress

__all__ = ["DownloadCancelled", "FetchControl", "FetchEvent", "FetchedFile", "FileRequest", "fetch_files"]

CHUNK = 1 << 20  # the most read at once, from the socket or from a kept prefix: memory stays flat
_STATE_EVERY = 1.0  # seconds between state saves while streaming (the byte count is informational)
_WRITE_BEHIND = 64 << 20  # bytes between write-behind hints (see _write_behind)
_MAX_REDIRECTS = 10
_MAX_BACKOFF = 60.0
# The advice of the errors a download raises, in words that suit the terminal and the window alike, except
# TOKEN_ADVICE, which names the command; the Models page chooses its own words by the error's ``kind``.
TOKEN_ADVICE = ("The repository may be gated or private: accept its terms on the hub, then store a token with "
                "`python -m app token set` (or set HF_TOKEN). A token that lacks access gives the same error.")
RESUME_ADVICE = "Start the download again: it resumes where it stopped."
NETWORK_ADVICE = "Check the network connection or try another mirror."
RETRY_ADVICE = "Start the download again."  # nothing was kept: there is nothing to resume
DISK_FULL_ADVICE = ("Free some space, then start the download again: the part already downloaded is kept and "
                    "the download resumes.")
# Small files (feeds, manifests, signatures, checksum lists: a request with ``max_size`` and no known size) get a
# total deadline for the whole batch, so a server dripping a byte now and then cannot hold a command for ever.
SMALL_FILE_DEADLINE_S = 30.0
DEADLINE_ENV = "FASTMTP_SMALL_FILE_DEADLINE_S"  # tests (and a very slow link) set another
NO_ROOM_ADVICE = ("Free some space or choose another folder, then start the download again; parts already "
                  "downloaded are kept.")

# httpcore reads the socket 64 KiB at a time and h11 copies every read a few times over: 1 MiB reads
# nearly double the throughput on a fast link (docs/benchmarks.md). It is a class attribute, so this is
# process-wide; it only ever makes reads larger, and a read returns what has arrived without waiting.
if getattr(httpcore.HTTP11Connection, "READ_NUM_BYTES", CHUNK) < CHUNK:
    httpcore.HTTP11Connection.READ_NUM_BYTES = CHUNK


@dataclass(frozen=True)
class FileRequest:
    """One file to fetch: a plain name (also its name in the staging folder) and mirrors in preference order."""

    name: str
    urls: list[str]
    size: int | None = None  # expected size: disk-space check, and never a byte past it
    sha256: str | None = None  # expected hash, checked at the end
    max_size: int | None = None  # the most bytes accepted when the size is not known (integrity files)


@dataclass(frozen=True)
class FetchedFile:
    """A file that arrived whole and matched every expectation it was given."""

    name: str
    path: Path
    size: int
    sha256: str


class DownloadCancelled(DownloadError):
    """The user cancelled; ``.part`` files are kept so the next run resumes."""

    kind = "download-cancelled"


ControlChange = Literal["paused", "resumed", "cancelled"]


class FetchControl:
    """Pause, resume and cancel, shared by the caller (any thread) and the fetcher's workers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._cancelled = False
        self._listeners: list[Callable[[ControlChange], None]] = []

    def pause(self) -> None:
        self._change("paused")

    def resume(self) -> None:
        self._change("resumed")

    def cancel(self) -> None:
        self._change("cancelled")

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def stopping(self) -> bool:
        """Paused or cancelled: a worker should put its bytes down now."""
        return self._paused or self._cancelled

    def add_listener(self, listener: Callable[[ControlChange], None]) -> Callable[[], None]:
        """Call ``listener`` on each change (in the thread that made it); returns the remover."""
        with self._cond:
            self._listeners.append(listener)

        def remove() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def wait_while_paused(self) -> None:
        """Block while paused; returns at once when running or cancelled."""
        with self._cond:
            self._cond.wait_for(lambda: not self._paused or self._cancelled)

    def sleep(self, seconds: float) -> None:
        """A backoff delay that ends early on pause or cancel."""
        with self._cond:
            self._cond.wait_for(lambda: self._paused or self._cancelled, timeout=seconds)

    def _change(self, change: ControlChange) -> None:
        with self._cond:
            if change == "cancelled":
                if self._cancelled:
                    return
                self._cancelled = True
            elif self._paused == (change == "paused"):
                return
            else:
                self._paused = change == "paused"
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(change)


@dataclass(frozen=True)
class _Settings:
    token: str | None
    token_hosts: frozenset[str] | None
    retries: int
    stall_timeout: float
    connect_timeout: float
    backoff_base: float


def fetch_files(requests: Sequence[FileRequest], staging_dir: Path, *, token: str | None = None,
                max_workers: int = 3, on_event: Callable[[FetchEvent], None] | None = None,
                control: FetchControl | None = None, retries: int = 4, stall_timeout: float = 30.0,
                connect_timeout: float = 10.0, backoff_base: float = 1.0,
                token_hosts: Sequence[str] | None = None, deadline: float | None = None) -> dict[str, FetchedFile]:
    """Download every request into ``staging_dir``, resuming ``.part`` files, verified as far as known.

    Args:
        requests: the files; names must be plain file names, unique in the batch.
        staging_dir: where ``<name>.part``, its state file and finally ``<name>`` live.
        token: a Bearer token, sent only to the origin of the URL asked for (or ``token_hosts``), never
            to a host a redirect leads to.
        max_workers: files downloaded at once.
        on_event: receives ``FetchEvent``s from worker threads, one at a time; keep it quick.
        control: pause / resume / cancel from any thread.
        retries: retries per mirror after a reset, a stall after data, a 5xx or a 429; progress resets the count.
            A name that does not resolve, a refused connection or a connect timeout is never retried.
        stall_timeout: seconds without a byte before the connection counts as stalled and is retried.
        connect_timeout: seconds to open a connection.
        backoff_base: first retry delay in seconds, doubling each retry (tests make it small).
        token_hosts: host names the token may go to (e.g. ``["huggingface.co"]``), when mirrors are mixed.
        deadline: seconds for the whole batch, after which it stops with a "too slow" :class:`NetworkDownloadError`;
            by default :func:`small_file_deadline` when every request is a small capped file (``max_size`` and no
            ``size``), none for model files (their stall timeout guards them).

    Returns:
        name -> ``FetchedFile``, in request order; files are at ``staging_dir / name``.

    Raises:
        DiskSpaceError: not enough free space for the known sizes (before any byte), or the disk filled up.
        DownloadError: a file could not be fetched from any mirror (``DownloadCancelled`` when cancelled).
        VerificationError: a file's size or sha256 differs from the expected one, or the server sent
            (or announced) more than expected or more than the request's ``max_size``; its ``.part`` is
            deleted.
    """
    requests = list(requests)
    _check_names(requests)
    if deadline is None and requests and all(r.size is None and r.max_size is not None for r in requests):
        deadline = small_file_deadline()
    staging_dir.mkdir(parents=True, exist_ok=True)
    _check_disk_space(requests, staging_dir)
    settings = _Settings(token, frozenset(token_hosts) if token_hosts is not None else None, retries,
                         stall_timeout, connect_timeout, backoff_base)
    progress = Progress(on_event, {r.name: r.size for r in requests})
    user = control or FetchControl()
    batch = FetchControl()  # the user's control mirrored, plus an abort when one file fails for good
    unlink_batch = batch.add_listener(lambda change: _report_change(progress, change))
    unlink_user = user.add_listener(lambda change: _apply_change(batch, change))
    if user.paused:
        batch.pause()
    if user.cancelled:
        batch.cancel()
    results: dict[str, FetchedFile] = {}
    errors: list[BaseException] = []
    expired = threading.Event()
    finished = threading.Event()
    if deadline is not None:
        threading.Thread(target=_watch_deadline, args=(deadline, user, batch, expired, finished), daemon=True,
                         name="fetch-deadline").start()
    downloads = [_Download(r, staging_dir, settings, batch, progress) for r in requests]
    try:
        workers = max(1, min(max_workers, len(requests)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
            futures = {pool.submit(d.run): index for index, d in enumerate(downloads)}
            failed: list[tuple[int, BaseException]] = []
            for future in as_completed(futures):
                try:
                    fetched = future.result()
                except BaseException as exc:
                    failed.append((futures[future], exc))
                    batch.cancel()
                else:
                    results[fetched.name] = fetched
            errors = [exc for _, exc in sorted(failed, key=lambda pair: pair[0])]  # named in request order
    finally:
        finished.set()
        unlink_user()
        unlink_batch()
    if user.cancelled:
        kept = sum(_size(_part_path(staging_dir, r.name)) for r in requests)
        raise DownloadCancelled(f"Download cancelled; {format_bytes(kept)} kept in .part files in {staging_dir}.",
                                RESUME_ADVICE)
    real = [e for e in errors if not isinstance(e, DownloadCancelled)]
    unfinished = [d for d in downloads if d.name not in results]
    if not real and expired.is_set() and deadline is not None and unfinished:
        real = [_too_slow(unfinished, deadline, progress)]
    if real or errors:
        first = (real or errors)[0]
        if isinstance(first, NetworkDownloadError):
            first.kept_bytes = sum(_size(_part_path(staging_dir, r.name)) for r in requests)
            if not first.kept_bytes:  # say "resume" only when there is something to resume
                first.advice = f"{net_failures.advice(first.failures)} {RETRY_ADVICE}"
        raise first
    progress.event("done", "", f"{len(results)} file(s) in {staging_dir}")
    return {r.name: results[r.name] for r in requests}


def _watch_deadline(seconds: float, user: FetchControl, batch: FetchControl, expired: threading.Event,
                    finished: threading.Event) -> None:
    """Stop the batch once it has run ``seconds`` (time paused by the user does not count): the workers put their
    bytes down as on a cancel, and the batch's error says "too slow"."""
    left = max(0.0, seconds)
    while left > 0:
        started = time.monotonic()
        if finished.wait(min(left, 0.25)):
            return
        if not user.paused:
            left -= time.monotonic() - started
    expired.set()
    batch.cancel()


def small_file_deadline() -> float:
    """The total deadline of a batch of small files: :data:`SMALL_FILE_DEADLINE_S`, or ``FASTMTP_SMALL_FILE_DEADLINE_S``
    when it holds a number of seconds between 0.1 and 3600."""
    text = os.environ.get(DEADLINE_ENV, "").strip()
    try:
        value = float(text) if 0 < len(text) <= 16 else SMALL_FILE_DEADLINE_S
    except ValueError:
        return SMALL_FILE_DEADLINE_S
    return value if 0.1 <= value <= 3600 else SMALL_FILE_DEADLINE_S


def _too_slow(unfinished: list[_Download], deadline: float, progress: Progress) -> NetworkDownloadError:
    """The error of a batch stopped at its deadline: which files, from where, in words."""
    failures = [net_failures.too_slow(d.current_url, deadline, role=d._role(d.current_url)) for d in unfinished]
    names = ", ".join(d.name for d in unfinished)
    words = net_failures.lower_first(net_failures.joined(failures))
    error = NetworkDownloadError(f"Could not download {names}: {words}\n"
                                 f"Tried: {', '.join(d.current_url for d in unfinished)}",
                                 "The server is far too slow for these small files; try again later or another "
                                 "mirror.", failures=failures, kind="download-network",
                                 detail="\n".join(f.detail for f in failures))
    for download in unfinished:
        progress.event("error", download.name, error.message, error.kind)
    return error


def pid_folder(parent: Path, prefix: str) -> Path:
    """``parent/<prefix>-<pid>``, a folder of this process's own, after removing those a killed run left behind
    (named for a process that no longer runs, or for a number no process can have). Not created here."""
    with contextlib.suppress(OSError):
        for entry in parent.glob(prefix + "-*"):
            pid_text = entry.name[len(prefix) + 1:]
            if not (pid_text.isascii() and pid_text.isdigit()):
                continue  # not a name we give
            if len(pid_text) <= 9 and (int(pid_text) == os.getpid() or processes.pid_alive(int(pid_text))):
                continue
            if entry.is_symlink() or not entry.is_dir():
                entry.unlink(missing_ok=True)
            else:
                shutil.rmtree(entry, ignore_errors=True)
    return parent / f"{prefix}-{os.getpid()}"


def _apply_change(control: FetchControl, change: ControlChange) -> None:
    if change == "paused":
        control.pause()
    elif change == "resumed":
        control.resume()
    else:
        control.cancel()


def _report_change(progress: Progress, change: ControlChange) -> None:
    if change == "paused":
        progress.event("paused", "", "paused; the parts are kept")
    elif change == "resumed":
        progress.event("resumed")


# Why a mirror could not be reached or read, for machines and the window (which words it through
# app.core.net_failures, never this module's English): the kinds of :data:`net_failures.NetKind`.
NetworkCause = NetKind


class NetworkDownloadError(DownloadError):
    """A file could not be fetched because the network or the server failed (not a refusal or a check).

    ``failures`` holds every endpoint's failure (the mirror's and the hub's), so the words name them all;
    ``cause`` and ``host`` are the first one's. ``message`` is in words, ``detail`` keeps the technical text (the
    URLs, the exceptions) for a tooltip or a log; ``kept_bytes`` is what the batch's ``.part`` files hold, so
    "resume" is only promised when something was kept.
    """

    def __init__(self, message: str, advice: str, *, failures: Sequence[NetFailure], kind: str,
                 detail: str = "") -> None:
        super().__init__(message, advice, kind=kind)
        self.failures = list(failures)
        self.cause: NetworkCause = self.failures[0].kind if self.failures else "connection-lost"
        self.host = self.failures[0].host if self.failures else ""
        self.detail = detail or message
        self.kept_bytes = 0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "cause": self.cause, "host": self.host, "kept_bytes": str(self.kept_bytes),
                "failures": [f.to_dict() for f in self.failures]}


class _Retry(Exception):
    """This attempt failed; ``retry`` says whether trying the same mirror again can help (a reset, a 5xx, a 429, a
    stall after data) or not (a name that does not resolve, a refused connection: the next mirror, at once)."""

    def __init__(self, reason: str, *, failure: NetFailure | None = None, retry_after: float | None = None,
                 immediate: bool = False, retry: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failure = failure
        self.retry_after = retry_after
        self.immediate = immediate
        self.retry = retry


class _MirrorFailed(Exception):
    """This mirror cannot serve the file (404, 403, a bad certificate ...): go to the next one."""

    def __init__(self, reason: str, advice: str = "", kind: str = "download-refused",
                 failure: NetFailure | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.advice = advice
        self.kind = kind
        self.failure = failure


class _Interrupted(Exception):
    """The user paused or cancelled while bytes were flowing."""


class _Download:
    """One file's journey from mirrors to ``staging_dir / name``."""

    def __init__(self, request: FileRequest, staging: Path, settings: _Settings, control: FetchControl,
                 progress: Progress) -> None:
        self.request = request
        self.name = request.name
        self.final = staging / request.name
        self.part = _part_path(staging, request.name)
        self.state_file = part_state.state_path(self.part)
        self.settings = settings
        self.control = control
        self.progress = progress
        self.hasher = BackgroundSha256()
        self.done = 0  # bytes in .part, all of them hashed
        self.state: PartState | None = None
        self.expected = request.size  # request.size, else what the server announced
        self._sock: socket.socket | None = None
        self._url = ""  # the URL of the current attempt, for messages
        self._aborted = False  # set when a pause or cancel broke the current attempt on purpose
        self._sock_lock = threading.Lock()

    # ------------------------------------------------------------------ top-down

    def run(self) -> FetchedFile:
        remove_listener = self.control.add_listener(self._on_control)
        try:
            self._checkpoint()
            kept = self._already_fetched()
            if kept is not None:
                return kept
            self._restore_part()
            self.progress.start(self.name, self.done, f"resuming at {format_bytes(self.done)}" if self.done else "")
            self._download_from_mirrors()
            return self._finish()
        except FastMTPError as exc:
            if not isinstance(exc, DownloadCancelled):
                self.progress.event("error", self.name, exc.message, exc.kind)
            raise
        finally:
            self.hasher.close()
            remove_listener()

    def _already_fetched(self) -> FetchedFile | None:
        """A file at the final name was verified by an earlier run; with a known hash, prove it again."""
        if not self.final.is_file() or self.request.sha256 is None:
            return None
        if self.request.size is not None and self.final.stat().st_size != self.request.size:
            return None
        digest = BackgroundSha256()
        size = self._hash_file(self.final, None, digest)
        if digest.hexdigest() != self.request.sha256.lower():
            return None
        self.progress.start(self.name, size, "already downloaded")
        self.progress.event("done", self.name, "already downloaded and verified")
        return FetchedFile(self.name, self.final, size, digest.hexdigest())

    def _restore_part(self) -> None:
        """Keep the ``.part`` only if its state says it is the file we want; re-hash the kept prefix once."""
        state = part_state.load(self.state_file) if self.part.is_file() else None
        request = self.request
        usable = (state is not None and (state.url in request.urls or request.sha256 is not None)
                  and not (request.size is not None and state.size is not None and state.size != request.size))
        kept = _size(self.part)
        limit = request.size if request.size is not None else request.max_size
        if not usable or (limit is not None and kept > limit):
            self.part.unlink(missing_ok=True)
            part_state.remove(self.state_file)
            return
        self.state = state
        self.done = self._hash_file(self.part, kept, self.hasher)

    def _download_from_mirrors(self) -> None:
        """Attempts with backoff on one mirror, then the next; returns when the part holds the whole file.

        Only failures a retry can help are retried (a reset, a 5xx, a 429, a stall after data); a name that does
        not resolve or a refused connection goes to the next mirror at once, so an offline machine gives up in
        seconds. The error names every mirror tried, each in words (:mod:`app.core.net_failures`)."""
        words: list[str] = []  # each mirror's failure, in words
        details: list[str] = []  # the same with URLs and exceptions, for a tooltip or a log
        network: list[NetFailure] = []
        advice = ""
        kind = "download-network"  # unless a mirror's failure gives the advice: then its kind goes with it
        for url in self.request.urls:
            attempt = 0
            high_water = self.done
            while True:
                self._checkpoint()
                try:
                    self._attempt(url)
                    return
                except _Interrupted:
                    continue
                except _MirrorFailed as exc:
                    words.append(exc.failure.clause() if exc.failure else f"{self._who(url)}: {exc.reason}")
                    details.append(exc.failure.detail if exc.failure else f"{url}: {exc.reason}")
                    if exc.failure is not None and exc.failure.kind != "tls-certificate":
                        network.append(exc.failure)
                    if not advice and exc.advice:
                        advice, kind = exc.advice, exc.kind
                    break
                except _Retry as exc:
                    if self.done > high_water:  # progress was made: the link works, just not for long
                        high_water, attempt = self.done, 0
                    attempt += 1
                    if not exc.retry or attempt > self.settings.retries:
                        tried = f" (still after {self.settings.retries} retries)" if exc.retry else ""
                        words.append((exc.failure.clause() if exc.failure else exc.reason) + tried)
                        details.append((exc.failure.detail if exc.failure else f"{url}: {exc.reason}")
                                       + (f" (gave up after {self.settings.retries} retries)" if exc.retry
                                          else " (not retried: a retry would not help)"))
                        network.append(exc.failure or NetFailure("connection-lost", net_failures.host_of(url),
                                                                 detail=f"{url}: {exc.reason}"))
                        break
                    delay = 0.0 if exc.immediate else self._backoff(attempt, exc.retry_after)
                    when = f"retrying in {_seconds(delay)}" if delay else "retrying now"
                    self.progress.waiting(self.name, net_failures.capital(
                        f"{exc.reason}; {when} (retry {attempt} of {self.settings.retries})"), delay)
                    self.control.sleep(delay)
            if url != self.request.urls[-1]:
                self.progress.event("retry", self.name, net_failures.capital(f"{words[-1]}; trying the next mirror"))
        tried = ", ".join(self.request.urls)
        message = (f"Could not download {self.name}: {net_failures.lower_first(net_failures.joined_words(words))}"
                   f"\nTried: {tried}")
        detail = "\n".join(details)
        if network and not advice:
            raise NetworkDownloadError(message, net_failures.advice(network) + " " + RESUME_ADVICE,
                                       failures=network, kind=kind, detail=detail)
        raise DownloadError(message, advice or NETWORK_ADVICE + " " + RESUME_ADVICE, kind=kind)

    @property
    def current_url(self) -> str:
        """The URL being tried now (the first before any attempt)."""
        return self._url or self.request.urls[0]

    def _who(self, url: str) -> str:
        """The mirror as the words name it: "the mirror HOST" when the batch mixes the hub and mirrors."""
        failure = NetFailure("connection-lost", net_failures.host_of(url), self._role(url))
        return failure.who

    def _role(self, url: str) -> str:
        """"mirror" for a URL whose host is not the hub's, when the request has several endpoints (the hub's own
        hosts are ``token_hosts``); "" otherwise (a lone URL is named by its host alone)."""
        hubs = self.settings.token_hosts
        if len(self.request.urls) < 2 or not hubs:
            return ""
        return "" if urlsplit(url).hostname in hubs else "mirror"

    def _finish(self) -> FetchedFile:
        """Check size and hash, then move into place; a mismatch deletes the part."""
        _fsync_path(self.part)
        size = _size(self.part)
        digest = self.hasher.hexdigest()
        if self.request.size is not None and size != self.request.size:
            self._discard()
            raise VerificationError(f"{self.name} has the wrong size: expected {self.request.size} bytes, "
                                    f"got {size}.", "The mirror serves a different file; try another mirror.",
                                    kind="size-mismatch", file=self.name)
        if self.request.sha256 is not None and digest != self.request.sha256.lower():
            self._discard()
            raise VerificationError(f"{self.name} failed its sha256 check: expected {self.request.sha256.lower()}, "
                                    f"got {digest}. The download was deleted.",
                                    "The mirror served corrupted or tampered bytes; try again or another mirror.",
                                    kind="sha256-mismatch", file=self.name)
        os.replace(self.part, self.final)
        part_state.remove(self.state_file)
        _fsync_path(self.final.parent)
        self.progress.event("done", self.name, str(self.final))
        return FetchedFile(self.name, self.final, size, digest)

    # ------------------------------------------------------------------ one HTTP attempt

    def _attempt(self, url: str) -> None:
        """One request from ``self.done`` onwards; returns when the part is complete, else raises."""
        same_source = self.state is not None and self.state.url == url
        started = self.done
        self._aborted = False
        self._url = url
        headers = {"Accept-Encoding": "identity", "User-Agent": f"fastmtp-chat/{__version__}"}
        if self.done > 0:
            headers["Range"] = f"bytes={self.done}-"
            if_range = self.state.if_range() if self.state is not None and same_source else None
            if if_range:
                headers["If-Range"] = if_range
        timeout = httpx.Timeout(self.settings.stall_timeout, connect=self.settings.connect_timeout)
        try:
            net_failures.resolve_within(url, self.settings.connect_timeout)  # no resolver: offline, said in seconds
        except socket.gaierror as exc:
            failure = net_failures.describe(exc, url, role=self._role(url))
            raise _Retry(failure.clause(), failure=failure, retry=False) from exc
        try:
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                response = self._send(client, url, headers)
                try:
                    if self._accept(response, url, same_source):
                        self._stream(response)
                finally:
                    with self._sock_lock:
                        self._sock = None
                    response.close()
        except httpx.TransportError as exc:
            if self._aborted:  # we shut the socket ourselves: a pause or cancel, not a network failure
                self._checkpoint()
                raise _Interrupted() from exc
            failure = net_failures.describe(exc, url, role=self._role(url), seconds=self.settings.stall_timeout)
            if failure.kind == "tls-certificate" or _is_certificate_error(exc):
                failure = NetFailure("tls-certificate", failure.host, failure.role, detail=failure.detail)
                raise _MirrorFailed(failure.clause(),
                                    "The connection may be intercepted; check the system clock and any proxy. "
                                    "Certificate checks are never turned off.", "tls-unverified", failure) from exc
            # a stall only counts as worth a retry once this attempt had data: a server that accepts and then
            # says nothing at all will not say more a second later
            retry = failure.retryable and (failure.kind != "stalled" or self.done > started)
            raise _Retry(failure.clause(), failure=failure, retry=retry) from exc
        if self.expected is not None and self.done < self.expected:
            failure = NetFailure("connection-lost", net_failures.host_of(url), self._role(url),
                                 detail=f"{url}: the connection closed early at {self.done} of {self.expected} bytes")
            raise _Retry(failure.clause(), failure=failure)

    def _send(self, client: httpx.Client, url: str, headers: dict[str, str]) -> httpx.Response:
        """GET with redirects followed by hand, so the token only ever goes where it was meant to."""
        origin = urlsplit(url)
        current = url
        for _ in range(_MAX_REDIRECTS + 1):
            if urlsplit(current).scheme not in ("http", "https"):
                raise _MirrorFailed(f"{current} is not an http(s) URL; refused")
            sent = dict(headers)
            if self.settings.token and self._token_allowed(origin.geturl(), current):
                sent["Authorization"] = f"Bearer {self.settings.token}"
            request = client.build_request("GET", current, headers=sent, extensions={"trace": self._trace})
            response = client.send(request, stream=True)
            location = response.headers.get("location")
            if response.status_code not in (301, 302, 303, 307, 308) or not location:
                self._remember_socket(response)
                return response
            response.close()
            target = urljoin(current, location)
            if urlsplit(current).scheme == "https" and urlsplit(target).scheme != "https":
                raise _MirrorFailed(f"it redirected from https to {target}, which is not https; refused")
            current = target
        raise _MirrorFailed(f"more than {_MAX_REDIRECTS} redirects")

    def _token_allowed(self, first: str, current: str) -> bool:
        here = urlsplit(current)
        if self.settings.token_hosts is not None:
            return here.hostname in self.settings.token_hosts and here.scheme == "https"
        origin = urlsplit(first)
        return (here.scheme, here.hostname, here.port) == (origin.scheme, origin.hostname, origin.port)

    def _accept(self, response: httpx.Response, url: str, same_source: bool) -> bool:
        """Whether the body continues (or restarts) our part; False when the part is already whole.

        Raises ``_Retry`` or ``_MirrorFailed`` from the status and headers.
        """
        status = response.status_code
        if status == 416 and self.done > 0:
            total = _content_range(response.headers.get("content-range"))[1]
            if self.expected is not None and self.done == self.expected and total in (None, self.expected):
                return False
            self._restart("the server refused to resume (416); starting again from zero")
            raise _Retry("the server refused to resume (416)", immediate=True)
        if status in (401, 403):
            raise _MirrorFailed(f"access denied (HTTP {status})", TOKEN_ADVICE, "download-denied")
        if status in (404, 410):
            raise _MirrorFailed(f"not found (HTTP {status})",
                                "The file is not on this mirror: check the repository, the revision and the "
                                "quantization name.", "not-found")
        if status in (408, 429) or status >= 500:
            failure = net_failures.from_status(status, url, role=self._role(url))
            raise _Retry(failure.clause(), failure=failure, retry_after=_retry_after(response))
        if status not in (200, 206):
            raise _MirrorFailed(f"unexpected answer (HTTP {status})")
        etag, modified = response.headers.get("etag"), response.headers.get("last-modified")
        if status == 206:
            first, total = _content_range(response.headers.get("content-range"))
            if first != self.done:
                self._restart("the server sent the wrong range; starting again from zero")
                raise _Retry("the server sent the wrong range", immediate=True)
            if self.state is not None and not (
                    self.state.same_remote(etag, modified, total) if same_source
                    else self.state.same_remote(None, None, total)):
                self._restart("the file changed on the server; starting again from zero")
                raise _Retry("the file changed on the server", immediate=True)
        else:
            if self.done > 0:
                self._restart("the server does not resume (ignored Range); starting again from zero")
            total = header_int(response.headers.get("content-length"))
        self._check_announced_size(total, url)
        self.state = PartState(url=url, etag=etag, last_modified=modified, size=self.expected, bytes_done=self.done)
        try:
            part_state.save(self.state_file, self.state)
        except OSError as exc:
            full = self._disk_full(exc)
            if full is None:
                raise
            raise full from exc
        return True

    def _check_announced_size(self, total: int | None, url: str) -> None:
        if total is None:
            return
        if self.request.size is not None and total != self.request.size:
            self._discard()
            raise VerificationError(f"{self.name} has the wrong size on {url}: expected {self.request.size} bytes, "
                                    f"the server announces {total}.",
                                    "The mirror serves a different file; try another mirror.", kind="size-mismatch",
                                    file=self.name)
        if self.request.max_size is not None and total > self.request.max_size:
            self._discard()
            raise VerificationError(f"{self.name} on {url} is too large: the server announces {total} bytes, "
                                    f"more than the {format_bytes(self.request.max_size)} this file may have; "
                                    "refused before reading it.",
                                    "The mirror serves something else than a release file; try another mirror.",
                                    kind="too-large", file=self.name)
        if self.expected is None:
            self.expected = total
            self.progress.set_total(self.name, total)

    def _stream(self, response: httpx.Response) -> None:
        """Append the body to the part, hashing as it goes; never a byte past the expected size."""
        fd = safe_paths.open_existing_or_new(self.part, "partial download")  # never through a planted link
        try:
            os.ftruncate(fd, self.done)
            os.lseek(fd, self.done, os.SEEK_SET)
            saved = time.monotonic()
            behind = self.done
            for piece in response.iter_raw():
                if self.control.stopping:
                    self._aborted = True
                    break
                if self.request.max_size is not None and self.done + len(piece) > self.request.max_size:
                    self._discard()
                    raise VerificationError(
                        f"{self.name} on {self._url} is too large: the server sent more than the "
                        f"{format_bytes(self.request.max_size)} this file may have; the download was stopped there "
                        "and deleted.",
                        "The mirror serves something else than a release file; try another mirror.", kind="too-large")
                if self.expected is not None and self.done + len(piece) > self.expected:
                    self._write(fd, memoryview(piece)[: self.expected - self.done])
                    self._discard()
                    raise VerificationError(
                        f"{self.name}: the server sent more than the expected {self.expected} bytes; "
                        "the download was cut off there and deleted.",
                        "The mirror serves a different file; try another mirror.", kind="size-mismatch")
                self._write(fd, memoryview(piece))
                if self.done - behind >= _WRITE_BEHIND:
                    _write_behind(fd, max(0, behind - _WRITE_BEHIND), self.done)
                    behind = self.done
                if time.monotonic() - saved >= _STATE_EVERY:
                    saved = time.monotonic()
                    self._save_state()
        finally:
            os.close(fd)
            if self.part.exists():
                self._save_state()
        if self._aborted:
            self._checkpoint()
            raise _Interrupted()

    def _write(self, fd: int, view: memoryview) -> None:
        while view:
            try:
                written = os.write(fd, view)
            except OSError as exc:
                full = self._disk_full(exc)
                if full is None:
                    raise
                raise full from exc
            self.hasher.update(view[:written])
            self.done += written
            self.progress.advance(self.name, written)
            view = view[written:]

    # ------------------------------------------------------------------ small steps

    def _restart(self, message: str) -> None:
        """Throw the part's bytes away: what we have no longer belongs to the file the server has."""
        self.done = 0
        self.hasher.close()
        self.hasher = BackgroundSha256()
        self.state = None
        self.part.unlink(missing_ok=True)  # the next attempt creates it anew (truncating could follow a link)
        part_state.remove(self.state_file)
        self.progress.restart(self.name, message)

    def _discard(self) -> None:
        self.part.unlink(missing_ok=True)
        part_state.remove(self.state_file)

    def _disk_full(self, exc: OSError) -> DiskSpaceError | None:
        """For ENOSPC and friends, the error that says the part is kept; None for other OS errors."""
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
        free = shutil.disk_usage(self.part.parent).free
        left = f" ({format_bytes(self.expected - self.done)} still to come)" if self.expected else ""
        return DiskSpaceError(f"The disk is full: {self.name} stopped at {format_bytes(self.done)}{left}; "
                              f"{format_bytes(free)} free in {self.part.parent}.",
                              DISK_FULL_ADVICE)

    def _save_state(self) -> None:
        """Best effort: only the byte count changes, and the .part's length is the truth for that."""
        if self.state is None:
            return
        with contextlib.suppress(OSError):
            self.state = PartState(self.state.url, self.state.etag, self.state.last_modified, self.state.size,
                                   self.done)
            part_state.save(self.state_file, self.state)

    def _hash_file(self, path: Path, limit: int | None, digest: BackgroundSha256) -> int:
        """Feed ``path`` (its first ``limit`` bytes) into ``digest``; cancellable, it may be many GB."""
        count = 0
        with path.open("rb") as handle:
            while limit is None or count < limit:
                self._checkpoint()
                chunk = handle.read(CHUNK if limit is None else min(CHUNK, limit - count))
                if not chunk:
                    break
                digest.update(chunk)
                count += len(chunk)
        return count

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.settings.backoff_base * 2.0 ** (attempt - 1), _MAX_BACKOFF) * random.uniform(1.0, 1.25)
        return max(delay, min(retry_after, _MAX_BACKOFF)) if retry_after is not None else delay

    def _checkpoint(self) -> None:
        """Wait out a pause; raise when cancelled."""
        self.control.wait_while_paused()
        if self.control.cancelled:
            raise DownloadCancelled(f"Download of {self.name} cancelled at {format_bytes(self.done)}; the part is "
                                    "kept.", RESUME_ADVICE)

    def _remember_socket(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        self._set_socket(stream.get_extra_info("socket") if stream is not None else None)

    def _trace(self, event: str, info: dict[str, object]) -> None:
        """httpcore's trace hook: the socket is known from the moment it connects, so a pause or cancel can
        shut it while we still wait for the response's headers (a server that never answers)."""
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            get_extra_info = getattr(stream, "get_extra_info", None)
            self._set_socket(get_extra_info("socket") if get_extra_info is not None else None)

    def _set_socket(self, sock: object) -> None:
        """Remember the live socket; when a pause or cancel came first, shut it at once."""
        with self._sock_lock:
            self._sock = sock if isinstance(sock, socket.socket) else None
            stop = self._sock is not None and self.control.stopping
            if stop:
                self._aborted = True
        if stop and isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _on_control(self, change: ControlChange) -> None:
        """On pause or cancel, shut the socket so a read blocked on a silent server returns now."""
        if change == "resumed":
            return
        with self._sock_lock:
            sock = self._sock
            self._aborted = True
        if sock is not None:
            with contextlib.suppress(OSError):  # the plain socket's shutdown, also for TLS: the SSL object stays
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _check_names(requests: list[FileRequest]) -> None:
    seen: set[str] = set()
    for request in requests:
        name = request.name
        if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
                or (len(name) > 1 and name[1] == ":")):
            raise VerificationError(f"Refusing to download {name!r}: not a plain file name.",
                                    "A release may only name files, never folders or paths.", kind="unsafe-name")
        if name in seen:
            raise ValueError(f"{name} is requested twice")
        if not request.urls:
            raise ValueError(f"{name} has no URL")
        seen.add(name)


def bytes_to_fetch(requests: Sequence[FileRequest], staging: Path) -> int:
    """The bytes a batch still has to download: the known sizes, minus complete files and what ``.part`` files
    already hold (they are resumed). Shared by the disk-space check and the callers' "download this?" question."""
    needed = 0
    for request in requests:
        if request.size is None:
            continue
        final = staging / request.name
        if final.is_file() and final.stat().st_size == request.size:
            continue
        kept = _size(_part_path(staging, request.name))
        needed += request.size - (kept if kept <= request.size else 0)
    return needed


def _check_disk_space(requests: list[FileRequest], staging: Path) -> None:
    """Before the first byte: the known sizes, minus what ``.part`` files already hold, must fit."""
    needed = bytes_to_fetch(requests, staging)
    free = shutil.disk_usage(staging).free
    if needed > free:
        raise DiskSpaceError(f"Not enough free space in {staging}: the download needs {format_bytes(needed)}, "
                             f"only {format_bytes(free)} is free.",
                             NO_ROOM_ADVICE, kind="no-room")


def _part_path(staging: Path, name: str) -> Path:
    return staging / f"{name}.part"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _seconds(delay: float) -> str:
    return f"{delay:.0f} s" if delay >= 10 else f"{delay:.1f} s"


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes FIRST-LAST/TOTAL`` (or ``bytes */TOTAL``) -> (FIRST, TOTAL); None for what is missing."""
    if not value or not value.startswith("bytes "):
        return None, None
    span, _, total = value[len("bytes "):].partition("/")
    first = span.partition("-")[0]
    return header_int(first), header_int(total)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds from ``Retry-After`` (ASCII digits only; an HTTP date or anything else: None)."""
    seconds = header_int(response.headers.get("retry-after"))
    return float(seconds) if seconds is not None else None


def _is_certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _write_behind(fd: int, start: int, end: int) -> None:
    """Start writing ``[start, end)`` to disk now and drop the pages already written.

    The final fsync then has little left to do, and a 30 GB download does not push everything else out
    of the page cache: the hash was taken while streaming, so the bytes are never read back.
    """
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


def _fsync_path(path: Path) -> None:
    """Make a finished file (or a rename in a folder) durable; best effort where the OS refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


