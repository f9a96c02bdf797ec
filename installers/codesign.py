"""Platform code signing in the release workflow: Authenticode on Windows, codesign + notarization on macOS.

Each step reads its certificate and passwords from environment variables that the workflow fills from the
`release-signing` environment's secrets. Without them the step signs nothing, says so with a GitHub
``::notice::`` (visible on the run's summary page) and succeeds, so a fork or a dry run still builds; the
unsigned files then warn their users (SmartScreen; Gatekeeper's "Open Anyway").

    python installers/codesign.py windows FILE...         WINDOWS_CERT_PFX_BASE64, WINDOWS_CERT_PASSWORD
    python installers/codesign.py macos-app APP           MACOS_CERT_P12_BASE64, MACOS_CERT_PASSWORD,
                                                          MACOS_SIGNING_IDENTITY
    python installers/codesign.py macos-dmg DMG           the above, and APPLE_ID, APPLE_TEAM_ID,
                                                          APPLE_APP_PASSWORD for notarytool

installers/README.md ("macOS", "Releases") says what these do by hand; none of it has run yet (no certificate).
"""

from __future__ import annotations

import argparse
import base64
import glob
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMESTAMP_URL = "http://timestamp.digicert.com"
ENTITLEMENTS = ROOT / "installers" / "macos" / "entitlements.plist"
NEEDS = {
    "windows": ("WINDOWS_CERT_PFX_BASE64", "WINDOWS_CERT_PASSWORD"),
    "macos-app": ("MACOS_CERT_P12_BASE64", "MACOS_CERT_PASSWORD", "MACOS_SIGNING_IDENTITY"),
    "macos-dmg": ("MACOS_CERT_P12_BASE64", "MACOS_CERT_PASSWORD", "MACOS_SIGNING_IDENTITY", "APPLE_ID",
                  "APPLE_TEAM_ID", "APPLE_APP_PASSWORD"),
}
WHAT = {"windows": "Authenticode signing", "macos-app": "codesign of the app", "macos-dmg": "notarization"}


def missing(step: str, env: dict[str, str]) -> list[str]:
    return [name for name in NEEDS[step] if not env.get(name)]


def notice(step: str, absent: Sequence[str]) -> str:
    """The line GitHub shows on the run's page when a signing step has no secrets."""
    return (f"::notice title=Not signed::{WHAT[step]} skipped: the secrets {', '.join(absent)} are not set in the "
            "release-signing environment, so these files are unsigned.")


def run(cmd: Sequence[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(list(cmd), check=True)


def signtool() -> str:
    """signtool.exe of the newest Windows SDK on the runner (it is not on PATH)."""
    found = sorted(glob.glob(r"C:\Program Files (x86)\Windows Kits\10\bin\10.*\x64\signtool.exe"))
    if not found:
        raise SystemExit("codesign: signtool.exe was not found under the Windows 10 SDK; install the SDK.")
    return found[-1]


def sign_windows(files: Sequence[Path], env: dict[str, str], tmp: Path) -> None:
    pfx = tmp / "cert.pfx"
    pfx.write_bytes(base64.b64decode(env["WINDOWS_CERT_PFX_BASE64"]))
    tool = signtool()
    run([tool, "sign", "/f", str(pfx), "/p", env["WINDOWS_CERT_PASSWORD"], "/fd", "SHA256", "/tr", TIMESTAMP_URL,
         "/td", "SHA256", *map(str, files)])
    run([tool, "verify", "/pa", *map(str, files)])


def _keychain(env: dict[str, str], tmp: Path) -> None:
    """A throwaway keychain holding the Developer ID certificate, first in the search list."""
    p12, chain, password = tmp / "cert.p12", tmp / "signing.keychain-db", base64.b64encode(os.urandom(24)).decode()
    p12.write_bytes(base64.b64decode(env["MACOS_CERT_P12_BASE64"]))
    run(["security", "create-keychain", "-p", password, str(chain)])
    run(["security", "set-keychain-settings", "-lut", "21600", str(chain)])
    run(["security", "unlock-keychain", "-p", password, str(chain)])
    run(["security", "import", str(p12), "-k", str(chain), "-P", env["MACOS_CERT_PASSWORD"], "-T",
         "/usr/bin/codesign"])
    run(["security", "set-key-partition-list", "-S", "apple-tool:,apple:", "-s", "-k", password, str(chain)])
    run(["security", "list-keychains", "-d", "user", "-s", str(chain)])


def macho_files(app: Path) -> list[Path]:
    """Every Mach-O inside the app, deepest first: codesign --deep does not reach the tools carried as data."""
    found = []
    for path in app.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                magic = handle.read(4)
            if magic in (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xce\xfa\xed\xfe"):
                found.append(path)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def sign_macos_app(app: Path, env: dict[str, str], tmp: Path) -> None:
    _keychain(env, tmp)
    identity = env["MACOS_SIGNING_IDENTITY"]
    for path in macho_files(app / "Contents"):
        run(["codesign", "--force", "--options", "runtime", "--timestamp", "--sign", identity, str(path)])
    run(["codesign", "--force", "--options", "runtime", "--timestamp", "--entitlements", str(ENTITLEMENTS),
         "--sign", identity, str(app)])
    run(["codesign", "--verify", "--deep", "--strict", "--verbose=2", str(app)])


def notarize_dmg(dmg: Path, env: dict[str, str], tmp: Path) -> None:
    _keychain(env, tmp)
    run(["codesign", "--force", "--timestamp", "--sign", env["MACOS_SIGNING_IDENTITY"], str(dmg)])
    run(["xcrun", "notarytool", "submit", str(dmg), "--apple-id", env["APPLE_ID"], "--team-id", env["APPLE_TEAM_ID"],
         "--password", env["APPLE_APP_PASSWORD"], "--wait"])
    run(["xcrun", "stapler", "staple", str(dmg)])
    run(["spctl", "--assess", "--type", "open", "--context", "context:primary-signature", "-v", str(dmg)])


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=sorted(NEEDS))
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    env = dict(os.environ) if env is None else env
    absent = missing(args.step, env)
    if absent:
        print(notice(args.step, absent), flush=True)
        return 0
    for path in args.files:
        if not path.exists():
            print(f"codesign: {path} is not there; build it first.", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="fastmtp-codesign-") as scratch:
        tmp = Path(scratch)
        if args.step == "windows":
            sign_windows(args.files, env, tmp)
        elif args.step == "macos-app":
            for app in args.files:
                sign_macos_app(app, env, tmp)
        else:
            for dmg in args.files:
                notarize_dmg(dmg, env, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
