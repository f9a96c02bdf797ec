"""Fetch one quantization of the release: integrity files first, trust and signatures, then the models.

The order is the point: gigabytes are only requested once a trusted signature vouches for their
names, sizes and hashes, and they land in a staging folder under the data dir. Nothing reaches the
models folder before :mod:`app.release.install` moves it there after every check passed.

The integrity files come first and nothing vouches for them yet, so each is capped
(:data:`~app.release.verify.INTEGRITY_MAX_BYTES`) and a failed or cancelled integrity phase leaves none of
them behind. The one ``FetchControl`` pauses and cancels every phase.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from app.core import paths
from app.core.errors import DownloadError, VerificationError
from app.release import part_state, trust
from app.release.catalog import Catalog, Endpoint, load_catalog, repo_slug
from app.release.fetcher import (
    DownloadCancelled,
    FetchControl,
    FetchEvent,
    FileRequest,
    NetworkDownloadError,
    bytes_to_fetch,
    fetch_files,
    small_file_deadline,
)
from app.release.install import Installed, install
from app.release.verify import INTEGRITY_MAX_BYTES, ReleaseMetadata, verify_file, verify_metadata

OnStep = Callable[[str], None]
# "Download this much into this folder (this much free there)?": bytes still to fetch, the destination folder, the
# free bytes on its disk; False declines and nothing is requested. Asked only from BIG_DOWNLOAD_BYTES up.
ConfirmSize = Callable[[int, Path, int], bool]
BIG_DOWNLOAD_BYTES = 1 << 30  # 1 GiB: below it a download just starts (the signed manifest's sizes decide)
# Advice in words that suit the terminal and the window alike (the Models page still puts them in its own)
PICK_QUANT_ADVICE = "Pick another quantization: the release's signed manifest lists the ones it has."
START_OVER_ADVICE = "Start the download again: it starts over."
KEPT_ADVICE = "Start the download again: model files already downloaded are kept and resumed."


class DownloadDeclined(DownloadCancelled):
    """The size question was answered no (or could not be asked): no model file was requested."""

    kind = "download-declined"
    exit_code = 1


@dataclass(frozen=True)
class FetchPlan:
    quant: str
    repo: str
    revision: str
    endpoints: list[Endpoint]
    dest: Path  # where the verified files are installed (the caller decides: the models folder, or --dest)
    trust_fingerprint: str | None = None
    max_workers: int = 3


def staging_dir(repo: str) -> Path:
    """``<data>/downloads/<owner>--<name>/``: unverified bytes live here and nowhere else."""
    path = paths.data_dir() / "downloads" / repo_slug(repo)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _urls(plan: FetchPlan, name: str) -> list[str]:
    return [e.file_url(plan.repo, plan.revision, name) for e in plan.endpoints]


def token_hosts(plan: FetchPlan) -> list[str]:
    """The hosts the hub token may go to: the hub's own, never a mirror's."""
    return sorted({urlsplit(e.url).hostname or "" for e in plan.endpoints if e.is_hub} - {""})


def pick_payload(meta: ReleaseMetadata, catalog: Catalog, quant: str) -> list[str]:
    """The quantization's file, the sidecar and the patch, as the signed manifest names them.

    The catalog's names are tried first; when the publisher named a file differently, the one manifest
    entry whose name carries the quantization tag (or ``FastMTP`` for the sidecar) is taken.
    """
    names = list(meta.manifest.files)
    ggufs = [n for n in names if n.lower().endswith(".gguf")]

    def find(expected: str, tag: str, what: str, exclude: str | None = None) -> str:
        if expected in meta.manifest.files:
            return expected
        hits = [n for n in ggufs if tag.lower() in n.lower() and n != exclude]
        if len(hits) == 1:
            return hits[0]
        raise VerificationError(f"The signed manifest {meta.manifest.source} has no {what} "
                                f"(expected {expected}; found {', '.join(ggufs) or 'no GGUF files'}).",
                                PICK_QUANT_ADVICE, kind="quant-missing")

    sidecar = find(catalog.sidecar.file, "FastMTP", "FastMTP sidecar")
    model = find(catalog.quant(quant).file, quant, f"{quant} model file", exclude=sidecar)
    chosen = [model, sidecar]
    if catalog.integrity.patch in meta.manifest.files:
        chosen.append(catalog.integrity.patch)
    return chosen


def _integrity_request(plan: FetchPlan, name: str) -> FileRequest:
    return FileRequest(name, _urls(plan, name), max_size=INTEGRITY_MAX_BYTES)


def _control_events(on_event: Callable[[FetchEvent], None] | None) -> Callable[[FetchEvent], None] | None:
    """Of the integrity phase's events, only pause and resume reach the caller (its rows are the payload's)."""
    if on_event is None:
        return None
    relay = on_event
    return lambda event: relay(event) if event.kind in ("paused", "resumed") else None


def _fetch_first(plan: FetchPlan, names: list[str], folder: Path, token: str | None,
                 control: FetchControl | None, on_event: Callable[[FetchEvent], None] | None,
                 deadline_at: float) -> str | None:
    """Try the variants of one integrity file (``X.sig``, ``X.sig.b64``) in order; None when none exists. A server
    too slow for the integrity files' shared deadline (``deadline_at``) ends it all, in its own words."""
    for name in names:
        try:
            fetch_files([_integrity_request(plan, name)], folder, token=token, max_workers=1,
                        token_hosts=token_hosts(plan), control=control, on_event=on_event,
                        deadline=_left(deadline_at))
            return name
        except DownloadCancelled:
            raise
        except NetworkDownloadError as exc:
            if exc.cause == "too-slow":
                raise
            _remove_partial(folder, name)
            (folder / name).unlink(missing_ok=True)
        except DownloadError:
            _remove_partial(folder, name)
            (folder / name).unlink(missing_ok=True)
    return None


