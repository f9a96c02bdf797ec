"""Where the app keeps its files: platformdirs locations, each overridable by an environment variable.

Tests and portable installs point ``FASTMTP_DATA_DIR`` / ``FASTMTP_CACHE_DIR`` / ``FASTMTP_CONFIG_DIR``
elsewhere; everything else uses the per-user directories of the platform.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "fastmtp-chat"


def _dir(env: str, default: str) -> Path:
    path = Path(os.environ.get(env) or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """Models and built backends: large, kept."""
    return _dir("FASTMTP_DATA_DIR", platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Backend sources and build trees: large, can be rebuilt, kept for fast rebuilds."""
    return _dir("FASTMTP_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """Settings and trusted keys: small."""
    return _dir("FASTMTP_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME, appauthor=False))


def backends_dir() -> Path:
    path = data_dir() / "backends"
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def demo_model_dir() -> Path:
    """The built-in demo model, written on first use."""
    return models_dir() / "demo"
