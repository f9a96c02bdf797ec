"""Which publisher keys we trust for which repository, and the last release version we verified.

Keys come from two places only: ``resources/keys/`` (shipped, pinned) and the user's config folder
(pinned by ``trust add``, ``--trust-fingerprint`` or a confirmed first use). A key is never trusted
because a repository serves it; a different key for a repository we already trust is a hard stop.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from app.core import paths, settings_file
from app.core.errors import StorageError, TrustError, VerificationError
from app.core.resources import resources_dir
from app.release import signing
from app.release.catalog import repo_slug
from app.release.manifest import Manifest

Confirm = Callable[[str, str], bool]
"""Asks the user whether to trust ``fingerprint`` for ``repo``; True only on an explicit yes."""


@dataclass(frozen=True)
class TrustedKey:
    repo: str
    fingerprint: str
    key: Ed25519PublicKey
    source: str  # "shipped" or "user"
    added: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"repo": self.repo, "fingerprint": self.fingerprint, "source": self.source, "added": self.added}


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


_RESTORE = ("Fix the file by hand or restore it from a backup; deleting it forgets trusted keys and rollback "
            "protection.")


def _write_json(path: Path, data: Any) -> None:
    try:
        settings_file.write_json(path, data)
    except OSError as exc:
        raise StorageError(f"Cannot write {path}: {exc.strerror or type(exc).__name__}.",
                           "Check that the config folder is writable and the disk is not full; nothing was "
                           "changed.") from None


def _damaged(path: Path, what: str) -> TrustError:
    return TrustError(f"{path} is damaged: {what}.", _RESTORE)


def _read_json(path: Path) -> dict[str, Any]:
    """The file's object; ``{}`` when there is none. A damaged file is refused, never read as empty: that
    would forget the pinned keys and the rollback protection."""
    try:
        data = settings_file.read_json(path)
    except settings_file.DamagedFile as exc:
        if isinstance(exc.error, RecursionError):
            raise _damaged(path, str(exc)) from None
        raise TrustError(f"Cannot read {path}: {exc}", _RESTORE, kind="trust-store-unreadable") from exc.error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _damaged(path, f"expected a JSON object, found a JSON {type(data).__name__}")
    return data


def _key_entries(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``keys`` list of the user's trusted-keys file, each entry checked for its shape."""
    path = _user_keys_file()
    keys = data.get("keys", [])
    if not isinstance(keys, list):
        raise _damaged(path, f'"keys" is a JSON {type(keys).__name__}, expected a list')
    for number, item in enumerate(keys, 1):
        if not isinstance(item, dict):
            raise _damaged(path, f"key {number} is a JSON {type(item).__name__}, expected an object")
        for field in ("repo", "public_key"):
            if not isinstance(item.get(field), str):
                raise _damaged(path, f'key {number} has no "{field}" text')
    return keys


# ----------------------------------------------------------------------------- keys


def _user_keys_file() -> Path:
    return paths.config_dir() / "trusted-keys.json"


def shipped_keys(repo: str) -> list[TrustedKey]:
    """Keys pinned in ``resources/keys/<owner>--<name>*.pem``."""
    keys = []
    for path in sorted((resources_dir() / "keys").glob(repo_slug(repo) + "*.pem")):
        key = signing.load_public_key(path.read_bytes(), str(path))
        keys.append(TrustedKey(repo, signing.fingerprint(key), key, "shipped"))
    return keys


def user_keys(repo: str | None = None) -> list[TrustedKey]:
    """Keys the user pinned, for one repository or all of them."""
    keys = []
    for number, item in enumerate(_key_entries(_read_json(_user_keys_file())), 1):
        if repo is not None and item["repo"] != repo:
            continue
        try:
            key = signing.public_key_from_raw(bytes.fromhex(item["public_key"]))
        except ValueError:
            raise _damaged(_user_keys_file(), f"the public key of key {number} is not 32 bytes of hex") from None
        keys.append(TrustedKey(item["repo"], signing.fingerprint(key), key, "user", str(item.get("added", ""))))
    return keys


