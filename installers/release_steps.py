"""The steps of the release workflow (.github/workflows/release.yml), one subcommand each, so that CI and
``make release-dry-run`` (installers/release_dry_run.py) run the very same code:

    gather        a build job's outputs into one folder, under their release names
    public-key    the public half of the signing key, and a check that it is the key the app ships (if it ships one)
    sign-backends every backend archive of the folder: its signed manifest and .sig (``release sign-backend``)
    sign-feed     the signed backend feed ``backend install --feed`` reads (``backend sign-feed``)
    app-feed      the signed app-update feed ``update check`` reads (``update sign``)
    sign-app      SHA256SUMS, manifest, provenance and signatures of the whole folder (``release sign --app``)
    check-sums    every file against SHA256SUMS (``sha256sum -c``, in Python so it runs on every runner)
    verify        everything as a user's app would: ``verify``, ``backend install --feed`` and ``update check``
                  against a 127.0.0.1 HTTP server serving the folder, in throwaway data folders

Every signature is made for the app's own repository id (``[app_updates] repo`` in resources/catalog.toml,
``fastmtp-chat/fastmtp-chat``), never the model publisher's. The signing steps call ``python -m app``, the
publisher's commands, so what is checked here is what a maintainer would run by hand.

    .venv/bin/python installers/release_steps.py STEP --help
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402

BACKEND_PREFIX = "fastmtp-backend-"
BACKEND_FEED = "fastmtp-backends.json"
APP_FEED = "fastmtp-chat-release.json"
TIMEOUT = 900  # one app command; a backend self-test on a busy 2-core machine is the slowest


class StepFailed(Exception):
    """A step could not do its work; the message says what and what to do."""


# ----------------------------------------------------------------------------- names


def app_repository() -> str:
    from app.release.publish import app_repository as repo

    return repo()


def backend_archive_name(version: str, flavor: str, os_name: str, arch: str = "x86_64") -> str:
    """``fastmtp-backend-0.1.0-cpu-linux-x86_64.tar.xz``, ``fastmtp-backend-0.1.0-cuda13.0-windows-x86_64.tar.xz``:
    the release's name for a backend archive, with the app version, so two releases' archives never clash."""
    if not re.fullmatch(r"cpu|cuda\d+\.\d+", flavor) or os_name not in ("linux", "windows", "macos"):
        raise StepFailed(f"{flavor!r} on {os_name!r} is not a backend kind this release makes "
                         "(cpu or cudaX.Y, on linux, windows or macos).")
    return f"{BACKEND_PREFIX}{version}-{flavor}-{os_name}-{arch}.tar.xz"


def backend_platform(name: str) -> str | None:
    """The feed platform of a release's backend archive (``linux``/``windows``), None for one the feed does not
    list (macOS has no prebuilt backend in the feed: the app builds with Metal there)."""
    match = re.fullmatch(re.escape(BACKEND_PREFIX) + r".+-(linux|windows|macos)-[a-z0-9_]+\.tar\.xz", name)
    return match.group(1) if match and match.group(1) != "macos" else None


def manifest_version(app_version: str) -> str:
    """The release manifest's version for an app version. The manifest takes numbers only (``1.2.3``), and the
    app refuses a manifest older than, or equal to with other bytes, one it verified; so a pre-release maps
    below its final release and above the one before: ``0.2.0-rc.1`` -> ``0.1.99999.3.1`` (rc = stage 3)."""
    from app.release.app_feed import parse_app_version

    parsed = parse_app_version(app_version, "the app version")
    if parsed.pre is None:
        return ".".join(str(n) for n in parsed.release)
    numbers = list(parsed.release)
    while numbers and numbers[-1] == 0:
        numbers.pop()
    if not numbers:
        raise StepFailed(f"{app_version} is a pre-release of 0.0.0; nothing comes before it.")
    numbers[-1] -= 1
    return ".".join(str(n) for n in [*numbers, 99999, *parsed.pre])


def check_version(tag: str) -> str:
    """A release tag names the version the app says it is (``v0.2.0`` for ``__version__ = "0.2.0"``); a branch or
    a manual run (no tag) takes the app's version. Returns the version."""
    from app.release.app_feed import parse_app_version

    if not tag.startswith("v"):
        say(f"not a release tag ({tag}): a dry run of version {__version__}")
        return __version__
    if tag[1:] != __version__:
        raise StepFailed(f"The tag {tag} is not the app's version {__version__} (app/__init__.py): set the version, "
                         "commit, and tag that commit.")
    parse_app_version(tag[1:], "the tag")
    say(f"tag {tag}: version {__version__}")
    return __version__


