"""The app-release feed: one signed JSON file naming the FastMTP Chat versions there are and their downloads.

The feed is signed like a model release's manifest (a detached Ed25519 signature over its exact bytes,
``<feed>.sig``, the key next to it) so the same trust chain vouches for it. This module is the format:
versions and how they compare, parsing (lenient about nothing: we write these files ourselves), and the
publisher's side that writes and signs one (``python -m app update sign``). ``docs/app-updates.md`` is
its written form; :mod:`app.release.updates` fetches and checks it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from app.core.errors import FastMTPError, VerificationError
from app.core.hashing import sha256_file
from app.core.platforms import current_platform as current_platform  # how the feed names a download
from app.release import signing
from app.release.manifest import check_file_name, normalize_sha256, parse_time

FEED_FORMAT = "fastmtp-chat-release/1"
FEED_NAME = "fastmtp-chat-release.json"
SIGNATURE_SUFFIX = ".sig"

_VERSION = re.compile(r"v?(\d{1,9}(?:\.\d{1,9}){0,5})(?:[-_.]?(dev|alpha|a|beta|b|rc|c|pre|preview)[-_.]?(\d{0,9}))?",
                      re.IGNORECASE)
_STAGES = {"dev": 0, "alpha": 1, "a": 1, "beta": 2, "b": 2, "rc": 3, "c": 3, "pre": 3, "preview": 3}
_PLATFORM = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
_MALFORMED = "The update information is malformed; it is not used. Report it to the FastMTP Chat publisher."


@dataclass(frozen=True)
class AppVersion:
    """A version like ``1.10.0`` or ``2.0.0-rc.1``: numbers compare as numbers, trailing zeros do not count,
    and a pre-release (dev < alpha < beta < rc) comes before its final release."""

    text: str
    release: tuple[int, ...]
    pre: tuple[int, int] | None = None  # (stage, number); None for a final release

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None

    @property
    def key(self) -> tuple[tuple[int, ...], int, tuple[int, int]]:
        trimmed = list(self.release)
        while len(trimmed) > 1 and trimmed[-1] == 0:
            trimmed.pop()
        return tuple(trimmed), int(self.pre is None), self.pre or (0, 0)

    def __lt__(self, other: AppVersion) -> bool:
        return self.key < other.key

    def __le__(self, other: AppVersion) -> bool:
        return self.key <= other.key

    def __gt__(self, other: AppVersion) -> bool:
        return self.key > other.key

    def __ge__(self, other: AppVersion) -> bool:
        return self.key >= other.key

    def same(self, other: AppVersion) -> bool:
        """Equal as versions (``1.2`` and ``1.2.0``), whatever their text."""
        return self.key == other.key


def parse_app_version(value: object, source: str = "version") -> AppVersion:
    """``1.2.3``, ``v1.2``, ``2.0.0-rc.1``, ``2.0.0rc1``, ``1.0.0.dev2``; anything else is refused."""
    match = _VERSION.fullmatch(value.strip()) if isinstance(value, str) and len(value) <= 64 else None
    if match is None:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:40] + "…"
        raise VerificationError(f"{source}: {shown} is not a version like 1.2.0 or 1.3.0-rc.1.", _MALFORMED)
    release = tuple(int(part) for part in match.group(1).split("."))
    stage = match.group(2)
    pre = (_STAGES[stage.lower()], int(match.group(3) or 0)) if stage else None
    return AppVersion(value.strip() if isinstance(value, str) else str(value), release, pre)


@dataclass(frozen=True)
class AppDownload:
    """One platform's file of a release, named relative to the feed's own URL."""

    platform: str
    name: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, "name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class AppRelease:
    version: AppVersion
    date: str
    notes: str
    downloads: tuple[AppDownload, ...]
    page: str | None = None

    def download_for(self, platform: str) -> AppDownload | None:
        return next((d for d in self.downloads if d.platform == platform), None)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": self.version.text, "date": self.date, "notes": self.notes}
        if self.page is not None:
            data["page"] = self.page
        data["downloads"] = [d.to_dict() for d in self.downloads]
        return data


@dataclass(frozen=True)
class AppFeed:
    repo: str
    date: datetime  # when the feed was signed: a later feed is never older (the rollback floor)
    releases: tuple[AppRelease, ...]
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    def latest(self, *, include_prereleases: bool = False) -> AppRelease | None:
        """The highest version, pre-releases only when asked for."""
        wanted = [r for r in self.releases if include_prereleases or not r.version.is_prerelease]
        return max(wanted, key=lambda r: r.version.key, default=None)


def _text(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise VerificationError(f"{where} has no {key} text.", _MALFORMED)
    return value


def _page(value: str | None, where: str) -> str | None:
    if value is not None and (urlsplit(value).scheme not in ("https", "http") or not urlsplit(value).netloc):
        raise VerificationError(f"{where}: the page {value[:80]!r} is not an http(s) URL.", _MALFORMED)
    return value


def _download(item: object, where: str) -> AppDownload:
    if not isinstance(item, dict):
        raise VerificationError(f"{where}: a download is a JSON {type(item).__name__}, expected an object.",
                                _MALFORMED)
    platform = _text(item, "platform", where) or ""
    if not _PLATFORM.fullmatch(platform):
        raise VerificationError(f"{where}: {platform[:60]!r} is not a platform name like linux-x86_64.", _MALFORMED)
    name = check_file_name(item.get("name"), where)
    size = item.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise VerificationError(f"{where}: the size of {name} is {size!r}, expected a whole number of bytes.",
                                _MALFORMED)
    return AppDownload(platform, name, size, normalize_sha256(item.get("sha256"), where, name))


def _release(item: object, source: str) -> AppRelease:
    if not isinstance(item, dict):
        raise VerificationError(f"{source}: a release is a JSON {type(item).__name__}, expected an object.",
                                _MALFORMED)
    version = parse_app_version(item.get("version"), f"{source}: a release's version")
    where = f"{source}, release {version.text}"
    date = _text(item, "date", where) or ""
    parse_time(date, where, "the date")
    downloads = item.get("downloads", [])
    if not isinstance(downloads, list):
        raise VerificationError(f"{where}: downloads is not a list.", _MALFORMED)
    parsed = tuple(_download(d, where) for d in downloads)
    platforms = [d.platform for d in parsed]
    if len(set(platforms)) != len(platforms):
        raise VerificationError(f"{where} lists a platform twice.", _MALFORMED)
    return AppRelease(version, date, _text(item, "notes", where, required=False) or "", parsed,
                      _page(_text(item, "page", where, required=False), where))


def parse_feed(data: bytes, source: str = FEED_NAME) -> AppFeed:
    """The feed's bytes (signature already checked by the caller) as an :class:`AppFeed`."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise VerificationError(f"{source} nests its JSON too deeply.", _MALFORMED) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerificationError(f"{source} is not valid JSON: {exc}.", _MALFORMED) from exc
    if not isinstance(obj, dict):
        raise VerificationError(f"{source} holds a JSON {type(obj).__name__}, expected an object.", _MALFORMED)
    if obj.get("format") != FEED_FORMAT:
        raise VerificationError(f"{source} is not a FastMTP Chat release feed (format {obj.get('format')!r}, "
                                f"expected {FEED_FORMAT!r}).", _MALFORMED)
    repo = _text(obj, "repo", source) or ""
    date = parse_time(_text(obj, "date", source), source, "the date")
    releases = obj.get("releases")
    if not isinstance(releases, list) or not releases:
        raise VerificationError(f"{source} lists no releases.", _MALFORMED)
    parsed = tuple(_release(r, source) for r in releases)
    keys = [r.version.key for r in parsed]
    if len(set(keys)) != len(keys):
        raise VerificationError(f"{source} lists a version twice.", _MALFORMED)
    return AppFeed(repo, date, parsed, obj)


