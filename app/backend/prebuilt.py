"""Install a prebuilt backend from a signed archive, a file or a URL (``python -m app backend install``).

It reads top-down, and every step must pass before the next: the signed manifest's signature with a
trusted key (the same trust chain as model releases); the archive's size and sha256 (from a URL it is
only downloaded once the signature vouches for them, resumable like a model file); the backend
inside, unpacked into a staging folder, must be the one the manifest describes; the self-test, run
on the staged copy. Only then is it moved into place and made active. Any failure leaves the
installed backends and the active one as they were.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from app.backend import archive, registry
from app.backend import signing as backend_signing
from app.backend.events import BuildEvent, EventKind, EventSink
from app.backend.signing import BackendClaim, VerifiedClaim
from app.core import paths
from app.core.cancel import CancelToken
from app.core.errors import BackendError, BuildCancelled, DownloadError
from app.core.safe_paths import check_name
from app.core.units import format_bytes
from app.release import trust
from app.release.catalog import check_url
from app.release.fetcher import DownloadCancelled, FetchControl, FetchedFile, FetchEvent, FileRequest, fetch_files
from app.release.verify import INTEGRITY_MAX_BYTES

STEP = "install"


@dataclass(frozen=True)
class InstalledPrebuilt:
    """A prebuilt backend that passed every check and its self-test here, and now sits with the others."""

    manifest: registry.BackendManifest
    folder: Path
    origin: archive.Origin
    active: bool

    @property
    def publisher_signed(self) -> bool:
        return self.origin.key_source == "shipped"

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.manifest.id, "folder": str(self.folder), "flavor": self.manifest.flavor,
                "cuda_archs": self.manifest.cuda_archs, "active": self.active, "origin": self.origin.to_dict(),
                "signed_by": self.origin.fingerprint, "publisher_signed": self.publisher_signed,
                "selftest": self.manifest.selftest,
                "server": str(archive.installed_server(self.folder) or "") or None}


def is_url(source: str | Path) -> bool:
    return isinstance(source, str) and source.lower().startswith(("http://", "https://"))


def _sibling_url(url: str, suffix: str) -> str:
    """The URL of ``<archive>`` + ``suffix``: the signed manifest and its signature sit beside the archive."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path + suffix))


class Events:
    """The install's progress as build events, so the CLI's printer and the Backend page show it as a build."""

    def __init__(self, sink: EventSink | None) -> None:
        self.sink = sink or (lambda _event: None)

    def emit(self, kind: EventKind, message: str, percent: float | None = None) -> None:
        self.sink(BuildEvent(kind, message, percent, STEP))

    def download(self, event: FetchEvent) -> None:
        if event.kind == "progress" and event.file and event.bytes_total:
            fraction = event.bytes_done / event.bytes_total
            self.emit("progress", f"Downloading {event.file}: {format_bytes(event.bytes_done)} of "
                                  f"{format_bytes(event.bytes_total)}", round(10 + 55 * fraction, 1))
        elif event.kind in ("retry", "error") and event.message:
            self.emit("log", f"{event.file}: {event.message}")


def install_prebuilt(source: str | Path, *, repo: str | None = None, trust_fingerprint: str | None = None,
                     confirm: trust.Confirm | None = None, activate: bool = True, on_event: EventSink | None = None,
                     cancel: CancelToken | None = None,
                     check_claim: Callable[[BackendClaim], None] | None = None) -> InstalledPrebuilt:
    """Check, self-test, install and (unless told not to) activate the prebuilt backend at ``source``.

    ``source`` is a path or an http(s) URL of a ``.tar.xz`` with ``<name>.manifest.json`` and its ``.sig``
    beside it. ``confirm`` answers the first-use question about an unknown key (None refuses it).
    ``check_claim`` sees the verified claim before the archive is downloaded or read (the backend feed checks
    that it names the bytes the feed lists); it raises to refuse.

    Raises:
        VerificationError: the signature, the key (:class:`TrustError`), the size, the sha256 or the
            backend inside does not check out; nothing was installed. :class:`UnsafeInputError` (one of them): the
            id is not a plain name, or the archive would write outside its folder or unpack to more than signed.
        DownloadError: the URL could not be fetched. BuildCancelled: ``cancel`` was triggered.
        BackendError: the archive cannot be unpacked, or the backend failed its self-test here.
    """
    events = Events(on_event)
    cancel = cancel or CancelToken()
    registry.cleanup_stale_staging()
    if is_url(source):
        verified, path, known = _from_url(str(source), repo, trust_fingerprint, confirm, events, cancel,
                                          check_claim)
    else:
        path = Path(source)
        events.emit("step", f"checking the signature of {path.name}", 2)
        verified = backend_signing.verify_claim(
            path.with_name(backend_signing.manifest_name(path.name)),
            path.with_name(backend_signing.signature_name(path.name)),
            repo=repo, trust_fingerprint=trust_fingerprint, confirm=confirm)
        if check_claim is not None:
            check_claim(verified.claim)
        known = None
    claim = verified.claim
    events.emit("step", f"signed by {verified.fingerprint} ({_trust_words(verified)}); checking the archive's "
                        "size and sha256", 68)
    backend_signing.check_archive(claim, path, known)
    _check_cancel(cancel)
    events.emit("step", "unpacking into a staging folder", 72)
    with archive.staged(path, claim.unpack_limits()) as staged:
        backend_signing.check_backend_matches(claim, registry.BackendManifest.read(staged).to_dict(), path.name)
        backend_signing.pin_if_new(verified)
        manifest = _selftest(staged, events, cancel)
        origin = archive.Origin("signed", claim.archive, claim.sha256, claim.repo, verified.fingerprint,
                                verified.key_source, archive.now_text())
        events.emit("step", f"moving {manifest.id} into place", 97)
        archive.place(staged, origin)
    if activate:
        registry.set_active(manifest.id, allow_unpatched=not manifest.patched)
    folder = registry.backend_dir(manifest.id)
    state = "and made active" if activate else "(the active backend is unchanged)"
    events.emit("done", f"Prebuilt backend {manifest.id} installed {state}: {origin.describe()}; "
                        "self-test passed here.", 100)
    return InstalledPrebuilt(manifest, folder, origin, activate)


