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

What was learned is not kept for good (issue 36: decisions learned under load stick): a record also notes the
machine's load when it was made (other processes' share of the cores, our own work left out, read so that another
program's burst is not a load: ``take_up``) and the backend's build (``backend_build``: its llama.cpp commit, patch
and build time, so a rebuild under the same id counts), and a record older than ``MAX_AGE_DAYS``, or made under a
load ``LOAD_FACTOR`` times lighter or heavier than now, or by another build, is not used (``stale_reason``): the
next load measures again and rewrites it. Auto drafting's records (``app.engine.auto_mode``) follow the same rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core import idle_cores
from app.core.settings_file import load_json_object, load_state, write_json
from app.engine.config import EngineConfig

SUFFIX = ".depth.json"
MAX_AGE_DAYS = 14.0  # a record older than this is measured again
LOAD_FACTOR = 2.0  # ... and one made under a load (per core) this many times lighter or heavier than now
LOAD_FLOOR = 0.25  # loads per core below this count as this (an idle machine's 0.02 against 0.1 is no change)


LOAD_WINDOW_S = 0.1  # the window the other processes' load is read over when a record is taken up ...
# ... and the longer one it is read over again where that reading is all a decision would stand on (a record that
# looks stale, or none: the next save notes it): another program's burst is not a load. On this
# 2-core machine with two programs busy half the time in bursts of 0.05-0.6 s, a record read stale at a third of
# its take-ups with one 0.1 s reading each, at a quarter with 0.5 s, at 3-7% with 1 s (docs/benchmarks.md)
LOAD_HOLD_WINDOW_S = 1.0


def load_average() -> float | None:
    """The 1-minute load average per core (None where the system has none, as on Windows): our own recent work
    counts in it too, so it is for reports, not for judging records."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return None


def machine_load(window_s: float = LOAD_WINDOW_S) -> float | None:
    """Other processes' share of the machine now, 0 (idle) to 1 (every core busy): the kernel's CPU counters over
    ``window_s`` with this process's own CPU time taken out (``app.core.idle_cores``). With the 1-minute load
    average, our own decoding of a minute before read as load: ``bench adaptive-load``'s second run of every phase
    found the first run's record "made under another load" (0.18 then, over 0.5 per core now) and started cold.
    Where the counters cannot be read, the load average per core stands in (capped at 1); None where there is
    neither."""
    idle = idle_cores.measure(window_s)
    if idle is None:
        return None
    cpus = os.cpu_count() or 1
    return min(max(1.0 - idle / cpus, 0.0), 1.0)


def backend_build(backend_id: str) -> str | None:
    """What identifies the build of an installed backend beyond its id (a rebuild keeps the id): its llama.cpp
    commit, patch and build time; None when it cannot be read (no such backend, a damaged manifest)."""
    from app.backend.registry import get
    from app.core.errors import FastMTPError

    try:
        manifest = get(backend_id)
    except (FastMTPError, OSError, ValueError, TypeError, KeyError):  # unknown: the id alone keys the record
        return None
    return f"{manifest.llama_cpp_commit}:{manifest.patch_sha256 or 'unpatched'}:{manifest.built_at}"


def conditions_now(backend_id: str, window_s: float = LOAD_WINDOW_S) -> dict[str, Any]:
    """The conditions a record notes when it is made: the load per core (read over ``window_s``) and the
    backend's build."""
    return {"load_per_core": machine_load(window_s), "backend_build": backend_build(backend_id)}


def take_up(record: dict[str, Any] | None, backend_id: str,
            read: Callable[[str, float], dict[str, Any]] = conditions_now, *,
            hold_new: bool = True) -> tuple[dict[str, Any], str | None]:
    """The conditions a session takes ``record`` up under (None: there is no usable one, a cold start) and why the
    record is stale (None: it holds, or there is none). The load is read over ``LOAD_WINDOW_S``; where that
    reading would throw the record away, or (``hold_new``) is what a new record would note, it is read again over
    ``LOAD_HOLD_WINDOW_S`` and that reading decides. A record that holds keeps the load it was made under for the
    next save: its replies were measured under that load, and a reading noted at every load would drift with the
    noise until a record held still at one load reads as made under another."""
    now = read(backend_id, LOAD_WINDOW_S)
    stale = stale_reason(record, now) if record is not None else None
    if stale is not None or (record is None and hold_new):
        now = read(backend_id, LOAD_HOLD_WINDOW_S)
        stale = stale_reason(record, now) if record is not None else None
    noted = record.get("conditions") if record is not None and stale is None else None
    then = noted.get("load_per_core") if isinstance(noted, dict) else None
    return ({**now, "load_per_core": float(then)} if isinstance(then, int | float) else now), stale


