"""Decisions that re-check themselves (issue 36 item 4): Auto drafting keeps looking at the modes its winner beat,
at a low, bounded rate, and changes its mind from the latest replies only; a remembered choice (Auto's or adaptive
depth's) is measured again when it is old, made under another load, or by another backend build. Given speeds (a
simulated machine), real record files in a temporary folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.engine import depth_memory
from app.engine.auto_mode import CANDIDATES, RECHECK_EVERY, AutoDrafting, AutoMemory, auto_key
from app.engine.depth_memory import (
    LOAD_FACTOR,
    LOAD_HOLD_WINDOW_S,
    LOAD_WINDOW_S,
    MAX_AGE_DAYS,
    DepthMemory,
    MemoryKey,
    conditions_now,
    machine_load,
    stale_reason,
    take_up,
)
from app.engine.verdict import MIN_SAMPLES, Condition


def _then(stale: object) -> str:
    """A "load changed" reason up to the load now (read afresh by each check: it differs between two readings)."""
    assert isinstance(stale, str) and "load changed" in stale, stale
    return stale.split(" then,")[0]


def _condition(mode: str) -> Condition:
    return Condition(mode, "" if mode == "off" else "adaptive depth ≤8", "temperature 0.7", "/models/m.gguf", None)


def _speeds(base: dict[str, float]) -> dict[str, Iterator[float]]:
    """Each mode's replies at about ``base`` tok/s, wobbling by a few percent in a fixed pattern."""
    def wobble(value: float) -> Iterator[float]:
        i = 0
        while True:
            yield value * (1.0 + 0.02 * ((i % 5) - 2) / 2)
            i += 1
    return {mode: wobble(value) for mode, value in base.items()}


def _replies(auto: AutoDrafting, speeds: dict[str, Iterator[float]], count: int) -> list[str]:
    used = []
    for _ in range(count):
        mode = auto.next_mode()
        used.append(mode)
        assert auto.observe(mode, _condition(mode), next(speeds[mode]), tokens=96, load=1.0)
    return used


D2T_PAYS = {"off": 36.0, "embedded": 40.0, "d2t": 48.0}
LOADED = {"off": 30.0, "embedded": 22.0, "d2t": 21.0}  # another job on the draft head's core: drafting loses


def test_auto_rechecks_the_modes_it_beat_and_changes_its_mind_when_the_load_changes() -> None:
    auto = AutoDrafting(CANDIDATES)
    _replies(auto, _speeds(D2T_PAYS), 1 + MIN_SAMPLES * len(CANDIDATES))
    assert auto.winner == "d2t"
    steady = _replies(auto, _speeds(D2T_PAYS), 8 * (RECHECK_EVERY + 1))
    rechecks = [m for m in steady if m != "d2t"]
    assert set(rechecks) == {"off", "embedded"}  # each beaten mode looked at again, in turn
    assert len(rechecks) <= len(steady) / RECHECK_EVERY  # at a low, bounded rate
    assert auto.winner == "d2t" and auto.changed == 0  # while d2t still wins, it stays
    assert "Next reply re-checks" not in auto.status() or auto.next_mode() != "d2t"

    used = _replies(auto, _speeds(LOADED), 2 * MIN_SAMPLES * (RECHECK_EVERY + 1) + 1)
    assert auto.winner == "off" and auto.changed == 1  # off's re-checks beside d2t's replies: d2t no longer pays
    switched = len(used) - used[::-1].index("off")  # the reply that decided it
    assert switched <= 2 * MIN_SAMPLES * (RECHECK_EVERY + 1) + 1
    assert auto.status().startswith("Auto uses drafting off")
    assert auto.verdicts["d2t"].outcome in ("slower", "no clear difference")

    after = _replies(auto, _speeds(D2T_PAYS), 2 * MIN_SAMPLES * (RECHECK_EVERY + 1) + 1)
    assert auto.winner in ("d2t", "embedded") and auto.changed == 2  # quiet again: drafting comes back
    assert after.count("off") > after.count(auto.winner)


@pytest.mark.usefixtures("steady_load")  # a recall right after a save
def test_a_rechecked_record_is_kept_across_starts(tmp_path: Path) -> None:
    target, d2t = tmp_path / "target.gguf", tmp_path / "target-d2t.gguf"
    target.write_bytes(b"GGUF target")
    d2t.write_bytes(b"GGUF d2t")
    memory, key = AutoMemory(tmp_path / "memory"), auto_key(target, d2t, backend="cpu-1")
    auto = memory.recall(key, CANDIDATES)
    _replies(auto, _speeds(D2T_PAYS), 1 + MIN_SAMPLES * len(CANDIDATES))
    _replies(auto, _speeds(LOADED), 2 * MIN_SAMPLES * (RECHECK_EVERY + 1) + 1)
    assert auto.winner == "off" and auto.changed == 1
    memory.remember(key, auto)
    again = memory.recall(key, CANDIDATES)
    assert again.winner == "off" and again.changed == 1 and again.since_check == auto.since_check
    record = json.loads(memory.path(key).read_text())
    assert record["conditions"]["load_per_core"] == auto.conditions["load_per_core"]  # type: ignore[index]


