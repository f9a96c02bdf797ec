"""CLI commands for releases: ``fetch``, ``verify``, ``models``, ``trust``, ``release``, ``token``, ``fit``,
``mirror``."""

from __future__ import annotations

import argparse
import getpass
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from app import cli_backend_install, cli_local
from app.cli import print_json
from app.errors import FastMTPError

if TYPE_CHECKING:
    from app.release.fetcher import FetchControl
    from app.release.trust import Confirm


class FetchStopped(FastMTPError):
    """``fetch`` was stopped by SIGINT (exit 130) or SIGTERM (exit 1); the message says what was kept."""

    def __init__(self, message: str, advice: str, exit_code: int) -> None:
        super().__init__(message, advice)
        self.exit_code = exit_code


def _say(args: argparse.Namespace, message: str) -> None:
    """Progress for people on stderr; with --json, one event line on stdout."""
    if args.json:
        print(json.dumps({"kind": "step", "message": message}), flush=True)
    else:
        print(message, file=sys.stderr, flush=True)


def cmd_fetch(args: argparse.Namespace) -> int:
    from app import secrets
    from app.release import trust
    from app.release.catalog import endpoints_for, load_catalog
    from app.release.download import FetchPlan, fetch_release
    from app.release.fetcher import FetchControl, FetchEvent

    catalog = load_catalog()
    plan = FetchPlan(quant=args.quant or catalog.default_quant, repo=args.repo or catalog.repo,
                     revision=args.revision or catalog.revision,
                     endpoints=endpoints_for(args.endpoint, args.base_url), dest=args.dest,
                     trust_fingerprint=args.trust_fingerprint)
    control = FetchControl()
    last = [-1.0]

    def on_event(event: FetchEvent) -> None:
        if args.json:
            print(event.to_json(), flush=True)
        elif event.kind == "progress" and not event.file and event.total_bytes:
            if event.total_done - last[0] >= event.total_bytes / 50:
                last[0] = event.total_done
                eta = f", {event.eta_s:.0f} s left" if event.eta_s is not None else ""
                print(f"  {event.total_done / event.total_bytes:6.1%} of {event.total_bytes / 2**30:.2f} GiB, "
                      f"{event.speed_bps / 2**20:.1f} MiB/s{eta}", file=sys.stderr, flush=True)
        elif event.kind == "done" and event.file:
            print(f"  done    {event.file}", file=sys.stderr, flush=True)
        elif event.kind in ("retry", "paused", "resumed"):  # errors come once, at the end, from main()
            print(f"  {event.kind:7} {event.file} {event.message}".rstrip(), file=sys.stderr, flush=True)

    confirm = None if args.json else trust.default_confirm()
    with _stop_on_signals(control) as prompting:
        installed = fetch_release(plan, token=secrets.get_token(), on_event=on_event,
                                  on_step=lambda m: _say(args, m), control=control,
                                  confirm=prompting(confirm) if confirm is not None else None)
    if args.json:
        print(json.dumps(dict(installed.to_dict(), kind="result")), flush=True)
    else:
        print(f"Installed release {installed.version} ({', '.join(installed.files)}) in {installed.folder}; "
              f"every file verified against the manifest signed by {installed.fingerprint}.")
    return 0


