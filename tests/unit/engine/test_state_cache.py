"""The chats' kept states without a backend: the file format and its checks, the key, the LRU caps, a failed save,
the setting and the CLI. (The states of a real model, restored into the decoder and the worker, are in
tests/integration/engine/test_chat_states.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from app.core import defaults
from app.engine import state_cache
from app.engine.config import EngineConfig
from app.engine.state_cache import MAGIC, Snapshot, StateCache, StateKey, file_name, key_for, read_state, write_state
from app.settings import app_settings

ROOT = Path(__file__).resolve().parents[3]
N_EMBD = 8


def _key(**changes: object) -> StateKey:
    key = StateKey("/m/target.gguf", 1000, 5, "/m/sidecar.gguf", 100, 6, "0.3.35-cpu-d2t-x", "sidecar", 2048, 512, None)
    return replace(key, **changes)  # type: ignore[arg-type]


def _snapshot(tokens: list[int], size: int = 1000, seed: int = 0, draft: bool = True, held: int = 2) -> Snapshot:
    rng = np.random.default_rng(seed)
    return Snapshot(list(tokens), rng.integers(0, 256, size, dtype=np.uint8).tobytes(),
                    rng.integers(0, 256, size // 2, dtype=np.uint8).tobytes() if draft else None, N_EMBD,
                    rng.standard_normal(N_EMBD).astype(np.float32) if draft else None, list(tokens[-held:]) if draft
                    else [], rng.standard_normal((held if draft else 0, N_EMBD)).astype(np.float32))


def _same(a: Snapshot, b: Snapshot) -> bool:
    return (a.tokens == b.tokens and bytes(a.target) == bytes(b.target) and a.draft == b.draft
            and a.held_tokens == b.held_tokens and np.array_equal(a.held_rows.reshape(-1), b.held_rows.reshape(-1))
            and ((a.pending_h is None and b.pending_h is None) or np.array_equal(a.pending_h, b.pending_h)))


TOKENS = list(range(10, 60))
PROMPT = [*TOKENS, 7, 8, 9]


def test_a_state_file_round_trips_exactly(tmp_path: Path) -> None:
    for draft in (True, False):
        snapshot = _snapshot(TOKENS, draft=draft)
        path = tmp_path / file_name("chat-1")
        size = write_state(path, "chat-1", _key(), snapshot)
        assert path.stat().st_size == size and path.read_bytes().startswith(MAGIC)
        assert _same(read_state(path, "chat-1", _key()), snapshot)
        assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_the_key_is_the_model_files_as_they_are_on_disk(tmp_path: Path) -> None:
    target, sidecar = tmp_path / "t.gguf", tmp_path / "s.gguf"
    target.write_bytes(b"t" * 10)
    sidecar.write_bytes(b"s" * 5)
    config = EngineConfig(target, mode="sidecar", draft=sidecar, n_ctx=2048)
    key = key_for(config, "backend-1")
    assert (key.target_size, key.draft_size, key.mode, key.n_ctx) == (10, 5, "sidecar", 2048)
    assert key_for(config, "backend-1") == key
    assert key_for(config, "backend-2") != key and key_for(replace(config, n_ctx=4096), "backend-1") != key
    assert key_for(replace(config, mode="off", draft=None), "backend-1").draft is None
    os.utime(target, ns=(1, 1))  # the same name, another file
    assert key_for(config, "backend-1") != key
    target.unlink()
    with pytest.raises(OSError):
        key_for(config, "backend-1")


def _written(tmp_path: Path) -> tuple[StateCache, Path]:
    cache = StateCache(tmp_path / "states", 10 * 1024 * 1024)
    assert cache.save("chat", _key(), _snapshot(TOKENS)) is None
    return cache, tmp_path / "states" / file_name("chat")


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _huge_header(path: Path) -> None:
    """A header whose sizes claim 40 GB of state, its own checksum right: only the file's size gives it away."""
    raw = path.read_bytes()
    preamble = state_cache._PREAMBLE
    _magic, version, length, _sha = preamble.unpack(raw[:preamble.size])
    header = json.loads(raw[preamble.size:preamble.size + length])
    header["blobs"]["target"] = 40 * 1024 ** 3
    encoded = json.dumps(header).encode()
    path.write_bytes(preamble.pack(MAGIC, version, len(encoded), hashlib.sha256(encoded).digest()) + encoded
                     + raw[preamble.size + length:])