def _aged(path: Path, **changes: object) -> None:
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))


@pytest.mark.usefixtures("steady_load")  # a recall right after a save
def test_a_remembered_choice_is_measured_again_when_old_or_made_under_another_load(tmp_path: Path) -> None:
    target, d2t = tmp_path / "target.gguf", tmp_path / "target-d2t.gguf"
    target.write_bytes(b"GGUF target")
    d2t.write_bytes(b"GGUF d2t")
    memory, key = AutoMemory(tmp_path / "memory"), auto_key(target, d2t, backend="cpu-1")
    auto = memory.recall(key, CANDIDATES)
    _replies(auto, _speeds(D2T_PAYS), 1 + MIN_SAMPLES * len(CANDIDATES))
    memory.remember(key, auto)
    assert memory.recall(key, CANDIDATES).winner == "d2t"  # just made, same machine: it holds
    old = (datetime.now(UTC) - timedelta(days=MAX_AGE_DAYS + 1)).isoformat(timespec="seconds")
    _aged(memory.path(key), saved_at=old)
    stale = memory.recall(key, CANDIDATES)
    assert stale.measuring and stale.stale is not None and stale.stale.startswith("measured 15 days ago")
    assert stale.status().startswith("Auto is measuring again (measured 15 days ago)")
    memory.remember(key, auto)
    now = machine_load()
    if now is not None:  # a record made when the machine was far busier than now
        _aged(memory.path(key), conditions={"load_per_core": max(now, 0.25) * LOAD_FACTOR * 4, "backend_build": None})
        busy = memory.recall(key, CANDIDATES)
        assert busy.measuring and busy.stale is not None and "load changed" in busy.stale
        listed = memory.entries()[0]["stale"]  # `depth-memory list` says so, with the load it reads then
        assert _then(listed) == _then(busy.stale)


def test_stale_reason_in_words() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)
    fresh = {"saved_at": "2026-12-01T10:00:00+00:00",
             "conditions": {"load_per_core": 0.4, "backend_build": "abc:p1:2026-11-30"}}
    assert stale_reason(fresh, {"load_per_core": 0.6, "backend_build": "abc:p1:2026-11-30"}, at) is None
    assert stale_reason(fresh, {"load_per_core": 1.2, "backend_build": "abc:p1:2026-11-30"}, at) == (
        "the machine's load changed (0.40 then, 1.20 now, per core)")
    assert stale_reason(fresh, {"load_per_core": 0.05, "backend_build": "abc:p1:2026-11-30"}, at) is None  # both idle
    assert stale_reason(fresh, {"load_per_core": 0.4, "backend_build": "def:p1:2026-12-02"}, at) == (
        "the backend was rebuilt since")
    assert stale_reason({**fresh, "saved_at": "2026-11-01T00:00:00+00:00"}, {}, at) == "measured 32 days ago"
    assert stale_reason({"saved_at": "2026-12-01T00:00:00+00:00"}, {"load_per_core": 9.0}, at) is None  # no notes


