"""Signed releases: ``fetch`` (download, verify, install), ``verify`` (a release folder or one model file),
``trust`` (publisher keys) and ``release keygen|sign|sign-backend`` (the publisher's side)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, ParamSpec, Protocol

from app.cli.common import Subparsers, command, emit, emit_line, for_people, group, trust_prompt
from app.core.errors import FastMTPError, VerificationError

if TYPE_CHECKING:
    from app.release.download import ConfirmSize
    from app.release.fetcher import FetchControl, FetchEvent

P = ParamSpec("P")


class Asking(Protocol):
    """Wraps a terminal question so that a signal interrupts it (``_stop_on_signals``)."""

    def __call__(self, question: Callable[P, bool]) -> Callable[P, bool]: ...


class FetchStopped(FastMTPError):
    """``fetch`` was stopped by SIGINT (exit 130) or SIGTERM (exit 1); the message says what was kept."""

    kind = "fetch-stopped"

    def __init__(self, message: str, advice: str, exit_code: int) -> None:
        super().__init__(message, advice)
        self.exit_code = exit_code


def cmd_fetch(args: argparse.Namespace) -> int:
    from app.core import secrets
    from app.models.installed import default_destination
    from app.release.catalog import endpoints_for, load_catalog
    from app.release.download import FetchPlan, fetch_release
    from app.release.fetcher import FetchControl

    catalog = load_catalog()
    plan = FetchPlan(quant=args.quant or catalog.default_quant, repo=args.repo or catalog.repo,
                     revision=args.revision or catalog.revision,
                     endpoints=endpoints_for(args.endpoint, args.base_url),
                     dest=args.dest or default_destination(args.repo or catalog.repo),
                     trust_fingerprint=args.trust_fingerprint)
    control = FetchControl()
    last = [-1.0]

    def on_event(event: FetchEvent) -> None:
        emit_line(args, event.to_json(), _fetch_line(event, last))

    confirm = trust_prompt(args)
    confirm_size = None if args.yes else size_prompt(args, plan.quant)
    with _stop_on_signals(control) as prompting:
        installed = fetch_release(plan, token=secrets.get_token(), on_event=on_event,
                                  on_step=lambda m: emit_line(args, {"kind": "step", "message": m}, m),
                                  control=control,
                                  confirm=prompting(confirm) if confirm is not None else None,
                                  confirm_size=prompting(confirm_size) if confirm_size is not None else None)
    emit(args, dict(installed.to_dict(), kind="result"),
         f"Installed release {installed.version} ({', '.join(installed.files)}) in {installed.folder}; "
         f"every file verified against the manifest signed by {installed.fingerprint}.", compact=True)
    return 0


def size_prompt(args: argparse.Namespace, quant: str) -> ConfirmSize:
    """The terminal question before a big download (y/N). Without a terminal (or with ``--json``) nobody can
    answer, so it refuses in words: a script says ``--yes`` for a big file instead of starting it unawares."""
    from app.core.units import format_bytes
    from app.release.download import DownloadDeclined

    def ask(needed: int, dest: Path, free: int) -> bool:
        what = f"Download {quant}: about {format_bytes(needed)} into {dest} ({format_bytes(free)} free there)."
        if not for_people(args, True) or not (sys.stdin.isatty() and sys.stderr.isatty()):
            refused = DownloadDeclined(f"{what} There is no terminal to ask you, so nothing was downloaded.",
                                       "Rerun with --yes to download it without being asked.",
                                       kind="download-declined")
            refused.exit_code = 2  # a usage matter: big downloads need --yes when nobody can be asked
            raise refused
        print(what, file=sys.stderr, flush=True)
        try:
            answer = input("Download now? [y/N] ")
        except EOFError:
            return False
        return answer.strip().lower() in ("y", "yes")

    return ask


def _fetch_line(event: FetchEvent, last: list[float]) -> str | None:
    """A fetch event for people: overall progress every 2%, each finished file, retries and pauses."""
    if event.kind == "progress" and not event.file and event.total_bytes:
        if event.total_done - last[0] >= event.total_bytes / 50:
            last[0] = event.total_done
            eta = f", {event.eta_s:.0f} s left" if event.eta_s is not None else ""
            return (f"  {event.total_done / event.total_bytes:6.1%} of {event.total_bytes / 2**30:.2f} GiB, "
                    f"{event.speed_bps / 2**20:.1f} MiB/s{eta}")
    elif event.kind == "done" and event.file:
        return f"  done    {event.file}"
    elif event.kind in ("retry", "paused", "resumed"):  # errors come once, at the end, from main()
        return f"  {event.kind:7} {event.file} {event.message}".rstrip()
    return None


@contextmanager
def _stop_on_signals(control: FetchControl) -> Iterator[Asking]:
    """SIGINT and SIGTERM cancel the fetch through ``control``, in every phase: workers put their bytes
    down, the integrity phase removes its partial files, and the command ends with :class:`FetchStopped`.

    Yields a wrapper for the terminal's questions (the key, the size), which a signal interrupts at once
    (``input()`` would otherwise wait on). A second signal interrupts whatever runs.
    """
    from app.release.fetcher import DownloadCancelled

    received: list[int] = []
    prompting = [False]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        control.cancel()
        if prompting[0] or len(received) > 1:
            raise KeyboardInterrupt

    def asking(question: Callable[P, bool]) -> Callable[P, bool]:
        def ask(*args: P.args, **kwargs: P.kwargs) -> bool:
            prompting[0] = True
            try:
                return question(*args, **kwargs)
            finally:
                prompting[0] = False

        return ask

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asking
    except (DownloadCancelled, KeyboardInterrupt) as exc:
        if not received:
            raise
        signum = received[0]
        what = exc.message if isinstance(exc, FastMTPError) else "Download stopped; nothing was installed."
        raise FetchStopped(f"Interrupted by {signal.Signals(signum).name}. {what}",
                           "Run the same command again; model files already downloaded resume where they stopped.",
                           130 if signum == signal.SIGINT else 1) from exc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def cmd_verify(args: argparse.Namespace) -> int:
    from app.release.verify import verify_release

    if args.dir.is_file():  # one model file: its release's signature chain, else the hub's content hash
        return cmd_verify_file(args)
    _check_release_folder(args.dir)
    result = verify_release(args.dir, repo=args.repo, trust_fingerprint=args.trust_fingerprint,
                            confirm=trust_prompt(args))

    def text() -> str:
        for warning in result.metadata.warnings:
            print("warning: " + warning, file=sys.stderr)
        return "\n".join([f"{args.dir}: release {result.metadata.manifest.version.text} of {result.metadata.repo}, "
                          f"signed by {result.metadata.fingerprint}",
                          *(f"  ok       {name}" for name in result.files),
                          *(f"  absent   {name}" for name in result.missing)])

    emit(args, result.to_dict(), text)
    return 0


def _check_release_folder(path: Path) -> None:
    """``verify PATH`` takes a model file or a release folder: anything else is named for what it is (a pipe is
    never read, a folder without the manifest is said not to be a release) before the trust chain looks at it."""
    from app.release.catalog import load_catalog

    if not path.exists():
        raise VerificationError(f"There is nothing at {path}.", "Give a downloaded model file or release folder.")
    if not path.is_dir():
        raise VerificationError(f"{path} is not a regular file or a folder (a pipe, a device or a socket), so "
                                "there is nothing to verify.", "Give a downloaded model file or release folder.")
    manifest = load_catalog().integrity.manifest
    if not (path / manifest).exists():
        raise VerificationError(f"{path} is not a release folder: it has no {manifest}.",
                                "Give a model file to check it alone, or the folder a release was downloaded into.")


def cmd_verify_file(args: argparse.Namespace) -> int:
    """``verify FILE``: a file in a signed release folder is checked through the trust chain; any other file
    against the hub's content hash for its repository (from its path, the registry or ``--repo``)."""
    from app.core import secrets
    from app.models import local_models
    from app.release.catalog import load_catalog
    from app.release.hub_hash import EXPLANATIONS, LABELS, HubOrigin, origin_from_path, verify_against_hub

    path = args.dir.absolute()
    if (path.parent / load_catalog().integrity.manifest).is_file():
        from app.release.verify import verify_release

        result = verify_release(path.parent, repo=args.repo, trust_fingerprint=args.trust_fingerprint)
        if path.name not in result.files:
            raise VerificationError(f"{path.name} is not listed in the release's signed manifest.",
                                    "Only files the publisher signed can be publisher-signed.")
        local_models.mark_signed(path, result.metadata.fingerprint)
        data = {"path": str(path), "state": "publisher-signed", "label": LABELS["publisher-signed"],
                "explanation": EXPLANATIONS["publisher-signed"], "fingerprint": result.metadata.fingerprint}
        emit(args, data, f"{path}: publisher-signed (every byte matches the manifest signed by "
                         f"{result.metadata.fingerprint})", compact=True)
        return 0
    known = local_models.find(path)
    origin = origin_from_path(path) or (known.origin if known else None)
    if args.repo:
        in_repo = args.path_in_repo or (origin.path_in_repo if origin else path.name)
        origin = HubOrigin(args.repo, args.revision, in_repo)
    if origin is None:
        message = (f"{path.name} has no publisher signature and no known place on the hub, so nothing can vouch "
                   "for it: it stays an unverified local file.")
        advice = ("If it came from the hub, say from where: `verify FILE --repo ORG/NAME [--revision main] "
                  "[--path-in-repo NAME]`.")
        emit(args, {"path": str(path), "state": "unverified", "label": LABELS["unverified"],
                    "explanation": EXPLANATIONS["unverified"], "message": message, "advice": advice},
             f"{path}: unverified local file\n{message}\nwhat to do: {advice}")
        return VerificationError.exit_code
    check = verify_against_hub(path, origin, args.endpoint, secrets.get_token())
    local_models.record_check(path, check)
    emit(args, check.to_dict(),
         f"{path}: {check.label}\n  hub: {check.endpoint}/{origin.repo} @ {origin.revision} "
         f"{origin.path_in_repo}\n  hub sha256  {check.expected_sha256}\n  file sha256 "
         f"{check.actual_sha256 or '(not hashed: the sizes differ)'}\n  {EXPLANATIONS[check.state]}")
    return 0 if check.state == "hub-hash-matches" else VerificationError.exit_code


