"""What adaptive depth learned about a model on this machine, kept between loads.

A fresh load of a model knows nothing of what its rounds cost at each depth, so adaptive depth tries the depths
near where it starts and pays for the tries: on a 2-core CPU, 2-4% of the first replies' speed, which is the
whole margin between depths 3, 4 and 5 there. Once a session has measured them, the next load of the same
model files, on the same backend, with the same threads and GPU layers, starts from what it measured.

One small JSON file per such combination, named by a digest of it, in the app's data folder (``python -m app
depth-memory list`` / ``forget``). A record that cannot be read, or that another version wrote, is a cold start,
never an error: it is rewritten by the next save; a damaged one (not a regular file, not JSON, a number that is
not finite) is moved aside as ``<name>.bad`` with a warning (``settings_file.load_state``). Qt-free, and
nothing native: the decoder hands in the backend's id.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core.settings_file import load_json_object, load_state, write_json
from app.engine.config import EngineConfig

SUFFIX = ".depth.json"


@dataclass(frozen=True)
class FilesKey:
    """The model files a record was made with, by path, size and modification time (a file replaced by another
    of the same name is another model): the first fields of every key (``files_identity`` fills them)."""

    target: str
    target_size: int
    target_mtime_ns: int
    draft: str | None
    draft_size: int | None
    draft_mtime_ns: int | None


@dataclass(frozen=True)
class MemoryKey(FilesKey):
    """Everything that decides what a round costs and how far drafts get accepted: the model files, the drafting
    mode, the backend build, the threads, the GPU layers and the RPC workers, and the machine."""

    mode: str
    backend: str
    threads: int
    gpu_layers: int
    flash_attn: bool | None
    rpc: tuple[str, ...]
    machine: str

    def digest(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


FilesIdentity = tuple[str, int, int, "str | None", "int | None", "int | None"]


def files_identity(config: EngineConfig) -> FilesIdentity:
    """``config``'s model files as they are on disk now: the target's and the sidecar's (in sidecar mode) resolved
    path, size and modification time (``OSError`` when one is missing). What a record learned from those files (a
    depth, a chat's state) is used again only while they are the same."""
    target = config.target.resolve()
    target_stat = target.stat()
    draft = config.draft.resolve() if config.draft is not None and config.mode == "sidecar" else None
    draft_stat = draft.stat() if draft is not None else None
    return (str(target), target_stat.st_size, target_stat.st_mtime_ns, str(draft) if draft is not None else None,
            draft_stat.st_size if draft_stat is not None else None,
            draft_stat.st_mtime_ns if draft_stat is not None else None)


def key_for(config: EngineConfig, backend: str, threads: int) -> MemoryKey:
    """The key of ``config``'s model files as they are on disk now (``OSError`` when one is missing)."""
    return MemoryKey(*files_identity(config), config.mode, backend, threads, config.n_gpu_layers, config.flash_attn,
                     tuple(config.rpc), platform.node())


def _check_record(record: dict[str, Any]) -> None:
    if not isinstance(record.get("key"), dict) or not isinstance(record.get("state"), dict):
        raise ValueError("it is not a depth-memory record (no key and state)")


class DepthMemory:
    """The folder of records; each record is ``{"key": MemoryKey fields, "saved_at", "state"}``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: MemoryKey) -> Path:
        return self.folder / f"{key.digest()}{SUFFIX}"

    def recall(self, key: MemoryKey) -> dict[str, Any] | None:
        """The state saved under ``key``, or None: none saved, or a record that is damaged or not for this key
        (then the next save replaces it)."""
        record = load_state(self.path(key), _check_record)  # damaged: set aside as .bad, a cold start
        if record is None or record.get("key") != json.loads(json.dumps(asdict(key))):
            return None
        state = record.get("state")
        return state if isinstance(state, dict) else None

    def remember(self, key: MemoryKey, state: dict[str, Any]) -> None:
        """Save ``state`` under ``key``, atomically (``OSError`` to the caller: a full disk, a read-only folder)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.path(key), {"key": asdict(key), "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                    "state": state})

    def entries(self) -> list[dict[str, Any]]:
        """Every readable record, for people: the files it is for, when it was saved, the depth it settled on."""
        found = []
        for path in sorted(self.folder.glob(f"*{SUFFIX}")) if self.folder.is_dir() else []:
            record = load_json_object(path) or {}
            key, state = record.get("key"), record.get("state")
            if not isinstance(key, dict) or not isinstance(state, dict):
                found.append({"file": str(path), "damaged": True})
                continue
            found.append({"file": str(path), "damaged": False, "target": key.get("target"), "draft": key.get("draft"),
                          "mode": key.get("mode"), "backend": key.get("backend"), "threads": key.get("threads"),
                          "gpu_layers": key.get("gpu_layers"), "saved_at": record.get("saved_at"),
                          "depth": state.get("current"), "rounds": state.get("rounds")})
        found += [{"file": str(path), "damaged": True} for path in set_aside_records(self.folder, SUFFIX)]
        return found

    def forget(self) -> int:
        """Delete every record (damaged ones too); how many there were."""
        return forget_records(self.folder, SUFFIX)


def set_aside_records(folder: Path, suffix: str) -> list[Path]:
    """The damaged records ``load_state`` moved aside (``<record>.bad``), for ``list`` to name as damaged."""
    return sorted(folder.glob(f"*{suffix}.bad")) if folder.is_dir() else []


def forget_records(folder: Path, suffix: str) -> int:
    """Delete the records ending in ``suffix`` in ``folder`` (damaged ones too, and those set aside as
    ``.bad``); how many there were."""
    paths = [*folder.glob(f"*{suffix}"), *set_aside_records(folder, suffix)] if folder.is_dir() else []
    for path in paths:
        path.unlink(missing_ok=True)
    return len(paths)