DAMAGES = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:-100]),
    "padded": lambda p: p.write_bytes(p.read_bytes() + b"\0"),
    "a flipped byte in the state": lambda p: _flip(p, p.stat().st_size - 700),
    "a flipped byte in the host rows": lambda p: _flip(p, p.stat().st_size - 3),
    "a flipped byte in the header": lambda p: _flip(p, state_cache._PREAMBLE.size + 20),
    "foreign magic": lambda p: p.write_bytes(b"GGUF\3\0\0\0" + p.read_bytes()[8:]),
    "another format version": lambda p: p.write_bytes(MAGIC + (99).to_bytes(4, "little") + p.read_bytes()[12:]),
    "a header claiming more than the file": lambda p: p.write_bytes(
        p.read_bytes()[:12] + (2 ** 31).to_bytes(4, "little") + p.read_bytes()[16:]),
    "a header claiming a huge state": _huge_header,
    "empty": lambda p: p.write_bytes(b""),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_file_is_set_aside_never_read_into_a_snapshot(tmp_path: Path, damage: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    cache, path = _written(tmp_path)
    DAMAGES[damage](path)
    fresh = StateCache(cache.folder, cache.max_bytes)  # nothing in memory: the file is all there is
    found = fresh.lookup("chat", _key(), PROMPT)
    assert found.snapshot is None and found.reason
    assert not path.exists() and path.with_name(path.name + ".bad").exists()
    assert any("damaged" in record.getMessage() for record in caplog.records)
    assert fresh.lookup("chat", _key(), PROMPT).reason == "none kept"  # the next turn simply reads the chat


def test_a_header_claiming_a_huge_state_is_refused_before_its_blobs_are_read(tmp_path: Path) -> None:
    _cache, path = _written(tmp_path)
    _huge_header(path)
    with pytest.raises(state_cache.StateError, match="more than"):
        read_state(path, "chat", _key(), max_bytes=1024 ** 3)


def test_another_chats_file_under_this_chats_name_is_set_aside(tmp_path: Path) -> None:
    cache, path = _written(tmp_path)
    os.replace(path, path.with_name(file_name("other")))
    found = StateCache(cache.folder, cache.max_bytes).lookup("other", _key(), PROMPT)
    assert found.snapshot is None and "another chat" in found.reason


@pytest.mark.parametrize("change", ["target_mtime_ns", "draft_size", "backend", "mode", "n_ctx", "n_batch"])
def test_a_state_for_another_model_or_setting_is_dropped(tmp_path: Path, change: str) -> None:
    cache, path = _written(tmp_path)
    other = replace(_key(), **{change: "x" if change in ("backend", "mode") else 1})
    fresh = StateCache(cache.folder, cache.max_bytes)
    found = fresh.lookup("chat", other, PROMPT)
    assert found.snapshot is None and "another model" in found.reason
    assert not path.exists() and not path.with_name(path.name + ".bad").exists()  # not damaged: just gone


@pytest.mark.parametrize("prompt", [
    [*TOKENS[:20], 999, *TOKENS[21:], 7],  # an edited history
    TOKENS[:30],  # a regenerated reply: the prompt ends before the kept tokens do
    TOKENS,  # nothing new to read
], ids=["edited", "regenerated", "same"])
def test_a_state_whose_tokens_do_not_begin_the_prompt_is_dropped(tmp_path: Path, prompt: list[int]) -> None:
    cache = StateCache(tmp_path, 10 * 1024 * 1024)
    path = tmp_path / file_name("chat")
    cache.keep("chat", _key(), _snapshot(TOKENS))
    cache.settle()
    found = cache.lookup("chat", _key(), prompt)  # from memory
    assert found.snapshot is None and "changed" in found.reason
    assert not path.exists() and cache.in_memory() == []
    cache.save("chat", _key(), _snapshot(TOKENS))
    found = StateCache(tmp_path, cache.max_bytes).lookup("chat", _key(), prompt)  # from disk
    assert found.snapshot is None and "changed" in found.reason
    assert not path.exists()


def test_a_hit_comes_from_memory_then_from_disk(tmp_path: Path) -> None:
    cache = StateCache(tmp_path / "states", 10 * 1024 * 1024)
    snapshot = _snapshot(TOKENS)
    cache.keep("chat", _key(), snapshot)
    assert cache.settle() == []
    found = cache.lookup("chat", _key(), PROMPT)
    assert found.source == "memory" and found.snapshot is snapshot
    later = StateCache(tmp_path / "states", 10 * 1024 * 1024)  # the app started again
    found = later.lookup("chat", _key(), PROMPT)
    assert found.source == "disk" and found.snapshot is not None and _same(found.snapshot, snapshot)
    assert later.in_memory() == ["chat"]


def test_memory_keeps_the_last_few_chats_within_its_bytes(tmp_path: Path) -> None:
    cache = StateCache(None, 0, memory_entries=2, memory_bytes=10_000)
    for name in ("a", "b", "c"):
        cache.keep(name, _key(), _snapshot(TOKENS, size=1000))
    assert cache.in_memory() == ["b", "c"]
    cache.lookup("b", _key(), PROMPT)  # used: now the most recent
    cache.keep("d", _key(), _snapshot(TOKENS, size=1000))
    assert cache.in_memory() == ["b", "d"]
    cache.keep("big", _key(), _snapshot(TOKENS, size=20_000))  # larger than memory may hold: not kept there
    assert cache.in_memory() == ["b", "d"]
    assert cache.lookup("a", _key(), PROMPT).reason == "none kept"  # no folder: memory only


def test_eviction_keeps_the_folder_under_the_cap_least_recently_used_first(tmp_path: Path) -> None:
    one = _snapshot(TOKENS, size=100_000).nbytes
    cache = StateCache(tmp_path, int(one * 3.5))
    for i, name in enumerate(("a", "b", "c")):
        assert cache.save(name, _key(), _snapshot(TOKENS, size=100_000, seed=i)) is None
        os.utime(tmp_path / file_name(name), (time.time() - 100 + i, time.time() - 100 + i))
    assert StateCache(tmp_path, cache.max_bytes).lookup("a", _key(), PROMPT).source == "disk"  # "a": used now
    assert cache.save("d", _key(), _snapshot(TOKENS, size=100_000, seed=3)) is None
    kept = {p.name for p in tmp_path.iterdir()}
    assert kept == {file_name(n) for n in ("a", "c", "d")}  # "b" was the least recently used
    assert cache.total_bytes() <= cache.max_bytes
    (tmp_path / (file_name("x") + ".bad")).write_bytes(b"x" * 50_000)  # set aside: the first to go
    assert cache.save("e", _key(), _snapshot(TOKENS, size=100_000, seed=4)) is None
    assert {p.name for p in tmp_path.iterdir()} == {file_name(n) for n in ("a", "d", "e")}


def test_a_state_larger_than_the_cap_stays_in_memory_and_says_so_once(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, 1000)
    cache.keep("a", _key(), _snapshot(TOKENS, size=5000))
    cache.keep("b", _key(), _snapshot(TOKENS, size=5000))
    notices = cache.settle()
    assert len(notices) == 1 and "larger than" in notices[0]
    assert list(tmp_path.iterdir()) == [] and cache.in_memory() == ["a", "b"]
    cache.keep("c", _key(), _snapshot(TOKENS, size=5000))
    assert cache.settle() == []  # said once


def test_a_folder_that_cannot_be_written_leaves_the_state_in_memory_and_says_so_once(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    cache = StateCache(blocked / "states", 10 * 1024 * 1024)
    cache.keep("a", _key(), _snapshot(TOKENS))
    cache.keep("b", _key(), _snapshot(TOKENS))
    notices = cache.settle()
    assert len(notices) == 1 and "could not be saved" in notices[0] and "goes on" in notices[0]
    assert cache.lookup("a", _key(), PROMPT).source == "memory"
    cache.keep("c", _key(), _snapshot(TOKENS))
    assert cache.settle() == [] and cache.close() == []


_FULL_DISK = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.unit.engine.test_state_cache import TOKENS, _key, _snapshot
from app.engine.state_cache import StateCache
cache = StateCache(Path(sys.argv[1]), 100 * 1024 * 1024)
print(repr(cache.save("big", _key(), _snapshot(TOKENS, size=200_000))))
print(repr(cache.save("small", _key(), _snapshot(TOKENS, size=1000))))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="file size limits are POSIX")
def test_a_save_that_runs_out_of_room_leaves_no_file_and_the_cache_goes_on(tmp_path: Path) -> None:
    """A real write refused by the kernel part-way (a file size limit in a child process: EFBIG, as ENOSPC is for a
    full disk): the save says why, leaves no partial or temporary file, and the next smaller save works."""
    (tmp_path / file_name("big")).write_bytes(b"an older state of this chat")

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path), str(ROOT)], capture_output=True,
                          text=True, timeout=120, preexec_fn=limit, check=False)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert "could not be saved" in first and "too large" in first.lower()
    assert second == "None"
    assert {p.name for p in tmp_path.iterdir()} == {file_name("small")}  # the older "big" one is gone too


