"""Verify a model file that has no publisher signature against the hub's own content hash.

Many models on the hub come without a signed manifest. The hub still stores every large file through Git
LFS and reports its sha256 (the LFS object id) and size: ``GET {endpoint}/api/models/{repo}/tree/{revision}/
{folder}`` lists a folder's files, each LFS file with ``{"lfs": {"oid": <sha256>, "size": n}}`` (the same
value the hub sends as ``X-Linked-ETag`` on ``resolve``). A file whose bytes hash to that value is the file
the hub serves for that repository and revision: that is worth showing, but it is **not** a publisher
signature (anyone can upload to a repository of their own), so the state has its own name and words.

The states, everywhere (``verify``, ``models``, the Models page): ``publisher-signed`` (a release verified
through the trust chain), ``hub-hash-matches``, ``hub-hash-mismatch`` (refused), ``unverified`` (a local
file nothing vouches for). Files in the Hugging Face cache name their repository and revision in their path
(``models--org--name/snapshots/<commit>/<file>``); LM Studio keeps ``<publisher>/<repo>/<file>``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urljoin, urlsplit

import httpx

from app import __version__
from app.core import bounded_http, net_failures, netaddr
from app.core.errors import DownloadError, FastMTPError, VerificationError

State = Literal["publisher-signed", "hub-hash-matches", "hub-hash-mismatch", "unverified"]
STATES: tuple[State, ...] = ("publisher-signed", "hub-hash-matches", "hub-hash-mismatch", "unverified")
LABELS: dict[State, str] = {
    "publisher-signed": "publisher-signed",
    "hub-hash-matches": "hub hash matches",
    "hub-hash-mismatch": "hub hash DIFFERS (refused)",
    "unverified": "unverified local file",
}
EXPLANATIONS: dict[State, str] = {
    "publisher-signed": "Every byte checked against a manifest signed with the publisher's trusted key.",
    "hub-hash-matches": "The file's sha256 equals the content hash the hub reports for this file of the repository. "
                        "That proves it is the hub's file, not who made it: there is no publisher signature.",
    "hub-hash-mismatch": "The file's sha256 differs from the content hash the hub reports for it: it is not the "
                         "hub's file (altered, damaged or another version). It is not offered in the chat.",
    "unverified": "Nothing vouches for this file: no publisher signature and no hub hash checked.",
}
HUB_URL = "https://huggingface.co"
_API_MAX_BYTES = 8 << 20  # a tree listing page is a few KiB; a hostile endpoint must not fill the memory
_API_DEADLINE_S = 120.0  # one listing page, however slowly it trickles
_MAX_PAGES = 20


@dataclass(frozen=True)
class HubOrigin:
    """Where a file lives on the hub: repository, revision (branch, tag or commit) and its path in the repo."""

    repo: str
    revision: str
    path_in_repo: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class HubFileInfo:
    """What the hub says about one file: its LFS sha256 and size."""

    sha256: str
    size: int | None


@dataclass(frozen=True)
class HubCheck:
    """The result of :func:`verify_against_hub`: the state and the evidence, JSON-ready with ``to_dict``."""

    state: State
    path: str
    origin: HubOrigin
    endpoint: str
    expected_sha256: str
    actual_sha256: str
    expected_size: int | None
    actual_size: int
    checked: str  # ISO time

    @property
    def label(self) -> str:
        return LABELS[self.state]

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "label": self.label, "explanation": EXPLANATIONS[self.state], "path": self.path,
                "origin": self.origin.to_dict(), "endpoint": self.endpoint, "expected_sha256": self.expected_sha256,
                "actual_sha256": self.actual_sha256, "expected_size": self.expected_size,
                "actual_size": self.actual_size, "checked": self.checked}


def default_endpoint() -> str:
    """The hub the hashes are asked of: ``HF_ENDPOINT`` (huggingface_hub's variable) or huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or HUB_URL).rstrip("/")


def web_origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port (the default one filled in): two URLs with the same are the same origin."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or {"https": 443, "http": 80}.get(scheme)


def token_allowed(url: str) -> bool:
    """Whether the hub token may go to ``url``: the hub's own origin (``HF_ENDPOINT``, else huggingface.co), and
    only over https. Any other endpoint (``--endpoint``, a mirror, a page a hub's answer links to) never sees it."""
    return web_origin(url)[0] == "https" and web_origin(url) == web_origin(default_endpoint())


def origin_from_path(path: Path) -> HubOrigin | None:
    """The hub origin a file's path names: the HF cache (``models--org--name/snapshots/<rev>/<file>``) or LM
    Studio's ``<publisher>/<repo>/<file>`` under a ``models`` folder (revision ``main``); None otherwise."""
    parts = path.absolute().parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 3 < len(parts) and parts[i + 1] == "snapshots":
            repo = part[len("models--"):].replace("--", "/", 1)
            return HubOrigin(repo, parts[i + 2], "/".join(parts[i + 3:]))
    for i, part in enumerate(parts):
        lmstudio = part in (".lmstudio", "lm-studio") and i + 4 < len(parts) and parts[i + 1] == "models"
        if lmstudio and len(parts) == i + 5:
            return HubOrigin(f"{parts[i + 2]}/{parts[i + 3]}", "main", parts[i + 4])
    return None


def cached_blob_sha256(path: Path) -> str | None:
    """In the HF cache a snapshot file links to ``blobs/<sha256>`` for LFS files: the hash it was stored under
    (what the hub announced at download time; a claim, checked against the bytes and the hub like any other)."""
    try:
        name = path.resolve().name
    except OSError:
        return None
    return name if re.fullmatch(r"[0-9a-f]{64}", name) and path.is_symlink() else None


def hub_file_info(origin: HubOrigin, endpoint: str | None = None, token: str | None = None,
                  timeout: float = 30.0) -> HubFileInfo:
    """Ask the hub for the LFS sha256 and size of ``origin``'s file (its folder's tree listing, page by page).

    ``token`` is sent only where :func:`token_allowed` says (the hub's own https origin), and every page must come
    from ``endpoint``'s origin: a ``Link`` to another origin (or from https down to http) is refused.

    Raises:
        DownloadError: the hub cannot be reached or answers with an error (exit code 3).
        VerificationError: the hub lists no such file, or reports no content hash for it (not an LFS file), or a
            next-page link leaves the endpoint's origin.
    """
    base = (endpoint or default_endpoint()).rstrip("/")
    folder = origin.path_in_repo.rpartition("/")[0]
    url: str | None = (f"{base}/api/models/{origin.repo}/tree/{quote(origin.revision, safe='')}"
                       + (f"/{quote(folder)}" if folder else ""))
    headers = {"User-Agent": f"fastmtp-chat/{__version__}", "Accept": "application/json"}
    if token and token_allowed(base):
        headers["Authorization"] = f"Bearer {token}"
    home = web_origin(base)
    pages = 0
    with httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False) as client:
        while url is not None and pages < _MAX_PAGES:
            pages += 1
            if web_origin(url) != home:  # a page elsewhere is not the hub's answer, and never sees the token
                raise VerificationError(f"The hub at {base} sent a next-page link to {url}, which is on another "
                                        "origin; a listing is only read from the hub's own origin.",
                                        "Check the endpoint (`--endpoint`, HF_ENDPOINT); nothing was changed.",
                                        kind="hub-answer-invalid")
            entries, url = _tree_page(client, url, headers, origin)
            for entry in entries:
                if isinstance(entry, dict) and entry.get("path") == origin.path_in_repo:
                    return _info_of(entry, origin)
    raise VerificationError(f"The hub does not list {origin.path_in_repo} in {origin.repo} at revision "
                            f"{origin.revision}.", "Check the repository, the revision and the file's name in "
                            "the repository (`--repo`, `--revision`, `--path-in-repo`).", kind="not-found")


