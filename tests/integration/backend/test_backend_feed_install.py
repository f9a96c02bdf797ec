"""``backend install --feed``: the signed backend feed, served by a real HTTP server on 127.0.0.1, end to end.

The archives are copies of the real patched CPU backend, each signed with ``release sign-backend``'s function and
labelled in the feed as the CPU and CUDA variants a release publishes; ``--gpu-arch`` and ``--driver`` stand in
for the GPU and the driver, so the choice between CUDA archives is tested on a machine without one. The real
CLI picks, downloads only the chosen archive, checks its signed claim against the feed, self-tests and installs
it. A feed signed by another key is refused naming the fingerprints; a machine nothing fits is told why and to
build here.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.backend.feed import FEED_NAME, write_feed
from app.backend.registry import BackendManifest
from app.backend.signing import backend_repo
from app.release import signing
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer
from tests.helpers.signed_backend import (
    PREVIOUS,
    Signed,
    SignedFeed,
    last_json,
    other_machine,
    run_app,
    sign_feed,
    sign_packed,
)
from tests.helpers.signed_backend import installed as installed_in

CUDA124 = "fastmtp-backend-cuda12.4-linux-x86_64.tar.xz"
CUDA128 = "fastmtp-backend-cuda12.8-linux-x86_64.tar.xz"
CPU = "fastmtp-backend-cpu-linux-x86_64.tar.xz"


@pytest.fixture(scope="module")
def signed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Signed:
    return sign_packed(patched_backend, module_tmp.mktemp("publisher"))


@pytest.fixture(scope="module")
def feed(signed: Signed, module_tmp: ModuleFolders) -> SignedFeed:
    return sign_feed(signed, module_tmp.mktemp("feed"))


@pytest.fixture
def machine(tmp_path: Path, signed: Signed) -> dict[str, str]:
    env = other_machine(tmp_path, signed.backend)
    env.pop("FASTMTP_BACKEND_FEED_URL", None)
    return env


def installed(env: dict[str, str]) -> tuple[list[str], str | None]:
    return installed_in(Path(env["FASTMTP_DATA_DIR"]))


def fetched(server: ReleaseServer) -> list[str]:
    return [r.path.rsplit("/", 1)[-1] for r in server.requests if r.method == "GET"]


def install(env: dict[str, str], server: ReleaseServer, fingerprint: str,
            *args: str) -> subprocess.CompletedProcess[str]:
    return run_app(env, "backend", "install", "--feed", server.url(FEED_NAME), "--trust-fingerprint", fingerprint,
                   "--json", *args)


def selection_line(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return next(line for line in lines if line.get("kind") == "selection")


# ----------------------------------------------------------------------------- picking and installing


def test_the_archive_for_the_gpu_and_driver_is_picked_checked_and_installed(
        feed: SignedFeed, signed: Signed, machine: dict[str, str]) -> None:
    with ReleaseServer(feed.served()) as server:
        done = install(machine, server, feed.fingerprint, "--gpu-arch", "sm_89", "--driver", "560.35.03")
        assert done.returncode == 0, done.stdout + done.stderr
        got_files = fetched(server)
    picked = selection_line(done)
    assert picked["archive"]["name"] == CUDA124 and picked["build_here"] is False
    assert picked["machine"] == {"platform": "linux", "gpu_archs": ["89"], "driver": "560.35.03"}
    assert "sm_89" in picked["reason"] and "560.35.03" in picked["reason"]
    assert any(line.startswith(f"{CUDA128}: driver 560.35.03 is older than the 570.26")
               for line in picked["passed_over"])
    got = last_json(done)
    assert got["kind"] == "result" and got["backend"] == signed.backend.id and got["active"] is True
    assert got["selection"]["archive"]["name"] == CUDA124 and got["feed_signed_by"] == feed.fingerprint
    assert got["origin"]["archive"] == CUDA124 and got["signed_by"] == feed.fingerprint
    assert got["selftest"]["ok"] is True
    assert installed(machine) == (sorted([PREVIOUS, signed.backend.id]), signed.backend.id)
    # the feed first, then only the chosen archive's manifest and bytes; the others were never fetched
    assert sorted(got_files[:2]) == [FEED_NAME, FEED_NAME + ".sig"]  # fetched side by side
    assert got_files.index(CUDA124 + ".manifest.json") < got_files.index(CUDA124)
    assert not [name for name in got_files if name.startswith((CUDA128, CPU))]
    # the key is pinned now: the next install from the feed needs no fingerprint
    trusted = json.loads(run_app(machine, "trust", "list", "--json").stdout)
    assert [k["fingerprint"] for k in trusted] == [feed.fingerprint]


def test_a_newer_driver_gets_the_newer_cuda_and_no_gpu_gets_the_cpu_archive(
        feed: SignedFeed, machine: dict[str, str]) -> None:
    with ReleaseServer(feed.served()) as server:
        newer = install(machine, server, feed.fingerprint, "--gpu-arch", "120", "--driver", "575.51.03",
                        "--no-activate")
        assert newer.returncode == 0, newer.stdout + newer.stderr
        assert last_json(newer)["selection"]["archive"]["name"] == CUDA128
        cpu = install(machine, server, feed.fingerprint, "--gpu-arch", "none", "--no-activate")
        assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    picked = last_json(cpu)["selection"]
    assert picked["archive"]["name"] == CPU and picked["reason"].startswith("No NVIDIA GPU here")
    assert installed(machine)[1] == PREVIOUS  # --no-activate


# ----------------------------------------------------------------------------- nothing fits: build here


@pytest.mark.parametrize(("arch", "driver", "reason"), [
    ("61", "590.10", "No archive for sm_61 (the feed's CUDA archives hold sm_75, sm_86, sm_89, sm_90, sm_120)."),
    ("86", "525.60", "Driver 525.60 is older than the 550 that CUDA 12.4 needs."),
])
def test_nothing_fits_says_why_and_to_build_here(feed: SignedFeed, machine: dict[str, str], arch: str, driver: str,
                                                 reason: str) -> None:
    with ReleaseServer(feed.served()) as server:
        done = install(machine, server, feed.fingerprint, "--gpu-arch", arch, "--driver", driver)
        got_files = fetched(server)
    assert done.returncode == 1, done.stdout + done.stderr
    error = last_json(done)
    assert error["kind"] == "no-fitting-archive" and error["reason"] == reason
    assert error["build_command"] == "python -m app backend build"
    assert "python -m app backend build" in error["advice"]
    assert reason in error["message"] and error["selection"]["build_here"] is True
    assert sorted(got_files) == [FEED_NAME, FEED_NAME + ".sig"]  # no archive was downloaded
    assert installed(machine) == ([PREVIOUS], PREVIOUS)
    assert json.loads(run_app(machine, "trust", "list", "--json").stdout) == []  # nothing installed: no key pinned


def test_nothing_fits_in_words_for_people(feed: SignedFeed, machine: dict[str, str]) -> None:
    with ReleaseServer(feed.served()) as server:
        done = run_app(machine, "backend", "install", "--feed", server.url(FEED_NAME), "--trust-fingerprint",
                       feed.fingerprint, "--gpu-arch", "61", "--driver", "590")
    assert done.returncode == 1
    assert "No archive for sm_61" in done.stderr and "Build here instead: `python -m app backend build`" in done.stderr


# ----------------------------------------------------------------------------- refusals: exit 4, nothing installed


def test_a_feed_signed_by_another_key_is_refused_naming_the_fingerprints(
        feed: SignedFeed, signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    other = signing.generate_key()
    forged = tmp_path / "forged"
    write_feed(list(feed.archives.values()), other, forged)
    files = dict(feed.served(), **{p.name: p.read_bytes() for p in forged.iterdir()})
    assert run_app(machine, "trust", "add", str(signed.public), "--repo", backend_repo(), "--json").returncode == 0
    with ReleaseServer(files) as server:
        done = run_app(machine, "backend", "install", "--feed", server.url(FEED_NAME), "--gpu-arch", "89",
                       "--driver", "560", "--json")
        pinned_fp = install(machine, server, feed.fingerprint, "--gpu-arch", "89", "--driver", "560")
        got_files = fetched(server)
    assert done.returncode == 4, done.stdout + done.stderr
    error = last_json(done)
    other_fp = signing.fingerprint(other.public_key())
    assert error["error"] == "TrustError" and "THE PUBLISHER KEY HAS CHANGED" in error["message"]
    assert other_fp in error["message"] and feed.fingerprint in error["message"]
    assert pinned_fp.returncode == 4 and f"signed with the key {other_fp}, not the {feed.fingerprint}" in \
        last_json(pinned_fp)["message"]
    assert not [name for name in got_files if name.endswith(".tar.xz")]
    assert installed(machine) == ([PREVIOUS], PREVIOUS)


def test_an_archive_whose_signed_claim_differs_from_the_feed_is_refused_before_its_bytes(
        feed: SignedFeed, signed: Signed, machine: dict[str, str], tmp_path: Path) -> None:
    """The feed and the archive are each signed by the right key, but the feed lists other bytes."""
    entries = [replace(a, sha256="0" * 64) if a.name == CUDA124 else a for a in feed.archives.values()]
    lying = tmp_path / "lying"
    write_feed(entries, signing.load_private_key(signed.private), lying)
    files = dict(feed.served(), **{p.name: p.read_bytes() for p in lying.iterdir()})
    with ReleaseServer(files) as server:
        done = install(machine, server, feed.fingerprint, "--gpu-arch", "89", "--driver", "560")
        got_files = fetched(server)
    assert done.returncode == 4, done.stdout + done.stderr
    error = last_json(done)
    assert f"{CUDA124} is not the archive the feed lists" in error["message"] and "sha256" in error["message"]
    assert CUDA124 not in got_files and installed(machine) == ([PREVIOUS], PREVIOUS)


def test_without_a_feed_url_the_catalogs_is_used_and_an_unreachable_one_is_a_network_error(
        machine: dict[str, str]) -> None:
    env = dict(machine, FASTMTP_BACKEND_FEED_URL="http://127.0.0.1:9/fastmtp-backends.json")
    done = run_app(env, "backend", "install", "--gpu-arch", "89", "--driver", "560", "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "127.0.0.1:9" in json.dumps(last_json(done)) and installed(machine) == ([PREVIOUS], PREVIOUS)
    assert os.environ.get("FASTMTP_BACKEND_FEED_URL") is None


# ----------------------------------------------------------------------------- the publisher's side


def test_sign_feed_lists_signed_archives_from_their_claims(signed: Signed, tmp_path: Path) -> None:
    copy = signed.copy_to(tmp_path / "dist")
    done = run_app(dict(os.environ), "backend", "sign-feed", f"windows={copy}", "--key", str(signed.private),
                   "--out", str(tmp_path / "dist"), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert out["fingerprint"] == signed.fingerprint and len(out["archives"]) == 1
    entry = out["archives"][0]
    assert entry["name"] == copy.name and entry["platform"] == "windows" and entry["flavor"] == "cpu"
    assert entry["patch_id"] == signed.backend.patch_sha256 and entry["cuda_archs"] == []
    data = (tmp_path / "dist" / FEED_NAME).read_bytes()
    public = signing.load_public_key(signed.public.read_bytes(), "public.pem")
    signing.verify(public, data, (tmp_path / "dist" / (FEED_NAME + ".sig")).read_bytes(), FEED_NAME)
    other = run_app(dict(os.environ), "backend", "sign-feed", str(copy), "--key", str(signed.private), "--out",
                    str(tmp_path / "x"), "--json")
    assert other.returncode == 1 and "Which platform" in last_json(other)["message"]
