"""Is there a newer FastMTP Chat? Asked on request, and at most once a day when the user allows it.

The answer comes from the signed app-release feed (:mod:`app.release.app_feed`) and goes through the
model releases' trust chain: the key pinned for the app's repository (shipped, or pinned by the user),
the catalog's fingerprint, or one the user confirms on first use; a feed that is unsigned, altered,
signed by another key or older than one verified before is never shown as an update. Nothing here
downloads or replaces the app: a check says which version there is and where to get it.

Every network or verification failure becomes an :class:`UpdateCheck` with a status, not an exception,
so a window can show it and an offline machine is not an error. Each check is remembered in
``<config>/update-state.json``: its result for the Settings page, its time for the once-a-day rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
import tomllib
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import httpx

from app import __version__
from app.core import bounded_http, net_failures, paths, settings_file
from app.core.errors import DownloadError, StorageError, VerificationError
from app.core.resources import resources_dir
from app.release import signing, trust
from app.release.app_feed import AppDownload, AppFeed, AppVersion, current_platform, parse_app_version, parse_feed
from app.release.catalog import CatalogError, check_url, load_catalog
from app.release.fetcher import small_file_deadline

Status = Literal["up_to_date", "available", "unverified", "unreachable"]
STATUSES: tuple[Status, ...] = ("up_to_date", "available", "unverified", "unreachable")
CHECK_INTERVAL = timedelta(hours=24)
STATE_FILE = "update-state.json"
FLOOR_FILE = "update-floor.json"  # in the data folder: not a cache, it guards against replayed old feeds
URL_ENV = "FASTMTP_UPDATE_URL"
DEFAULT_TIMEOUT = 15.0
CONNECT_TIMEOUT = 10.0  # the most one connect waits: a dropped SYN (a firewall, a captive network) is not waited on
_MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_NOT_VERIFIED = "The update information could not be verified"
_ADVICE_OF_ITS_OWN = net_failures.OFFLINE | {"tls", "tls-certificate"}  # the other kinds: "the server may be down"


@dataclass(frozen=True)
class UpdateSource:
    """Where the feed is and who must have signed it (``[app_updates]`` in the catalog)."""

    url: str
    repo: str
    fingerprint: str | None = None  # the key the feed must be signed with, when the catalog names one
    public_key: str = "fastmtp-chat-Ed25519-PUBLIC.pem"  # served next to the feed, for a first use
    max_bytes: int = 262_144  # the most read of the feed, its signature or its key before anything vouches

    def sibling(self, name: str) -> str:
        """The URL of a file next to the feed (a download, the public key)."""
        return urljoin(self.url, quote(name))

    def signature_urls(self) -> list[str]:
        """``<feed>.sig`` then ``<feed>.sig.b64``: the signature names model releases use."""
        parts = urlsplit(self.url)
        return [urlunsplit(parts._replace(path=parts.path + suffix))
                for suffix in load_catalog().integrity.signature_suffixes]


def default_source(url: str | None = None) -> UpdateSource:
    """The catalog's feed; ``url`` (``--url``) or ``FASTMTP_UPDATE_URL`` replaces its address only."""
    path = resources_dir() / "catalog.toml"
    try:
        with path.open("rb") as handle:
            table = tomllib.load(handle).get("app_updates")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"Cannot read the release catalog {path}: {exc}", "Reinstall the app.") from exc
    if not isinstance(table, dict) or not isinstance(table.get("url"), str) or not isinstance(table.get("repo"), str):
        raise CatalogError(f"{path} has no [app_updates] section with url and repo.", "Reinstall the app.")
    fingerprint = table.get("fingerprint")
    max_bytes = table.get("max_feed_bytes")
    return UpdateSource(
        url=check_url(url or os.environ.get(URL_ENV) or table["url"]), repo=table["repo"],
        fingerprint=signing.normalize_fingerprint(fingerprint) if isinstance(fingerprint, str) and fingerprint
        else None,
        public_key=str(table.get("public_key") or UpdateSource.public_key),
        max_bytes=max_bytes if isinstance(max_bytes, int) and max_bytes > 0 else UpdateSource.max_bytes)


