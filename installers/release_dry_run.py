"""``make release-dry-run``: the release workflow's steps (installers/release_steps.py), in its order, on this
Linux machine, with the Linux job's real outputs from ``make package`` (dist/ tarball and .deb, the CPU backend
archive under build/prebuilt-backend/) and stand-ins only for what another system builds, each labelled
STAND-IN in the output:

    windows job   FastMTP-Chat-Setup-<v>.exe       a text file saying it stands in for the Inno Setup installer
    macos job     FastMTP-Chat-<v>.dmg             a text file saying it stands in for the disk image
    backend jobs  fastmtp-backend-<v>-cpu-windows  a copy of the Linux CPU archive under a Windows name

The CUDA archives are not made (their build takes an hour here); the feed then lists the CPU archives only.

A throwaway key from ``release keygen`` in a temp folder signs everything (the `sign` job's secret stands in),
and every step runs with temp FASTMTP_CONFIG_DIR/DATA/CACHE folders, never the user's. Then ``verify`` checks
the folder as a user's app would: ``verify``, ``backend install --feed`` from 127.0.0.1 and ``update check``.
Exit 1 with the failed step's words on any failure.

    .venv/bin/python installers/release_dry_run.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import __version__  # noqa: E402
from installers import release_steps as steps  # noqa: E402

# The `sign` job of .github/workflows/release.yml, step by step (tests/unit/installers/test_workflows.py checks
# that the workflow calls installers/release_steps.py in this order).
SIGN_STEPS = ("public-key", "sign-backends", "sign-feed", "app-feed", "sign-app", "check-sums", "verify")

STAND_IN_TEXT = ("STAND-IN for {what}, made by installers/release_dry_run.py on Linux. The real file is built by "
                 "the {job} job of .github/workflows/release.yml; this one only lets the signing steps run here.\n")


def stand_ins(job_outputs: Path, linux_cpu_archive: Path, version: str) -> list[Path]:
    """What the Windows and macOS jobs would upload, made here and labelled; returns the files."""
    made = []
    windows, macos, backend = job_outputs / "windows", job_outputs / "macos", job_outputs / "backend-windows"
    for folder, name, what, job in ((windows, f"FastMTP-Chat-Setup-{version}.exe", "the Windows installer", "windows"),
                                    (macos, f"FastMTP-Chat-{version}.dmg", "the macOS disk image", "macos")):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_text(STAND_IN_TEXT.format(what=what, job=job), encoding="utf-8")
        steps.say(f"  {name:58} STAND-IN (a text file; the {job} job builds the real one)")
        made.append(path)
    made.append(steps.copy(linux_cpu_archive, backend / steps.backend_archive_name(version, "cpu", "windows"),
                           stand_in=True))
    steps.say("    (that Windows backend is the Linux CPU archive under a Windows name: it is never installed here)")
    return made


def run_step(name: str, args: list[str], env: dict[str, str]) -> None:
    """One step as the workflow runs it: ``python installers/release_steps.py STEP ...`` in its own process."""
    steps.say(f"==> {name}")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "installers" / "release_steps.py"), name, *args], cwd=ROOT,
                          env=env, check=False)
    if proc.returncode != 0:
        raise steps.StepFailed(f"the step {name} failed (exit {proc.returncode}); its words are above.")
    steps.say(f"    {time.monotonic() - started:.1f} s")


def dry_run(work: Path, *, dist: Path, build: Path, version: str = __version__) -> None:
    """Every step of the workflow into ``work`` (job outputs, the merged release folder, the key, a user's home)."""
    env = steps.user_env(work / "home")  # every step's app folders: temp ones, never the user's

    steps.say(f"==> build jobs' outputs (version {version})")
    linux = work / "jobs" / "linux"
    steps.gather("linux", linux, dist=dist, build=build, version=version)
    stand_ins(work / "jobs", steps.one(build / "prebuilt-backend", "*.tar.xz"), version)

    steps.say("==> sign job: a throwaway key (`release keygen`; CI reads the release-signing environment's secret)")
    keys = work / "key"
    steps.app_command(["release", "keygen", "--out", str(keys)], env=env)
    key = keys / "private.pem"
    release = work / "release"
    release.mkdir()
    for job in sorted((work / "jobs").iterdir()):  # actions/download-artifact, merge-multiple
        for path in sorted(job.iterdir()):
            shutil.copyfile(path, release / path.name)
    from app.release import signing

    fingerprint = signing.fingerprint(signing.load_private_key(key).public_key())
    notes = work / "notes.md"
    notes.write_text(f"FastMTP Chat {version} (dry run of the release workflow; not published).\n", encoding="utf-8")
    signing_args = ["--dir", str(release), "--key", str(key)]
    step_args = {"public-key": ["--key", str(key), "--out", str(keys / "public-copy.pem")],
                 "sign-backends": signing_args, "sign-feed": signing_args,
                 "app-feed": [*signing_args, "--version", version, "--notes", str(notes)],
                 "sign-app": [*signing_args, "--version", version],
                 "check-sums": ["--dir", str(release)],
                 "verify": ["--dir", str(release), "--trust-fingerprint", fingerprint, "--version", version]}
    for name in SIGN_STEPS:  # the `sign` job's steps, in its order; verify runs in fresh user folders of its own
        run_step(name, step_args[name], env)
    steps.say(f"\nrelease folder {release}:")
    for path in sorted(release.iterdir()):
        steps.say(f"  {path.stat().st_size:>12,}  {path.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it, instead of a temp one")
    args = parser.parse_args(argv)
    started = time.monotonic()
    from app.core.errors import FastMTPError

    try:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=False)
            dry_run(args.keep, dist=args.dist, build=args.build)
        else:
            with tempfile.TemporaryDirectory(prefix="fastmtp-release-dry-run-") as tmp:
                dry_run(Path(tmp), dist=args.dist, build=args.build)
    except (steps.StepFailed, FastMTPError) as exc:
        text = exc.args[0] if isinstance(exc, steps.StepFailed) else f"{exc.message} {exc.advice}"
        print(f"\nrelease dry run FAILED: {text}", file=sys.stderr)
        return 1
    steps.say(f"\nrelease dry run passed in {time.monotonic() - started:.0f} s: signed, verified, installed from the "
              "feed and found by update check as a user's app would. Stand-ins (labelled STAND-IN above) replaced "
              "the Windows and macOS jobs' files; no CUDA archive was built.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