def _tree_page(client: httpx.Client, url: str, headers: dict[str, str],
               origin: HubOrigin) -> tuple[list[Any], str | None]:
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code in (401, 403):
                raise DownloadError(f"The hub refused to list {origin.repo} (HTTP {response.status_code}).",
                                    "The repository may be gated or private: store a token with "
                                    "`python -m app token set` (or set HF_TOKEN).", kind="download-denied")
            if response.status_code == 404:
                raise VerificationError(f"The hub has no repository {origin.repo} at revision {origin.revision} "
                                        f"(HTTP 404 for {url}).", "Check the repository name and the revision.",
                                        kind="not-found")
            if response.status_code != 200:
                raise DownloadError(f"The hub answered HTTP {response.status_code} for {url}.",
                                    "Try again later; the file's state stays as it was.", kind="hub-http-error")
            body = _read_listing(response, url)
            link = response.headers.get("link", "")
    except httpx.HTTPError as exc:
        failure = net_failures.describe(exc, url)  # in words, from the one place
        raise DownloadError(f"The hub could not be read: {net_failures.lower_first(failure.sentence())}",
                            f"{net_failures.advice([failure])} Then verify again.", kind="download-network") from exc
    try:
        entries = bounded_http.loads(body)
    except ValueError as exc:
        raise VerificationError(f"The hub's answer for {url} is not JSON"
                                + (f" ({exc})." if isinstance(exc, bounded_http.TooDeep) else "."),
                                "Check the endpoint.", kind="hub-answer-invalid") from None
    if not isinstance(entries, list):
        raise VerificationError(f"The hub's answer for {url} is not a file listing.", "Check the endpoint.",
                                kind="hub-answer-invalid")
    following = re.search(r'<([^>]+)>\s*;\s*rel="next"', link)
    return entries, urljoin(url, following.group(1)) if following else None