# ----------------------------------------------------------------------------- running the app's commands


def app_command(args: Sequence[str], *, env: dict[str, str] | None = None, check: bool = True,
                timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``python -m app ARGS`` from this checkout; a failure is a :class:`StepFailed` with the app's own words."""
    proc = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise StepFailed(f"`python -m app {' '.join(args)}` failed (exit {proc.returncode}):\n{said}")
    return proc


def say(text: str) -> None:
    print(text, flush=True)


# ----------------------------------------------------------------------------- gather


def copy(source: Path, dest: Path, *, stand_in: bool = False) -> Path:
    if not source.is_file():
        raise StepFailed(f"{source} is not there; the build step before this one did not make it.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    label = "STAND-IN (made on Linux, not by the job it stands for)" if stand_in else "built"
    say(f"  {dest.name:58} {label}, from {source}")
    return dest


def one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise StepFailed(f"Expected one {pattern} in {folder}, found {len(found)}: "
                         f"{', '.join(p.name for p in found) or 'none'}. Run the build first (`make package`).")
    return found[0]


def gather(job: str, out: Path, *, dist: Path, build: Path, version: str, archive: Path | None = None,
           flavor: str | None = None, os_name: str | None = None) -> list[Path]:
    """The files a build job uploads, under their release names, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if job == "linux":
        return [copy(one(dist, f"fastmtp-chat-{version}-linux-*.tar.gz"),
                     out / one(dist, f"fastmtp-chat-{version}-linux-*.tar.gz").name),
                copy(one(dist, f"fastmtp-chat_{version}_*.deb"), out / one(dist, f"fastmtp-chat_{version}_*.deb").name),
                copy(one(build / "prebuilt-backend", "*.tar.xz"),
                     out / backend_archive_name(version, "cpu", "linux"))]
    if job == "windows":
        return [copy(one(dist, f"FastMTP-Chat-Setup-{version}.exe"), out / f"FastMTP-Chat-Setup-{version}.exe")]
    if job == "macos":
        return [copy(one(dist, f"FastMTP-Chat-{version}.dmg"), out / f"FastMTP-Chat-{version}.dmg")]
    if job == "backend":
        if archive is None or flavor is None or os_name is None:
            raise StepFailed("gather backend needs --archive, --flavor and --os.")
        return [copy(archive, out / backend_archive_name(version, flavor, os_name))]
    raise StepFailed(f"No build job {job!r}: linux, windows, macos or backend.")


# ----------------------------------------------------------------------------- Windows: the MSVC runtime

WINDOWS_RUNTIME_DLLS = ("vcomp140.dll", "msvcp140.dll", "msvcp140_1.dll", "vcruntime140.dll", "vcruntime140_1.dll")


def msvc_redist_dlls(roots: Sequence[Path]) -> dict[str, Path]:
    """The newest MSVC redistributable copy of each DLL a Windows backend needs besides the driver's (the C++
    runtime and OpenMP, which ggml's CPU threads use), from ``VC/Redist/MSVC/<version>/x64/Microsoft.VC*.{CRT,
    OpenMP}`` under a Visual Studio install."""
    found: dict[str, Path] = {}
    for root in roots:
        for dll in sorted(root.glob("VC/Redist/MSVC/*/x64/Microsoft.VC*.*/*.dll"), key=lambda p: p.parts):
            if dll.name.lower() in WINDOWS_RUNTIME_DLLS and dll.parent.name.endswith((".CRT", ".OpenMP")):
                found[dll.name.lower()] = dll  # sorted: a newer version folder comes later and wins
    return found


def visual_studio_roots() -> list[Path]:
    bases = [Path(os.environ[name]) / "Microsoft Visual Studio" for name in ("ProgramFiles", "ProgramFiles(x86)")
             if os.environ.get(name)]
    return [edition for base in bases for year in sorted(base.glob("*")) for edition in sorted(year.glob("*"))
            if (edition / "VC").is_dir()]


CUDA_RUNTIME_DLLS = ("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll")


def cuda_runtime_dlls(cuda_path: Path) -> list[Path]:
    """The CUDA runtime DLLs a ggml-cuda build loads (as llama.cpp ships them beside ggml-cuda.dll), from the
    toolkit's ``bin`` (CUDA 12) or ``bin/x64`` (CUDA 13)."""
    found = []
    for pattern in CUDA_RUNTIME_DLLS:
        matches = sorted({p for folder in (cuda_path / "bin", cuda_path / "bin" / "x64") for p in folder.glob(pattern)})
        if not matches:
            raise StepFailed(f"No {pattern} under {cuda_path}/bin or bin/x64: is CUDA_PATH the toolkit the backend was "
                             "built with?")
        found += matches
    return found


def add_windows_runtime(lib_dir: Path | None = None, roots: Sequence[Path] | None = None,
                        cuda_path: Path | None = None) -> list[Path]:
    """Copy the MSVC and OpenMP runtime DLLs, and with ``cuda_path`` the CUDA runtime's, beside the active backend's
    libraries before ``backend pack``, so the archive loads on a Windows PC with only the NVIDIA driver and without
    the Visual C++ Redistributable. ``backend pack`` copies what it finds of them too (runtime_libs.bundle_windows),
    but silently skips what it does not find and looks for MSVC's redist only in a Developer prompt's
    VCTOOLSREDISTDIR; this step finds Visual Studio's folders itself and fails the job when one is missing."""
    if lib_dir is None:
        from app.backend import registry

        active = registry.active_id()
        if active is None:
            raise StepFailed("No active backend to add the MSVC runtime to; build it first (`backend build`).")
        lib_dir = registry.backend_dir(active) / "llama_cpp" / "lib"
    dlls = msvc_redist_dlls(visual_studio_roots() if roots is None else roots)
    absent = [name for name in WINDOWS_RUNTIME_DLLS if name not in dlls]
    if absent:
        raise StepFailed(f"The MSVC redistributable DLLs {', '.join(absent)} were not found under Visual Studio's "
                         "VC/Redist/MSVC; install the C++ build tools with their redistributables.")
    copied = []
    for name in WINDOWS_RUNTIME_DLLS:
        shutil.copyfile(dlls[name], lib_dir / name)
        copied.append(lib_dir / name)
        say(f"  {name} from {dlls[name].parent}")
    for dll in cuda_runtime_dlls(cuda_path) if cuda_path is not None else []:
        shutil.copyfile(dll, lib_dir / dll.name)
        copied.append(lib_dir / dll.name)
        say(f"  {dll.name} from {dll.parent}")
    return copied


# ----------------------------------------------------------------------------- keys


def public_key(key: Path, out: Path | None = None) -> str:
    """The public half's fingerprint (written to ``out``); refuses a key other than the one the app ships for its
    repository, since every user's app would then stop at "the publisher key has changed"."""
    from app.release import signing, trust

    private = signing.load_private_key(key)
    fp = signing.fingerprint(private.public_key())
    if out is not None:
        out.write_bytes(signing.public_key_pem(private.public_key()))
    repo = app_repository()
    shipped = [k.fingerprint for k in trust.shipped_keys(repo)]
    if shipped and fp not in shipped:
        raise StepFailed(f"The signing key {fp} is not the key the app ships for {repo} ({', '.join(shipped)}): "
                         "every installed app would refuse this release. Use the release key of the `release-signing` "
                         "environment, or ship its public key in resources/keys/ first.")
    say(f"signing key {fp} for {repo}" + (" (the key the app ships)" if shipped else
                                          " (the app ships no key for it yet: first use asks the user)"))
    return fp


# ----------------------------------------------------------------------------- signing


def backend_archives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob(f"{BACKEND_PREFIX}*.tar.xz") if p.is_file())


