"""The Hugging Face hub token: kept in the system keyring, never in a file or a log of ours.

``HF_TOKEN`` in the environment wins over the keyring (a script's explicit choice). Where the
platform has no keyring backend, we say so and point at ``HF_TOKEN`` instead of writing plain text.
A keyring that fails in any other way (a damaged keyring file) raises :class:`SecretsError` naming the
backend and its file, never the error's own text (which may quote the file's lines, token included).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import keyring
import keyring.errors
from keyring.backends import fail

from app.core.errors import FastMTPError

SERVICE = "fastmtp-chat"
USERNAME = "huggingface-hub-token"
ENV_VAR = "HF_TOKEN"
T = TypeVar("T")


class SecretsError(FastMTPError):
    """The keyring cannot store or read the token."""

    kind = "keyring"


@dataclass(frozen=True)
class TokenStatus:
    source: Literal["env", "keyring"] | None
    backend: str
    keyring_available: bool

    def to_dict(self) -> dict[str, Any]:
        """Where the token comes from; never the token itself, nor a part or the length of it."""
        return {"token": "set" if self.source else "not set", "source": self.source, "backend": self.backend,
                "keyring_available": self.keyring_available}


def _backend() -> Any:
    return keyring.get_keyring()


def _backend_name(backend: Any) -> str:
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def keyring_available() -> bool:
    backend = _backend()
    if isinstance(backend, fail.Keyring):
        return False
    chain = getattr(backend, "backends", None)  # the chainer with nothing behind it
    return chain is None or bool(chain)


def _no_keyring() -> SecretsError:
    return SecretsError("No keyring backend is available on this system, so the token cannot be stored safely.",
                        f"Set the {ENV_VAR} environment variable for the runs that need it instead "
                        "(or install a keyring backend such as gnome-keyring or KWallet).")


def _damaged(exc: Exception) -> SecretsError:
    backend = _backend()
    where = getattr(backend, "file_path", None)  # the file-backed keyrings (keyrings.alt) name their file
    place = f" ({where})" if isinstance(where, str) else ""
    return SecretsError(f"The keyring {_backend_name(backend)}{place} cannot be read: {type(exc).__name__}, "
                        "so it is damaged or not a keyring.",
                        (f"Move {where} aside (then store the token again with `python -m app token set`)"
                         if place else "Repair or reset the keyring") + f", or set the {ENV_VAR} environment "
                        "variable for the runs that need a token.")


def set_token(token: str) -> None:
    token = token.strip()
    if not token or any(ch.isspace() for ch in token):
        raise SecretsError("That is not a token (it is empty or contains spaces).",
                           "Copy the token from https://huggingface.co/settings/tokens and try again.")
    if not keyring_available():
        raise _no_keyring()
    _keyring_call(lambda: keyring.set_password(SERVICE, USERNAME, token), "store the token",
                  f"Unlock the keyring and retry, or use the {ENV_VAR} environment variable.")


def clear_token() -> bool:
    """Forget the stored token; False when none was stored."""
    if not keyring_available():
        raise _no_keyring()
    return _delete(USERNAME, "the token")


def _stored() -> str | None:
    return get_secret(USERNAME)


def get_token() -> str | None:
    """The token to send to the hub: ``HF_TOKEN`` if set, else the keyring's, else None (public repos)."""
    return os.environ.get(ENV_VAR) or _stored()


def status() -> TokenStatus:
    source: Literal["env", "keyring"] | None = "env" if os.environ.get(ENV_VAR) else None
    if source is None and _stored():
        source = "keyring"
    return TokenStatus(source=source, backend=_backend_name(_backend()), keyring_available=keyring_available())


# ----------------------------------------------------------------------------- other secrets (API keys)
# Remote servers' and ``serve``'s API keys live beside the hub token under their own user names. They have no
# environment fallback: a missing keyring is an error that says so, never a plain-text file.


def _no_keyring_for(what: str) -> SecretsError:
    return SecretsError(f"No keyring backend is available on this system, so {what} cannot be stored safely.",
                        "Install a keyring backend such as gnome-keyring or KWallet, or use a server without a key.")


def set_secret(username: str, value: str, what: str = "the key") -> None:
    """Store ``value`` under ``username`` in the keyring (SecretsError in words when it cannot)."""
    if not keyring_available():
        raise _no_keyring_for(what)
    _keyring_call(lambda: keyring.set_password(SERVICE, username, value), f"store {what}",
                  "Unlock the keyring and retry.")


def get_secret(username: str) -> str | None:
    """The value stored under ``username``, or None (also when there is no keyring or it is locked)."""
    if not keyring_available():
        return None
    try:
        return keyring.get_password(SERVICE, username)
    except keyring.errors.KeyringError:
        return None
    except Exception as exc:  # a backend's own failure (configparser, binascii, OSError, …)
        raise _damaged(exc) from None


def delete_secret(username: str) -> bool:
    """Forget the value stored under ``username``; False when none was stored or there is no keyring."""
    if not keyring_available():
        return False
    return _delete(username, "a key")


def _delete(username: str, what: str) -> bool:
    def delete() -> bool:
        try:
            keyring.delete_password(SERVICE, username)
        except keyring.errors.PasswordDeleteError:
            return False
        return True

    return _keyring_call(delete, f"delete {what}", "Unlock the keyring and retry.")


def _keyring_call(action: Callable[[], T], refused: str, hint: str) -> T:
    """Run one keyring call; a refusal (locked, denied) and a backend's own failure (a damaged file) become
    SecretsError in words, never the error's text, which may quote the keyring file's lines."""
    try:
        return action()
    except keyring.errors.KeyringError as exc:
        raise SecretsError(f"The keyring refused to {refused}: {type(exc).__name__}.", hint) from None
    except Exception as exc:  # a backend's own failure (configparser, binascii, OSError, …)
        raise _damaged(exc) from None