@contextmanager
def _stop_on_signals(control: FetchControl) -> Iterator[Callable[[Confirm], Confirm]]:
    """SIGINT and SIGTERM cancel the fetch through ``control``, in every phase: workers put their bytes
    down, the integrity phase removes its partial files, and the command ends with :class:`FetchStopped`.

    Yields a wrapper for the terminal's trust question, which a signal interrupts at once (``input()``
    would otherwise wait on). A second signal interrupts whatever runs.
    """
    from app.release.fetcher import DownloadCancelled

    received: list[int] = []
    prompting = [False]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        control.cancel()
        if prompting[0] or len(received) > 1:
            raise KeyboardInterrupt

    def asking(confirm: Confirm) -> Confirm:
        def ask(repo: str, fingerprint: str) -> bool:
            prompting[0] = True
            try:
                return confirm(repo, fingerprint)
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
    from app.release import trust
    from app.release.verify import verify_release

    if args.dir.is_file():  # one model file: its release's signature chain, else the hub's content hash
        return cli_local.cmd_verify_file(args)
    result = verify_release(args.dir, repo=args.repo, trust_fingerprint=args.trust_fingerprint,
                            confirm=None if args.json else trust.default_confirm())
    if args.json:
        print_json(result.to_dict())
        return 0
    for warning in result.metadata.warnings:
        print("warning: " + warning, file=sys.stderr)
    print(f"{args.dir}: release {result.metadata.manifest.version.text} of {result.metadata.repo}, signed by "
          f"{result.metadata.fingerprint}")
    for name in result.files:
        print(f"  ok       {name}")
    for name in result.missing:
        print(f"  absent   {name}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from app.release.installed import list_installed, model_roots

    models = list_installed(*([args.dir] if args.dir else []))
    if args.json:  # with --dir that folder's releases; else the releases and your own added files
        print_json([m.to_dict() for m in models] + ([] if args.dir else cli_local.local_rows()))
        return 0
    if not args.dir:
        cli_local.print_local_models()
    if not models:
        where = args.dir or " or ".join(str(root) for root in model_roots())
        print(f"No downloaded model in {where}. Get one with `python -m app fetch`.")
    for m in models:
        sidecars = ", ".join(f"{kind} {path.name}" for kind, path in (("d2t", m.sidecar_d2t), ("full", m.sidecar_full))
                             if path is not None) or "no sidecar"
        state = "verified (publisher-signed)" if m.verified else "NOT VERIFIED"
        print(f"{m.quant:8} release {m.version}  {m.size_bytes / 1e9:.1f} GB  {state}  {m.target}\n"
              f"         sidecars: {sidecars}")
        if m.problem:
            print("         " + m.problem.replace("\n", "\n         "))
    return 0


def cmd_trust_list(args: argparse.Namespace) -> int:
    from app.release import trust
    from app.release.catalog import load_catalog

    repo = load_catalog().repo
    keys = [k.to_dict() for k in trust.shipped_keys(repo) + trust.user_keys()]
    if args.json:
        print_json(keys)
        return 0
    if not keys:
        print("No publisher key is trusted yet. Pin one with `python -m app trust add PUBLIC.pem`.")
    for key in keys:
        added = f", added {key['added']}" if key["added"] else ""
        print(f"{key['fingerprint']}  {key['repo']}  ({key['source']}{added})")
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
    if args.json:
        print_json(pinned.to_dict())
    else:
        print(f"Trusted {pinned.fingerprint} for {pinned.repo}.\n"
              "Check that this fingerprint is the one the publisher announced.")
    return 0


def cmd_trust_remove(args: argparse.Namespace) -> int:
    from app.release import signing, trust

    repos = trust.remove_key(args.fingerprint)
    fp = signing.normalize_fingerprint(args.fingerprint)
    if args.json:
        print_json({"removed": fp, "repos": repos})
    else:
        print(f"No longer trusted: {fp} ({', '.join(repos)})")
    return 0


def cmd_release_keygen(args: argparse.Namespace) -> int:
    from app.release.publish import keygen

    pair = keygen(args.out)
    if args.json:
        print_json({"private": str(pair.private), "public": str(pair.public), "fingerprint": pair.fingerprint})
    else:
        print(f"private key {pair.private} (keep it secret, outside any release folder)\n"
              f"public key  {pair.public}\nfingerprint {pair.fingerprint}")
    return 0


def cmd_release_sign(args: argparse.Namespace) -> int:
    from app.release.publish import sign_release

    signed = sign_release(args.dir, args.key, version=args.version, expires=args.expires, repo=args.repo,
                          llama_cpp_commit=args.llama_cpp_commit)
    if args.json:
        print_json(signed.to_dict())
    else:
        print(f"Signed release {signed.version} of {len(signed.files)} files in {signed.folder} "
              f"with {signed.fingerprint}")
    return 0


def cmd_token_set(args: argparse.Namespace) -> int:
    from app import secrets

    token = getpass.getpass("Hub token (not shown): ") if sys.stdin.isatty() else sys.stdin.readline()
    secrets.set_token(token)
    if args.json:
        print_json({"token": "stored", "backend": secrets.status().backend})
    else:
        print("Token stored in the system keyring.")
    return 0


def cmd_token_clear(args: argparse.Namespace) -> int:
    from app import secrets

    removed = secrets.clear_token()
    if args.json:
        print_json({"removed": removed})
    else:
        print("Token removed from the keyring." if removed else "No token was stored.")
    return 0


def cmd_token_status(args: argparse.Namespace) -> int:
    from app import secrets

    status = secrets.status()
    if args.json:
        print_json(status.to_dict())
        return 0
    where = {"env": f"from the {secrets.ENV_VAR} environment variable", "keyring": "stored in the keyring",
             None: "not set (public repositories need none)"}[status.source]
    print(f"Hub token: {where}.")
    if not status.keyring_available:
        print(f"No keyring backend is available; set {secrets.ENV_VAR} for runs that need a token.")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from app import fit

    if args.vram_gib is not None:
        if args.vram_gib <= 0:
            raise FastMTPError(f"--vram-gib {args.vram_gib} is not an amount of memory.", "Give e.g. --vram-gib 24.")
        vram, source = int(args.vram_gib * fit.GIB), "given with --vram-gib"
    else:
        vram, source = fit.detected_vram()
    report = fit.fit(vram, args.context, source)
    if args.json:
        print_json(report.to_dict())
    else:
        print("\n".join(fit.format_report(report)))
    return 0


def cmd_mirror_list(args: argparse.Namespace) -> int:
    from app.release.catalog import endpoints_for

    endpoints = [e.to_dict() for e in endpoints_for()]
    if args.json:
        print_json(endpoints)
    else:
        for e in endpoints:
            print(f"{e['kind']:5} {e['url']}  {e['name']}")
    return 0


def cmd_mirror_add(args: argparse.Namespace) -> int:
    from app.release.catalog import add_user_endpoint

    endpoint = add_user_endpoint("hf" if args.hf else "plain", args.hf or args.plain)
    if args.json:
        print_json(endpoint.to_dict())
    else:
        print(f"Added {endpoint.kind} mirror {endpoint.url} (tried before the hub).")
    return 0


def cmd_mirror_remove(args: argparse.Namespace) -> int:
    from app.release.catalog import remove_user_endpoint

    removed = remove_user_endpoint(args.url)
    if args.json:
        print_json({"removed": removed})
    else:
        print(f"Removed {args.url}." if removed else f"{args.url} was not in the mirror list.")
    return 0


def add_commands(sub: Any, command: Any) -> None:
    """Register the release commands on the top-level subparsers."""
    f = command(sub, "fetch", cmd_fetch, "download, verify and install a quantization with the FastMTP sidecar")
    f.add_argument("--quant", help="quantization, e.g. Q4_K_P (default: the catalog's)")
    f.add_argument("--repo", help="repository id (default: the catalog's)")
    f.add_argument("--revision", help="branch, tag or commit on an HF-compatible endpoint (default main)")
    where = f.add_mutually_exclusive_group()
    where.add_argument("--endpoint", help="HF-compatible host: files at {endpoint}/{repo}/resolve/{revision}/{file}")
    where.add_argument("--base-url", help="plain mirror: files at {base-url}/{file}")
    f.add_argument("--dest", type=Path, help="install here instead of the app's models folder")
    f.add_argument("--trust-fingerprint", help="trust the publisher key with this fingerprint (no prompt)")

    v = command(sub, "verify", cmd_verify, "verify a release folder (signatures, trusted key, sizes and hashes), or "
                "one model file: through its release's signatures, else against the hub's content hash")
    v.add_argument("dir", type=Path, metavar="DIR|FILE")
    v.add_argument("--repo", help="repository id the release (or the file, on the hub) belongs to")
    v.add_argument("--trust-fingerprint", help="trust the publisher key with this fingerprint (no prompt)")
    cli_local.add_verify_arguments(v)

    md = command(sub, "models", cmd_models, "list the downloaded models: target, FastMTP sidecars, checks passed "
                 "(signatures and sizes; `verify DIR` re-hashes)")
    md.add_argument("--dir", type=Path, help="the models folder to list (default: the one in the settings, and the "
                    "one downloads go to)")
    cli_local.add_models_commands(md, command)

    trust = sub.add_parser("trust", help="publisher keys trusted for releases")
    tsub = trust.add_subparsers(dest="trust_command", required=True)
    command(tsub, "list", cmd_trust_list, "list trusted publisher keys")
    ta = command(tsub, "add", cmd_trust_add, "trust a publisher key (prints its fingerprint)")
    ta.add_argument("public_key", type=Path, metavar="PUBLIC.pem")
    ta.add_argument("--repo", help="repository the key signs (default: the catalog's)")
    tr = command(tsub, "remove", cmd_trust_remove, "stop trusting a key")
    tr.add_argument("fingerprint", metavar="FP")

    release = sub.add_parser("release", help="make signed releases (publishers, tests)")
    rsub = release.add_subparsers(dest="release_command", required=True)
    kg = command(rsub, "keygen", cmd_release_keygen, "make an Ed25519 key pair: DIR/private.pem, DIR/public.pem")
    kg.add_argument("--out", type=Path, required=True)
    sg = command(rsub, "sign", cmd_release_sign, "write SHA256SUMS, manifest, provenance, signatures and key into DIR")
    sg.add_argument("--dir", type=Path, required=True)
    sg.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    sg.add_argument("--version", help="release version, a number or 1.2.3 (default: one more than the folder's)")
    sg.add_argument("--expires", help="ISO date after which verifiers warn, e.g. 2026-12-31")
    sg.add_argument("--repo", help="repository id (default: the catalog's)")
    sg.add_argument("--llama-cpp-commit", default="4df29be", help="llama.cpp commit the patch applies to")
    cli_backend_install.add_release_commands(rsub, command)

    token = sub.add_parser("token", help="the Hugging Face hub token, kept in the system keyring")
    ksub = token.add_subparsers(dest="token_command", required=True)
    command(ksub, "set", cmd_token_set, "store the token (read from the terminal without echo, or stdin)")
    command(ksub, "clear", cmd_token_clear, "remove the stored token")
    command(ksub, "status", cmd_token_status, "say whether a token is set and where from (never the token)")

    ft = command(sub, "fit", cmd_fit, "recommend the largest quantization that fits the GPU, with the arithmetic")
    ft.add_argument("--vram-gib", type=float, help="GPU memory in GiB (default: detected with nvidia-smi)")
    ft.add_argument("--context", type=int, default=32768, help="context length in tokens (default 32768)")

    mirror = sub.add_parser("mirror", help="mirrors tried before the Hugging Face hub")
    msub = mirror.add_subparsers(dest="mirror_command", required=True)
    command(msub, "list", cmd_mirror_list, "list the endpoints a fetch tries, in order")
    ma = command(msub, "add", cmd_mirror_add, "add an HF-compatible mirror or a plain base URL")
    kind = ma.add_mutually_exclusive_group(required=True)
    kind.add_argument("--hf", metavar="URL", help="HF-compatible host")
    kind.add_argument("--plain", metavar="URL", help="plain base URL holding the release files")
    mr = command(msub, "remove", cmd_mirror_remove, "remove a mirror")
    mr.add_argument("url")
