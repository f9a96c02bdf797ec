"""A real backend, packed and signed as a publisher would, and another machine to install it on.

Shared by the CLI and the GUI tests of prebuilt backends: ``sign_packed`` packs the real patched CPU
backend and signs it with the real ``release keygen`` and ``release sign-backend`` commands;
``other_machine`` fills fresh data folders with a different backend, installed and active, which an
install that fails must leave exactly as it was. ``sign_feed`` publishes copies of the packed backend under
the names of CPU and CUDA archives, each signed, and the signed backend feed that lists them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.backend import archive, registry
from app.backend.feed import FeedArchive, feed_entry, write_feed
from app.backend.registry import BackendManifest
from app.backend.signing import sign_backend_archive
from app.release import signing

TIMEOUT = 600  # a self-test on a busy 2-core machine; each run ends as soon as it is done
PREVIOUS = "previous-backend"


@dataclass(frozen=True)
class Signed:
    """A packed backend, signed, with the key that signed it."""

    archive: Path
    manifest: Path
    signature: Path
    private: Path
    public: Path
    fingerprint: str
    backend: BackendManifest

    def copy_to(self, folder: Path) -> Path:
        """The archive with its manifest and signature in ``folder``; returns the archive's new path."""
        folder.mkdir(parents=True, exist_ok=True)
        for path in (self.archive, self.manifest, self.signature):
            shutil.copy2(path, folder / path.name)
        return folder / self.archive.name

    def tampered_copy(self, folder: Path) -> Path:
        """A copy whose archive has one byte changed (same size); manifest and signature untouched."""
        copy = self.copy_to(folder)
        data = bytearray(copy.read_bytes())
        data[len(data) // 2] ^= 0x01
        copy.write_bytes(bytes(data))
        return copy

    def served(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in (self.archive, self.manifest, self.signature)}


def run_app(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The result (or the error) is the last line a ``--json`` command prints."""
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def sign_packed(backend: BackendManifest, root: Path) -> Signed:
    """Pack the installed ``backend`` into ``root/dist`` and sign it with a key made in ``root/keys``."""
    packed = archive.pack(backend.id, root / "dist" / "fastmtp-backend-cpu.tar.xz")
    env = dict(os.environ)
    keys = json.loads(run_app(env, "release", "keygen", "--out", str(root / "keys"), "--json").stdout)
    done = run_app(env, "release", "sign-backend", "--archive", str(packed), "--key", keys["private"], "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    return Signed(packed, Path(out["manifest"]), Path(out["signature"]), Path(keys["private"]),
                  Path(keys["public"]), keys["fingerprint"], backend)


def other_machine(root: Path, backend: BackendManifest) -> dict[str, str]:
    """Data and config folders under ``root`` where a copy of ``backend`` under the id ``PREVIOUS`` is installed
    and active; returns the environment for commands run there."""
    env = dict(os.environ, FASTMTP_DATA_DIR=str(root / "data"), FASTMTP_CONFIG_DIR=str(root / "config"))
    env.pop("FASTMTP_BACKEND_DIR", None)
    backends = root / "data" / "backends"
    shutil.copytree(registry.backend_dir(backend.id), backends / PREVIOUS)
    manifest = json.loads((backends / PREVIOUS / registry.MANIFEST).read_text())
    (backends / PREVIOUS / registry.MANIFEST).write_text(json.dumps(dict(manifest, id=PREVIOUS)))
    (backends / "active.json").write_text(json.dumps({"id": PREVIOUS}))
    return env


def installed(data_dir: Path) -> tuple[list[str], str | None]:
    """The backend folders in ``data_dir`` (hidden staging folders included) and the active backend's id."""
    backends = data_dir / "backends"
    active = json.loads((backends / "active.json").read_text()).get("id")
    return sorted(p.name for p in backends.iterdir() if p.is_dir()), active


# ----------------------------------------------------------------------------- a signed backend feed


@dataclass(frozen=True)
class Variant:
    """How the feed labels one copy of the packed backend (the bytes are the CPU build; the labels are what
    the choice reads, so a CPU-only machine can test the choice between CUDA archives end to end)."""

    name: str
    flavor: Literal["cpu", "cuda"] = "cuda"
    cuda_version: str | None = None
    cuda_archs: tuple[str, ...] = ()
    min_driver: str | None = None
    platform: Literal["linux", "windows"] = "linux"


FEED_VARIANTS = (
    Variant("fastmtp-backend-cpu-linux-x86_64.tar.xz", "cpu"),
    Variant("fastmtp-backend-cuda12.4-linux-x86_64.tar.xz", "cuda", "12.4", ("75", "86", "89", "90"), "550"),
    Variant("fastmtp-backend-cuda12.8-linux-x86_64.tar.xz", "cuda", "12.8", ("75", "86", "89", "90", "120"),
            "570.26"),
    Variant("fastmtp-backend-cuda13.0-windows-x86_64.tar.xz", "cuda", "13.0", ("75", "86", "89", "90", "120"),
            "580.88", "windows"),
)


@dataclass(frozen=True)
class SignedFeed:
    """A feed folder as a publisher uploads it: the feed, its .sig, and each archive with its signed manifest."""

    folder: Path
    feed: Path
    fingerprint: str
    archives: dict[str, FeedArchive]

    def served(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in self.folder.iterdir() if p.is_file()}


def sign_feed(signed: Signed, folder: Path, variants: tuple[Variant, ...] = FEED_VARIANTS,
              key_path: Path | None = None) -> SignedFeed:
    """Copy the packed backend under each variant's name into ``folder``, sign each copy (``release sign-backend``'s
    function) and a feed listing them with ``key_path`` (default: the key that signed ``signed``)."""
    key_path = key_path or signed.private
    key = signing.load_private_key(key_path)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for variant in variants:
        copy = folder / variant.name
        shutil.copy2(signed.archive, copy)
        claim = sign_backend_archive(copy, key_path).claim
        entries.append(feed_entry(copy, claim, platform=variant.platform, flavor=variant.flavor,
                                  cuda_version=variant.cuda_version, cuda_archs=variant.cuda_archs,
                                  min_driver=variant.min_driver))
    written = write_feed(entries, key, folder)
    return SignedFeed(folder, written.feed, signing.fingerprint(key.public_key()), {e.name: e for e in entries})
