"""CLI commands for app updates: ``update check`` (is a newer FastMTP Chat out?) and ``update sign`` (the
publisher's side: write and sign the feed it reads).

``update check`` exits 0 when it got a verified answer (up to date, or a newer version with its
download), 3 when the server could not be reached and 4 when the update information could not be
verified: the codes ``fetch`` uses for the network and for verification.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, emit, group, trust_prompt
from app.core.errors import FastMTPError

EXIT_CODES = {"up_to_date": 0, "available": 0, "unreachable": 3, "unverified": 4}


def cmd_update_check(args: argparse.Namespace) -> int:
    from app import __version__
    from app.release.updates import check_for_update, default_source

    result = check_for_update(__version__, source=default_source(args.url),
                              include_prereleases=args.pre, trust_fingerprint=args.trust_fingerprint,
                              confirm=trust_prompt(args), timeout=args.timeout)
    emit(args, result.to_dict(), lambda: _describe(result))
    return EXIT_CODES[result.status]


def _describe(result: Any) -> None:
    """The answer for people; a failed check goes to stderr as "error:" and "what to do:"."""
    if result.status in ("unverified", "unreachable"):
        print(f"error: {result.summary()}", file=sys.stderr)
        if result.advice:
            print(f"what to do: {result.advice}", file=sys.stderr)
        return
    print(result.summary())
    if result.status == "available":
        if result.download is not None:
            print(f"  {result.download.name}: {result.download.size} bytes, sha256 {result.download.sha256}")
        else:
            print("  (no download for this platform is listed; the link is the release page)")
        if result.notes:
            print("  " + result.notes.strip().replace("\n", "\n  "))
        print("The app does not update itself: download the new version and install it over this one.")
    print(f"Signed by {result.fingerprint}.")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError("give a number of seconds between 0 and 600, e.g. 15")
    return value


def _platform_file(text: str) -> tuple[str, Path]:
    platform, sep, path = text.partition("=")
    if not sep or not platform or not path:
        raise argparse.ArgumentTypeError("expected PLATFORM=PATH, e.g. linux-x86_64=dist/fastmtp-chat.tar.gz")
    return platform.strip(), Path(path)


def cmd_update_sign(args: argparse.Namespace) -> int:
    from app.release.app_feed import sign_feed
    from app.release.updates import default_source

    try:
        notes = args.notes.read_text(encoding="utf-8") if args.notes else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise FastMTPError(f"Cannot read the release notes {args.notes}: {exc}", "Give a UTF-8 text file.") \
            from exc
    files = dict(args.file or [])
    if len(files) != len(args.file or []):
        raise FastMTPError("A platform is given twice with --file.", "Give one file per platform.")
    source = default_source()
    signed = sign_feed(args.out, args.key, version=args.version, notes=notes, files=files,
                       repo=args.repo or source.repo, page=args.page, public_key_name=source.public_key)
    emit(args, signed.to_dict(), f"Signed the feed of {signed.feed.repo} in {signed.folder} with {signed.fingerprint}: "
                                 f"{', '.join(r.version.text for r in signed.feed.releases)}.\n"
                                 "Publish it with its .sig and key next to the download files it names.")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``update check`` and ``update sign``."""
    usub = group(sub, "update", "is a newer FastMTP Chat out? (it never replaces itself)")
    c = command(usub, "check", cmd_update_check,
                "check the signed release feed for a newer FastMTP Chat (exit 0 answered, 3 unreachable, "
                "4 not verified)")
    c.add_argument("--url", help="the feed's URL (default: the catalog's, or FASTMTP_UPDATE_URL)")
    c.add_argument("--trust-fingerprint", help="trust the feed's key with this fingerprint (no prompt)")
    c.add_argument("--pre", action="store_true", help="consider pre-releases (rc, beta, …) too")
    c.add_argument("--timeout", type=_seconds, default=15.0, help="seconds for each connect and read (default 15)")
    s = command(usub, "sign", cmd_update_sign,
                "add a version to the app-release feed in DIR and sign it (publishers, tests)")
    s.add_argument("--version", required=True, help="the app version, e.g. 0.2.0 or 0.3.0-rc.1")
    s.add_argument("--notes", type=Path, help="a text file with the release notes")
    s.add_argument("--file", type=_platform_file, action="append", metavar="PLATFORM=PATH",
                   help="a download for one platform, e.g. linux-x86_64=dist/fastmtp-chat-0.2.0-linux-x86_64.tar.gz "
                        "(repeat per platform; hashed, not copied)")
    s.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    s.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the feed folder; releases of a feed already there (signed by the same key) are kept")
    s.add_argument("--repo", help="the repository the key is trusted for (default: the catalog's)")
    s.add_argument("--page", help="the release page, linked when a platform has no download")