def stale_for_listing() -> Callable[[dict[str, Any], str], str | None]:
    """``take_up``'s judgment for a listing of many records (why each is stale, or None): the load read at most
    once over each window, each backend's build once."""
    loads: dict[float, float | None] = {}
    builds: dict[str, str | None] = {}

    def read(backend_id: str, window_s: float) -> dict[str, Any]:
        if window_s not in loads:
            loads[window_s] = machine_load(window_s)
        if backend_id not in builds:
            builds[backend_id] = backend_build(backend_id)
        return {"load_per_core": loads[window_s], "backend_build": builds[backend_id]}

    return lambda record, backend_id: take_up(record, backend_id, read)[1]


def stale_reason(record: dict[str, Any], now: dict[str, Any], at: datetime | None = None) -> str | None:
    """Why a record should be measured again, in words, or None while it still holds: it is older than
    ``MAX_AGE_DAYS``, the load per core changed by ``LOAD_FACTOR`` or more, or the backend was rebuilt. A record
    that notes no conditions (an older version's) is judged by its age alone."""
    saved = record.get("saved_at")
    try:
        saved_at = datetime.fromisoformat(str(saved)) if saved else None
    except ValueError:
        saved_at = None
    if saved_at is not None and saved_at.tzinfo is not None:
        age = ((at or datetime.now(UTC)) - saved_at).total_seconds() / 86400.0
        if age > MAX_AGE_DAYS:
            return f"measured {age:.0f} days ago"
    then = record.get("conditions")
    if not isinstance(then, dict):
        return None
    old_load, new_load = then.get("load_per_core"), now.get("load_per_core")
    if isinstance(old_load, int | float) and isinstance(new_load, int | float):
        low, high = sorted((max(float(old_load), LOAD_FLOOR), max(float(new_load), LOAD_FLOOR)))
        if high >= low * LOAD_FACTOR:
            return f"the machine's load changed ({float(old_load):.2f} then, {float(new_load):.2f} now, per core)"
    old_build, new_build = then.get("backend_build"), now.get("backend_build")
    if old_build and new_build and old_build != new_build:
        return "the backend was rebuilt since"
    return None


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
    mode, the backend build, the threads as set (0: they follow the machine's idle cores, which change from one
    reply to the next), the GPU layers and the RPC workers, and the machine."""

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
        self.conditions: dict[str, Any] | None = None  # at ``recall``: the load and build this session began under
        self.stale: str | None = None  # why the record found at ``recall`` was not used, if it was stale

    def path(self, key: MemoryKey) -> Path:
        return self.folder / f"{key.digest()}{SUFFIX}"

    def recall(self, key: MemoryKey) -> dict[str, Any] | None:
        """The state saved under ``key``, or None: none saved, a record that is damaged or not for this key, or one
        that is stale (``stale_reason``; said in ``stale``): then the next save replaces it. Notes the conditions
        for the saves (``take_up``: read now, before this session's own work loads the machine, or the record's
        own load where it holds)."""
        record = load_state(self.path(key), _check_record)  # damaged: set aside as .bad, a cold start
        if record is not None and (record.get("key") != json.loads(json.dumps(asdict(key)))
                                   or not isinstance(record.get("state"), dict)):
            record = None
        self.conditions, self.stale = take_up(record, key.backend)
        state = record.get("state") if record is not None and self.stale is None else None
        return state if isinstance(state, dict) else None

    def remember(self, key: MemoryKey, state: dict[str, Any]) -> None:
        """Save ``state`` under ``key``, atomically (``OSError`` to the caller: a full disk, a read-only folder),
        with the conditions noted at ``recall`` (or now, without one)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        conditions = self.conditions if self.conditions is not None else conditions_now(key.backend)
        write_json(self.path(key), {"key": asdict(key), "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
                                    "conditions": conditions, "state": state})

    def entries(self) -> list[dict[str, Any]]:
        """Every readable record, for people: the files it is for, when it was saved, the depth it settled on."""
        found, stale = [], stale_for_listing()
        for path in sorted(self.folder.glob(f"*{SUFFIX}")) if self.folder.is_dir() else []:
            record = load_json_object(path) or {}
            key, state = record.get("key"), record.get("state")
            if not isinstance(key, dict) or not isinstance(state, dict):
                found.append({"file": str(path), "damaged": True})
                continue
            found.append({"file": str(path), "damaged": False, "target": key.get("target"), "draft": key.get("draft"),
                          "mode": key.get("mode"), "backend": key.get("backend"), "threads": key.get("threads"),
                          "gpu_layers": key.get("gpu_layers"), "saved_at": record.get("saved_at"),
                          "depth": state.get("current"), "rounds": state.get("rounds"),
                          "stale": stale(record, str(key.get("backend")))})
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
