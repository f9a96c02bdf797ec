"""A backend archive whose xz stream is broken mid-way or cut short ends in words, never a traceback (issue 37
item 8): ``release sign-backend`` refuses to sign it, ``backend unpack`` refuses it, and ``backend install`` of one
signed as it is refuses it after the signature and hash check, with nothing installed. Real archives, real keys,
the real CLI in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from app.backend.signing import manifest_name, sign_backend_archive, signature_name
from app.core.hashing import sha256_file
from app.release import signing
from app.release.publish import keygen

REPO_ROOT = Path(__file__).resolve().parents[3]
NAME = "fastmtp-backend-test-cpu-linux-x86_64.tar.xz"


def _manifest() -> dict[str, object]:
    return {"id": "test-cpu", "llama_cpp_python_version": "0.3.0", "llama_cpp_commit": "abc", "sdist_sha256": "0" * 64,
            "patch_name": None, "patch_sha256": None, "flavor": "cpu", "cmake_args": [], "cuda_version": None,
            "cuda_archs": [], "compiler": "cc", "built_at": "2026-01-01T00:00:00Z", "build_seconds": 1.0}


@pytest.fixture
def archives(tmp_path: Path) -> dict[str, Path]:
    source = tmp_path / "src" / "test-cpu"
    source.mkdir(parents=True)
    (source / "fastmtp-backend.json").write_text(json.dumps(_manifest()))
    (source / "lib.so").write_bytes(os.urandom(400_000))  # incompressible: the break lands inside its bytes
    good = tmp_path / "good" / NAME
    good.parent.mkdir()
    with tarfile.open(good, "w:xz") as tar:
        tar.add(source, arcname="test-cpu")
    data = good.read_bytes()
    broken = bytearray(data)
    for i in range(len(data) // 2, len(data) // 2 + 64):
        broken[i] ^= 0xFF
    out = {"good": good}
    for kind, body in (("broken", bytes(broken)), ("truncated", data[: len(data) * 2 // 3])):
        path = tmp_path / kind / NAME
        path.parent.mkdir()
        path.write_bytes(body)
        out[kind] = path
    return out


def _app(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
           "FASTMTP_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("FASTMTP_BACKEND_DIR", None)
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def _sign_as_is(damaged: Path, good: Path, private: Path) -> None:
    """What a careless publisher would do: sign the damaged bytes (the good one's claim with their hash and size)."""
    signed = sign_backend_archive(good, private)
    body = json.loads(signed.manifest.read_bytes())
    body["archive"].update(size=damaged.stat().st_size, sha256=sha256_file(damaged))
    data = (json.dumps(body, indent=2) + "\n").encode()
    damaged.with_name(manifest_name(NAME)).write_bytes(data)
    damaged.with_name(signature_name(NAME)).write_bytes(signing.sign(signing.load_private_key(private), data))


@pytest.mark.parametrize("kind", ["broken", "truncated"])
def test_a_damaged_archive_is_refused_in_words(tmp_path: Path, archives: dict[str, Path], kind: str) -> None:
    keys = keygen(tmp_path / "keys")
    damaged = archives[kind]

    signed = _app(tmp_path, "release", "sign-backend", "--archive", str(damaged), "--key", str(keys.private))
    assert signed.returncode in range(1, 5), signed.stderr
    assert "damaged" in signed.stderr and "Traceback" not in signed.stderr
    assert not damaged.with_name(manifest_name(NAME)).exists()

    unpacked = _app(tmp_path, "backend", "unpack", str(damaged))
    assert unpacked.returncode in range(1, 5), unpacked.stderr
    assert "Could not" in unpacked.stderr and "Traceback" not in unpacked.stderr

    _sign_as_is(damaged, archives["good"], keys.private)
    installed = _app(tmp_path, "backend", "install", str(damaged), "--trust-fingerprint", keys.fingerprint)
    assert installed.returncode in range(1, 5), installed.stderr
    assert "Could not unpack the backend archive" in installed.stderr and "Traceback" not in installed.stderr
    backends = tmp_path / "data" / "backends"
    assert not backends.exists() or not [p for p in backends.iterdir() if not p.name.startswith(".")]