def _remove_partial(folder: Path, name: str) -> None:
    part = folder / f"{name}.part"
    part.unlink(missing_ok=True)
    part_state.remove(part_state.state_path(part))


def _left(deadline_at: float) -> float:
    """Seconds left of a shared deadline (a little at least, so the last call still says "too slow" in words)."""
    return max(0.05, deadline_at - time.monotonic())


def fetch_integrity(plan: FetchPlan, folder: Path, token: str | None, *, control: FetchControl | None = None,
                    on_event: Callable[[FetchEvent], None] | None = None) -> None:
    """Download the small integrity files afresh into ``folder`` (never resumed from an older run).

    Each is capped at :data:`INTEGRITY_MAX_BYTES` (a larger one is a :class:`VerificationError`), and all of them
    together have one total deadline (:func:`~app.release.fetcher.small_file_deadline`). When this fails or is
    cancelled, ``folder`` is removed: no partial integrity file stays behind.
    """
    integ = load_catalog().integrity
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    relay = _control_events(on_event)
    deadline_at = time.monotonic() + small_file_deadline()
    try:
        required = [integ.checksums, integ.manifest, integ.provenance]
        fetch_files([_integrity_request(plan, n) for n in required], folder, token=token,
                    max_workers=plan.max_workers, token_hosts=token_hosts(plan), control=control, on_event=relay,
                    deadline=_left(deadline_at))
        for signed in (integ.manifest, integ.provenance):
            names = integ.signature_names(signed)
            if _fetch_first(plan, names, folder, token, control, relay, deadline_at) is None:
                raise DownloadError(f"The signature of {signed} could not be fetched (tried {', '.join(names)}).",
                                    "Check the mirror; a release without signatures is never used.",
                                    kind="signature-unavailable")
        _fetch_first(plan, [integ.public_key], folder, token, control, relay, deadline_at)  # optional when pinned
    except DownloadCancelled as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise DownloadCancelled("Download cancelled while fetching the integrity files; no partial file was kept.",
                                START_OVER_ADVICE, kind="download-cancelled-start-over") from exc
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _checkpoint(control: FetchControl | None, where: str) -> None:
    """Between two phases: wait out a pause, stop when cancelled."""
    if control is None:
        return
    control.wait_while_paused()
    if control.cancelled:
        raise DownloadCancelled(f"Download cancelled {where}; nothing was installed.",
                                KEPT_ADVICE, kind="download-cancelled-kept")


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk ``folder`` will be on (its nearest existing parent: it may not exist yet)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return shutil.disk_usage(Path.cwd()).free


