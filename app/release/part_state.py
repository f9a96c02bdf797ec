"""The small JSON file beside a ``.part`` download that lets a later run resume it safely.

A resume is only safe if the server still has the same file: the state remembers where the bytes came
from (the URL asked for) and what the server said about them (ETag, Last-Modified, total size). The
byte count itself is the ``.part`` file's length: every byte in it was written in order from one
response, so the file survives a SIGKILL as it is, and the state never has to be fsync'ed per chunk.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from app.core import safe_paths

_VERSION = 1


@dataclass(frozen=True)
class PartState:
    """What we knew about the remote file when the bytes in ``.part`` were written."""

    url: str  # the URL we asked for (before redirects): the mirror the bytes came from
    etag: str | None  # the response's ETag, compared and sent as If-Range on resume
    last_modified: str | None
    size: int | None  # the total size: expected, or the server's when we expected none
    bytes_done: int  # informational: the .part length when the state was last saved

    def same_remote(self, etag: str | None, last_modified: str | None, size: int | None) -> bool:
        """Whether a response describes the same file: a validator or the size differing means it changed."""
        if self.etag and etag and self.etag != etag:
            return False
        if self.last_modified and last_modified and self.last_modified != last_modified:
            return False
        return not (self.size is not None and size is not None and self.size != size)

    def if_range(self) -> str | None:
        """The If-Range value: a strong ETag, else Last-Modified (weak ETags are not allowed there)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified


def state_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def load(path: Path) -> PartState | None:
    """The saved state, or None when missing, unreadable or from another format (the part restarts)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.pop("version", None) != _VERSION:
            return None
        return PartState(url=str(data["url"]), etag=_opt_str(data.get("etag")),
                         last_modified=_opt_str(data.get("last_modified")),
                         size=_opt_int(data.get("size")), bytes_done=int(data.get("bytes_done", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: Path, state: PartState) -> None:
    """Write atomically (temp file + rename), so a crash leaves the old state or the new, never half."""
    safe_paths.write_replacing(path, json.dumps({"version": _VERSION, **asdict(state)}, indent=1).encode())


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | str):
        return int(value)
    raise TypeError(f"not an integer: {value!r}")
