"""Signed backend archives: the publisher's trust chain, applied to a ``backend pack`` archive.

A prebuilt backend is native code the app will load, so it is trusted exactly like a model release:
an Ed25519 signature by a key pinned for the repository (shipped in ``resources/keys/``, or trusted
with ``trust add``, ``--trust-fingerprint`` or a confirmed first use; :func:`app.release.trust.decide`).
Beside ``NAME.tar.xz`` the publisher puts ``NAME.tar.xz.manifest.json`` (the archive's size and
sha256, what it unpacks to, and what the backend inside is) and its detached signature
``NAME.tar.xz.manifest.json.sig``. The backend id it names must be a plain name (``app.core.safe_paths``).
The manifest carries the signer's public key, which, like a release's served ``.pem``, is never
trusted because it is there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from app import __version__ as app_version
from app.core import safe_paths
from app.core.errors import FastMTPError, VerificationError
from app.core.hashing import sha256_file
from app.core.json_object import load_object
from app.core.safe_paths import UNPACK_MAX_BYTES, UNPACK_MAX_MEMBERS, UnpackLimits, check_name
from app.release import signing, trust
from app.release.catalog import load_catalog
from app.release.manifest import check_file_name, normalize_sha256
from app.release.verify import read_capped

FORMAT = "fastmtp-backend-archive/1"
MANIFEST_SUFFIX = ".manifest.json"
SIGNATURE_SUFFIX = ".sig"
CLAIMED = ("id", "flavor", "cuda_archs", "cuda_version", "llama_cpp_python_version", "llama_cpp_commit",
           "sdist_sha256", "patch_sha256")
"""The fields of the archive's own ``fastmtp-backend.json`` that the signed manifest vouches for."""


def backend_repo() -> str:
    """The repository id backend archives and the backend feed are signed for: the app's own
    (``[app_updates] repo``), whose release key signs them, never the model publisher's (one key is pinned per
    repository, so sharing an id would make whichever key was trusted first refuse the other)."""
    from app.release.updates import default_source

    return default_source().repo


def legacy_repo() -> str:
    """The model publisher's repository, which archives and feeds signed before issue 35 claim: still read, under
    that repository's trusted keys as before, so a key a user trusted for them keeps working."""
    return load_catalog().repo


def claimed_repo(repo: str | None, claimed: object) -> str:
    """The repository whose trusted keys must have signed a file: ``repo`` when given (``--repo``), else the
    app's, or the legacy one when that is what the file claims (an older archive or feed)."""
    if repo:
        return repo
    return legacy_repo() if isinstance(claimed, str) and claimed == legacy_repo() != backend_repo() \
        else backend_repo()


def manifest_name(archive_name: str) -> str:
    return archive_name + MANIFEST_SUFFIX


def signature_name(archive_name: str) -> str:
    return manifest_name(archive_name) + SIGNATURE_SUFFIX


@dataclass(frozen=True)
class BackendClaim:
    """What the signed manifest says: the archive's bytes and the backend they hold."""

    repo: str
    date: str
    archive: str
    size: int
    sha256: str
    backend: dict[str, Any]
    unpacked_bytes: int | None = None  # what the archive unpacks to (manifests signed before it was recorded: None)
    unpacked_members: int | None = None

    @property
    def backend_id(self) -> str:
        return str(self.backend["id"])

    def unpack_limits(self) -> UnpackLimits:
        """The most the archive may unpack to: what the signed manifest records, else what its signed size allows."""
        default = UnpackLimits.for_archive(self.size)
        if self.unpacked_bytes is None or self.unpacked_members is None:
            return default
        return UnpackLimits(min(self.unpacked_bytes, UNPACK_MAX_BYTES), min(self.unpacked_members, UNPACK_MAX_MEMBERS))

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "date": self.date, "archive": self.archive, "size": self.size,
                "sha256": self.sha256, "backend": self.backend,
                "unpacked": {"bytes": self.unpacked_bytes, "members": self.unpacked_members}}


@dataclass(frozen=True)
class SignedBackend:
    """What ``release sign-backend`` wrote."""

    archive: Path
    manifest: Path
    signature: Path
    claim: BackendClaim
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"archive": str(self.archive), "manifest": str(self.manifest), "signature": str(self.signature),
                "fingerprint": self.fingerprint, **self.claim.to_dict()}