def cmd_trust_list(args: argparse.Namespace) -> int:
    from app.release import trust
    from app.release.catalog import load_catalog

    repo = load_catalog().repo
    keys = [k.to_dict() for k in trust.shipped_keys(repo) + trust.user_keys()]
    emit(args, keys, lambda: "\n".join(f"{key['fingerprint']}  {key['repo']}  ({key['source']}"
                                       f"{', added ' + key['added'] if key['added'] else ''})" for key in keys)
         or "No publisher key is trusted yet. Pin one with `python -m app trust add PUBLIC.pem`.")
    return 0


def cmd_trust_add(args: argparse.Namespace) -> int:
    from app.release import signing, trust
    from app.release.catalog import load_catalog
    from app.release.verify import read_capped

    try:
        data = read_capped(args.public_key, "public key")  # bounded: `trust add /dev/zero` ends
    except OSError as exc:
        raise FastMTPError(f"Cannot read {args.public_key}: {exc.strerror}.", "Give the publisher's .pem file.") \
            from exc
    key = signing.load_public_key(data, str(args.public_key))
    pinned = trust.pin_key(args.repo or load_catalog().repo, key)
    emit(args, pinned.to_dict(), f"Trusted {pinned.fingerprint} for {pinned.repo}.\n"
                                 "Check that this fingerprint is the one the publisher announced.")
    return 0


