"""Build the packaged app: the prebuilt CPU backend, the one-folder app and, on Linux, the tarball and the .deb.

    .venv/bin/pip install -e '.[package]'
    .venv/bin/python installers/build.py            # everything under dist/
    .venv/bin/python installers/build.py --no-sdist # without the bundled llama-cpp-python source (72 MB less)

Steps, each timed and printed with its size:
1. the portable CPU backend (`backend build --cpu-variants`: x86-64-v2 base plus an AVX2 module, the best
   picked at start), packed with `backend pack` into build/prebuilt-backend/, so the packaged app answers
   on first start with no compiler;
2. PyInstaller with installers/fastmtp-chat.spec: dist/fastmtp-chat/;
3. Linux: dist/fastmtp-chat-<version>-linux-<arch>.tar.gz and dist/fastmtp-chat_<version>_<arch>.deb.

The size budget (the one-folder app without the sdist under 300 MB) is checked here and by the smoke
test; the build names the biggest parts. Windows and macOS installers are made from the same folder
on those systems (installers/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from installers import debian  # noqa: E402
from installers.bundle import APP_NAME, PREBUILT_DIR, SDIST_FOLDER  # noqa: E402

SIZE_BUDGET_MB = 300  # the one-folder app without the bundled sdist


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def biggest_parts(folder: Path, count: int = 6) -> list[tuple[str, int]]:
    """The largest entries of ``_internal/`` (folders summed), to name what dominates the size."""
    inside = folder / "_internal"
    base = inside if inside.is_dir() else folder
    sizes = [(entry.name, folder_size(entry) if entry.is_dir() else entry.stat().st_size)
             for entry in base.iterdir() if not entry.is_symlink()]
    return sorted(sizes, key=lambda item: -item[1])[:count]


def app_size_without_sdist(folder: Path) -> int:
    sdist = folder / "_internal" / SDIST_FOLDER
    return folder_size(folder) - (folder_size(sdist) if sdist.is_dir() else 0)


def prebuilt_backend(out_dir: Path, work: Path) -> Path:
    """Build (or reuse from the build cache) the portable CPU backend and pack it into ``out_dir``.

    It is built into its own data folder, so the developer's installed and active backends stay as they are.
    """
    env = dict(os.environ, FASTMTP_DATA_DIR=str(work / "prebuilt-data"))
    app = [sys.executable, "-m", "app"]
    done = subprocess.run([*app, "backend", "build", "--cpu-variants", "--json"], env=env, cwd=ROOT, check=True,
                          stdout=subprocess.PIPE, text=True)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"kind": "result"')]
    backend_id = results[-1]["manifest"]["id"]
    shutil.rmtree(out_dir, ignore_errors=True)
    out = out_dir / f"fastmtp-backend-{backend_id}.tar.xz"
    subprocess.run([*app, "backend", "pack", backend_id, "--out", str(out)], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return out


def freeze(dist: Path, work: Path, with_sdist: bool) -> Path:
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


def deb(folder: Path, work: Path) -> Path:
    arch = debian.debian_arch()
    root = debian.package_tree(folder, work / "deb-root", __version__, arch)
    return debian.build_deb(root, folder.parent / f"{APP_NAME}_{__version__}_{arch}.deb")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller")
    parser.add_argument("--no-sdist", action="store_true", help="leave the pinned llama-cpp-python source out")
    parser.add_argument("--no-backend", action="store_true", help="leave the prebuilt CPU backend out")
    parser.add_argument("--no-tarball", action="store_true")
    parser.add_argument("--no-deb", action="store_true")
    parser.add_argument("--json", type=Path, help="write the times and sizes here as JSON")
    args = parser.parse_args(argv)
    report: dict[str, object] = {"version": __version__}

    def step(name: str, started: float, path: Path, size: int) -> None:
        seconds = round(time.monotonic() - started, 1)
        report[name] = {"path": str(path), "mb": round(size / 1e6, 1), "seconds": seconds}
        print(f"{name}: {path} ({size / 1e6:.0f} MB) in {seconds:.0f} s", flush=True)

    if args.no_backend:
        shutil.rmtree(PREBUILT_DIR, ignore_errors=True)
    else:
        started = time.monotonic()
        backend = prebuilt_backend(PREBUILT_DIR, args.work)
        step("prebuilt backend", started, backend, backend.stat().st_size)
    started = time.monotonic()
    folder = freeze(args.dist, args.work, with_sdist=not args.no_sdist)
    step("one-folder app", started, folder, folder_size(folder))
    without_sdist = app_size_without_sdist(folder)
    report["app_mb_without_sdist"] = round(without_sdist / 1e6, 1)
    report["biggest_parts_mb"] = {name: round(size / 1e6, 1) for name, size in biggest_parts(folder)}
    parts = ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in biggest_parts(folder))
    print(f"size without the sdist: {without_sdist / 1e6:.0f} MB (budget {SIZE_BUDGET_MB} MB); biggest: {parts}")
    if sys.platform.startswith("linux"):
        if not args.no_tarball:
            started = time.monotonic()
            out = tarball(folder)
            step("tarball", started, out, out.stat().st_size)
        if not args.no_deb and shutil.which("dpkg-deb"):
            started = time.monotonic()
            out = deb(folder, args.work)
            step("deb", started, out, out.stat().st_size)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if without_sdist > SIZE_BUDGET_MB * 1e6:
        print(f"error: the app without the sdist is {without_sdist / 1e6:.0f} MB, over the {SIZE_BUDGET_MB} MB "
              "budget; see the biggest parts above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
