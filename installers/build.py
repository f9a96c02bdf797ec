"""Build the one-folder app with PyInstaller and, on Linux, a tarball of it.

    .venv/bin/pip install -e '.[package]'
    .venv/bin/python installers/build.py            # dist/fastmtp-chat/ and dist/fastmtp-chat-<v>-linux-<arch>.tar.gz
    .venv/bin/python installers/build.py --no-sdist # without the bundled llama-cpp-python source (75 MB less)

Prints the build time and the sizes; the Windows installer and the macOS disk image are built from
the same folder on those systems (installers/README.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from installers.bundle import APP_NAME  # noqa: E402


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build(dist: Path, work: Path, with_sdist: bool) -> Path:
    env = dict(os.environ, FASTMTP_BUNDLE_SDIST="1" if with_sdist else "0")
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work), str(ROOT / "installers" / "fastmtp-chat.spec")]
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    return dist / APP_NAME


def tarball(folder: Path) -> Path:
    machine = platform.machine().lower() or "unknown"
    out = folder.parent / f"{APP_NAME}-{__version__}-{sys.platform.rstrip('0123456789')}-{machine}.tar.gz"
    with tarfile.open(out, "w:gz", compresslevel=6) as archive:
        archive.add(folder, arcname=f"{APP_NAME}-{__version__}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller")
    parser.add_argument("--no-sdist", action="store_true", help="leave the pinned llama-cpp-python source out")
    parser.add_argument("--no-tarball", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    folder = build(args.dist, args.work, with_sdist=not args.no_sdist)
    frozen_seconds = time.monotonic() - started
    print(f"one-folder app: {folder} ({folder_size(folder) / 1e6:.0f} MB) in {frozen_seconds:.0f} s")
    if sys.platform.startswith("linux") and not args.no_tarball:
        started = time.monotonic()
        out = tarball(folder)
        print(f"tarball: {out} ({out.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