def sign_backends(folder: Path, key: Path) -> list[Path]:
    archives = backend_archives(folder)
    if not archives:
        raise StepFailed(f"No {BACKEND_PREFIX}*.tar.xz in {folder}: the backend jobs uploaded nothing.")
    repo = app_repository()
    for archive in archives:
        app_command(["release", "sign-backend", "--archive", str(archive), "--key", str(key), "--repo", repo])
        say(f"  signed {archive.name} for {repo}")
    return archives


def sign_feed(folder: Path, key: Path, *, valid_days: float = 180, feed_version: int | None = None) -> Path:
    listed = [f"{platform}={archive}" for archive in backend_archives(folder)
              if (platform := backend_platform(archive.name)) is not None]
    if not listed:
        raise StepFailed(f"No Linux or Windows backend archive in {folder} for the backend feed.")
    args = ["backend", "sign-feed", *listed, "--key", str(key), "--out", str(folder), "--repo", app_repository(),
            "--valid-days", str(valid_days)]
    if feed_version is not None:
        args += ["--feed-version", str(feed_version)]
    app_command(args)
    say(f"  {BACKEND_FEED}: {len(listed)} archives")
    return folder / BACKEND_FEED


def app_downloads(folder: Path, version: str) -> dict[str, Path]:
    """The app-update feed's download per platform: what a user of that system installs."""
    wanted = {"linux-x86_64": f"fastmtp-chat-{version}-linux-x86_64.tar.gz",
              "windows-x86_64": f"FastMTP-Chat-Setup-{version}.exe",
              "macos-arm64": f"FastMTP-Chat-{version}.dmg"}
    return {platform: folder / name for platform, name in wanted.items() if (folder / name).is_file()}