def trusted_keys(repo: str) -> list[TrustedKey]:
    return shipped_keys(repo) + user_keys(repo)


def pin_key(repo: str, key: Ed25519PublicKey) -> TrustedKey:
    """Remember ``key`` for ``repo``. Refuses a second, different key: rotation needs an explicit remove first."""
    fp = signing.fingerprint(key)
    existing = trusted_keys(repo)
    if any(k.fingerprint == fp for k in existing):
        return next(k for k in existing if k.fingerprint == fp)
    if existing:
        raise key_changed_error(repo, fp, existing)
    data = _read_json(_user_keys_file())
    entry = {"repo": repo, "fingerprint": fp, "public_key": signing.raw_public_key(key).hex(), "added": _now()}
    data["keys"] = [*_key_entries(data), entry]
    _write_json(_user_keys_file(), data)
    return TrustedKey(repo, fp, key, "user", entry["added"])


def remove_key(fingerprint: str) -> list[str]:
    """Forget a user-pinned key; returns the repositories it was pinned for. Shipped keys cannot be removed."""
    fp = signing.normalize_fingerprint(fingerprint)
    data = _read_json(_user_keys_file())
    keys = _key_entries(data)
    removed = [k["repo"] for k in keys if k.get("fingerprint") == fp]
    if not removed:
        raise TrustError(f"No user-pinned key has the fingerprint {fp}.",
                         "See `python -m app trust list`; keys shipped with the app cannot be removed.",
                         kind="key-not-pinned")
    data["keys"] = [k for k in keys if k.get("fingerprint") != fp]
    _write_json(_user_keys_file(), data)
    return removed


def key_changed_error(repo: str, fp: str, trusted: list[TrustedKey]) -> TrustError:
    known = ", ".join(k.fingerprint for k in trusted)
    return TrustError(
        "!!! THE PUBLISHER KEY HAS CHANGED !!!\n"
        f"The release of {repo} is signed with the key {fp},\n"
        f"but the key trusted for {repo} is {known}.\n"
        "Someone may be impersonating the publisher, or the publisher replaced their key.",
        "Nothing was installed. Do not continue unless the publisher announced a new key through a channel you "
        "trust; then run `python -m app trust remove OLD_FINGERPRINT` and trust the new one explicitly.")


def terminal_confirm(repo: str, fp: str) -> bool:
    """Ask on the terminal; only a typed 'yes' trusts the key."""
    print(f"\nThe release of {repo} is signed with a key this app has never seen:\n\n    {fp}\n\n"
          "Compare this fingerprint with the one the publisher announced (model card, website).",
          file=sys.stderr, flush=True)
    try:
        answer = input("Trust this key for this repository from now on? Type 'yes' to trust it: ")
    except EOFError:
        return False
    return answer.strip().lower() == "yes"


def default_confirm() -> Confirm | None:
    """The terminal prompt when stdin and stderr are a terminal; None (refuse) otherwise."""
    return terminal_confirm if sys.stdin.isatty() and sys.stderr.isatty() else None