@dataclass(frozen=True)
class UpdateCheck:
    """What one check found; ``status`` says which of the other fields mean something."""

    status: Status
    current_version: str
    checked_at: datetime
    feed_url: str
    latest_version: str | None = None
    notes: str = ""
    download_url: str | None = None  # this platform's file, else the release page
    download: AppDownload | None = None
    fingerprint: str | None = None  # the key that signed the feed
    message: str = ""  # why it could not be verified or reached
    advice: str = ""
    warning: str = ""  # what the check found damaged and set aside (the rollback floor)

    @property
    def newer_available(self) -> bool:
        return self.status == "available"

    def summary(self) -> str:
        """One line for a person."""
        warning = f" Warning: {self.warning}" if self.warning else ""
        if self.status == "available":
            where = self.download_url or self.feed_url
            return f"FastMTP Chat {self.latest_version} is available: {where}{warning}"
        if self.status == "up_to_date":
            return f"FastMTP Chat {self.current_version} is up to date.{warning}"
        if self.status == "unverified":
            return f"{_NOT_VERIFIED}: {self.message}{warning}"
        return f"Could not reach the update server: {net_failures.lower_first(self.message)}{warning}"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "newer_available": self.newer_available,
                "current_version": self.current_version, "latest_version": self.latest_version,
                "notes": self.notes, "download_url": self.download_url,
                "download": self.download.to_dict() if self.download else None, "fingerprint": self.fingerprint,
                "checked_at": _iso(self.checked_at), "feed_url": self.feed_url, "message": self.message,
                "advice": self.advice, "warning": self.warning}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpdateCheck:
        """The inverse of :meth:`to_dict`; ``ValueError`` (or ``KeyError``/``TypeError``) on a damaged entry."""
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(status)
        download = data.get("download")
        return cls(status=status, current_version=str(data["current_version"]),
                   checked_at=_aware(datetime.fromisoformat(data["checked_at"])), feed_url=str(data["feed_url"]),
                   latest_version=_optional(data.get("latest_version")), notes=str(data.get("notes") or ""),
                   download_url=_optional(data.get("download_url")),
                   download=AppDownload(**download) if isinstance(download, dict) else None,
                   fingerprint=_optional(data.get("fingerprint")), message=str(data.get("message") or ""),
                   advice=str(data.get("advice") or ""), warning=str(data.get("warning") or ""))


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return _aware(moment).astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# ----------------------------------------------------------------------------- fetching the feed


@dataclass(frozen=True)
class VerifiedFeed:
    feed: AppFeed
    fingerprint: str
    sha256: str
    key_pinned_now: bool


