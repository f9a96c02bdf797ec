"""One way to read and write the app's own small JSON files: the settings, the window's state, the remote
servers, the update check's state, the trust store, the list of local models, the active backend and what
adaptive depth learned per model (``engine/depth_memory.py``).

Two rules, one place. Reading: a missing file is no file (the caller's defaults); a file that cannot be read
or parsed (unreadable, not JSON, nested deeper than Python parses) is damaged, ``DamagedFile``, and is left
as it is: ``load_json`` reads it as missing (preferences and caches, rewritten by the next save), while a
caller whose file must not be silently forgotten (the trust store) catches ``DamagedFile`` and says so.
Only a regular file is read (opened without blocking and checked on the open descriptor, so a FIFO or a link
to ``/dev/zero`` is refused unread), at most ``MAX_BYTES`` of it, and numbers that are not finite (``1e999``,
``NaN``, ``Infinity``) make it damaged.

State files are advisory (``load_state``: the window's state, depth memory, the settings, ``serve.json``, the
update check's state): a damaged one, or one its caller's ``validate`` refuses (types and ranges), is logged
as a warning and moved aside as ``<name>.bad``, and the caller starts from its defaults: no state file can
keep the app from starting, and the damaged one is kept for a person to look at.
Writing: atomically, a temporary file beside the target renamed over it, so a crash or a full disk mid-write
leaves the old file whole; the ``OSError`` goes to the caller, which words it for its file.

Qt-free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.regular_files import NotRegularFile, open_regular

log = logging.getLogger(__name__)

MAX_BYTES = 8 * 1024 * 1024  # every file read here is a few KiB; more is not one of ours
BAD_SUFFIX = ".bad"


class DamagedFile(Exception):
    """A settings file that exists but cannot be read as JSON; ``error`` is what reading it raised."""

    def __init__(self, path: Path, error: Exception) -> None:
        if isinstance(error, RecursionError):
            reason = "its JSON is nested too deeply"
        elif isinstance(error, NotRegularFile):
            reason = f"it is {error.strerror}, not a regular file"
        else:
            reason = str(error)
        super().__init__(reason)
        self.path = path
        self.error = error


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def read_json(path: Path, max_bytes: int = MAX_BYTES) -> Any:
    """The JSON value in ``path``; None when there is no file there; ``DamagedFile`` when it cannot be read: not a
    regular file (a FIFO, a device, a folder: refused without blocking or reading), over ``max_bytes``, not UTF-8
    JSON, nested deeper than Python parses, or holding a number that is not finite."""
    try:
        try:
            handle, size = open_regular(path)
        except FileNotFoundError:
            return None
        with handle:
            if size > max_bytes:
                raise ValueError(f"it is {size} bytes, more than the {max_bytes} such a file can be")
            raw = handle.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ValueError(f"it is more than the {max_bytes} bytes such a file can be")
        return json.loads(raw.decode("utf-8"), parse_float=_finite, parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python parses
        raise DamagedFile(path, exc) from exc


def set_aside(path: Path, reason: str) -> Path | None:
    """Move a damaged state file out of the way as ``<name>.bad`` (replacing an older one), with a warning in the
    log; where it went, or None when it could not be moved (then it is left, and read as missing)."""
    bad = path.with_name(path.name + BAD_SUFFIX)
    try:
        os.replace(path, bad)
    except OSError as exc:
        log.warning("%s is damaged (%s) and could not be moved aside: %s", path, reason, exc)
        return None
    log.warning("%s is damaged (%s): moved aside as %s; starting from the defaults", path, reason, bad.name)
    return bad


def check_state(path: Path, validate: Callable[[dict[str, Any]], None] | None = None,
                max_bytes: int = MAX_BYTES) -> tuple[dict[str, Any] | None, str | None]:
    """``load_state`` with the reason: ``(object, None)``, ``(None, None)`` for no file, ``(None, reason)`` for a
    damaged file, now moved aside as ``<name>.bad``."""
    try:
        data = read_json(path, max_bytes)
    except DamagedFile as exc:
        reason = str(exc)
    else:
        if data is None:
            return None, None
        if not isinstance(data, dict):
            reason = "it is not a JSON object"
        else:
            try:
                if validate is not None:
                    validate(data)
                return data, None
            except (ValueError, TypeError, KeyError, OverflowError) as exc:
                reason = str(exc) or type(exc).__name__
    set_aside(path, reason)
    return None, reason


def load_state(path: Path, validate: Callable[[dict[str, Any]], None] | None = None,
               max_bytes: int = MAX_BYTES) -> dict[str, Any] | None:
    """An advisory state file's JSON object, or None: no file, or a damaged one (unreadable, not a regular file,
    too big, not a JSON object, or refused by ``validate``, which raises ``ValueError`` naming what is wrong),
    which is logged and moved aside as ``<name>.bad`` so the caller starts from its defaults."""
    return check_state(path, validate, max_bytes)[0]


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
    two processes never share one, created exclusively and never through a link, renamed over it). On ``OSError``
    the temporary file is removed and the error raised for the caller to word; the old file is untouched."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()  # a leftover, or a link planted at this predictable name: removed, never written through
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2) + "\n")
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


def load_floors(path: Path, valid_entry: Callable[[object], bool]) -> tuple[dict[str, Any], str]:
    """A rollback-floor file (``{repository: entry}``: the last signed feed verified for each) and, when it was
    damaged, why (empty when all is well; a missing file is no floors and no warning).

    A floor is never dropped in silence: a damaged file (unreadable, not a JSON object, or an entry
    ``valid_entry`` refuses) is set aside as ``<name>.bad``, the entries still whole (other repositories') are
    written back, and the reason says so, for the caller to tell the user that, until the next verified feed, an
    older replayed one cannot be refused for what was lost. The app-update floor (``update-floor.json``) and the
    backend feed's (``backend-feed-floor.json``) follow these rules."""
    reason = ""
    try:
        data = read_json(path)
    except DamagedFile as exc:
        data, reason = {}, str(exc)
    if data is None:
        return {}, ""
    if not isinstance(data, dict):
        data, reason = {}, "it is not a JSON object"
    floors = {str(repo): entry for repo, entry in data.items() if valid_entry(entry)}
    if not reason and len(floors) != len(data):
        damaged = next(str(repo) for repo in data if repo not in floors)
        reason = f"the entry for {damaged[:80]!r} is not a valid floor"
    if not reason:
        return floors, ""
    moved = set_aside(path, reason)
    if floors:
        with contextlib.suppress(OSError):
            write_json(path, floors)
    aside = f" and was set aside as {moved.name}" if moved else ""
    kept = " The floors of the other repositories were kept." if floors else ""
    return floors, f"{path} was damaged ({reason}){aside}.{kept}"
