"""Long chats reopen at once: the evaluated state of the chats a person left, kept in memory and on disk.

When the engine turns from one chat to another, the chat it leaves is kept as a :class:`Snapshot`: the target's
and the draft head's sequence state (llama.cpp's bytes), the tokens they evaluated, and the decoder's host rows
(the pending hidden row and the draft's held rows). The last few stay in memory; every one is also written to
the cache folder (``app.core.paths.chat_states_dir()``), one file per chat, the folder bounded by a byte cap
with the least recently used files evicted first. Coming back to a chat loads its state instead of reading the
conversation again, but only when everything it was made with still holds: the same target and sidecar files
(path, size, modification time), backend build, drafting mode and context settings (the :class:`StateKey`), and
the saved tokens a prefix of the chat's prompt now (an edited history or a regenerated reply is not). A state
that does not fit is dropped.

A state file is native memory llama.cpp will trust, so nothing of one reaches it unchecked: the file's size
against its header's (before a byte of the blobs is read, and under a sane cap), the magic, the format version,
the header's own sha256, the key, the conversation it names, and a CRC-32 over its blobs. A file that fails any
of these is set aside as ``<name>.bad`` with a log line and the chat is read again. A save that fails (a full
disk, a read-only folder) leaves the chat going and the state unsaved, and says why (``notices``).

The file format (little-endian)::

    magic  8 bytes  b"FMTPSTAT"
    u32    format version (1)
    u32    header length H
    32     sha256 of the header
    H      header: UTF-8 JSON {"conversation", "key": StateKey fields, "tokens", "tokens_sha256",
           "host": {"n_embd", "pending", "held_tokens"}, "blobs": {"target", "draft", "host"} (byte sizes,
           "draft" -1 for none), "blobs_crc32", "saved_at"}
    blobs  target state, draft state, host rows (float32: the pending row, then the held rows)

Qt-free and nothing native (the window lists and clears the folder through it); the engine worker hands in the
snapshots and the backend's id.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import struct
import threading
import zlib
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import numpy.typing as npt

from app.core.regular_files import open_regular
from app.core.settings_file import set_aside
from app.core.units import format_bytes
from app.engine.config import EngineConfig
from app.engine.depth_memory import FilesKey, files_identity

log = logging.getLogger(__name__)

MAGIC = b"FMTPSTAT"
VERSION = 1
SUFFIX = ".fmstate"
BAD_SUFFIX = ".bad"
_PREAMBLE = struct.Struct("<8sII32s")  # magic, version, header length, header sha256
MAX_HEADER_BYTES = 16 * 1024 * 1024  # the tokens of a 262,144-token context as JSON are under 2 MiB
MAX_STATE_BYTES = 64 * 1024 ** 3  # no state of a model this app runs is larger: a file claiming more is not one
MAX_TOKEN = 2 ** 31 - 1
MEMORY_ENTRIES = 4  # chats kept in memory
MEMORY_BYTES = 1024 ** 3  # and at most this many bytes of them
_CHUNK = 8 * 1024 * 1024  # blobs are read and written in slices of this size
STALE_TEMPORARY_S = 3600  # a temporary file this old is no save in progress: ``clear`` removes it

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class StateKey(FilesKey):
    """What a state is only valid for: the model files as they are on disk, the backend build, the drafting mode
    and the context settings."""

    backend: str
    mode: str
    n_ctx: int
    n_batch: int
    flash_attn: bool | None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode("utf-8")).hexdigest()[:24]


def key_for(config: EngineConfig, backend: str) -> StateKey:
    """The key of ``config``'s model files as they are on disk now (``OSError`` when one is missing)."""
    return StateKey(*files_identity(config), backend, config.mode, config.n_ctx, config.n_batch, config.flash_attn)


