"""The backend feed's format and the choice of an archive for a machine: pure functions, no network, no backend.

The choice is what decides whether a GPU owner gets a backend that runs, so every branch is pinned here:
no GPU (the CPU archive), the architecture (``no archive for sm_61``), the driver (``driver 525 is older than
the 550 that CUDA 12.4 needs``), the newest CUDA the driver runs, the platform, and the feed's signature.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.feed import (
    FORMAT,
    FeedArchive,
    Machine,
    NoFittingArchive,
    detect_machine,
    normalize_arch,
    parse_driver_version,
    parse_feed,
    select_archive,
    verify_feed,
    write_feed,
)
from app.backend.signing import backend_repo
from app.core.errors import TrustError, VerificationError
from app.release import signing, trust

REPO = backend_repo()  # the app's own repository: what backend archives and feeds are signed for
SHA = "ab" * 32


def cuda(name: str, version: str, driver: str, archs: tuple[str, ...], platform: str = "linux") -> FeedArchive:
    return FeedArchive(name, 1000, SHA, "cuda", platform, version, driver, archs, "0.3.35", "cd" * 32)  # type: ignore[arg-type]


def cpu(name: str = "cpu-linux.tar.xz", platform: str = "linux") -> FeedArchive:
    return FeedArchive(name, 1000, SHA, "cpu", platform, None, None, (), "0.3.35", "cd" * 32)  # type: ignore[arg-type]


ALL = ("75", "86", "89", "90", "120")
FEED = (
    cpu(),
    cpu("cpu-windows.tar.xz", "windows"),
    cuda("cuda12.4-linux.tar.xz", "12.4", "550", ("75", "86", "89", "90")),
    cuda("cuda12.8-linux.tar.xz", "12.8", "570.26", ALL),
    cuda("cuda13.0-linux.tar.xz", "13.0", "580.65.06", ALL),
    cuda("cuda13.0-windows.tar.xz", "13.0", "580.88", ALL, "windows"),
)


def pick(machine: Machine, archives: tuple[FeedArchive, ...] = FEED) -> str | None:
    chosen = select_archive(archives, machine).archive
    return chosen.name if chosen else None


# ----------------------------------------------------------------------------- choosing


def test_no_gpu_gets_the_cpu_archive_of_its_platform() -> None:
    got = select_archive(FEED, Machine("linux"))
    assert got.archive is not None and got.archive.name == "cpu-linux.tar.xz" and not got.build_here
    assert "No NVIDIA GPU here" in got.reason
    assert pick(Machine("windows")) == "cpu-windows.tar.xz"


def test_the_newest_cuda_the_driver_supports_wins() -> None:
    assert pick(Machine("linux", ("89",), "590.10")) == "cuda13.0-linux.tar.xz"
    assert pick(Machine("linux", ("89",), "580.65.06")) == "cuda13.0-linux.tar.xz"  # exactly the minimum
    assert pick(Machine("linux", ("89",), "575.51.03")) == "cuda12.8-linux.tar.xz"
    got = select_archive(FEED, Machine("linux", ("89",), "560.35.03"))
    assert got.archive is not None and got.archive.name == "cuda12.4-linux.tar.xz"
    assert "sm_89" in got.reason and "560.35.03" in got.reason
    passed = dict(line.split(": ", 1) for line in got.passed_over)
    assert passed["cuda13.0-linux.tar.xz"] == "driver 560.35.03 is older than the 580.65.06 that CUDA 13.0 needs"
    assert passed["cpu-linux.tar.xz"] == "a CPU backend, and this machine has an NVIDIA GPU"
    assert passed["cuda13.0-windows.tar.xz"] == "it is for windows"


def test_driver_versions_compare_as_numbers_not_text() -> None:
    # "1000" < "580" as text; 9 < 65 as numbers
    assert pick(Machine("linux", ("90",), "1000.1")) == "cuda13.0-linux.tar.xz"
    assert pick(Machine("linux", ("90",), "580.9")) == "cuda12.8-linux.tar.xz"


def test_an_architecture_in_no_archive_is_named_and_means_build_here() -> None:
    got = select_archive(FEED, Machine("linux", ("61",), "590.10"))
    assert got.archive is None and got.build_here
    assert got.reason.startswith("No archive for sm_61")
    assert "sm_75, sm_86, sm_89, sm_90, sm_120" in got.reason
    assert got.to_dict()["advice"] == "Build here: `python -m app backend build`"


def test_sm_120_needs_an_archive_that_holds_it() -> None:
    assert pick(Machine("linux", ("120",), "560.35")) is None  # only the 12.8+ archives hold sm_120
    got = select_archive(FEED, Machine("linux", ("120",), "560.35"))
    assert got.reason == "Driver 560.35 is older than the 570.26 that CUDA 12.8 needs."
    assert pick(Machine("linux", ("120",), "570.86")) == "cuda12.8-linux.tar.xz"


def test_a_driver_too_old_for_every_archive_names_the_nearest_minimum() -> None:
    got = select_archive(FEED, Machine("linux", ("86",), "525"))
    assert got.archive is None
    assert got.reason == "Driver 525 is older than the 550 that CUDA 12.4 needs."


def test_every_gpu_of_the_machine_must_be_in_the_one_archive() -> None:
    two = (cuda("a.tar.xz", "12.4", "550", ("86",)), cuda("b.tar.xz", "12.4", "550", ("120",)))
    got = select_archive(two, Machine("linux", ("86", "120"), "590"))
    assert got.archive is None and got.reason == "No single archive holds all of sm_86, sm_120."
    assert pick(Machine("linux", ("86", "89"), "590")) == "cuda13.0-linux.tar.xz"


def test_an_unknown_driver_is_said_rather_than_guessed() -> None:
    got = select_archive(FEED, Machine("linux", ("89",), None))
    assert got.archive is None and "driver version is unknown" in got.reason and "--driver" in got.reason


def test_the_platform_matters() -> None:
    assert pick(Machine("windows", ("89",), "581.00")) == "cuda13.0-windows.tar.xz"
    assert pick(Machine("windows", ("89",), "575")) is None
    got = select_archive(FEED, Machine("macos"))
    assert got.archive is None and got.reason == "The feed has no archive for macos."
    no_cpu = tuple(a for a in FEED if a.flavor == "cuda")
    assert select_archive(no_cpu, Machine("linux")).reason == \
        "No NVIDIA GPU here, and the feed has no CPU archive for linux."


def test_a_gpu_machine_with_only_cpu_archives_builds_here() -> None:
    got = select_archive((cpu(),), Machine("linux", ("89",), "590"))
    assert got.archive is None and got.reason == "The feed has no CUDA archive for linux."


def test_the_no_fit_error_carries_the_reason_and_the_build_command() -> None:
    selection = select_archive(FEED, Machine("linux", ("61",), "590"))
    error = NoFittingArchive(selection, "http://127.0.0.1/feed.json")
    assert "No archive for sm_61" in error.message and "python -m app backend build" in error.advice
    data = error.to_json()
    assert data["kind"] == "no-fitting-archive" and data["build_command"] == "python -m app backend build"
    assert data["selection"]["build_here"] is True and data["reason"] == selection.reason


# ----------------------------------------------------------------------------- this machine


def test_overrides_replace_detection() -> None:
    machine = detect_machine(["sm_89", "8.9", "90"], "560.35.03", platform="linux")
    assert machine == Machine("linux", ("89", "90"), "560.35.03")
    assert detect_machine([], platform="win32") == Machine("windows", (), None)
    with pytest.raises(VerificationError, match="not a GPU architecture"):
        normalize_arch("ampere")
    with pytest.raises(VerificationError, match="not an NVIDIA driver version"):
        detect_machine(["89"], "latest")


def test_the_driver_version_is_read_from_the_nvidia_smi_header() -> None:
    header = "| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |"
    assert parse_driver_version(header) == "580.65.06"
    assert parse_driver_version("no driver here") is None


# ----------------------------------------------------------------------------- the format and its signature


def test_written_feeds_read_back_and_verify_with_the_trusted_key(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    key = signing.generate_key()
    written = write_feed(FEED, key, tmp_path / "out")
    data, sig = written.feed.read_bytes(), written.signature.read_bytes()
    assert json.loads(data)["format"] == FORMAT and written.body.archives == FEED
    trust.pin_key(REPO, key.public_key())
    verified = verify_feed(data, sig, "http://127.0.0.1/fastmtp-backends.json")
    assert verified.fingerprint == written.fingerprint and verified.key_source == "user"
    assert verified.archive_url(FEED[2]) == "http://127.0.0.1/cuda12.4-linux.tar.xz"


def test_a_feed_signed_by_another_key_is_refused_naming_both_fingerprints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    ours, theirs = signing.generate_key(), signing.generate_key()
    trust.pin_key(REPO, ours.public_key())
    written = write_feed(FEED, theirs, tmp_path / "out")
    with pytest.raises(TrustError) as refused:
        verify_feed(written.feed.read_bytes(), written.signature.read_bytes(), "http://127.0.0.1/f.json")
    text = str(refused.value)
    assert "THE PUBLISHER KEY HAS CHANGED" in text
    assert signing.fingerprint(theirs.public_key()) in text and signing.fingerprint(ours.public_key()) in text
    # the trusted key's feed, with a signature by another key: the signature does not hold
    good = write_feed(FEED, ours, tmp_path / "good")
    forged = signing.sign(theirs, good.feed.read_bytes())
    with pytest.raises(VerificationError, match="does not verify with the publisher key"):
        verify_feed(good.feed.read_bytes(), forged, "http://127.0.0.1/f.json")


def test_an_untrusted_key_needs_its_fingerprint_and_a_wrong_one_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    key, other = signing.generate_key(), signing.generate_key()
    written = write_feed(FEED, key, tmp_path / "out")
    data, sig = written.feed.read_bytes(), written.signature.read_bytes()
    with pytest.raises(TrustError, match="not trusted yet"):
        verify_feed(data, sig, "http://x/f.json")
    wrong = signing.fingerprint(other.public_key())
    with pytest.raises(TrustError, match=f"signed with the key {written.fingerprint}, not the {wrong}"):
        verify_feed(data, sig, "http://x/f.json", trust_fingerprint=wrong)
    verified = verify_feed(data, sig, "http://x/f.json", trust_fingerprint=written.fingerprint)
    assert verified.key_source == "new" and trust.user_keys(REPO) == []  # pinned only once an archive installed


@pytest.mark.parametrize(("change", "words"), [
    (lambda a: a.update(flavor="rocm"), "flavor"),
    (lambda a: a.update(platform="macos"), "platform"),
    (lambda a: a.update(cuda_archs=["ampere"]), "GPU architecture"),
    (lambda a: a.update(min_driver="new"), "driver version"),
    (lambda a: a.update(cuda_version="twelve"), "cuda_version"),
    (lambda a: a.update(name="../evil.tar.xz"), "evil"),
    (lambda a: a.update(size=-1), "size"),
    (lambda a: a.update(sha256="x"), "sha256"),
])
def test_a_malformed_archive_entry_is_refused_in_words(change: object, words: str) -> None:
    body = {"format": FORMAT, "repo": REPO, "archives": [FEED[3].to_dict()]}
    change(body["archives"][0])  # type: ignore[operator]
    with pytest.raises(VerificationError, match=words):
        parse_feed(json.dumps(body).encode())


def test_a_feed_of_another_format_or_with_duplicates_is_refused() -> None:
    with pytest.raises(VerificationError, match="format"):
        parse_feed(json.dumps({"format": "other/1", "repo": REPO, "archives": []}).encode())
    twice = {"format": FORMAT, "repo": REPO, "archives": [FEED[0].to_dict(), FEED[0].to_dict()]}
    with pytest.raises(VerificationError, match="twice"):
        parse_feed(json.dumps(twice).encode())
    with pytest.raises(VerificationError, match="not valid JSON"):
        parse_feed(b"{")
    assert parse_feed(json.dumps({"format": FORMAT, "repo": REPO,
                                  "archives": [replace(FEED[0]).to_dict()]}).encode()).archives == (FEED[0],)
