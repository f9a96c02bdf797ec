"""The release workflow's scripts (installers/release_steps.py, codesign.py, macos/make_dmg.sh) and ``release sign
--app``: names, versions, the files each step takes and refuses, on real files in tmp_path (issue 35)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.errors import FastMTPError
from app.release import signing
from app.release.manifest import parse_version
from app.release.publish import keygen, sign_release
from app.release.verify import verify_release
from installers import codesign, release_steps
from installers.release_steps import StepFailed

ROOT = Path(__file__).resolve().parents[3]
APP_REPO = "fastmtp-chat/fastmtp-chat"


def test_backend_archive_names_carry_the_version_and_say_their_platform() -> None:
    linux = release_steps.backend_archive_name("0.2.0", "cpu", "linux")
    windows = release_steps.backend_archive_name("0.2.0", "cuda13.0", "windows")
    assert linux == "fastmtp-backend-0.2.0-cpu-linux-x86_64.tar.xz"
    assert windows == "fastmtp-backend-0.2.0-cuda13.0-windows-x86_64.tar.xz"
    assert release_steps.backend_platform(linux) == "linux" and release_steps.backend_platform(windows) == "windows"
    assert release_steps.backend_platform(release_steps.backend_archive_name("0.2.0", "cpu", "macos")) is None
    assert release_steps.backend_platform("fastmtp-chat-0.2.0-linux-x86_64.tar.gz") is None
    with pytest.raises(StepFailed, match="not a backend kind"):
        release_steps.backend_archive_name("0.2.0", "rocm6", "linux")


@pytest.mark.parametrize(("earlier", "later"), [
    ("0.1.5", "0.2.0-rc.1"), ("0.2.0-rc.1", "0.2.0-rc.2"), ("0.2.0-rc.2", "0.2.0"), ("0.2.0-beta.3", "0.2.0-rc.1"),
    ("0.9.3", "1.0.0-rc.1"), ("1.0.0-rc.1", "1.0.0"), ("1.0.0", "1.0.1"),
])
def test_manifest_versions_keep_the_order_of_app_versions(earlier: str, later: str) -> None:
    """The signed manifest takes numbers only, and the app refuses an older one: a pre-release must sort after
    the final release before it and before its own final release."""
    first = parse_version(release_steps.manifest_version(earlier), "test")
    second = parse_version(release_steps.manifest_version(later), "test")
    assert first.key < second.key


def test_manifest_version_of_a_final_release_is_its_own_and_nothing_precedes_0_0_0() -> None:
    assert release_steps.manifest_version("0.2.0") == "0.2.0"
    assert release_steps.manifest_version("0.2.0-rc.1") == "0.1.99999.3.1"
    with pytest.raises(StepFailed, match="nothing comes before"):
        release_steps.manifest_version("0.0.0-rc.1")


def test_the_tag_must_be_the_apps_version() -> None:
    from app import __version__

    assert release_steps.check_version(f"v{__version__}") == __version__
    assert release_steps.check_version("main") == __version__  # a manual run from a branch: a dry run
    with pytest.raises(StepFailed, match="not the app's version"):
        release_steps.check_version("v99.0.0")


def _linux_build(tmp_path: Path, version: str) -> tuple[Path, Path]:
    dist, build = tmp_path / "dist", tmp_path / "build"
    (build / "prebuilt-backend").mkdir(parents=True)
    dist.mkdir()
    (dist / f"fastmtp-chat-{version}-linux-x86_64.tar.gz").write_bytes(b"tarball")
    (dist / f"fastmtp-chat_{version}_amd64.deb").write_bytes(b"deb")
    (build / "prebuilt-backend" / "fastmtp-backend-0.3.35-cpu-any-d2t-1234.tar.xz").write_bytes(b"backend")
    return dist, build


def test_gather_puts_the_linux_jobs_files_under_their_release_names(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dist, build = _linux_build(tmp_path, "0.2.0")
    out = tmp_path / "out"
    got = release_steps.gather("linux", out, dist=dist, build=build, version="0.2.0")
    assert sorted(p.name for p in got) == sorted(p.name for p in out.iterdir()) == [
        "fastmtp-backend-0.2.0-cpu-linux-x86_64.tar.xz", "fastmtp-chat-0.2.0-linux-x86_64.tar.gz",
        "fastmtp-chat_0.2.0_amd64.deb"]
    assert (out / "fastmtp-backend-0.2.0-cpu-linux-x86_64.tar.xz").read_bytes() == b"backend"
    assert "STAND-IN" not in capsys.readouterr().out
    release_steps.gather("backend", out, dist=dist, build=build, version="0.2.0",
                         archive=build / "prebuilt-backend" / "fastmtp-backend-0.3.35-cpu-any-d2t-1234.tar.xz",
                         flavor="cuda13.0", os_name="windows")
    assert (out / "fastmtp-backend-0.2.0-cuda13.0-windows-x86_64.tar.xz").is_file()


def test_gather_says_which_build_output_is_missing(tmp_path: Path) -> None:
    dist, build = _linux_build(tmp_path, "0.2.0")
    (dist / "fastmtp-chat_0.2.0_amd64.deb").unlink()
    with pytest.raises(StepFailed, match=r"Expected one fastmtp-chat_0\.2\.0_\*\.deb .* found 0: none.*make package"):
        release_steps.gather("linux", tmp_path / "out", dist=dist, build=build, version="0.2.0")
    with pytest.raises(StepFailed, match=r"FastMTP-Chat-Setup-0\.2\.0\.exe"):
        release_steps.gather("windows", tmp_path / "out", dist=dist, build=build, version="0.2.0")


def _vs_tree(root: Path, version: str, dlls: tuple[str, ...]) -> None:
    for dll in dlls:
        folder = "Microsoft.VC143.OpenMP" if dll == "vcomp140.dll" else "Microsoft.VC143.CRT"
        path = root / "VC" / "Redist" / "MSVC" / version / "x64" / folder / dll
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(version.encode())


def test_the_msvc_runtime_dlls_come_from_the_newest_redist(tmp_path: Path) -> None:
    vs = tmp_path / "Microsoft Visual Studio" / "2022" / "Enterprise"
    _vs_tree(vs, "14.38.33130", release_steps.WINDOWS_RUNTIME_DLLS)
    _vs_tree(vs, "14.40.33807", release_steps.WINDOWS_RUNTIME_DLLS)
    (vs / "VC" / "Redist" / "MSVC" / "14.40.33807" / "x64" / "Microsoft.VC143.DebugCRT").mkdir()
    (vs / "VC" / "Redist" / "MSVC" / "14.40.33807" / "x64" / "Microsoft.VC143.DebugCRT" / "vcruntime140.dll"
     ).write_bytes(b"debug")
    lib = tmp_path / "backend" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    copied = release_steps.add_windows_runtime(lib, [vs])
    assert sorted(p.name for p in copied) == sorted(release_steps.WINDOWS_RUNTIME_DLLS)
    assert {p.read_bytes() for p in copied} == {b"14.40.33807"}  # the newer redist, never the debug runtime


def test_a_missing_runtime_dll_stops_the_job(tmp_path: Path) -> None:
    vs = tmp_path / "vs"
    _vs_tree(vs, "14.40.33807", tuple(n for n in release_steps.WINDOWS_RUNTIME_DLLS if n != "vcomp140.dll"))
    with pytest.raises(StepFailed, match=r"vcomp140\.dll were not found"):
        release_steps.add_windows_runtime(tmp_path, [vs])


def test_check_sums_finds_a_changed_byte_and_an_unlisted_file(tmp_path: Path) -> None:
    keys = keygen(tmp_path / "keys")
    release = tmp_path / "release"
    release.mkdir()
    (release / "fastmtp-chat-0.2.0-linux-x86_64.tar.gz").write_bytes(b"x" * 1000)
    sign_release(release, keys.private, version="0.2.0", app=True)
    assert release_steps.check_sums(release) == 1
    (release / "fastmtp-chat-0.2.0-linux-x86_64.tar.gz").write_bytes(b"x" * 999 + b"y")
    (release / "extra.txt").write_text("not signed")
    with pytest.raises(StepFailed, match=r"tar\.gz: sha256 differs; extra\.txt: not listed"):
        release_steps.check_sums(release)


def test_release_sign_app_needs_no_model_patch_and_signs_for_the_apps_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = keygen(tmp_path / "keys")
    release = tmp_path / "release"
    release.mkdir()
    (release / "FastMTP-Chat-Setup-0.2.0.exe").write_bytes(b"installer")
    with pytest.raises(FastMTPError, match=r"HauhauCS-FastMTP-llama\.cpp\.patch"):
        sign_release(release, keys.private, version="0.2.0")  # the model release's mode still wants its patch
    proc = subprocess.run([sys.executable, "-m", "app", "release", "sign", "--app", "--dir",
                           str(release), "--key", str(keys.private), "--version", "0.2.0", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((release / "HauhauCS-RELEASE-MANIFEST.json").read_text())
    provenance = json.loads((release / "FastMTP-PROVENANCE.json").read_text())
    assert manifest["repo"] == provenance["repo"] == APP_REPO
    assert "patch" not in provenance["llama_cpp"] and provenance["app"]["name"] == "FastMTP Chat"
    result = verify_release(release, repo=APP_REPO, trust_fingerprint=keys.fingerprint)
    assert list(result.files) == ["FastMTP-Chat-Setup-0.2.0.exe"]
    # never the model publisher's release; a config folder of its own, so no key pinned for that publisher by
    # another test in the same run answers first
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    with pytest.raises(FastMTPError, match="not HauhauCS"):
        verify_release(release, trust_fingerprint=keys.fingerprint)


def test_public_key_writes_the_public_half_and_names_its_fingerprint(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    keys = keygen(tmp_path / "keys")
    fp = release_steps.public_key(keys.private, tmp_path / "public.pem")
    assert fp == keys.fingerprint
    assert signing.fingerprint(signing.load_public_key((tmp_path / "public.pem").read_bytes(), "x")) == fp
    assert f"signing key {fp} for {APP_REPO}" in capsys.readouterr().out


# ----------------------------------------------------------------------------- codesign.py


@pytest.mark.parametrize("step", sorted(codesign.NEEDS))
def test_signing_without_secrets_is_a_visible_notice_not_a_failure(step: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"unsigned")
    env = {codesign.NEEDS[step][0]: "set"}  # one secret of several: still nothing signed
    assert codesign.main([step, str(target)], env=env) == 0
    out = capsys.readouterr().out
    assert out.startswith("::notice title=Not signed::") and codesign.NEEDS[step][-1] in out
    assert codesign.NEEDS[step][0] not in out
    assert target.read_bytes() == b"unsigned"


def test_signing_with_secrets_refuses_a_file_that_is_not_there(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    env = dict.fromkeys(codesign.NEEDS["windows"], "c2VjcmV0")
    assert codesign.main(["windows", str(tmp_path / "absent.exe")], env=env) == 1
    assert "absent.exe is not there" in capsys.readouterr().err


def test_mach_o_files_are_found_by_their_magic_deepest_first(tmp_path: Path) -> None:
    app = tmp_path / "FastMTP Chat.app" / "Contents"
    (app / "MacOS").mkdir(parents=True)
    (app / "Resources" / "tools" / "bin").mkdir(parents=True)
    (app / "MacOS" / "fastmtp-chat").write_bytes(b"\xcf\xfa\xed\xfe" + b"\0" * 16)
    (app / "Resources" / "tools" / "bin" / "cmake").write_bytes(b"\xca\xfe\xba\xbe" + b"\0" * 16)
    (app / "Resources" / "notes.txt").write_bytes(b"text")
    (app / "Info.plist").write_bytes(b"<plist/>")
    assert [p.name for p in codesign.macho_files(app)] == ["cmake", "fastmtp-chat"]


# ----------------------------------------------------------------------------- make_dmg.sh: hdiutil retried


def _fake_hdiutil(folder: Path, fail_times: int) -> None:
    """An hdiutil that fails ``fail_times`` times ("Resource busy"), then writes the image it was asked for."""
    folder.mkdir()
    script = folder / "hdiutil"
    script.write_text(f"""#!/bin/bash