@dataclass
class Snapshot:
    """A decoder's evaluated conversation (``SpeculativeDecoder.snapshot`` / ``restore``)."""

    tokens: list[int]  # evaluated by the target (positions 0..n-1)
    target: bytes | bytearray  # the target context's sequence state
    draft: bytes | bytearray | None  # the draft context's (None: drafting off)
    n_embd: int
    pending_h: FloatArray | None  # the target's nextn row of the last evaluated position
    held_tokens: list[int] = field(default_factory=list)  # evaluated by the target, not yet by the draft
    held_rows: FloatArray = field(default_factory=lambda: np.zeros((0, 0), np.float32))

    @property
    def nbytes(self) -> int:
        return len(self.target) + len(self.draft or b"") + self.host_bytes

    @property
    def host_bytes(self) -> int:
        return 4 * self.n_embd * (len(self.held_tokens) + (1 if self.pending_h is not None else 0))

    def host_blob(self) -> bytes:
        rows = [] if self.pending_h is None else [self.pending_h.reshape(1, self.n_embd)]
        if self.held_tokens:
            rows.append(self.held_rows.reshape(len(self.held_tokens), self.n_embd))
        if not rows:
            return b""
        return np.ascontiguousarray(np.concatenate(rows), dtype="<f4").tobytes()


@dataclass
class Lookup:
    """What a lookup found: a snapshot and where it came from (``"memory"`` / ``"disk"``), or why there is none."""

    snapshot: Snapshot | None
    source: str = ""
    reason: str = ""


class StateError(ValueError):
    """A state file that is damaged or not one of ours (set aside), or not for this key or chat (dropped)."""

    def __init__(self, reason: str, *, damaged: bool) -> None:
        super().__init__(reason)
        self.damaged = damaged


def file_name(conversation: str) -> str:
    """The file a conversation's state is kept in (a digest of its id: any id is a safe name)."""
    return hashlib.sha256(conversation.encode("utf-8")).hexdigest()[:32] + SUFFIX