def test_adaptive_depths_record_is_not_used_under_another_load(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    memory = DepthMemory(tmp_path)
    key = MemoryKey("/m/t.gguf", 1, 1, None, None, None, "sidecar", "cpu-1", 2, 0, None, (), "host")
    assert memory.recall(key) is None and memory.conditions is not None
    now_conditions = conditions_now("cpu-1")
    assert memory.conditions["backend_build"] == now_conditions["backend_build"]
    assert all(load is None or 0.0 <= load <= 1.0 for load in (memory.conditions["load_per_core"],
                                                               now_conditions["load_per_core"]))
    if machine_load() is None:
        pytest.skip("no CPU counters or load average on this system")
    # from here the machine's load holds still: two real readings a moment apart differ 2x on a busy machine (the
    # other test worker starting a file), and then a record made a moment ago is rightly stale ("make check" failed)
    monkeypatch.setattr(depth_memory, "machine_load", lambda window_s=0.1: 0.3)
    memory = DepthMemory(tmp_path)
    assert memory.recall(key) is None
    memory.remember(key, {"version": 1, "current": 4})
    assert DepthMemory(tmp_path).recall(key) == {"version": 1, "current": 4}
    _aged(memory.path(key), conditions={"load_per_core": 0.3 * LOAD_FACTOR * 4, "backend_build": None})
    later = DepthMemory(tmp_path)
    assert later.recall(key) is None and later.stale is not None and "load changed" in later.stale
    assert _then(later.entries()[0]["stale"]) == _then(later.stale)


class Readings:
    """The loads a take-up reads, one per window asked for, in turn; the windows asked for are kept."""

    def __init__(self, *loads: float) -> None:
        self.loads, self.windows = list(loads), list[float]()

    def __call__(self, backend_id: str, window_s: float) -> dict[str, object]:
        self.windows.append(window_s)
        return {"load_per_core": self.loads.pop(0), "backend_build": f"{backend_id}:p1"}


NOTED = {"saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
         "conditions": {"load_per_core": 0.1, "backend_build": "cpu-1:p1"}}


def test_a_burst_at_a_take_up_does_not_throw_a_record_away_and_a_load_that_holds_does() -> None:
    """Another program's burst in the short reading is read again over the longer window, which decides; a
    record that holds keeps the load it was made under for its next save (a record held still at one load must
    not drift, a noisy reading at a time, to another)."""
    burst = Readings(0.9, 0.12)
    assert take_up(NOTED, "cpu-1", burst) == ({"load_per_core": 0.1, "backend_build": "cpu-1:p1"}, None)
    assert burst.windows == [LOAD_WINDOW_S, LOAD_HOLD_WINDOW_S]
    quiet = Readings(0.15)  # the short reading agrees: no longer wait
    assert take_up(NOTED, "cpu-1", quiet) == ({"load_per_core": 0.1, "backend_build": "cpu-1:p1"}, None)
    assert quiet.windows == [LOAD_WINDOW_S]
    held = Readings(0.9, 0.8)
    conditions, stale = take_up(NOTED, "cpu-1", held)
    assert conditions == {"load_per_core": 0.8, "backend_build": "cpu-1:p1"}  # what the new record will note
    assert stale == "the machine's load changed (0.10 then, 0.80 now, per core)"
    old = {**NOTED, "saved_at": (datetime.now(UTC) - timedelta(days=MAX_AGE_DAYS + 1)).isoformat()}
    aged = Readings(0.1, 0.3)
    assert take_up(old, "cpu-1", aged) == ({"load_per_core": 0.3, "backend_build": "cpu-1:p1"}, "measured 15 days ago")
    cold = Readings(0.7, 0.2)  # no record: the load the first save notes is the longer reading
    assert take_up(None, "cpu-1", cold) == ({"load_per_core": 0.2, "backend_build": "cpu-1:p1"}, None)
    assert cold.windows == [LOAD_WINDOW_S, LOAD_HOLD_WINDOW_S]
    chosen = Readings(0.7, 0.2)  # the window, a model just chosen: a new record notes the short reading, no wait
    assert take_up(None, "cpu-1", chosen, hold_new=False) == ({"load_per_core": 0.7, "backend_build": "cpu-1:p1"},
                                                               None)
    assert chosen.windows == [LOAD_WINDOW_S]


@pytest.mark.usefixtures("steady_load")  # the records made at 0.1
def test_both_memories_keep_a_record_through_a_burst_and_note_the_load_it_was_made_under(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recalls of adaptive depth's and Auto's records read the load as ``take_up`` does: a burst over the
    short window (0.9) beside a quiet longer one (0.12) keeps a record made at 0.1, and its next save notes 0.1."""
    target, d2t = tmp_path / "target.gguf", tmp_path / "target-d2t.gguf"
    target.write_bytes(b"GGUF target")
    d2t.write_bytes(b"GGUF d2t")
    auto_memory, auto_key_ = AutoMemory(tmp_path / "memory"), auto_key(target, d2t, backend="cpu-1")
    decided = auto_memory.recall(auto_key_, CANDIDATES)
    _replies(decided, _speeds(D2T_PAYS), 1 + MIN_SAMPLES * len(CANDIDATES))
    auto_memory.remember(auto_key_, decided)
    depths = DepthMemory(tmp_path / "memory")
    key = MemoryKey(str(target), 1, 1, None, None, None, "sidecar", "cpu-1", 2, 0, None, (), "host")
    assert depths.recall(key) is None
    depths.remember(key, {"version": 1, "current": 4})

    windows: list[float] = []

    def burst(window_s: float = LOAD_WINDOW_S) -> float:
        windows.append(window_s)
        return 0.9 if window_s < LOAD_HOLD_WINDOW_S else 0.12
    monkeypatch.setattr(depth_memory, "machine_load", burst)
    again = auto_memory.recall(auto_key_, CANDIDATES)
    assert again.winner == "d2t" and again.stale is None
    auto_memory.remember(auto_key_, again)
    later = DepthMemory(tmp_path / "memory")
    assert later.recall(key) == {"version": 1, "current": 4} and later.stale is None
    later.remember(key, {"version": 1, "current": 5})
    for path in (auto_memory.path(auto_key_), later.path(key)):
        assert json.loads(path.read_text())["conditions"]["load_per_core"] == 0.1
    windows.clear()
    assert [e["stale"] for e in auto_memory.entries() + later.entries()] == [None, None]  # listed as taken up
    assert windows == [LOAD_WINDOW_S, LOAD_HOLD_WINDOW_S] * 2  # each listing reads each window once

    monkeypatch.setattr(depth_memory, "machine_load", lambda window_s=LOAD_WINDOW_S: 0.9)  # a load that holds
    assert auto_memory.recall(auto_key_, CANDIDATES).measuring
    assert DepthMemory(tmp_path / "memory").recall(key) is None