class _Reader:
    """GETs with a byte cap, one total deadline, hand-followed redirects (never https to http) and no retries: the
    check is asked again tomorrow, and an offline machine hears so at once. Failures are in words
    (:mod:`app.core.net_failures`)."""

    def __init__(self, client: httpx.Client, limit: int, deadline: float) -> None:
        self._client = client
        self._limit = limit
        self._deadline = deadline
        self._seconds = max(0.0, deadline - time.monotonic())

    def get(self, url: str, what: str, *, optional: bool = False) -> bytes | None:
        """The body of ``url``; None for a 404 when ``optional``. Raises DownloadError / VerificationError."""
        current = url
        for _ in range(_MAX_REDIRECTS + 1):
            reader = bounded_http.BoundedRead(f"The {what} at {url}", max_body=self._limit,
                                              deadline_at=self._deadline)
            try:
                # no resolver answering (offline) is said within the connect timeout, not after getaddrinfo's own
                net_failures.resolve_within(current, self._client.timeout.connect or CONNECT_TIMEOUT)
                with self._client.stream("GET", current, extensions=reader.extensions) as response:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECTS and location:
                        current = self._redirect(current, urljoin(current, location), what)
                        continue
                    if response.status_code == 404 and optional:
                        return None
                    if response.status_code != 200:
                        failure = net_failures.from_status(response.status_code, current)
                        raise DownloadError(f"The {what} could not be read: {failure.clause()}.",
                                            "The update server may be down or moved; try again later.")
                    return self._body(reader, response, url, what)
            except bounded_http.TooSlow:
                raise self._too_slow(current, what) from None
            except (httpx.TransportError, socket.gaierror) as exc:
                try:
                    reader.explain(exc)  # the deadline shut the socket: say "too slow", not "closed"
                except bounded_http.TooSlow:
                    raise self._too_slow(current, what) from None
                failure = net_failures.describe(exc, current, seconds=self._client.timeout.read)
                # the update server is not the user's to start: "is it running?" is no advice for them
                own_words = failure.kind in _ADVICE_OF_ITS_OWN
                advice = net_failures.advice([failure]) if own_words else \
                    "Check the network connection, or try again later: the update server may be down."
                raise DownloadError(failure.sentence(), advice + " Nothing was changed; the app works offline.") \
                    from exc
            finally:
                reader.finish()
        raise DownloadError(f"The {what} at {url} redirects more than {_MAX_REDIRECTS} times.",
                            "The update server is misconfigured; try again later.")

    def _too_slow(self, url: str, what: str) -> DownloadError:
        failure = net_failures.too_slow(url, self._seconds)
        return DownloadError(f"The {what} could not be read: {failure.clause()}.",
                             "The update server is far too slow; try again later. Nothing was changed.")

    @staticmethod
    def _redirect(current: str, target: str, what: str) -> str:
        if urlsplit(target).scheme not in ("http", "https") or \
                (urlsplit(current).scheme == "https" and urlsplit(target).scheme != "https"):
            raise DownloadError(f"The {what} at {current} redirects to {target[:120]}, which is refused "
                                "(not http(s), or from https to plain http).", "Try again later.")
        return target

    def _body(self, reader: bounded_http.BoundedRead, response: httpx.Response, url: str, what: str) -> bytes:
        too_big = VerificationError(f"The {what} at {url} is larger than {self._limit} bytes, far more than any "
                                    f"{what} holds; it was not read further.",
                                    "Nothing was trusted. The server may be misconfigured or hostile.")
        try:
            return reader.body(response)
        except bounded_http.TooLarge:
            raise too_big from None
        except bounded_http.TooSlow:
            raise
        except bounded_http.ReadLimitError as exc:
            raise VerificationError(exc.message, "Nothing was trusted.") from None


def fetch_feed(source: UpdateSource, *, trust_fingerprint: str | None = None, confirm: trust.Confirm | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> VerifiedFeed:
    """Download the feed, its signature and (when served) its key; check the signature with a trusted key.

    A key trusted for the first time (``trust_fingerprint``, the catalog's fingerprint or a confirmed
    ``confirm``) is pinned for ``source.repo`` once the feed verified, as ``fetch`` does for models.

    Raises:
        DownloadError: the server could not be reached, or answered with an error, or too slowly.
        VerificationError: unsigned, altered, signed by an untrusted or another key, oversized,
            malformed, for another repository, or older than the feed verified before (``TrustError``
            for the key cases).
    """
    headers = {"User-Agent": f"fastmtp-chat/{__version__}", "Accept-Encoding": "identity"}
    limits = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))
    with httpx.Client(timeout=limits, headers=headers, follow_redirects=False) as client:
        reader = _Reader(client, source.max_bytes, time.monotonic() + min(3 * timeout, small_file_deadline()))
        data = reader.get(source.url, "update information")
        assert data is not None
        signature = None
        for url in source.signature_urls():
            signature = reader.get(url, "update signature", optional=True)
            if signature is not None:
                break
        if signature is None:
            raise VerificationError(f"The update information at {source.url} is not signed (no "
                                    f"{' or '.join(u.rsplit('/', 1)[-1] for u in source.signature_urls())}).",
                                    "Unsigned update information is never trusted; get FastMTP Chat from its "
                                    "official page.")
        served_bytes = reader.get(source.sibling(source.public_key), "publisher key", optional=True)
    served = signing.load_public_key(served_bytes, source.public_key) if served_bytes is not None else None
    key, is_new = trust.decide(source.repo, served, trust_fingerprint=trust_fingerprint or source.fingerprint,
                               confirm=confirm)
    signing.verify(key, data, signing.decode_signature(signature, "the update signature"), "the update information")
    feed = parse_feed(data, "the update information")
    if feed.repo != source.repo:
        raise VerificationError(f"The update information is for {feed.repo}, not {source.repo}.",
                                "A feed signed for another repository is not used.")
    _check_floor(source.repo, feed)
    if is_new:
        trust.pin_key(source.repo, key)
    return VerifiedFeed(feed, signing.fingerprint(key), hashlib.sha256(data).hexdigest(), is_new)