def tokens_digest(tokens: list[int]) -> str:
    return hashlib.sha256(np.asarray(tokens, dtype="<i4").tobytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- the file format


def write_state(path: Path, conversation: str, key: StateKey, snapshot: Snapshot) -> int:
    """Write ``snapshot`` to ``path`` atomically (a temporary file beside it, renamed over it); its size in bytes.
    ``OSError`` to the caller (a full disk: the temporary file is removed and nothing else changed)."""
    host = snapshot.host_blob()
    blobs: list[bytes | bytearray] = [snapshot.target, snapshot.draft or b"", host]
    crc = 0
    for blob in blobs:
        crc = zlib.crc32(blob, crc)
    header = json.dumps({
        "conversation": conversation, "key": asdict(key), "tokens": snapshot.tokens,
        "tokens_sha256": tokens_digest(snapshot.tokens),
        "host": {"n_embd": snapshot.n_embd, "pending": snapshot.pending_h is not None,
                 "held_tokens": snapshot.held_tokens},
        "blobs": {"target": len(snapshot.target), "draft": -1 if snapshot.draft is None else len(snapshot.draft),
                  "host": len(host)},
        "blobs_crc32": crc, "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }, separators=(",", ":")).encode("utf-8")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temporary.open("wb") as out:
            out.write(_PREAMBLE.pack(MAGIC, VERSION, len(header), hashlib.sha256(header).digest()))
            out.write(header)
            for blob in blobs:
                view = memoryview(blob)
                for start in range(0, len(view), _CHUNK):
                    out.write(view[start:start + _CHUNK])
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
    return _PREAMBLE.size + len(header) + sum(len(blob) for blob in blobs)


def read_header(handle: BinaryIO, size: int, max_bytes: int = MAX_STATE_BYTES) -> tuple[dict[str, Any], int]:
    """The checked header of an open state file of ``size`` bytes and where its blobs begin; ``StateError`` (damaged)
    when it is not one: too short, another magic or version, a header too big or not matching its sha256, fields
    of the wrong types, or blob sizes that do not add up to the file's size (truncated or padded) or exceed
    ``max_bytes``. Reads the preamble and the header only."""
    if size < _PREAMBLE.size:
        raise StateError(f"it is {size} bytes, shorter than a state file's preamble", damaged=True)
    magic, version, header_len, header_sha = _PREAMBLE.unpack(_read_exactly(handle, _PREAMBLE.size))
    if magic != MAGIC:
        raise StateError("it is not a chat state file (another magic)", damaged=True)
    if version != VERSION:
        raise StateError(f"it is a format {version} state file; this version reads format {VERSION}", damaged=True)
    if header_len > min(MAX_HEADER_BYTES, size - _PREAMBLE.size):
        raise StateError(f"its header claims {header_len} bytes, more than the file or a header can hold",
                         damaged=True)
    raw = _read_exactly(handle, header_len)
    if hashlib.sha256(raw).digest() != header_sha:
        raise StateError("its header does not match its checksum", damaged=True)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StateError(f"its header is not JSON ({exc})", damaged=True) from None
    _check_header(header)
    blobs = header["blobs"]
    total = blobs["target"] + max(blobs["draft"], 0) + blobs["host"]
    if total > max_bytes:
        raise StateError(f"it claims {total} bytes of state, more than the {max_bytes} a state can be", damaged=True)
    start = _PREAMBLE.size + header_len
    if start + total != size:
        raise StateError(f"it is {size} bytes, but its header says {start + total} (truncated or padded)",
                         damaged=True)
    return header, start


def _check_header(header: Any) -> None:
    def fail(what: str) -> StateError:
        return StateError(f"its header's {what} is missing or of the wrong type", damaged=True)

    if not isinstance(header, dict):
        raise fail("object")
    if not isinstance(header.get("conversation"), str):
        raise fail("conversation")
    key = header.get("key")
    if not isinstance(key, dict) or set(key) != {f.name for f in fields(StateKey)}:
        raise fail("key")
    if not _token_list(header.get("tokens")) or not header["tokens"]:
        raise fail("tokens")
    if header.get("tokens_sha256") != tokens_digest(header["tokens"]):
        raise StateError("its tokens do not match their hash", damaged=True)
    host = header.get("host")
    if (not isinstance(host, dict) or not _count(host.get("n_embd")) or not isinstance(host.get("pending"), bool)
            or not _token_list(host.get("held_tokens"))):
        raise fail("host state")
    blobs = header.get("blobs")
    if (not isinstance(blobs, dict) or not _count(blobs.get("target")) or not _count(blobs.get("host"))
            or not (blobs.get("draft") == -1 or _count(blobs.get("draft")))):
        raise fail("blob sizes")
    rows = len(host["held_tokens"]) + (1 if host["pending"] else 0)
    if blobs["host"] != 4 * host["n_embd"] * rows:
        raise StateError("its host rows do not match their size", damaged=True)
    if not _count(header.get("blobs_crc32")):
        raise fail("checksum")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STATE_BYTES


def _token_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN for t in value)


def _read_exactly(handle: BinaryIO, n: int) -> bytes:
    data = handle.read(n)
    if len(data) != n:
        raise StateError(f"it ends {n - len(data)} bytes early", damaged=True)
    return data


def read_state(path: Path, conversation: str, key: StateKey, max_bytes: int = MAX_STATE_BYTES) -> Snapshot:
    """The snapshot in ``path`` after every check (``StateError``: ``damaged`` when the file is not a whole state
    file of ours, else a state of another chat, model or setting). The blobs are read only after the header passed,
    each into memory the header sized and the file's size confirmed."""
    handle, size = open_regular(path)
    with handle:
        header, _start = read_header(handle, size, max_bytes)
        if header["conversation"] != conversation:
            raise StateError("it holds another chat's state", damaged=True)
        if header["key"] != json.loads(json.dumps(asdict(key))):
            raise StateError("it was saved for another model file, backend or context setting", damaged=False)
        sizes = header["blobs"]
        target = _read_blob(handle, sizes["target"])
        draft = _read_blob(handle, sizes["draft"]) if sizes["draft"] >= 0 else None
        host_raw = _read_blob(handle, sizes["host"])
        if handle.read(1):
            raise StateError("it is longer than its header says", damaged=True)
    crc = zlib.crc32(host_raw, zlib.crc32(draft or b"", zlib.crc32(target)))
    if crc != header["blobs_crc32"]:
        raise StateError("its state does not match its checksum", damaged=True)
    host = header["host"]
    n_embd = host["n_embd"]
    rows = np.frombuffer(host_raw, dtype="<f4").astype(np.float32).reshape(-1, n_embd) if host_raw else \
        np.zeros((0, n_embd), np.float32)
    pending = rows[0].copy() if host["pending"] else None
    held = rows[1:] if host["pending"] else rows
    return Snapshot(list(header["tokens"]), target, draft, n_embd, pending, list(host["held_tokens"]),
                    np.ascontiguousarray(held, dtype=np.float32))


def _read_blob(handle: BinaryIO, n: int) -> bytearray:
    reader = cast(io.BufferedReader, handle)  # what ``open_regular`` opens: straight into the buffer, no copy
    blob = bytearray(n)
    view = memoryview(blob)
    done = 0
    while done < n:
        got = reader.readinto(view[done:done + _CHUNK])
        if not got:
            raise StateError(f"it ends {n - done} bytes early", damaged=True)
        done += got
    return blob


# ---------------------------------------------------------------------------------------------- the cache


class StateCache:
    """The kept states: a few in memory (least recently used first out), every one on disk in ``folder`` (None:
    memory only) under ``max_bytes`` in all (least recently used files evicted). ``keep`` returns at once: the
    file is written by one background thread, in order; ``settle`` waits for the writes and says what failed."""

    def __init__(self, folder: Path | None, max_bytes: int, *, memory_entries: int = MEMORY_ENTRIES,
                 memory_bytes: int = MEMORY_BYTES) -> None:
        self.folder = folder
        self.max_bytes = max(0, max_bytes)
        self.memory_entries = memory_entries
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[str, tuple[str, Snapshot]] = OrderedDict()  # conversation: (key digest, snapshot)
        self._disk = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future[tuple[str, str] | None]] = []
        self._told: set[str] = set()  # the kinds of save failure already reported (each is said once)

    # ---------------------------------------------------------------------------------------- keeping

    def keep(self, conversation: str, key: StateKey, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` as ``conversation``'s state: in memory now, on disk in the background."""
        self._remember(conversation, key, snapshot)
        if self.folder is None:
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-cache")
        self._pending.append(self._writer.submit(self._save, conversation, key, snapshot))

    def save(self, conversation: str, key: StateKey, snapshot: Snapshot) -> str | None:
        """Write ``conversation``'s state file now, evicting the least recently used files to stay under the cap;
        None when saved, else why not (a full disk, a read-only folder, a state larger than the cap), in words.
        Never raises an ``OSError``: the chat goes on without its state on disk."""
        failure = self._save(conversation, key, snapshot)
        return None if failure is None else failure[1]

    def _save(self, conversation: str, key: StateKey, snapshot: Snapshot) -> tuple[str, str] | None:
        """``save``, with the failure's kind ("too-large", "disk") for saying each once."""
        if self.folder is None:
            return None
        path = self.folder / file_name(conversation)
        if snapshot.nbytes > self.max_bytes:
            with self._disk, contextlib.suppress(OSError):
                path.unlink(missing_ok=True)  # an older, shorter state of this chat is no use any more
            return "too-large", (f"The chat's state ({format_bytes(snapshot.nbytes)}) is larger than the "
                                 f"{format_bytes(self.max_bytes)} kept for saved chats on disk: "
                                 f"{self._elsewhere(snapshot)}")
        with self._disk:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                remove_stale_temporaries(self.folder)
                # room for the new file (its header: about 7 bytes a token) before it is written
                self._evict(self.max_bytes - snapshot.nbytes - 8 * len(snapshot.tokens) - 4 * 1024, keep=path)
                write_state(path, conversation, key, snapshot)
                self._evict(self.max_bytes, keep=path)
            except OSError as exc:
                reason = exc.strerror or type(exc).__name__
                log.warning("the state of a chat could not be saved in %s: %s", self.folder, reason)
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)  # no older state of this chat is left to be mistaken for it
                return "disk", (f"The chat's state could not be saved in {self.folder} ({reason}): "
                                f"{self._elsewhere(snapshot)}")
        return None

    def _elsewhere(self, snapshot: Snapshot) -> str:
        """Where an unsaved state still is, in words: the chat goes on either way."""
        if snapshot.nbytes <= self.memory_bytes and self.memory_entries > 0:
            return "it is kept in memory only, and the chat goes on."
        return "the chat goes on, and is read again when you come back to it."

    def settle(self) -> list[str]:
        """Wait for the background writes; the failures not reported before (each reason once)."""
        pending, self._pending = self._pending, []
        fresh: list[str] = []
        for future in pending:
            try:
                failure = future.result()
            except Exception as exc:  # a bug in the writer must not end the reply: say it and go on
                log.exception("saving a chat's state failed")
                failure = "error", f"The chat's state could not be saved: {exc}"
            if failure is not None and failure[0] not in self._told:
                self._told.add(failure[0])
                fresh.append(failure[1])
        return fresh

    def close(self) -> list[str]:
        """Finish the writes (at the engine's shutdown) and stop the writer; what failed."""
        failures = self.settle()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
        return failures

    def _remember(self, conversation: str, key: StateKey, snapshot: Snapshot) -> None:
        self._memory.pop(conversation, None)
        if snapshot.nbytes > self.memory_bytes or self.memory_entries <= 0:
            return
        self._memory[conversation] = (key.digest(), snapshot)
        while (len(self._memory) > self.memory_entries
               or sum(s.nbytes for _, s in self._memory.values()) > self.memory_bytes):
            self._memory.popitem(last=False)

    # ---------------------------------------------------------------------------------------- looking up

    def lookup(self, conversation: str, key: StateKey, prompt: list[int]) -> Lookup:
        """``conversation``'s kept state when it is valid for ``key`` and its tokens begin ``prompt`` (and are fewer:
        the new turn has tokens to read); a state that is not is dropped (memory and file), a damaged file set
        aside. Memory first, then the disk."""
        self.settle_quietly()
        held = self._memory.get(conversation)
        if held is not None:
            digest, snapshot = held
            if digest == key.digest() and _extends(prompt, snapshot.tokens):
                self._memory.move_to_end(conversation)
                self._touch(conversation)
                return Lookup(snapshot, "memory")
            why = ("saved for another model, backend or context setting" if digest != key.digest()
                   else "the chat changed since (an edit or a regenerated reply)")
            self.drop(conversation)
            return Lookup(None, reason=why)
        if self.folder is None:
            return Lookup(None, reason="none kept")
        path = self.folder / file_name(conversation)
        with self._disk:
            try:
                if path.stat().st_size > self.max_bytes + MAX_HEADER_BYTES:  # the cap was lowered since
                    path.unlink()
                    return Lookup(None, reason="the saved state is larger than the cap now")
                snapshot = read_state(path, conversation, key)
            except FileNotFoundError:
                return Lookup(None, reason="none kept")
            except StateError as exc:
                if exc.damaged:
                    set_aside(path, str(exc))
                    return Lookup(None, reason=f"the saved state was damaged ({exc}): set aside")
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
                return Lookup(None, reason=str(exc))
            except OSError as exc:  # unreadable, or not a regular file
                set_aside(path, exc.strerror or str(exc))
                return Lookup(None, reason=f"the saved state could not be read ({exc.strerror or exc})")
            if not _extends(prompt, snapshot.tokens):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
                return Lookup(None, reason="the chat changed since (an edit or a regenerated reply)")
            with contextlib.suppress(OSError):
                os.utime(path)  # used now: the last to be evicted
        self._remember(conversation, key, snapshot)
        return Lookup(snapshot, "disk")

    def settle_quietly(self) -> None:
        """Wait for the background writes, keeping their failures for the next ``settle``."""
        for future in list(self._pending):
            with contextlib.suppress(Exception):
                future.result()

    def drop(self, conversation: str) -> None:
        """Forget ``conversation``'s state (memory and file)."""
        self.settle_quietly()
        self._memory.pop(conversation, None)
        if self.folder is not None:
            with self._disk, contextlib.suppress(OSError):
                (self.folder / file_name(conversation)).unlink(missing_ok=True)

    def in_memory(self) -> list[str]:
        """The conversations kept in memory, least recently used first."""
        return list(self._memory)

    def _touch(self, conversation: str) -> None:
        if self.folder is not None:
            with contextlib.suppress(OSError):
                os.utime(self.folder / file_name(conversation))

    # ---------------------------------------------------------------------------------------- the folder

    def _evict(self, budget: int, keep: Path) -> None:
        """Delete the least recently used files (set-aside ones first) until the folder's files take at most
        ``budget`` bytes besides ``keep`` (never deleted: it is being written)."""
        files = [f for f in folder_files(self.folder) if f[0] != keep] if self.folder is not None else []
        total = sum(size for _, size, _ in files)
        if total <= budget:
            return
        order = sorted(files, key=lambda f: (not f[0].name.endswith(BAD_SUFFIX), f[2]))
        for path, size, _ in order:
            if total <= budget:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size
                log.info("the saved chat state %s was evicted (least recently used)", path.name)

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in folder_files(self.folder)) if self.folder is not None else 0


def _extends(prompt: list[int], tokens: list[int]) -> bool:
    return 0 < len(tokens) < len(prompt) and prompt[:len(tokens)] == tokens


def folder_files(folder: Path | None) -> list[tuple[Path, int, float]]:
    """The state files (kept and set aside) in ``folder``: (path, bytes, last used)."""
    found = []
    if folder is None or not folder.is_dir():
        return []
    for path in folder.iterdir():
        if path.name.endswith((SUFFIX, SUFFIX + BAD_SUFFIX)) and not path.name.startswith("."):
            with contextlib.suppress(OSError):
                info = path.stat()
                found.append((path, info.st_size, info.st_mtime))
    return found


def entries(folder: Path) -> list[dict[str, Any]]:
    """Every state file in ``folder``, for people (``state-cache list``, the Settings page): its chat, tokens, size,
    last use, model file and mode; ``damaged`` for one that is set aside or fails its header's checks (the blobs are
    not read)."""
    found: list[dict[str, Any]] = []
    for path, size, used in sorted(folder_files(folder), key=lambda f: -f[2]):
        entry: dict[str, Any] = {"file": str(path), "bytes": size,
                                 "last_used": datetime.fromtimestamp(used, UTC).isoformat(timespec="seconds"),
                                 "damaged": path.name.endswith(BAD_SUFFIX)}
        if not entry["damaged"]:
            try:
                handle, real_size = open_regular(path)
                with handle:
                    header, _ = read_header(handle, real_size)
            except (OSError, StateError):
                entry["damaged"] = True
            else:
                key = header["key"]
                entry.update(conversation=header["conversation"], tokens=len(header["tokens"]),
                             target=key["target"], draft=key["draft"], mode=key["mode"], n_ctx=key["n_ctx"],
                             backend=key["backend"], saved_at=header.get("saved_at"))
        found.append(entry)
    return found


def _stale_temporary(path: Path, now: float) -> bool:
    """A temporary file of a save that was interrupted (an engine killed while it wrote) an hour ago or more."""
    name = path.name
    return (name.startswith(".") and name.endswith(".tmp") and SUFFIX in name
            and now - path.stat().st_mtime > STALE_TEMPORARY_S)


def remove_stale_temporaries(folder: Path) -> None:
    now = datetime.now(UTC).timestamp()
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            if _stale_temporary(path, now):
                path.unlink()


def clear(folder: Path) -> tuple[int, int]:
    """Delete every state file in ``folder`` (set-aside ones too, and temporary ones an interrupted save left an
    hour ago or more); how many, and their bytes. A chat whose state was cleared is read again on its next turn."""
    count = removed = 0
    if not folder.is_dir():
        return 0, 0
    now = datetime.now(UTC).timestamp()
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            info = path.stat()
            if path.name.endswith((SUFFIX, SUFFIX + BAD_SUFFIX)) or _stale_temporary(path, now):
                path.unlink()
                count += 1
                removed += info.st_size
    return count, removed

