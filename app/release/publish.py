"""Write a conforming signed release from a folder and a private key (``release sign``, ``release keygen``).

For publishers, and for our tests, which need real signed releases to attack. The output follows
``docs/release-format.md`` exactly; the verifier accepts more variants than this writes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app import __version__ as app_version
from app.core import safe_paths
from app.core.errors import FastMTPError
from app.core.hashing import sha256_file
from app.release import signing
from app.release.catalog import load_catalog
from app.release.manifest import FileEntry, check_file_name, format_sha256sums, parse_time, parse_version

LLAMA_CPP_COMMIT = "4df29be"
MANIFEST_FORMAT = "hauhaucs-release-manifest/1"
PROVENANCE_FORMAT = "fastmtp-provenance/1"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    fingerprint: str


@dataclass(frozen=True)
class SignedRelease:
    folder: Path
    version: str
    files: list[FileEntry]
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "version": self.version, "fingerprint": self.fingerprint,
                "files": [f.to_dict() for f in self.files]}


def keygen(out: Path) -> KeyPair:
    """``out/private.pem`` (mode 0600, never overwritten) and ``out/public.pem``."""
    out.mkdir(parents=True, exist_ok=True)
    private, public = out / "private.pem", out / "public.pem"
    if private.exists():
        raise FastMTPError(f"{private} already exists; a key is never overwritten.", "Pick another --out folder.")
    key = signing.generate_key()
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(signing.private_key_pem(key))
    public.write_bytes(signing.public_key_pem(key.public_key()))
    return KeyPair(private, public, signing.fingerprint(key.public_key()))


def _looks_private(path: Path) -> bool:
    with path.open("rb") as handle:
        head = handle.read(200)
    return head.startswith(b"-----BEGIN") and b"PRIVATE KEY" in head


def _payload(folder: Path, key_path: Path) -> list[Path]:
    """Every plain, visible file of the folder that is not an integrity file; sub-folders are ignored."""
    if key_path.resolve().parent == folder.resolve():
        raise FastMTPError(f"The private key {key_path} is inside the release folder.",
                           "Keep the private key outside the folder you publish.")
    skip = set(load_catalog().integrity.metadata_names)
    files = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name in skip or not path.is_file() or path.is_symlink():
            continue
        check_file_name(path.name, str(folder))
        if _looks_private(path):
            raise FastMTPError(f"{path.name} looks like a private key; it would be published.",
                               "Move it out of the release folder.")
        files.append(path)
    return files


def _default_version(manifest_path: Path) -> int:
    """One more than the folder's current manifest version, or 1."""
    try:
        current = json.loads(manifest_path.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return 1
    return current + 1 if isinstance(current, int) and not isinstance(current, bool) else 1


def _json_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode("utf-8")


def app_repository() -> str:
    """The app's own repository id (``[app_updates] repo``): what the app's releases, backend archives and feeds are
    signed for, so they never claim the model publisher's repository (one key is pinned per repository)."""
    from app.release.updates import default_source

    return default_source().repo


def sign_release(folder: Path, key_path: Path, *, version: str | None = None, expires: str | None = None,
                 repo: str | None = None, llama_cpp_commit: str = LLAMA_CPP_COMMIT, app: bool = False) -> SignedRelease:
    """Hash the folder's files and write SHA256SUMS, the manifest, the provenance, their signatures and the key.

    ``app``: a FastMTP Chat release (installers, backend archives, feeds), signed for the app's own repository
    unless ``repo`` says otherwise; it carries no model patch, so none is required and the provenance names the
    app's build instead of a llama.cpp patch.
    """
    catalog = load_catalog()
    integ = catalog.integrity
    if not folder.is_dir():
        raise FastMTPError(f"{folder} is not a folder.", "Give the folder that holds the release files.")
    key = signing.load_private_key(key_path)
    files = [FileEntry(p.name, sha256_file(p), p.stat().st_size) for p in _payload(folder, key_path)]
    patch = next((f for f in files if f.name == integ.patch), None)
    if app:
        repo = repo or app_repository()
        if not files:
            raise FastMTPError(f"{folder} holds no files to sign.", "Gather the release files into it first.")
    elif patch is None:
        raise FastMTPError(f"{folder} has no {integ.patch}.",
                           "The release ships the llama.cpp patch its models need; put it in the folder.")
    version_value: int | str = int(version) if version and version.isdigit() and len(version) < 100 else \
        version or _default_version(folder / integ.manifest)
    parsed_version = parse_version(version_value, "--version")
    if expires is not None:
        parse_time(expires, "--expires", "the expiry")
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    listing = [f.to_dict() for f in files]
    manifest: dict[str, Any] = {"format": MANIFEST_FORMAT, "repo": repo or catalog.repo, "version": version_value,
                                "date": now}
    if expires is not None:
        manifest["expires"] = expires
    manifest["files"] = listing
    llama_cpp: dict[str, Any] = {"repository": "https://github.com/ggml-org/llama.cpp", "commit": llama_cpp_commit}
    if patch is not None:
        llama_cpp["patch"] = patch.to_dict()
    provenance: dict[str, Any] = {
        "format": PROVENANCE_FORMAT, "repo": repo or catalog.repo, "version": version_value, "date": now,
        "llama_cpp": llama_cpp, "files": [f for f in listing if f["name"] != integ.patch],
        "tool": f"fastmtp-chat {app_version} release sign{' --app' if app else ''}",
    }
    if app:
        provenance["app"] = {"name": "FastMTP Chat", "version": app_version}
    outputs = {integ.checksums: format_sha256sums({f.name: f for f in files}).encode("utf-8"),
               integ.manifest: _json_bytes(manifest), integ.provenance: _json_bytes(provenance),
               integ.public_key: signing.public_key_pem(key.public_key())}
    for signed in (integ.manifest, integ.provenance):
        names = integ.signature_names(signed)
        outputs[names[0]] = signing.sign(key, outputs[signed])
        for stale in names[1:]:
            (folder / stale).unlink(missing_ok=True)
    for name, data in outputs.items():
        safe_paths.write_replacing(folder / name, data)  # never through a link planted in the release folder
    return SignedRelease(folder, parsed_version.text, files, signing.fingerprint(key.public_key()))
