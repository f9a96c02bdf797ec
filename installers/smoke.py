"""Smoke test of the packaged Linux app, run by `make test` after `installers/build.py`.

On Windows and macOS (the release workflow) it runs the steps of the one-folder app: 1, its ``quickstart``
with the bundled backend (as 2, from the folder), 3 and 4.

Every run uses a clean environment (``env -i`` style: a fresh HOME, data, config and cache folder, no
venv on PATH), as a person who just installed the package has:

1. ``--help``; ``demo-model`` + ``gguf inspect`` of its d2t sidecar;
2. the tarball, unpacked, with **no compiler on PATH**: ``quickstart`` answers with the bundled backend;
3. ``release keygen`` + ``release sign`` of a demo release, ``verify`` passes, and fails once a byte changes;
4. the window under ``QT_QPA_PLATFORM=offscreen`` until the first-run panel is shown;
5. a backend **built** from the bundled sdist with the bundled cmake and ninja (the system's are hidden),
   then ``quickstart`` with it;
6. the ``.deb`` installed into a throwaway root with ``dpkg --root``: its launcher answers with no
   compiler, and ``dpkg -r`` removes every file it installed.

Prints a table of the steps and their times and writes them to build/smoke.json; exit 1 on any failure.

    .venv/bin/python installers/smoke.py [--dist dist] [--skip-build-step]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from installers import debian  # noqa: E402
from installers.bundle import APP_NAME  # noqa: E402

HIDDEN_TOOLS = {"cmake", "ninja", "ctest", "cpack", "ccmake", "cmake-gui", "ninja-build"}
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++")


WINDOWS_ENV = ("SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT")


def system_path() -> str:
    """The system's own programs and nothing else: no venv, no compiler's folder."""
    if sys.platform == "win32":
        return str(Path(os.environ.get("SYSTEMROOT", r"C:\Windows")) / "System32")
    return "/usr/bin:/bin"


def app_program(folder: Path) -> Path:
    """The console program of the one-folder app on this system."""
    return folder / (f"{APP_NAME}.exe" if sys.platform == "win32" else APP_NAME)


class SmokeFailure(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SmokeFailure(what)


class Machine:
    """A fresh user account in a folder: its own HOME and app folders, and a chosen PATH."""

    def __init__(self, base: Path, name: str, path: str) -> None:
        self.home = base / name
        for sub in ("data", "config", "cache", "tmp"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.path = path
        self.extra: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        env = {"HOME": str(self.home), "PATH": self.path, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "TMPDIR": str(self.home / "tmp"), "FASTMTP_DATA_DIR": str(self.home / "data"),
               "FASTMTP_CONFIG_DIR": str(self.home / "config"), "FASTMTP_CACHE_DIR": str(self.home / "cache"),
               "QT_QPA_PLATFORM": "offscreen"}
        if sys.platform == "win32":  # what any Windows program needs (Python's sockets and random read SYSTEMROOT)
            env.update({name: os.environ[name] for name in WINDOWS_ENV if name in os.environ})
            env.update({"USERPROFILE": str(self.home), "TEMP": str(self.home / "tmp"), "TMP": str(self.home / "tmp")})
        return {**env, **self.extra}

    def run(self, program: Path, *args: str, timeout: float = 600, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(program), *args], env=self.env(), cwd=self.home, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if done.returncode != expect:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
            raise SmokeFailure(f"`{program.name} {' '.join(args)}` exited {done.returncode} (expected {expect}):\n"
                               f"{tail}")
        return done

    def run_json(self, program: Path, *args: str, timeout: float = 600, expect: int = 0) -> Any:
        done = self.run(program, *args, "--json", timeout=timeout, expect=expect)
        return parse_json(done.stdout, " ".join(args))


def parse_json(text: str, what: str) -> Any:
    """The whole output as one (indented) JSON document, else its last one-line JSON record."""
    try:
        return json.loads(text)
    except ValueError:
        lines = [line for line in text.splitlines() if line.startswith("{")]
        check(bool(lines), f"`{what} --json` printed no JSON: {text[-500:]}")
        return json.loads(lines[-1])


def no_compiler_path(base: Path) -> str:
    """A PATH with nothing on it: no compiler, no cmake, no ninja, not even a shell."""
    empty = base / "empty-bin"
    empty.mkdir(exist_ok=True)
    return str(empty)


def system_without_build_tools(base: Path) -> str:
    """/usr/bin with cmake and ninja taken away, so a build can only use the bundled ones."""
    folder = base / "usr-bin-without-cmake"
    folder.mkdir(exist_ok=True)
    for entry in Path("/usr/bin").iterdir():
        if entry.name not in HIDDEN_TOOLS and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    return str(folder)


def bundled_backend_id(app_folder: Path) -> str:
    archives = sorted((app_folder / "_internal" / "backends").glob("*.tar.xz"))
    check(len(archives) == 1, f"the app carries {len(archives)} prebuilt backend archives, expected 1")
    return archives[0].name.removeprefix("fastmtp-backend-").removesuffix(".tar.xz")


def check_quickstart(result: dict[str, Any], backend_id: str | None) -> str:
    check(bool(result.get("reply", "").strip()), f"quickstart gave no reply: {result}")
    check(result.get("reply_tokens", 0) > 0, f"quickstart counted no tokens: {result}")
    check(result.get("draft_acceptance", 0) > 0.5, f"the d2t draft head guessed too little: {result}")
    if backend_id is not None:
        check(result.get("backend_id") == backend_id, f"quickstart used {result.get('backend_id')}, not {backend_id}")
    return f"{result['reply_tokens']} tokens, d2t acceptance {result['draft_acceptance']:.0%}"


def step_help_and_demo(app: Path, base: Path) -> str:
    user = Machine(base, "help", system_path())
    done = user.run(app, "--help")
    check("usage:" in done.stdout and "quickstart" in done.stdout, "--help does not list the commands")
    demo = user.home / "demo"
    user.run(app, "demo-model", "--out", str(demo), "--size", "tiny")
    info = user.run_json(app, "gguf", "inspect", str(demo / "sidecar-d2t.gguf"))
    check(info.get("kind") == "mtp_sidecar_d2t", f"gguf inspect says {info.get('kind')}, not mtp_sidecar_d2t")
    return f"sidecar kind {info['kind']}"


def step_tarball(tarball: Path, backend_id: str, base: Path) -> str:
    user = Machine(base, "tarball", no_compiler_path(base))
    check(all(shutil.which(tool, path=user.path) is None for tool in COMPILERS), "a compiler is on PATH")
    with tarfile.open(tarball) as archive:
        archive.extractall(user.home / "unpacked", filter="tar")
    app = user.home / "unpacked" / f"{APP_NAME}-{__version__}" / APP_NAME
    result = user.run_json(app, "quickstart", timeout=300)
    listed = user.run_json(app, "backend", "status")
    check(backend_id in json.dumps(listed), f"backend status does not name the bundled {backend_id}")
    return check_quickstart(result, backend_id)


def step_folder_quickstart(app: Path, backend_id: str, base: Path) -> str:
    """Windows and macOS (the release workflow): the one-folder app's own ``quickstart`` with the system's PATH
    only, so a bundled backend that does not load there (a missing runtime DLL, a too-new macOS target) fails
    the job instead of the user's first start."""
    user = Machine(base, "folder", system_path())
    return check_quickstart(user.run_json(app, "quickstart", timeout=600), backend_id)