def test_clear_and_entries_see_only_state_files(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, 10 * 1024 * 1024)
    cache.save("a", _key(), _snapshot(TOKENS))
    cache.save("b", _key(mode="off"), _snapshot(TOKENS, draft=False))
    (tmp_path / (file_name("c") + ".bad")).write_bytes(b"damaged")
    (tmp_path / "notes.txt").write_text("someone else's")
    stale = tmp_path / f".{file_name('d')}.1.2.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = tmp_path / f".{file_name('e')}.1.2.tmp"  # a save under way
    fresh.write_bytes(b"half")
    found = {e.get("conversation", "damaged"): e for e in state_cache.entries(tmp_path)}
    assert set(found) == {"a", "b", "damaged"}
    assert found["a"]["tokens"] == len(TOKENS) and found["b"]["mode"] == "off" and found["a"]["draft"]
    count, removed = state_cache.clear(tmp_path)
    assert count == 4 and removed > 2000
    assert {p.name for p in tmp_path.iterdir()} == {"notes.txt", fresh.name}
    assert state_cache.clear(tmp_path / "missing") == (0, 0)


def test_the_setting_is_range_checked_and_reaches_the_engine() -> None:
    settings = app_settings.Settings()
    assert settings.state_cache_mb == defaults.STATE_CACHE_MB
    assert EngineConfig(Path("x")).state_cache_bytes == defaults.STATE_CACHE_MB * 1024 * 1024
    assert replace(settings, state_cache_mb=-5).validated().state_cache_mb == 0
    assert replace(settings, state_cache_mb=10 ** 9).validated().state_cache_mb == app_settings.STATE_CACHE_MB_MAX
    fields = app_settings.engine_fields(replace(settings, state_cache_mb=0))
    assert "state_cache_dir" not in fields and fields["state_cache_bytes"] == 0  # memory only


