"""CLI for prebuilt backends as a trusted channel: ``backend install`` and ``release sign-backend``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.backend.events import BuildEvent


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str), flush=True)


def cmd_backend_install(args: argparse.Namespace) -> int:
    from app.backend.prebuilt import install_prebuilt
    from app.cli import _cancel_on_signals
    from app.release import trust

    def on_event(event: BuildEvent) -> None:
        if args.json:
            print(event.to_json(), flush=True)
        elif event.kind in ("step", "done"):
            print(f"==> {event.message}", file=sys.stderr, flush=True)

    got = install_prebuilt(args.source, repo=args.repo, trust_fingerprint=args.trust_fingerprint,
                           confirm=None if args.json else trust.default_confirm(), activate=not args.no_activate,
                           on_event=on_event, cancel=_cancel_on_signals())
    if args.json:
        print(json.dumps(dict(got.to_dict(), kind="result"), default=str), flush=True)
    else:
        state = "active now" if got.active else "installed, not active (`backend use` makes it active)"
        print(f"{got.manifest.id}: {state}; {got.origin.describe()}; self-test passed here.")
    return 0


def cmd_release_sign_backend(args: argparse.Namespace) -> int:
    from app.release.backend_signing import sign_backend_archive

    signed = sign_backend_archive(args.archive, args.key, repo=args.repo)
    if args.json:
        _print(signed.to_dict())
    else:
        print(f"Signed {signed.archive.name} ({signed.claim.backend_id}) for {signed.claim.repo} with "
              f"{signed.fingerprint}:\n  {signed.manifest}\n  {signed.signature}\n"
              "Publish both beside the archive.")
    return 0


def add_backend_commands(bsub: Any, command: Any) -> None:
    ins = command(bsub, "install", cmd_backend_install,
                  "install a signed prebuilt backend (file or URL): signature, sha256, self-test, then activate")
    ins.add_argument("source", metavar="ARCHIVE|URL",
                     help="a .tar.xz from `backend pack` with its signed manifest beside it, or its http(s) URL")
    ins.add_argument("--repo", help="repository whose trusted key must have signed it (default: the catalog's)")
    ins.add_argument("--trust-fingerprint", help="trust the signing key with this fingerprint (no prompt)")
    ins.add_argument("--no-activate", action="store_true", help="install but keep the current active backend")


def add_release_commands(rsub: Any, command: Any) -> None:
    sb = command(rsub, "sign-backend", cmd_release_sign_backend,
                 "sign a `backend pack` archive: writes ARCHIVE.manifest.json and its .sig beside it")
    sb.add_argument("--archive", type=Path, required=True, metavar="FILE.tar.xz")
    sb.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    sb.add_argument("--repo", help="repository id whose key signs it (default: the catalog's)")