# ----------------------------------------------------------------------------- the publisher's side


@dataclass(frozen=True)
class SignedFeed:
    folder: Path
    feed: AppFeed
    fingerprint: str
    files: tuple[Path, ...]  # what was written: the feed, its signature, the public key

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "repo": self.feed.repo, "fingerprint": self.fingerprint,
                "releases": [r.to_dict() for r in self.feed.releases], "written": [str(p) for p in self.files]}


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _previous(out: Path, key: Ed25519PublicKey, repo: str) -> list[dict[str, Any]]:
    """The releases of the feed already in ``out``, kept only when our own key signed it for the same repo."""
    feed_path = out / FEED_NAME
    if not feed_path.exists():
        return []
    sig_path = out / (FEED_NAME + SIGNATURE_SUFFIX)
    advice = f"Remove {feed_path} to start a new feed, or sign with the key that signed it."
    try:
        data, signature = feed_path.read_bytes(), sig_path.read_bytes()
        signing.verify(key, data, signing.decode_signature(signature, sig_path.name), FEED_NAME)
        feed = parse_feed(data, str(feed_path))
    except (OSError, VerificationError) as exc:
        raise FastMTPError(f"{feed_path} is there but does not verify with this key, so its releases are not "
                           f"carried over: {exc}", advice) from exc
    if feed.repo != repo:
        raise FastMTPError(f"{feed_path} is the feed of {feed.repo}, not {repo}.", advice)
    return [r.to_dict() for r in feed.releases]