# ----------------------------------------------------------------------------- checking


def check_for_update(current_version: str = __version__, *, source: UpdateSource | None = None,
                     include_prereleases: bool = False, trust_fingerprint: str | None = None,
                     confirm: trust.Confirm | None = None, timeout: float = DEFAULT_TIMEOUT,
                     now: datetime | None = None, platform: str | None = None, remember: bool = True) -> UpdateCheck:
    """Ask the feed whether a version newer than ``current_version`` is out, and remember the answer.

    Args:
        current_version: this app's version (``1.10.0`` is newer than ``1.9.0``).
        source: the feed (default: the catalog's, see :func:`default_source`).
        include_prereleases: consider ``-rc``/``-beta``/… versions too (ignored by default).
        trust_fingerprint: trust the key with this fingerprint on first use (no question).
        confirm: asks the user about a key seen for the first time; None refuses it.
        timeout: seconds for each connect and read; the whole check gets three times this, at most the small
            files' total deadline (:func:`~app.release.fetcher.small_file_deadline`, 30 s).
        now: the time of the check (tests pass a fixed clock).
        platform: the download to point at (default: this machine's, e.g. ``linux-x86_64``).
        remember: save the result and time in the update state (the once-a-day rule reads it).

    Returns:
        An :class:`UpdateCheck`: ``available``, ``up_to_date``, ``unverified`` (never shown as an update)
        or ``unreachable``.
    """
    source = source or default_source()
    checked_at = _aware(now or datetime.now(UTC))
    current = parse_app_version(current_version, "this app's version")
    base = UpdateCheck("up_to_date", current.text, checked_at, source.url,
                       warning=_load_floors()[1])  # a damaged floor is set aside here, and said with the result
    verified: VerifiedFeed | None = None
    try:
        verified = fetch_feed(source, trust_fingerprint=trust_fingerprint, confirm=confirm, timeout=timeout)
    except VerificationError as exc:
        result = replace(base, status="unverified", message=exc.message, advice=exc.advice)
    except DownloadError as exc:
        result = replace(base, status="unreachable", message=exc.message, advice=exc.advice)
    else:
        result = _compare(base, verified, current, include_prereleases, platform or current_platform(), source)
    if remember:
        _remember(result, verified, source.repo)
    return result


def _compare(base: UpdateCheck, verified: VerifiedFeed, current: AppVersion, include_prereleases: bool,
             platform: str, source: UpdateSource) -> UpdateCheck:
    latest = verified.feed.latest(include_prereleases=include_prereleases)
    result = replace(base, fingerprint=verified.fingerprint,
                     latest_version=latest.version.text if latest else None)
    if latest is None or latest.version <= current:
        return result
    download = latest.download_for(platform)
    return replace(result, status="available", notes=latest.notes, download=download,
                   download_url=source.sibling(download.name) if download else latest.page)


# ----------------------------------------------------------------------------- state and the daily rule


def _state_path() -> Path:
    return paths.config_dir() / STATE_FILE


def _floor_path() -> Path:
    return paths.data_dir() / FLOOR_FILE


def _read_state() -> dict[str, Any]:
    """The saved state; a missing or damaged file reads as empty (it is a cache, rewritten on the next check; a
    damaged one is set aside as ``update-state.json.bad`` with a warning)."""
    return settings_file.load_state(_state_path()) or {}


