"""Where the app keeps its files: platformdirs locations, each overridable by an environment variable.

Tests and portable installs point ``FASTMTP_DATA_DIR`` / ``FASTMTP_CACHE_DIR`` / ``FASTMTP_CONFIG_DIR``
elsewhere; everything else uses the per-user directories of the platform.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from app.core.errors import StorageError

APP_NAME = "fastmtp-chat"


def ensure_dir(path: Path, what: str, env: str = "") -> Path:
    """``path`` as an existing folder (created if missing), or a :class:`StorageError` that says why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        reason = (f"{blocker} is a file, not a folder" if blocker is not None
                  else exc.strerror or type(exc).__name__)
        where = f"Point {env} at a folder you can write to" if env else "Fix or remove what is in the way"
        raise StorageError(f"The {what} folder {path} cannot be used: {reason}.",
                           f"{where} (or fix its permissions), then try again.") from None
    return path


def _dir(env: str, default: str, what: str) -> Path:
    return ensure_dir(Path(os.environ.get(env) or default), what, env)


def data_dir() -> Path:
    """Models and built backends: large, kept."""
    return _dir("FASTMTP_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False), "data")


def cache_dir() -> Path:
    """Backend sources and build trees: large, can be rebuilt, kept for fast rebuilds."""
    return _dir("FASTMTP_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False), "cache")


def config_dir() -> Path:
    """Settings and trusted keys: small."""
    return _dir("FASTMTP_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False), "config")


def backends_dir() -> Path:
    return ensure_dir(data_dir() / "backends", "backends")


def depth_memory_dir() -> Path:
    """What adaptive depth learned per model and machine (small; created by its first save)."""
    return data_dir() / "depth-memory"


def chat_states_dir() -> Path:
    """The evaluated state of the chats left, so that they reopen at once (``engine/state_cache.py``; created by its
    first save; bounded by the ``state_cache_mb`` setting)."""
    return cache_dir() / "chat-states"


def models_dir() -> Path:
    return ensure_dir(data_dir() / "models", "models")


def demo_model_dir() -> Path:
    """The built-in demo model, written on first use."""
    return models_dir() / "demo"