def decide(repo: str, served: Ed25519PublicKey | None, *, trust_fingerprint: str | None = None,
           confirm: Confirm | None = None) -> tuple[Ed25519PublicKey, bool]:
    """Pick the key that must have signed the release; returns it and whether it is new (to pin once it verified).

    ``served`` is the key file the release folder holds (it may be absent when a key is already pinned).
    """
    trusted = trusted_keys(repo)
    wanted = signing.normalize_fingerprint(trust_fingerprint) if trust_fingerprint else None
    if served is None:
        if not trusted:
            raise TrustError(f"The release of {repo} has no public key file and no key is trusted for it.",
                             "Pin the publisher key with `python -m app trust add PUBLIC.pem --repo REPO`.",
                             kind="no-key")
        if wanted and all(k.fingerprint != wanted for k in trusted):
            raise TrustError(f"--trust-fingerprint {wanted} is not the key trusted for {repo}.",
                             "Check the fingerprint; `python -m app trust list` shows the trusted one.",
                             kind="fingerprint-mismatch")
        if len(trusted) == 1:
            return trusted[0].key, False
        raise TrustError(f"Several keys are trusted for {repo} and the release names none.",
                         "Remove the stale one with `python -m app trust remove FP`.", kind="several-keys")
    fp = signing.fingerprint(served)
    if wanted is not None and wanted != fp:
        raise TrustError(f"The release of {repo} is signed with the key {fp}, not the {wanted} you asked to trust.",
                         "Check the fingerprint the publisher announced; nothing was installed.",
                         kind="fingerprint-mismatch")
    if trusted:
        if any(k.fingerprint == fp for k in trusted):
            return served, False
        raise key_changed_error(repo, fp, trusted)
    if wanted is not None:
        return served, True
    if confirm is None:
        raise TrustError(
            f"The publisher key of {repo} ({fp}) is not trusted yet, and there is no terminal to ask you.",
            "Compare the fingerprint with the publisher's announcement, then rerun with "
            f"--trust-fingerprint {fp} (or pin the key: `python -m app trust add PUBLIC.pem`).")
    if not confirm(repo, fp):
        raise TrustError(f"You did not trust the key {fp} for {repo}.", "Nothing was installed.", kind="key-refused")
    return served, True


# ----------------------------------------------------------------------------- rollback and freeze


def _state_file() -> Path:
    return paths.config_dir() / "release-state.json"


def last_verified(repo: str) -> dict[str, Any] | None:
    """The last version verified for ``repo`` (its ``version_key`` checked), or None before the first."""
    return _state_entry(_read_json(_state_file()), repo)


def _state_entry(data: dict[str, Any], repo: str) -> dict[str, Any] | None:
    entry = data.get(repo)
    if entry is None:
        return None
    path = _state_file()
    if not isinstance(entry, dict):
        raise _damaged(path, f"the entry of {repo} is a JSON {type(entry).__name__}, expected an object")
    key = entry.get("version_key", [])
    if not isinstance(key, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in key):
        raise _damaged(path, f'the "version_key" of {repo} is not a list of whole numbers')
    return entry


def check_freshness(repo: str, manifest: Manifest, manifest_sha256: str, now: datetime | None = None) -> list[str]:
    """Refuse a version older than the last one verified (rollback) or the same version with other contents
    (equivocation); return warnings (a manifest past its expiry)."""
    last = last_verified(repo)
    if last is not None:
        last_key = tuple(last.get("version_key", []))
        if manifest.version.key < last_key:
            raise VerificationError(
                f"{manifest.source} is version {manifest.version.text}, older than version {last.get('version')} "
                f"verified for {repo} on {last.get('verified_at')}.",
                "A server offering an older release may be trying to roll you back to known-vulnerable files; "
                "nothing was installed. Use another mirror.", kind="version-rollback")
        if manifest.version.key == last_key and last.get("manifest_sha256") not in (None, manifest_sha256):
            raise VerificationError(
                f"{manifest.source} claims version {manifest.version.text}, which was verified before with "
                "different contents.", "A signed version must never change; nothing was installed. "
                "Report this to the publisher.", kind="version-changed")
    warnings = []
    if manifest.expires is not None and manifest.expires < (now or datetime.now(UTC)):
        warnings.append(f"{manifest.source} expired on {manifest.expires.date().isoformat()}: the mirror may be "
                        "serving a frozen, outdated release. Check for a newer one.")
    return warnings


def record_verified(repo: str, manifest: Manifest, manifest_sha256: str) -> None:
    """Remember this version as the floor for later releases of ``repo``."""
    data = _read_json(_state_file())
    last = _state_entry(data, repo)
    if last is not None and tuple(last.get("version_key", [])) > manifest.version.key:
        return
    data[repo] = {"version": manifest.version.text, "version_key": list(manifest.version.key),
                  "manifest_sha256": manifest_sha256, "verified_at": _now()}
    _write_json(_state_file(), data)