def app_feed(folder: Path, key: Path, *, version: str, notes: Path | None = None, page: str | None = None) -> Path:
    downloads = app_downloads(folder, version)
    if not downloads:
        raise StepFailed(f"No app download of {version} in {folder} for the update feed.")
    args = ["update", "sign", "--version", version, "--key", str(key), "--out", str(folder), "--repo",
            app_repository()]
    for platform, path in downloads.items():
        args += ["--file", f"{platform}={path}"]
    if notes is not None:
        args += ["--notes", str(notes)]
    if page is not None:
        args += ["--page", page]
    app_command(args)
    say(f"  {APP_FEED}: {version} for {', '.join(downloads)}")
    return folder / APP_FEED


def sign_app(folder: Path, key: Path, *, version: str) -> None:
    app_command(["release", "sign", "--app", "--dir", str(folder), "--key", str(key),
                 "--version", manifest_version(version)])
    say(f"  SHA256SUMS and the signed manifest of {folder} (manifest version {manifest_version(version)})")


def check_sums(folder: Path) -> int:
    from app.release.manifest import parse_sha256sums

    sums_path = folder / "SHA256SUMS"
    if not sums_path.is_file():
        raise StepFailed(f"{folder} has no SHA256SUMS; run sign-app first.")
    sums = parse_sha256sums(sums_path.read_text(encoding="utf-8"), "SHA256SUMS")
    bad = []
    for name, digest in sums.items():
        path = folder / name
        if not path.is_file():
            bad.append(f"{name}: missing")
            continue
        h = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != digest:
            bad.append(f"{name}: sha256 differs")
    unlisted = [p.name for p in folder.iterdir() if p.is_file() and p.name not in sums and not p.name.startswith(".")
                and p.name not in _integrity_names()]
    if bad or unlisted:
        raise StepFailed("SHA256SUMS does not match the folder: " + "; ".join(bad + [f"{n}: not listed" for n in
                                                                                    unlisted]))
    say(f"  SHA256SUMS: {len(sums)} files OK")
    return len(sums)


