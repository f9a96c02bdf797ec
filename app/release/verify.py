"""Verify a release folder: signatures with a trusted key, SHA256SUMS against the manifest, every file's size and hash.

Two steps, because a download needs the first before it fetches gigabytes: :func:`verify_metadata`
(integrity files only) and :func:`verify_files` (the payload). :func:`verify_release` does both.
Every failure is a :class:`VerificationError` that names the file and the check it failed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import VerificationError
from app.core.hashing import sha256_file
from app.release import signing, trust
from app.release.catalog import Catalog, load_catalog
from app.release.manifest import FileEntry, Manifest, Provenance, parse_manifest, parse_provenance, parse_sha256sums

INTEGRITY_MAX_BYTES = 1 << 20
"""The most an integrity file (manifest, provenance, SHA256SUMS, a signature, the key) may hold: they are
fetched and read before anything vouches for them, so a hostile server must not be able to fill the disk
or the memory with one. A real one is a few KiB (a SHA256SUMS line is ~100 bytes)."""


def read_capped(path: Path, what: str, limit: int = INTEGRITY_MAX_BYTES) -> bytes:
    """The bytes of ``path``, refused beyond ``limit`` after reading at most ``limit + 1`` (``/dev/zero`` ends).

    Raises :class:`VerificationError` when the file is larger; ``OSError`` when it cannot be read.
    """
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise VerificationError(f"The {what} file {path} is larger than {limit / 2**20:g} MiB, far more than "
                                f"any {what} holds; it was not read further.",
                                "Point at the right file; nothing was trusted or installed.", kind="too-large")
    return data


@dataclass
class ReleaseMetadata:
    """The integrity files of a release, signature-checked and cross-checked; no payload file read yet."""

    folder: Path
    repo: str
    manifest: Manifest
    manifest_sha256: str
    provenance: Provenance
    fingerprint: str
    key_pinned_now: bool
    metadata_files: dict[str, Path]
    warnings: list[str] = field(default_factory=list)

    def entry(self, name: str) -> FileEntry:
        try:
            return self.manifest.files[name]
        except KeyError:
            raise VerificationError(f"{name} is not listed in the signed manifest {self.manifest.source}.",
                                    "Only files the publisher signed are used; this one is refused.",
                                    kind="not-in-manifest") from None

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "version": self.manifest.version.text, "date": self.manifest.date,
                "expires": self.manifest.expires.isoformat() if self.manifest.expires else None,
                "fingerprint": self.fingerprint, "key_pinned_now": self.key_pinned_now,
                "llama_cpp_commit": self.provenance.llama_cpp_commit, "warnings": self.warnings,
                "manifest_files": [e.to_dict() for e in self.manifest.files.values()]}


@dataclass
class VerifiedRelease:
    metadata: ReleaseMetadata
    files: dict[str, Path]
    missing: list[str]

    def to_dict(self) -> dict[str, Any]:
        from app.release.hub_hash import EXPLANATIONS, LABELS

        state = {"state": "publisher-signed", "label": LABELS["publisher-signed"],
                 "explanation": EXPLANATIONS["publisher-signed"]}
        return dict(self.metadata.to_dict(), folder=str(self.metadata.folder),
                    verified=[self.metadata.entry(n).to_dict() for n in self.files], missing=self.missing,
                    verification=state, files={n: state for n in self.files})


def _read(folder: Path, name: str, what: str) -> bytes:
    path = folder / name
    if not path.is_file():
        raise VerificationError(f"The release has no {what} ({name} is missing from {folder}).",
                                f"A release must ship {name}; without it nothing can be verified.",
                                kind="release-file-missing")
    return read_capped(path, what)


def find_signature(folder: Path, signed: str, catalog: Catalog) -> Path:
    """The detached signature of ``signed``: the first of ``X.sig``, ``X.sig.b64`` that exists."""
    names = catalog.integrity.signature_names(signed)
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise VerificationError(f"The signature of {signed} is missing (expected {' or '.join(names)}).",
                            "An unsigned release cannot be trusted; nothing was installed.", kind="signature-missing")


def _check_sums(sums: dict[str, str], manifest: Manifest, folder: Path, sums_name: str,
                metadata: dict[str, Path]) -> None:
    for name, entry in manifest.files.items():
        listed = sums.get(name)
        if listed is None:
            raise VerificationError(f"{sums_name} does not list {name}, which the manifest lists.",
                                    "The checksum list and the manifest disagree; the release is not used.",
                                    kind="checksums-disagree")
        if listed != entry.sha256:
            raise VerificationError(f"{sums_name} gives sha256 {listed} for {name}, but the signed manifest gives "
                                    f"{entry.sha256}.", "The checksum list and the manifest disagree; "
                                    "the release is not used.", kind="checksums-disagree")
    for name, path in metadata.items():  # a SHA256SUMS that also lists the integrity files must be right about them
        if name in sums and sha256_file(path) != sums[name]:
            raise VerificationError(f"{sums_name} gives sha256 {sums[name]} for {name}, which does not match the file.",
                                    "The release folder is inconsistent; fetch it again.", kind="sha256-mismatch")


def _check_provenance(provenance: Provenance, manifest: Manifest, catalog: Catalog) -> None:
    patch = manifest.files.get(catalog.integrity.patch)
    if provenance.patch_sha256 and patch is not None and provenance.patch_sha256 != patch.sha256:
        raise VerificationError(f"{provenance.source} names the patch sha256 {provenance.patch_sha256}, but the "
                                f"manifest gives {patch.sha256} for {patch.name}.",
                                "The provenance and the manifest disagree; the release is not used.",
                                kind="provenance-disagrees")
    for name, entry in provenance.files.items():
        listed = manifest.files.get(name)
        if listed is not None and listed.sha256 != entry.sha256:
            raise VerificationError(f"{provenance.source} gives sha256 {entry.sha256} for {name}, the manifest "
                                    f"{listed.sha256}.", "The provenance and the manifest disagree; "
                                    "the release is not used.", kind="provenance-disagrees")


def verify_metadata(folder: Path, *, repo: str | None = None, trust_fingerprint: str | None = None,
                    confirm: trust.Confirm | None = None) -> ReleaseMetadata:
    """Check the manifest and provenance signatures with a trusted key, then their agreement with SHA256SUMS.

    A key trusted for the first time (``--trust-fingerprint`` or a confirmed prompt) is pinned once both
    signatures verified. Raises :class:`VerificationError` (or its :class:`TrustError`) on any failure.
    """
    catalog = load_catalog()
    integ = catalog.integrity
    repo = repo or catalog.repo
    manifest_bytes = _read(folder, integ.manifest, "manifest")
    provenance_bytes = _read(folder, integ.provenance, "provenance")
    sums_bytes = _read(folder, integ.checksums, "checksum list")
    key_path = folder / integ.public_key
    served = signing.load_public_key(read_capped(key_path, "public key"), integ.public_key) \
        if key_path.is_file() else None

    key, is_new = trust.decide(repo, served, trust_fingerprint=trust_fingerprint, confirm=confirm)
    signatures: dict[str, Path] = {}
    for name, data in ((integ.manifest, manifest_bytes), (integ.provenance, provenance_bytes)):
        sig_path = find_signature(folder, name, catalog)
        signatures[sig_path.name] = sig_path
        signing.verify(key, data, signing.decode_signature(read_capped(sig_path, "signature"), sig_path.name), name)

    manifest = parse_manifest(manifest_bytes, integ.manifest)
    if manifest.repo is not None and manifest.repo != repo:
        raise VerificationError(f"{integ.manifest} is for the repository {manifest.repo}, not {repo}.",
                                "A release signed for another repository is not used here.", kind="wrong-repository")
    provenance = parse_provenance(provenance_bytes, integ.provenance)
    _check_provenance(provenance, manifest, catalog)
    try:
        sums_text = sums_bytes.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise VerificationError(f"{integ.checksums} is not text.", "Fetch it again.",
                                kind="checksums-unreadable") from exc
    metadata = {integ.manifest: folder / integ.manifest, integ.provenance: folder / integ.provenance, **signatures}
    if served is not None:
        metadata[integ.public_key] = key_path
    _check_sums(parse_sha256sums(sums_text, integ.checksums), manifest, folder, integ.checksums, metadata)
    metadata[integ.checksums] = folder / integ.checksums
    manifest_sha256 = hashlib.sha256(manifest_bytes).hexdigest()
    warnings = trust.check_freshness(repo, manifest, manifest_sha256)
    if is_new:
        trust.pin_key(repo, key)
    return ReleaseMetadata(folder=folder, repo=repo, manifest=manifest, manifest_sha256=manifest_sha256,
                           provenance=provenance, fingerprint=signing.fingerprint(key), key_pinned_now=is_new,
                           metadata_files=metadata, warnings=warnings)


def verify_file(meta: ReleaseMetadata, name: str, path: Path, known_sha256: str | None = None) -> None:
    """Size, then sha256, against the signed manifest. ``known_sha256`` is a hash computed while downloading."""
    entry = meta.entry(name)
    if path.is_symlink() or not path.is_file():
        raise VerificationError(f"{name}: missing or not a regular file at {path}.", "Fetch it again.",
                                kind="file-missing", file=name)
    size = path.stat().st_size
    if entry.size is not None and size != entry.size:
        raise VerificationError(f"{name} failed the size check: {size} bytes, the signed manifest says {entry.size}.",
                                "The file is incomplete or altered; it was not installed. Fetch it again.",
                                kind="size-mismatch", file=name)
    actual = known_sha256 or sha256_file(path)
    if actual != entry.sha256:
        raise VerificationError(f"{name} failed the sha256 check: got {actual}, the signed manifest says "
                                f"{entry.sha256}.", "The file is corrupted or altered; it was not installed. "
                                "Fetch it again, from another mirror if this repeats.", kind="sha256-mismatch",
                                file=name)


def verify_files(meta: ReleaseMetadata, folder: Path, names: Iterable[str],
                 known: dict[str, str] | None = None) -> dict[str, Path]:
    """Check the named payload files in ``folder``; returns name -> path, all of them verified."""
    verified = {}
    for name in names:
        verify_file(meta, name, folder / name, (known or {}).get(name))
        verified[name] = folder / name
    return verified


def verify_release(folder: Path, *, repo: str | None = None, trust_fingerprint: str | None = None,
                   confirm: trust.Confirm | None = None) -> VerifiedRelease:
    """Everything in a folder: the metadata, then every manifest file that is present (at least one must be)."""
    meta = verify_metadata(folder, repo=repo, trust_fingerprint=trust_fingerprint, confirm=confirm)
    present = [n for n in meta.manifest.files if (folder / n).exists() or (folder / n).is_symlink()]
    if not present:
        raise VerificationError(f"{folder} holds none of the files the manifest lists.",
                                "Point at the folder that holds the downloaded model files.", kind="no-release-files")
    files = verify_files(meta, folder, present)
    trust.record_verified(meta.repo, meta.manifest, meta.manifest_sha256)
    return VerifiedRelease(meta, files, [n for n in meta.manifest.files if n not in files])


def verified_release_patch(folder: Path, *, repo: str | None = None, trust_fingerprint: str | None = None) -> Path:
    """The release's own llama.cpp patch, only after its signature chain and hash checked out.

    Non-interactive: the key must already be trusted (or given by fingerprint). Our own patch stays the
    builder's default; this is for a user who asks to build with the publisher's.
    """
    meta = verify_metadata(folder, repo=repo, trust_fingerprint=trust_fingerprint, confirm=None)
    name = load_catalog().integrity.patch
    return verify_files(meta, folder, [name])[name]