def test_the_config_carries_the_folder_through_the_protocol(tmp_path: Path) -> None:
    from app.engine import protocol

    config = EngineConfig(Path("t.gguf"), state_cache_dir=tmp_path, state_cache_bytes=123)
    assert protocol.config_from_dict(json.loads(json.dumps(protocol.config_to_dict(config), default=str))) == config


def test_the_cli_lists_and_clears(tmp_path: Path) -> None:
    env = {**os.environ, "FASTMTP_CACHE_DIR": str(tmp_path)}
    StateCache(tmp_path / "chat-states", 10 * 1024 * 1024).save("chat-7", _key(), _snapshot(TOKENS))

    def cli(*args: str) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "app", "state-cache", *args, "--json"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120, check=True)
        data: dict[str, object] = json.loads(done.stdout)
        return data

    listed = cli("list")
    assert listed["folder"] == str(tmp_path / "chat-states") and isinstance(listed["entries"], list)
    assert [e["conversation"] for e in listed["entries"]] == ["chat-7"]
    assert cli("clear") == {"cleared": 1, "bytes": listed["bytes"]}
    assert cli("list")["entries"] == []


def test_a_save_removes_what_an_interrupted_save_left_an_hour_ago(tmp_path: Path) -> None:
    stale, fresh = tmp_path / f".{file_name('a')}.9.9.tmp", tmp_path / f".{file_name('b')}.9.9.tmp"
    for path in (stale, fresh):
        path.write_bytes(b"half a state")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    assert StateCache(tmp_path, 10 * 1024 * 1024).save("c", _key(), _snapshot(TOKENS)) is None
    assert {p.name for p in tmp_path.iterdir()} == {fresh.name, file_name("c")}