def _integrity_names() -> set[str]:
    from app.release.catalog import load_catalog

    return set(load_catalog().integrity.metadata_names)


# ----------------------------------------------------------------------------- verify as a user's app would


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """The folder over HTTP on 127.0.0.1 (a free port), as the release page serves its files."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def user_env(home: Path) -> dict[str, str]:
    """A fresh user's folders: nothing of the real user's config, data or cache is read or written."""
    env = dict(os.environ)
    for name, sub in (("FASTMTP_CONFIG_DIR", "config"), ("FASTMTP_DATA_DIR", "data"), ("FASTMTP_CACHE_DIR", "cache")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(home / sub)
    for name in ("FASTMTP_UPDATE_URL", "FASTMTP_BACKEND_FEED_URL"):
        env.pop(name, None)
    return env


@dataclass(frozen=True)
class Verified:
    release_files: int
    backend: str
    update_status: str
    latest: str | None


def _json_result(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The last JSON object a ``--json`` command printed (event lines come first)."""
    for line in reversed(proc.stdout.strip().splitlines()):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    with contextlib.suppress(ValueError):
        data = json.loads(proc.stdout)
        if isinstance(data, dict):
            return data
    raise StepFailed(f"`{' '.join(map(str, proc.args))[-200:]}` printed no JSON result:\n{proc.stdout[-1000:]}")


def _this_platform() -> str:
    return "windows" if sys.platform == "win32" else "linux"


def verify(folder: Path, *, fingerprint: str, version: str, home: Path | None = None) -> Verified:
    """``verify``, ``backend install --feed`` (no GPU: the CPU archive for this platform, self-tested) and
    ``update check`` against the folder served on 127.0.0.1, in a fresh user's folders, trusting ``fingerprint``
    (the release key) for the app's repository exactly as the first use of a user's app does."""
    from app.release.app_feed import parse_app_version

    repo = app_repository()
    with contextlib.ExitStack() as stack:
        if home is None:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fastmtp-release-verify-")))
        env = user_env(home)
        proc = app_command(["verify", str(folder), "--repo", repo, "--trust-fingerprint", fingerprint, "--json"],
                           env=env)
        files = _json_result(proc).get("files")
        count = len(files) if isinstance(files, list | dict) else 0
        say(f"  verify: {count} files match the manifest signed for {repo}")
        url = stack.enter_context(serve(folder))
        proc = app_command(["backend", "install", "--feed", url + BACKEND_FEED, "--repo", repo, "--gpu-arch", "none",
                            "--trust-fingerprint", fingerprint, "--json"], env=env)
        result = _json_result(proc)
        backend = str(result.get("backend"))
        chosen = result.get("selection")
        archive = chosen.get("archive") if isinstance(chosen, dict) else None
        name = archive.get("name") if isinstance(archive, dict) else None
        if not result.get("active") or not isinstance(name, str) or backend_platform(name) != _this_platform():
            raise StepFailed(f"backend install --feed did not install and activate this platform's archive: {result}")
        say(f"  backend install --feed {url}{BACKEND_FEED}: {backend} installed and self-tested")
        proc = app_command(["update", "check", "--url", url + APP_FEED, "--trust-fingerprint", fingerprint,
                            "--pre", "--json"], env=env, check=False)
        check = _json_result(proc)
        status, latest = str(check.get("status")), check.get("latest_version")
        if proc.returncode != 0 or status not in ("up_to_date", "available"):
            raise StepFailed(f"update check against {url}{APP_FEED} gave {status} (exit {proc.returncode}): "
                             f"{check.get('message') or proc.stderr.strip()[-500:]}")
        if not isinstance(latest, str) or not parse_app_version(latest).same(parse_app_version(version)):
            raise StepFailed(f"update check found version {latest}, the release is {version}.")
        say(f"  update check --url {url}{APP_FEED}: {status}, latest {latest}")
    return Verified(count, backend, status, latest)


