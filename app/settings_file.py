"""One way to read and write the app's own small JSON files: the settings, the window's state, the remote
servers, the update check's state, the trust store, the list of local models, the active backend and what
adaptive depth learned per model (``engine/depth_memory.py``).

Two rules, one place. Reading: a missing file is no file (the caller's defaults); a file that cannot be read
or parsed (unreadable, not JSON, nested deeper than Python parses) is damaged, ``DamagedFile``, and is left
as it is: ``load_json`` reads it as missing (preferences and caches, rewritten by the next save), while a
caller whose file must not be silently forgotten (the trust store) catches ``DamagedFile`` and says so.
Writing: atomically, a temporary file beside the target renamed over it, so a crash or a full disk mid-write
leaves the old file whole; the ``OSError`` goes to the caller, which words it for its file.

Qt-free.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


class DamagedFile(Exception):
    """A settings file that exists but cannot be read as JSON; ``error`` is what reading it raised."""

    def __init__(self, path: Path, error: Exception) -> None:
        reason = "its JSON is nested too deeply" if isinstance(error, RecursionError) else str(error)
        super().__init__(reason)
        self.path = path
        self.error = error


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; None when there is no file there; ``DamagedFile`` when it cannot be read."""
    try:
        if not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python parses
        raise DamagedFile(path, exc) from exc


def load_json(path: Path) -> Any:
    """The JSON value in ``path``, or None when the file is missing or damaged (the caller's defaults apply;
    the damaged file stays as it is until the next save replaces it)."""
    try:
        return read_json(path)
    except DamagedFile:
        return None


def load_json_object(path: Path) -> dict[str, Any] | None:
    """``load_json``, keeping only a JSON object: None for anything else as for a missing file."""
    data = load_json(path)
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (a temporary file beside ``path``, named for this process so
    two processes never share one, renamed over it). On ``OSError`` the temporary file is removed and the
    error raised for the caller to word; the old file is untouched."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