def sign_feed(out: Path, key_path: Path, *, version: str, notes: str, files: dict[str, Path], repo: str,
              page: str | None = None, public_key_name: str, now: datetime | None = None) -> SignedFeed:
    """Add ``version`` (its notes and one download per platform) to the feed in ``out`` and sign it.

    Releases already in a feed there that our key signed are kept (the same version is replaced), so
    stable and pre-release versions can be announced side by side. The download files are hashed, not
    copied: publish them next to the feed.
    """
    parsed = parse_app_version(version, "--version")
    for platform in files:
        if not _PLATFORM.fullmatch(platform):
            raise FastMTPError(f"{platform!r} is not a platform name.",
                               "Name platforms like linux-x86_64, windows-x86_64, macos-arm64.")
    _page(page, "--page")
    out.mkdir(parents=True, exist_ok=True)
    if key_path.resolve().parent == out.resolve():
        raise FastMTPError(f"The private key {key_path} is inside the feed folder {out}.",
                           "Keep the private key outside the folder you publish.")
    private = signing.load_private_key(key_path)
    public = private.public_key()
    downloads = []
    for platform, path in sorted(files.items()):
        if not path.is_file():
            raise FastMTPError(f"{path} (for {platform}) is not a file.", "Give the built app archive.")
        downloads.append(AppDownload(platform, check_file_name(path.name, "--file"), path.stat().st_size,
                                     sha256_file(path)).to_dict())
    when = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    release: dict[str, Any] = {"version": parsed.text, "date": when, "notes": notes}
    if page is not None:
        release["page"] = page
    release["downloads"] = downloads
    kept = [r for r in _previous(out, public, repo)
            if not parse_app_version(r["version"]).same(parsed)]
    releases = sorted([*kept, release], key=lambda r: parse_app_version(r["version"]).key, reverse=True)
    data = (json.dumps({"format": FEED_FORMAT, "repo": repo, "date": when, "releases": releases}, indent=2)
            + "\n").encode("utf-8")
    feed = parse_feed(data)  # what we write must be what we read
    written = [out / FEED_NAME, out / (FEED_NAME + SIGNATURE_SUFFIX), out / public_key_name]
    _write(written[1], signing.sign(private, data))
    _write(written[0], data)
    _write(written[2], signing.public_key_pem(public))
    return SignedFeed(out, feed, signing.fingerprint(public), tuple(written))