def _floor_date(entry: object) -> datetime | None:
    """A floor entry's date, or None when the entry is damaged (not an object, no ISO date)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("date"), str) or len(entry["date"]) > 64:
        return None
    try:
        return _aware(datetime.fromisoformat(entry["date"].replace("Z", "+00:00")))
    except ValueError:
        return None


def _read_floors() -> dict[str, Any]:
    return _load_floors()[0]


def _load_floors() -> tuple[dict[str, Any], str]:
    """The date of the last feed verified, per repository (the rollback floor), from the data folder, and a warning
    (empty when all is well). Once, the floor an older version kept in the update state (config folder) moves here.

    A damaged file is never dropped in silence: it is set aside as ``update-floor.json.bad``, the entries that are
    still whole (other repositories') are kept and written back, and the warning says what was lost: until the next
    verified feed, an older replayed one cannot be refused for the damaged repository."""
    path = _floor_path()
    if not os.path.lexists(path):
        if os.path.lexists(path.with_name(FLOOR_FILE + ".bad")):
            return {}, ""
        return _migrate_floors(path), ""
    floors, damage = settings_file.load_floors(path, lambda entry: _floor_date(entry) is not None)
    if not damage:
        return floors, ""
    return floors, (f"The record of the last update information verified: {damage} Until the next verified "
                    "check, an older update feed replayed by a server cannot be refused.")


def _migrate_floors(path: Path) -> dict[str, Any]:
    state = _read_state()
    old = state.pop("feeds", None)
    if not isinstance(old, dict):
        return {}
    migrated = {repo: entry for repo, entry in old.items() if isinstance(entry, dict)
                and isinstance(entry.get("date"), str)}
    with contextlib.suppress(OSError):
        settings_file.write_json(path, migrated)
        settings_file.write_json(_state_path(), state)
    return migrated


def _remember(result: UpdateCheck, verified: VerifiedFeed | None, repo: str) -> None:
    floors = _read_floors()  # first: moves an older version's floor out of the state
    data = _read_state()
    data["last_check"] = result.to_dict()
    data.pop("feeds", None)  # the floor lives in the data folder
    targets: list[tuple[Path, dict[str, Any], str]] = []
    if verified is not None:
        floors[repo] = {"date": _iso(verified.feed.date), "sha256": verified.sha256}
        targets.append((_floor_path(), floors, "data"))
    targets.append((_state_path(), data, "config"))
    for path, body, folder in targets:
        try:
            settings_file.write_json(path, body)
        except OSError as exc:
            raise StorageError(f"Cannot write {path}: {exc.strerror or type(exc).__name__}.",
                               f"Check that the {folder} folder is writable and the disk is not full.") from None


def _check_floor(repo: str, feed: AppFeed) -> None:
    """Refuse a feed signed before the last one verified: a replayed old feed would hide a newer release."""
    seen = _floor_date(_read_floors().get(repo))  # a damaged entry was set aside, and said, by _load_floors
    if seen is None:
        return
    if feed.date < seen:
        raise VerificationError(f"The update information is dated {_iso(feed.date)}, older than the one verified "
                                f"before ({_iso(seen)}).",
                                "A server offering older update information may be hiding a newer release; "
                                "try again later or get FastMTP Chat from its official page.")


def last_check() -> UpdateCheck | None:
    """The result of the last check (by the window or ``update check``), or None before the first."""
    entry = _read_state().get("last_check")
    if not isinstance(entry, dict):
        return None
    try:
        return UpdateCheck.from_dict(entry)
    except (KeyError, TypeError, ValueError):
        return None


def check_due(allowed: bool, now: datetime | None = None) -> bool:
    """Whether the automatic check may run now: the user allowed it and the last check is 24 h old or more.

    A last check in the future (the clock was set back) makes it due, so a wrong clock cannot stop checks.
    """
    if not allowed:
        return False
    last = last_check()
    if last is None:
        return True
    elapsed = _aware(now or datetime.now(UTC)) - last.checked_at
    return elapsed >= CHECK_INTERVAL or elapsed < timedelta(0)


def check_if_due(allowed: bool, current_version: str = __version__, *, now: datetime | None = None,
                 source: UpdateSource | None = None, timeout: float = DEFAULT_TIMEOUT) -> UpdateCheck | None:
    """The automatic check: None (and no network at all) unless :func:`check_due`; never asks about a key."""
    if not check_due(allowed, now):
        return None
    return check_for_update(current_version, source=source, now=now, timeout=timeout, confirm=None)