def cmd_trust_remove(args: argparse.Namespace) -> int:
    from app.release import signing, trust

    repos = trust.remove_key(args.fingerprint)
    fp = signing.normalize_fingerprint(args.fingerprint)
    emit(args, {"removed": fp, "repos": repos}, f"No longer trusted: {fp} ({', '.join(repos)})")
    return 0


def cmd_release_keygen(args: argparse.Namespace) -> int:
    from app.release.publish import keygen

    pair = keygen(args.out)
    emit(args, {"private": str(pair.private), "public": str(pair.public), "fingerprint": pair.fingerprint},
         f"private key {pair.private} (keep it secret, outside any release folder)\n"
         f"public key  {pair.public}\nfingerprint {pair.fingerprint}")
    return 0


def cmd_release_sign(args: argparse.Namespace) -> int:
    from app.release.publish import sign_release

    signed = sign_release(args.dir, args.key, version=args.version, expires=args.expires, repo=args.repo,
                          llama_cpp_commit=args.llama_cpp_commit, app=args.app)
    what = "app release" if args.app else "release"
    emit(args, dict(signed.to_dict(), app=args.app),
         f"Signed {what} {signed.version} of {len(signed.files)} files in {signed.folder} with {signed.fingerprint}")
    return 0


def cmd_release_sign_backend(args: argparse.Namespace) -> int:
    from app.backend.signing import sign_backend_archive

    signed = sign_backend_archive(args.archive, args.key, repo=args.repo)
    emit(args, signed.to_dict(),
         f"Signed {signed.archive.name} ({signed.claim.backend_id}) for {signed.claim.repo} with "
         f"{signed.fingerprint}:\n  {signed.manifest}\n  {signed.signature}\nPublish both beside the archive.")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``fetch``, ``verify``, ``trust list|add|remove`` and ``release keygen|sign|sign-backend``."""
    f = command(sub, "fetch", cmd_fetch, "download, verify and install a quantization with the FastMTP sidecar")
    f.add_argument("--quant", help="quantization, e.g. Q4_K_P (default: the catalog's)")
    f.add_argument("--repo", help="repository id (default: the catalog's)")
    f.add_argument("--revision", help="branch, tag or commit on an HF-compatible endpoint (default main)")
    where = f.add_mutually_exclusive_group()
    where.add_argument("--endpoint", help="HF-compatible host: files at {endpoint}/{repo}/resolve/{revision}/{file}")
    where.add_argument("--base-url", help="plain mirror: files at {base-url}/{file}")
    f.add_argument("--dest", type=Path, help="install here instead of the app's models folder")
    f.add_argument("--trust-fingerprint", help="trust the publisher key with this fingerprint (no prompt)")
    f.add_argument("--yes", action="store_true",
                   help="download a big file (1 GiB or more) without asking; without a terminal it is required")

    v = command(sub, "verify", cmd_verify, "verify a release folder (signatures, trusted key, sizes and hashes), or "
                "one model file: through its release's signatures, else against the hub's content hash")
    v.add_argument("dir", type=Path, metavar="DIR|FILE")
    v.add_argument("--repo", help="repository id the release (or the file, on the hub) belongs to")
    v.add_argument("--trust-fingerprint", help="trust the publisher key with this fingerprint (no prompt)")
    v.add_argument("--revision", default="main", help="FILE: the revision on the hub (default main)")
    v.add_argument("--path-in-repo", help="FILE: its path in the repository (default: its file name)")
    v.add_argument("--endpoint", help="FILE: the hub to ask (default HF_ENDPOINT or huggingface.co); the stored token "
                                      "goes only to that default hub, over https")

    tsub = group(sub, "trust", "publisher keys trusted for releases")
    command(tsub, "list", cmd_trust_list, "list trusted publisher keys")
    ta = command(tsub, "add", cmd_trust_add, "trust a publisher key (prints its fingerprint)")
    ta.add_argument("public_key", type=Path, metavar="PUBLIC.pem")
    ta.add_argument("--repo", help="repository the key signs (default: the catalog's)")
    tr = command(tsub, "remove", cmd_trust_remove, "stop trusting a key")
    tr.add_argument("fingerprint", metavar="FP")

    rsub = group(sub, "release", "make signed releases (publishers, tests)")
    kg = command(rsub, "keygen", cmd_release_keygen, "make an Ed25519 key pair: DIR/private.pem, DIR/public.pem")
    kg.add_argument("--out", type=Path, required=True)
    sg = command(rsub, "sign", cmd_release_sign, "write SHA256SUMS, manifest, provenance, signatures and key into DIR")
    sg.add_argument("--dir", type=Path, required=True)
    sg.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    sg.add_argument("--version", help="release version, a number or 1.2.3 (default: one more than the folder's)")
    sg.add_argument("--expires", help="ISO date after which verifiers warn, e.g. 2026-12-31")
    sg.add_argument("--repo", help="repository id (default: the catalog's; with --app, the app's own)")
    sg.add_argument("--app", action="store_true",
                    help="a FastMTP Chat release (installers, backend archives, feeds): no model patch needed, "
                         "signed for the app's repository ([app_updates] repo)")
    sg.add_argument("--llama-cpp-commit", default="4df29be", help="llama.cpp commit the patch applies to")
    sb = command(rsub, "sign-backend", cmd_release_sign_backend,
                 "sign a `backend pack` archive: writes ARCHIVE.manifest.json and its .sig beside it")
    sb.add_argument("--archive", type=Path, required=True, metavar="FILE.tar.xz")
    sb.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    sb.add_argument("--repo", help="repository id whose key signs it (default: the catalog's)")