def _trust_words(verified: VerifiedClaim) -> str:
    return {"shipped": "the publisher key shipped with the app", "new": "a key you trusted just now"}.get(
        verified.key_source, "a key you trusted before")


def _check_cancel(cancel: CancelToken) -> None:
    if cancel.cancelled:
        raise BuildCancelled("The install was cancelled; nothing was installed.",
                             "Install it again when you want it; a download resumes where it stopped.")


def _selftest(staged: Path, events: Events, cancel: CancelToken) -> registry.BackendManifest:
    """Self-test the staged copy in a child process; its result replaces the build machine's in the manifest."""
    from app.backend.builder import Reporter, run_selftest_subprocess

    manifest = registry.BackendManifest.read(staged)
    events.emit("step", f"self-testing {manifest.id} on this machine", 80)
    reporter = Reporter(events.sink)
    reporter.step = STEP
    result = run_selftest_subprocess(staged, reporter, cancel)
    if not result.get("ok"):
        raise BackendError(f"The prebuilt backend {manifest.id} failed its self-test on this machine: "
                           f"{result.get('error', 'no result')}.",
                           "Nothing was installed and the active backend is unchanged. A CUDA backend needs an "
                           "NVIDIA GPU and driver here; otherwise build one with `python -m app backend build`.",
                           kind="selftest-failed")
    manifest = replace(manifest, selftest=dict(result))
    manifest.write(staged)
    return manifest


def _from_url(url: str, repo: str | None, trust_fingerprint: str | None, confirm: trust.Confirm | None,
              events: Events, cancel: CancelToken, check_claim: Callable[[BackendClaim], None] | None = None,
              ) -> tuple[VerifiedClaim, Path, str | None]:
    """Fetch the signed manifest and its signature (capped, afresh), check them, then fetch the archive with the
    size and sha256 they vouch for into ``<data>/downloads/backends/`` (a ``.part`` there is resumed)."""
    check_url(url)  # the one URL parser: a port outside 1..65535 or a malformed host, in words (exit 2)
    staging = paths.ensure_dir(paths.data_dir() / "downloads" / "backends", "downloads")
    integrity = staging / f"integrity-{os.getpid()}"
    name = check_name(Path(urlsplit(url).path).name or "backend.tar.xz", "archive name", url, archive.REFUSED_ADVICE)
    manifest_name, signature_name = backend_signing.manifest_name(name), backend_signing.signature_name(name)
    control = FetchControl()
    cancel.set_kill(control.cancel)
    try:
        events.emit("step", f"downloading the signed manifest of {name}", 2)
        shutil.rmtree(integrity, ignore_errors=True)
        requests = [FileRequest(n, [_sibling_url(url, n[len(name):])], max_size=INTEGRITY_MAX_BYTES)
                    for n in (manifest_name, signature_name)]
        fetch_checked(requests, integrity, control, events, cancel)
        events.emit("step", "checking the signature and the publisher key", 6)
        verified = backend_signing.verify_claim(integrity / manifest_name, integrity / signature_name, repo=repo,
                                                trust_fingerprint=trust_fingerprint, confirm=confirm)
        claim: BackendClaim = verified.claim
        if check_claim is not None:
            check_claim(claim)
        events.emit("step", f"downloading {claim.archive} ({format_bytes(claim.size)})", 10)
        fetched = fetch_checked([FileRequest(claim.archive, [url], claim.size, claim.sha256)], staging, control,
                                events, cancel)
    finally:
        cancel.set_kill(None)
        shutil.rmtree(integrity, ignore_errors=True)
    got = fetched[claim.archive]
    return verified, got.path, got.sha256


def fetch_checked(requests: list[FileRequest], folder: Path, control: FetchControl, events: Events,
           cancel: CancelToken) -> dict[str, FetchedFile]:
    """``fetch_files``; a cancel from ``cancel`` ends as :class:`BuildCancelled`, like a cancelled build."""
    try:
        return fetch_files(requests, folder, max_workers=2, on_event=events.download, control=control)
    except DownloadCancelled as exc:
        _check_cancel(cancel)
        raise DownloadError(exc.message, exc.advice, kind=exc.kind) from exc