# ----------------------------------------------------------------------------- the command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="release_steps.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    g = sub.add_parser("gather", help="a build job's outputs under their release names")
    g.add_argument("job", choices=["linux", "windows", "macos", "backend"])
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--dist", type=Path, default=ROOT / "dist")
    g.add_argument("--build", type=Path, default=ROOT / "build")
    g.add_argument("--archive", type=Path, help="backend: the `backend pack` archive")
    g.add_argument("--flavor", help="backend: cpu or cudaX.Y")
    g.add_argument("--os", dest="os_name", choices=["linux", "windows", "macos"], help="backend: its system")
    w = sub.add_parser("windows-runtime", help="the MSVC and OpenMP runtime DLLs into the active backend")
    w.add_argument("--lib-dir", type=Path, help="default: the active backend's llama_cpp/lib")
    w.add_argument("--cuda-path", type=Path, help="also the CUDA runtime DLLs of this toolkit (e.g. \"$CUDA_PATH\")")
    pk = sub.add_parser("public-key", help="the signing key's public half and fingerprint")
    pk.add_argument("--key", type=Path, required=True)
    pk.add_argument("--out", type=Path)
    pk.add_argument("--github-output", type=Path, help="append fingerprint=FP to this file ($GITHUB_OUTPUT)")
    for name, text in (("sign-backends", "sign every backend archive"), ("sign-feed", "write the backend feed"),
                       ("app-feed", "write the app-update feed"), ("sign-app", "sign the app release")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--dir", type=Path, required=True)
        s.add_argument("--key", type=Path, required=True)
        if name in ("app-feed", "sign-app"):
            s.add_argument("--version", default=__version__)
        if name == "app-feed":
            s.add_argument("--notes", type=Path)
            s.add_argument("--page")
        if name == "sign-feed":
            s.add_argument("--valid-days", type=float, default=180)
            s.add_argument("--feed-version", type=int)
    t = sub.add_parser("check-version", help="the tag is v + the app's version (app/__init__.py)")
    t.add_argument("--tag", required=True)
    c = sub.add_parser("check-sums", help="every file against SHA256SUMS")
    c.add_argument("--dir", type=Path, required=True)
    v = sub.add_parser("verify", help="verify, backend install --feed and update check, as a user's app")
    v.add_argument("--dir", type=Path, required=True)
    v.add_argument("--trust-fingerprint", required=True)
    v.add_argument("--version", default=__version__)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from app.core.errors import FastMTPError

    try:
        if args.step == "gather":
            gather(args.job, args.out, dist=args.dist, build=args.build, version=__version__, archive=args.archive,
                   flavor=args.flavor, os_name=args.os_name)
        elif args.step == "windows-runtime":
            add_windows_runtime(args.lib_dir, cuda_path=args.cuda_path)
        elif args.step == "public-key":
            fp = public_key(args.key, args.out)
            if args.github_output is not None:
                with args.github_output.open("a", encoding="utf-8") as handle:
                    handle.write(f"fingerprint={fp}\n")
        elif args.step == "sign-backends":
            sign_backends(args.dir, args.key)
        elif args.step == "sign-feed":
            sign_feed(args.dir, args.key, valid_days=args.valid_days, feed_version=args.feed_version)
        elif args.step == "app-feed":
            app_feed(args.dir, args.key, version=args.version, notes=args.notes, page=args.page)
        elif args.step == "sign-app":
            sign_app(args.dir, args.key, version=args.version)
        elif args.step == "check-version":
            check_version(args.tag)
        elif args.step == "check-sums":
            check_sums(args.dir)
        else:
            verify(args.dir, fingerprint=args.trust_fingerprint, version=args.version)
    except (StepFailed, FastMTPError) as exc:
        text = exc.args[0] if isinstance(exc, StepFailed) else f"{exc.message} {exc.advice}"
        print(f"release step {args.step} failed: {text}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
