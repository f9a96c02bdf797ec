"""Ed25519 keys and detached signatures: make, read, sign, verify, fingerprint.

Signatures are detached and cover the exact bytes of the signed file. We read them as 64 raw bytes,
or as base64 or hex text of those bytes, because publishers write either.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app.core.errors import FastMTPError, TrustError, VerificationError

SIGNATURE_BYTES = 64


def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_from_raw(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """A PKCS#8 PEM Ed25519 private key without a passphrase (what ``release keygen`` writes)."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise FastMTPError(f"Cannot read the private key {path}: {exc}",
                           "Give an unencrypted PEM Ed25519 key, e.g. one made by `python -m app release keygen`.") \
            from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise FastMTPError(f"{path} is not an Ed25519 private key.", "Make one with `python -m app release keygen`.")
    return key


def load_public_key(data: bytes, source: str) -> Ed25519PublicKey:
    """PEM (SubjectPublicKeyInfo), OpenSSH ``ssh-ed25519``, or 32 raw bytes / their base64."""
    key: object = None
    text = data.strip()
    try:
        if text.startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(text)
        elif text.startswith(b"ssh-ed25519 "):
            key = serialization.load_ssh_public_key(text)
        elif len(data) == 32:
            key = public_key_from_raw(data)
        else:
            raw = base64.b64decode(text, validate=True)
            key = public_key_from_raw(raw) if len(raw) == 32 else None
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise TrustError(f"{source} is not an Ed25519 public key (expected PEM 'BEGIN PUBLIC KEY', "
                         "'ssh-ed25519 ...', or 32 raw bytes).",
                         "The release's key file is damaged or of another kind; nothing was trusted.")
    return key


def fingerprint(key: Ed25519PublicKey) -> str:
    """SHA-256 of the raw 32-byte public key, as hex in groups of four: what users compare and type."""
    digest = hashlib.sha256(raw_public_key(key)).hexdigest()
    return ":".join(digest[i:i + 4] for i in range(0, len(digest), 4))


def normalize_fingerprint(text: str) -> str:
    """Accept a fingerprint with or without separators, any case; give the grouped form back."""
    digest = re.sub(r"[\s:_-]", "", text).lower().removeprefix("sha256")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise TrustError(f"{text!r} is not a key fingerprint (expected 64 hex digits, grouped or not).",
                         "Copy the fingerprint exactly as the publisher gives it.")
    return ":".join(digest[i:i + 4] for i in range(0, len(digest), 4))


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    return key.sign(data)


def decode_signature(data: bytes, source: str) -> bytes:
    """64 raw bytes, or base64 / hex text of them (whitespace ignored)."""
    if len(data) == SIGNATURE_BYTES:
        return data
    text = b"".join(data.split())
    for decode in (lambda t: base64.b64decode(t, validate=True), binascii.unhexlify):
        try:
            raw = decode(text)
        except (binascii.Error, ValueError):
            continue
        if len(raw) == SIGNATURE_BYTES:
            return raw
    raise VerificationError(f"{source} is not a detached Ed25519 signature (expected 64 raw bytes or their "
                            f"base64 or hex text; got {len(data)} bytes).",
                            "The signature file is damaged or of another kind; the release is not used.")


def verify(key: Ed25519PublicKey, data: bytes, signature: bytes, signed: str) -> None:
    """Raise a :class:`VerificationError` naming the signed file when the signature does not hold."""
    try:
        key.verify(signature, data)
    except InvalidSignature as exc:
        raise VerificationError(
            f"The signature of {signed} does not verify with the publisher key {fingerprint(key)}.",
            "The file was altered or signed by someone else. Nothing was installed; do not use this release.") \
            from exc