def _read_listing(response: httpx.Response, url: str) -> bytes:
    """One listing page through the bounded reader: at most 8 MiB, within the listing deadline."""
    reader = bounded_http.BoundedRead(f"The hub's listing at {url}", max_body=_API_MAX_BYTES,
                                      deadline_at=bounded_http.deadline_in(_API_DEADLINE_S),
                                      advice="Check the endpoint; nothing was changed.")
    try:
        return reader.body(response)
    except bounded_http.TooSlow as exc:
        raise DownloadError(exc.message, "Try again later; the file's state stays as it was.", kind=exc.kind) from None
    except bounded_http.ReadLimitError as exc:
        raise VerificationError(exc.message, exc.advice, kind=exc.kind) from None
    finally:
        reader.finish()


def _info_of(entry: dict[str, Any], origin: HubOrigin) -> HubFileInfo:
    lfs = entry.get("lfs")
    oid = lfs.get("oid") if isinstance(lfs, dict) else None
    if not isinstance(oid, str) or not re.fullmatch(r"(sha256:)?[0-9a-f]{64}", oid):
        raise VerificationError(f"The hub reports no content hash (LFS sha256) for {origin.path_in_repo} in "
                                f"{origin.repo}: it is not stored through LFS.",
                                "Model files always are; check that this is the right file.", kind="no-lfs-hash")
    size = lfs.get("size") if isinstance(lfs, dict) else None
    return HubFileInfo(oid.removeprefix("sha256:"), size if isinstance(size, int) else None)


def sha256_with_progress(path: Path, on_bytes: Callable[[int, int], None] | None = None) -> str:
    """The file's sha256; ``on_bytes(done, total)`` after each MiB read (it may raise to stop)."""
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            done += len(chunk)
            if on_bytes is not None:
                on_bytes(done, total)
    return digest.hexdigest()


def _readable_size(path: Path) -> int:
    from app.core.regular_files import open_regular

    try:
        handle, size = open_regular(path)  # a pipe or a device is refused, not waited on
        handle.close()
        return size
    except OSError as exc:
        raise FastMTPError(f"{path} cannot be read: {exc.strerror or type(exc).__name__}.",
                           "Check the file's permissions (and those of its folders).", kind="unreadable-file") from None


def verify_against_hub(path: Path, origin: HubOrigin, endpoint: str | None = None, token: str | None = None,
                       on_bytes: Callable[[int, int], None] | None = None) -> HubCheck:
    """Compare ``path`` with the hub's LFS sha256 and size for ``origin``: ``hub-hash-matches`` or
    ``hub-hash-mismatch`` (returned, not raised, so the state can be recorded; the CLI exits 4 on it).

    The size is compared first (no hashing of a file that cannot match).

    Raises:
        DownloadError, VerificationError: the hub could not say (see :func:`hub_file_info`).
    """
    base = (endpoint or default_endpoint()).rstrip("/")
    try:  # the one URL parser: a port outside 1..65535 or a malformed host is refused before anything is asked
        netaddr.web_url(base)
    except netaddr.BadUrl as exc:
        raise FastMTPError(f"The hub address {base[:200]!r} is not a usable http(s) URL: {exc}.",
                           "Give one like https://huggingface.co (--endpoint or HF_ENDPOINT).",
                           kind="bad-usage") from None
    size = _readable_size(path)  # before asking the hub: a file that cannot be read is said so at once
    info = hub_file_info(origin, base, token)
    actual = "" if info.size is not None and info.size != size else sha256_with_progress(path, on_bytes)
    state: State = "hub-hash-matches" if actual == info.sha256 else "hub-hash-mismatch"
    return HubCheck(state=state, path=str(path), origin=origin, endpoint=base, expected_sha256=info.sha256,
                    actual_sha256=actual, expected_size=info.size, actual_size=size,
                    checked=datetime.now(UTC).isoformat(timespec="seconds"))