def step_verify(app: Path, base: Path) -> str:
    user = Machine(base, "verify", system_path())
    keys = user.run_json(app, "release", "keygen", "--out", str(user.home / "keys"))
    release = user.home / "release"
    user.run(app, "demo-model", "--out", str(release), "--size", "tiny")
    patch = next((app.parent / "_internal" / "resources" / "patches").glob("*.patch"))
    shutil.copy2(patch, release / "HauhauCS-FastMTP-llama.cpp.patch")  # a release ships the patch it needs
    user.run_json(app, "release", "sign", "--dir", str(release), "--key", keys["private"])
    user.run_json(app, "verify", str(release), "--trust-fingerprint", keys["fingerprint"])
    victim = release / "sidecar-d2t.gguf"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    done = subprocess.run([str(app), "verify", str(release), "--json"], env=user.env(), capture_output=True,
                          text=True, timeout=300)
    check(done.returncode not in (0, None), "verify passed a release with a changed byte")
    return f"signed by {keys['fingerprint'][:16]}…; a changed byte fails with exit {done.returncode}"


def step_window(app: Path, base: Path) -> str:
    user = Machine(base, "window", system_path())
    done = user.run(app, "window", "--check", timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    check(bool(lines), f"the window reported nothing: {done.stdout[-300:]} {done.stderr[-300:]}")
    shown = json.loads(lines[-1])
    check(shown.get("window") == "shown" and shown.get("first_run_panel") is True,
          f"the window did not show the first-run panel: {shown}")
    return f"first-run panel shown; backend {shown.get('backend')}"


def step_build(app: Path, base: Path) -> str:
    user = Machine(base, "build", system_without_build_tools(base))
    check(shutil.which("cmake", path=user.path) is None and shutil.which("ninja", path=user.path) is None,
          "the system's cmake or ninja is still on PATH")
    nothing = user.home / "no-bundled-backend"
    nothing.mkdir()
    user.extra["FASTMTP_BUNDLED_BACKENDS"] = str(nothing)  # so quickstart has to build
    doctor = user.run(app, "backend", "doctor", "--json", expect=0).stdout
    check(str(app.parent) in doctor, "backend doctor does not find the bundled cmake/ninja")
    result = user.run_json(app, "quickstart", timeout=1800)
    check(not (user.home / "cache" / "sources").exists()
          or not any((user.home / "cache" / "sources").glob("*.part")), "a partial source download was left")
    return "built from the bundled sdist with the bundled cmake/ninja; " + check_quickstart(result, None)


def step_deb(deb: Path, backend_id: str, base: Path) -> str:
    info = subprocess.run(["dpkg-deb", "--field", str(deb), "Package", "Depends"], capture_output=True,
                          text=True, check=True).stdout
    check("fastmtp-chat" in info and "libxcb-cursor0" in info and "libgomp1" in info,
          f"the .deb's control fields are incomplete: {info}")
    root = base / "deb-root"
    for sub in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name in ("status", "available"):
        (root / "var/lib/dpkg" / name).touch()
    dpkg = ["dpkg", f"--root={root}", "--force-depends", "--force-not-root", "--force-script-chrootless"]
    subprocess.run([*dpkg, "--install", str(deb)], check=True, capture_output=True, text=True)
    launcher = root / "usr" / "bin" / APP_NAME
    check(launcher.is_symlink() and launcher.resolve().is_file(), "the installed launcher does not resolve")
    check((root / "usr/share/applications/fastmtp-chat.desktop").is_file(), "no .desktop entry installed")
    check((root / "usr/share/icons/hicolor/256x256/apps/fastmtp-chat.png").is_file(), "no hicolor icon installed")
    user = Machine(base, "deb-user", no_compiler_path(base))
    summary = check_quickstart(user.run_json(launcher, "quickstart", timeout=300), backend_id)
    subprocess.run([*dpkg, "--remove", APP_NAME], check=True, capture_output=True, text=True)
    left = [p for p in (root / "opt", root / "usr") if p.exists() and any(q.is_file() or q.is_symlink()
                                                                          for q in p.rglob("*"))]
    check(not left, f"dpkg -r left files behind in {left}")
    return f"installed launcher: {summary}; removed cleanly"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--report", type=Path, default=ROOT / "build" / "smoke.json")
    parser.add_argument("--skip-build-step", action="store_true",
                        help="leave out step 5 (a full backend compile: minutes)")
    args = parser.parse_args(argv)
    folder = args.dist / APP_NAME
    app = app_program(folder)
    # Windows and macOS (the release workflow): the one-folder app's steps; the tarball, the .deb and the build
    # with the system's /usr/bin are Linux's.
    linux = sys.platform.startswith("linux")
    arch = debian.debian_arch() if linux else ""
    tarballs = sorted(args.dist.glob(f"{APP_NAME}-{__version__}-linux-*.tar.gz"))
    deb = args.dist / f"{APP_NAME}_{__version__}_{arch}.deb"
    missing = [str(app.relative_to(args.dist))] if not app.is_file() else []
    if linux:
        missing += [] if tarballs else [f"{APP_NAME}-{__version__}-linux-*.tar.gz"]
        missing += [] if deb.is_file() else [deb.name]
    if missing:
        print(f"error: build the packages first (`python installers/build.py`); missing under {args.dist}: "
              f"{', '.join(missing)}", file=sys.stderr)
        return 1
    backend_id = bundled_backend_id(folder)
    steps: list[tuple[str, Callable[[Path], str]]] = [
        ("--help, demo-model, gguf inspect", lambda base: step_help_and_demo(app, base))]
    if linux:
        steps.append(("tarball: quickstart, no compiler", lambda base: step_tarball(tarballs[-1], backend_id, base)))
    else:
        steps.append(("one-folder app: quickstart", lambda base: step_folder_quickstart(app, backend_id, base)))
    steps += [("release sign + verify", lambda base: step_verify(app, base)),
              ("window (offscreen) first-run panel", lambda base: step_window(app, base))]
    if linux:
        steps.append((".deb: install, launcher, remove", lambda base: step_deb(deb, backend_id, base)))
    if linux and not args.skip_build_step:
        steps.append(("backend build with bundled tools", lambda base: step_build(app, base)))
    results: list[dict[str, Any]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="fastmtp-smoke-") as tmp:
        for name, run in steps:
            started = time.monotonic()
            try:
                detail, ok = run(Path(tmp)), True
            except (SmokeFailure, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
                detail, ok = f"{type(exc).__name__}: {exc}", False
                failed = True
            results.append({"step": name, "ok": ok, "seconds": round(time.monotonic() - started, 1),
                            "detail": detail})
            print(f"{'ok  ' if ok else 'FAIL'} {results[-1]['seconds']:7.1f} s  {name}: {detail}", flush=True)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"version": __version__, "steps": results}, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