@dataclass(frozen=True)
class VerifiedClaim:
    """A claim whose signature holds with a trusted key, and where that trust comes from."""

    claim: BackendClaim
    key: Ed25519PublicKey
    fingerprint: str
    key_source: str  # "shipped" (the app's pinned publisher key), "user" (trusted before) or "new" (not yet pinned)

    @property
    def publisher_signed(self) -> bool:
        """Signed with a key the app itself ships for the repository, not one the user chose to trust."""
        return self.key_source == "shipped"


def sign_backend_archive(archive: Path, key_path: Path, *, repo: str | None = None) -> SignedBackend:
    """Hash ``archive``, read the backend manifest inside it, and write the signed manifest and its signature.

    Raises:
        FastMTPError: the key cannot be read or sits beside the archive, or the archive is not a backend archive.
    """
    from app.backend import archive as backend_archive

    if not archive.is_file():
        raise FastMTPError(f"{archive} is not a file.", "Give the .tar.xz that `backend pack` wrote.")
    if key_path.resolve().parent == archive.resolve().parent:
        raise FastMTPError(f"The private key {key_path} is in the same folder as the archive.",
                           "Keep the private key outside the folder you publish.")
    key = signing.load_private_key(key_path)
    check_file_name(archive.name, str(archive.parent))
    inner = backend_archive.read_manifest(archive).to_dict()
    unpacked = backend_archive.contents(archive)
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    body = {"format": FORMAT, "repo": repo or backend_repo(), "date": now,
            "archive": {"name": archive.name, "size": archive.stat().st_size, "sha256": sha256_file(archive)},
            "unpacked": {"bytes": unpacked.bytes, "members": unpacked.members},
            "backend": {name: inner.get(name) for name in CLAIMED},
            "public_key": signing.public_key_pem(key.public_key()).decode("ascii"),
            "tool": f"fastmtp-chat {app_version} release sign-backend"}
    data = (json.dumps(body, indent=2) + "\n").encode("utf-8")
    manifest = archive.with_name(manifest_name(archive.name))
    signature = archive.with_name(signature_name(archive.name))
    for path, content in ((manifest, data), (signature, signing.sign(key, data))):
        safe_paths.write_replacing(path, content)  # never through a link planted at a fixed temporary name
    return SignedBackend(archive, manifest, signature, parse_claim(data, manifest.name),
                         signing.fingerprint(key.public_key()))


def _malformed(source: str, what: str) -> VerificationError:
    return VerificationError(f"{source} is not a signed backend manifest: {what}.",
                             "Nothing was installed. Ask whoever published the archive for its signed manifest "
                             "(`python -m app release sign-backend` writes one).")


def _load(data: bytes, source: str) -> dict[str, Any]:
    return load_object(data, lambda what: _malformed(source, what))