count_file="{folder}/count"; n=$(cat "$count_file" 2>/dev/null || echo 0); echo $((n + 1)) > "$count_file"
if [ "$n" -lt {fail_times} ]; then echo "hdiutil: create failed - Resource busy" >&2; exit 1; fi
echo image > "${{@: -1}}"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _dmg(tmp_path: Path, fail_times: int, tries: int) -> subprocess.CompletedProcess[str]:
    app = tmp_path / "FastMTP Chat.app"
    (app / "Contents").mkdir(parents=True)
    (app / "Contents" / "Info.plist").write_text("<plist/>")
    _fake_hdiutil(tmp_path / "bin", fail_times)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", HDIUTIL_TRIES=str(tries),
               HDIUTIL_PAUSE="0")
    return subprocess.run(["bash", str(ROOT / "installers" / "macos" / "make_dmg.sh"), str(app),
                           str(tmp_path / "out.dmg")], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_make_dmg_tries_hdiutil_again_when_it_fails(tmp_path: Path) -> None:
    done = _dmg(tmp_path, fail_times=2, tries=5)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.dmg").read_text() == "image\n"
    assert (tmp_path / "bin" / "count").read_text().strip() == "3"
    assert "try 1 of 5" in done.stderr and "try 2 of 5" in done.stderr


def test_make_dmg_gives_up_after_its_tries_in_words(tmp_path: Path) -> None:
    done = _dmg(tmp_path, fail_times=9, tries=2)
    assert done.returncode == 1 and not (tmp_path / "out.dmg").exists()
    assert "hdiutil failed 2 times; no disk image was made" in done.stderr


# ----------------------------------------------------------------------------- release_dry_run.py


def test_the_dry_run_without_a_build_says_to_make_the_package(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from installers import release_dry_run

    (tmp_path / "dist").mkdir()
    assert release_dry_run.main(["--dist", str(tmp_path / "dist"), "--build", str(tmp_path / "build")]) == 1
    err = capsys.readouterr().err
    assert "release dry run FAILED" in err and "make package" in err


def test_the_dry_runs_stand_ins_are_named_and_labelled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from installers import release_dry_run

    archive = tmp_path / "cpu.tar.xz"
    archive.write_bytes(b"linux cpu archive")
    made = release_dry_run.stand_ins(tmp_path / "jobs", archive, "0.2.0")
    assert sorted(p.name for p in made) == ["FastMTP-Chat-0.2.0.dmg", "FastMTP-Chat-Setup-0.2.0.exe",
                                           "fastmtp-backend-0.2.0-cpu-windows-x86_64.tar.xz"]
    assert all("STAND-IN" in p.read_text() for p in made if p.suffix in (".exe", ".dmg"))
    out = capsys.readouterr().out
    assert all(f"{p.name}" in line and "STAND-IN" in line
               for p in made for line in out.splitlines() if line.strip().startswith(p.name))


# ----------------------------------------------------------------------------- smoke.py on Windows and macOS


def _folder_app(dist: Path, backend_reported: str) -> None:
    """A stand-in one-folder app: a script answering --help and quickstart as the frozen app does."""
    folder = dist / "fastmtp-chat"
    (folder / "_internal" / "backends").mkdir(parents=True)
    (folder / "_internal" / "backends" / "fastmtp-backend-0.1.0-cpu-macos-arm64.tar.xz").write_bytes(b"x")
    reply = json.dumps({"reply": "Hello.", "reply_tokens": 12, "draft_acceptance": 0.9,
                        "backend_id": backend_reported})
    program = folder / "fastmtp-chat"
    program.write_text(f"""#!/bin/bash
case "$1" in
  --help) echo "usage: fastmtp-chat quickstart";;
  quickstart) echo '{reply}';;
  *) exit 3;;
esac
""")
    program.chmod(0o755)


@pytest.mark.parametrize(("reported", "ok"), [("0.1.0-cpu-macos-arm64", True), ("some-other-backend", False)])
def test_smoke_on_macos_and_windows_runs_the_folders_quickstart_with_its_bundled_backend(
        reported: str, ok: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundled backend that does not load (the reply came from another, or none) fails the release job."""
    from installers import smoke

    monkeypatch.setattr(sys, "platform", "darwin")
    _folder_app(tmp_path / "dist", reported)
    report = tmp_path / "smoke.json"
    assert smoke.main(["--dist", str(tmp_path / "dist"), "--report", str(report)]) == 1  # other steps: stand-in
    steps = {s["step"]: s for s in json.loads(report.read_text())["steps"]}
    assert steps["one-folder app: quickstart"]["ok"] is ok
    assert ("12 tokens" in steps["one-folder app: quickstart"]["detail"]) is ok


def test_the_signing_key_must_be_the_one_the_app_ships(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Once the app ships its release key, a release signed with any other key would be refused by every installed
    app ("the publisher key has changed"): the sign job stops before signing anything."""
    import shutil

    resources = tmp_path / "bundle" / "resources"
    (resources / "keys").mkdir(parents=True)
    shutil.copy(ROOT / "resources" / "catalog.toml", resources / "catalog.toml")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)  # how a frozen app finds them
    shipped, other = keygen(tmp_path / "shipped"), keygen(tmp_path / "other")
    (resources / "keys" / "fastmtp-chat--fastmtp-chat.pem").write_bytes(shipped.public.read_bytes())
    assert release_steps.public_key(shipped.private) == shipped.fingerprint
    assert "(the key the app ships)" in capsys.readouterr().out
    with pytest.raises(StepFailed, match=f"{other.fingerprint} is not the key the app ships .*{shipped.fingerprint}"):
        release_steps.public_key(other.private)