def _confirm_size(plan: FetchPlan, requests: list[FileRequest], files_dir: Path, control: FetchControl | None,
                  confirm_size: ConfirmSize | None) -> None:
    """Ask before a big download, with the signed manifest's real sizes minus what is already kept; a no stops
    here, before any model file is requested."""
    needed = bytes_to_fetch(requests, files_dir)
    if confirm_size is None or needed < BIG_DOWNLOAD_BYTES:
        return
    if confirm_size(needed, plan.dest, free_bytes(plan.dest)):
        return
    _checkpoint(control, "before any model file was requested")  # a Cancel while asking stays a cancel
    raise DownloadDeclined(f"The download of {plan.quant} was declined. Nothing was downloaded.",
                           "Start the download again when you want it.", kind="download-declined")


def fetch_release(plan: FetchPlan, *, token: str | None = None, on_event: Callable[[FetchEvent], None] | None = None,
                  on_step: OnStep | None = None, on_warning: OnStep | None = None,
                  control: FetchControl | None = None, confirm: trust.Confirm | None = None,
                  confirm_size: ConfirmSize | None = None) -> Installed:
    """Download, verify and install one quantization with its sidecar and patch; returns what was installed.

    ``on_warning`` gets the verified release's warnings (by default they are steps, ``warning: …``).
    ``confirm_size`` is asked once the signed manifest verified, when the bytes still to fetch reach
    :data:`BIG_DOWNLOAD_BYTES`; declining raises :class:`DownloadDeclined` with nothing requested.
    Raises :class:`DownloadError` (network), :class:`VerificationError` / :class:`TrustError` (checks);
    after either, the models folder is as it was.
    """
    step = on_step or (lambda _message: None)
    warn = on_warning or (lambda message: step("warning: " + message))
    catalog = load_catalog()
    catalog.quant(plan.quant)  # a usage error before any network
    staging = staging_dir(plan.repo)
    token = token if token_hosts(plan) else None  # a mirror never sees the hub token

    step("fetching the integrity files")
    meta_dir = staging / "integrity"
    fetch_integrity(plan, meta_dir, token, control=control, on_event=on_event)
    _checkpoint(control, "after the integrity files")
    step("checking signatures and the publisher key")
    meta = verify_metadata(meta_dir, repo=plan.repo, trust_fingerprint=plan.trust_fingerprint, confirm=confirm)
    for warning in meta.warnings:
        warn(warning)
    _checkpoint(control, "after the signatures checked out")

    names = pick_payload(meta, catalog, plan.quant)
    files_dir = staging / "files"
    requests = [FileRequest(n, _urls(plan, n), meta.entry(n).size, meta.entry(n).sha256) for n in names]
    _confirm_size(plan, requests, files_dir, control, confirm_size)
    step(f"fetching {', '.join(names)}")
    fetched = fetch_files(requests, files_dir, token=token, max_workers=plan.max_workers, on_event=on_event,
                          control=control, token_hosts=token_hosts(plan))

    step("checking every file against the signed manifest")
    verified = {}
    for name in names:
        path = fetched[name].path if name in fetched else files_dir / name
        try:
            verify_file(meta, name, path, fetched[name].sha256 if name in fetched else None)
        except VerificationError:
            path.unlink(missing_ok=True)  # never resume from bytes that failed their check
            raise
        verified[name] = path
    _checkpoint(control, "before the verified files were moved into place")
    step("moving the verified files into place")
    return install(meta, verified, plan.dest)
