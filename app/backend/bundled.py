"""The prebuilt CPU backend a packaged app carries, installed on first start so the demo answers without a compiler.

The installers put a ``backend pack`` archive of a ``--cpu-variants`` build (x86-64-v2 base plus an AVX2
module, picked at load) into the bundle. When no backend is active yet, the first command unpacks it
into the data folder and makes it active; a backend built or installed later takes over as usual.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from app.backend import archive, registry

BUNDLE_FOLDER = "backends"


def bundled_archives() -> list[Path]:
    """``FASTMTP_BUNDLED_BACKENDS`` (a folder) when set, else the frozen app's ``backends/``; newest name last."""
    override = os.environ.get("FASTMTP_BUNDLED_BACKENDS")
    bundle = getattr(sys, "_MEIPASS", None)
    folder = Path(override) if override else Path(bundle) / BUNDLE_FOLDER if bundle else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(folder.glob("*.tar.xz"))


def ensure_installed(say: Callable[[str], None] = lambda _line: None) -> registry.BackendManifest | None:
    """Install and activate the bundled backend when no backend is active; returns it, or None if nothing to do."""
    archives = bundled_archives()  # first: a checkout has none, and then the data folder is not even looked at
    if not archives or registry.active_id() is not None:
        return None
    say(f"First start: installing the bundled CPU backend from {archives[-1].name}…")
    unpacked = archive.unpack(archives[-1], activate=True, kind="bundled")
    say(f"Backend {unpacked.manifest.id} is ready (prebuilt, no compiler needed).")
    return unpacked.manifest