def parse_claim(data: bytes, source: str) -> BackendClaim:
    """The claim of a signed manifest's bytes (call after the signature verified, or to read the key first)."""
    obj = _load(data, source)
    if obj.get("format") != FORMAT:
        raise _malformed(source, f"its format is {str(obj.get('format'))[:60]!r}, expected {FORMAT!r}")
    archive, backend = obj.get("archive"), obj.get("backend")
    if not isinstance(archive, dict) or not isinstance(backend, dict):
        raise _malformed(source, "it has no 'archive' and 'backend' objects")
    size = archive.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise _malformed(source, f"the archive size is {size!r}, expected a whole number of bytes")
    if not isinstance(backend.get("id"), str) or not backend["id"]:
        raise _malformed(source, "it names no backend id")
    check_name(backend["id"], "backend id", source, "This looks like a path-traversal attempt or a broken archive; "
               "nothing was installed. Do not use it, and tell whoever published it.")
    name = check_file_name(archive.get("name"), source)
    repo = obj.get("repo")
    if not isinstance(repo, str) or not repo:
        raise _malformed(source, "it names no repository")
    unpacked = obj.get("unpacked")
    counts: list[int | None] = [None, None]
    if unpacked is not None:
        counts = [unpacked.get(key) if isinstance(unpacked, dict) else None for key in ("bytes", "members")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            raise _malformed(source, f"its 'unpacked' is {str(unpacked)[:80]!r}, expected whole numbers of bytes "
                                     "and members")
    return BackendClaim(repo=repo, date=str(obj.get("date", "")), archive=name, size=size,
                        sha256=normalize_sha256(archive.get("sha256"), source, name),
                        backend={field: backend.get(field) for field in CLAIMED},
                        unpacked_bytes=counts[0], unpacked_members=counts[1])


def served_key(data: bytes, source: str) -> Ed25519PublicKey | None:
    """The signer's public key the manifest carries (a hint for :func:`trust.decide`, never trusted for it)."""
    return key_in(_load(data, source), source, lambda what: _malformed(source, what))


def key_in(obj: dict[str, Any], source: str, bad: Callable[[str], Exception]) -> Ed25519PublicKey | None:
    """The public key a signed file (a backend manifest, the feed) carries in ``public_key``: a hint for
    :func:`trust.decide` of whom to ask about, never trusted because it is there."""
    text = obj.get("public_key")
    if text is None:
        return None
    if not isinstance(text, str):
        raise bad("its public_key is not text")
    return signing.load_public_key(text.encode("utf-8"), f"the public key in {source}")


def verify_claim(manifest_path: Path, signature_path: Path, *, repo: str | None = None,
                 trust_fingerprint: str | None = None, confirm: trust.Confirm | None = None) -> VerifiedClaim:
    """Check the signed manifest's signature with a trusted key; a key trusted for the first time is pinned by
    :func:`pin_if_new` once the archive checked out too.

    Raises:
        VerificationError: a file is missing, too large or malformed, the signature does not hold, or the
            manifest is for another repository; :class:`TrustError` when the key is not trusted.
    """
    for path, what in ((manifest_path, "signed manifest"), (signature_path, "signature")):
        if not path.is_file():
            raise VerificationError(f"The backend archive has no {what}: {path.name} is missing.",
                                    "An unsigned archive is not installed as a trusted prebuilt backend. If you "
                                    "packed it yourself, `python -m app backend unpack` installs it unchecked.")
    data = read_capped(manifest_path, "signed manifest")
    raw_signature = read_capped(signature_path, "signature")
    repo = claimed_repo(repo, _load(data, manifest_path.name).get("repo"))  # which keys: read before they vouch
    key, is_new = trust.decide(repo, served_key(data, manifest_path.name), trust_fingerprint=trust_fingerprint,
                               confirm=confirm)
    signing.verify(key, data, signing.decode_signature(raw_signature, signature_path.name), manifest_path.name)
    claim = parse_claim(data, manifest_path.name)
    if claim.repo != repo:
        raise VerificationError(f"{manifest_path.name} is signed for the repository {claim.repo}, not {repo}.",
                                f"Nothing was installed. If you mean to trust {claim.repo}'s key for backends, "
                                f"pass --repo {claim.repo}.")
    fp = signing.fingerprint(key)
    known = [k.source for k in trust.trusted_keys(repo) if k.fingerprint == fp]
    return VerifiedClaim(claim, key, fp, "new" if is_new else (known or ["user"])[0])


def pin_if_new(verified: VerifiedClaim) -> None:
    """Remember a key the user trusted for the first time (``--trust-fingerprint`` or the prompt)."""
    if verified.key_source == "new":
        trust.pin_key(verified.claim.repo, verified.key)


def check_archive(claim: BackendClaim, path: Path, known_sha256: str | None = None) -> None:
    """Size, then sha256, of the archive against the signed manifest."""
    if path.is_symlink() or not path.is_file():
        raise VerificationError(f"{claim.archive}: missing or not a regular file at {path}.",
                                "Give the archive itself, with its signed manifest beside it.")
    size = path.stat().st_size
    if size != claim.size:
        raise VerificationError(f"{path.name} failed the size check: {size} bytes, the signed manifest says "
                                f"{claim.size}.", "The archive is incomplete or was altered; nothing was installed. "
                                "Get it again from the publisher.")
    actual = known_sha256 or sha256_file(path)
    if actual != claim.sha256:
        raise VerificationError(f"{path.name} failed the sha256 check: got {actual}, the signed manifest says "
                                f"{claim.sha256}.", "The archive was altered or damaged after it was signed; "
                                "nothing was installed. Do not use it; get it again from the publisher.")


def check_backend_matches(claim: BackendClaim, inner: dict[str, Any], source: str) -> None:
    """The archive's own ``fastmtp-backend.json`` must say what the signed manifest says, field by field."""
    differ = [f"{field} is {inner.get(field)!r} inside, {claim.backend.get(field)!r} signed"
              for field in CLAIMED if inner.get(field) != claim.backend.get(field)]
    if differ:
        raise VerificationError(f"The backend inside {source} is not the one its signed manifest describes: "
                                + "; ".join(differ) + ".", "Nothing was installed. The archive and its manifest "
                                "do not belong together; get both again from the publisher.")
