"""What adaptive depth remembers between loads: the record's key, damaged and foreign records, saves that fail,
the CLI; and on the real patched backend, a second load of the same files that starts where the first left off."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.engine.adaptive import MEMORY_VERSION, START_DEPTH, RoundTiming
from app.engine.config import EngineConfig, SamplingParams
from app.engine.depth_memory import DepthMemory, key_for
from app.engine.sampling import Sampler
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

STATE = {"version": MEMORY_VERSION, "draft_depth": 8, "rest": {"1": 0.05, "4": 0.09}, "first_pass": 0.01, "step": 0.008,
         "first_step": 0.009,
         "tested": [40.0, 30.0, 20.0, 0, 0, 0, 0, 0], "accepted": [36.0, 25.0, 15.0, 0, 0, 0, 0, 0],
         "current": 3, "rounds": 200}


pytestmark = pytest.mark.usefixtures("steady_load")  # a recall right after a save: the load held still


def _files(tmp_path: Path) -> EngineConfig:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"t" * 100)
    draft.write_bytes(b"d" * 50)
    return EngineConfig(target, mode="sidecar", draft=draft, adaptive=True, depth_memory=tmp_path / "memory")


def test_the_key_changes_with_anything_that_changes_the_costs(tmp_path: Path) -> None:
    config = _files(tmp_path)
    key = key_for(config, "0.3.35-cpu-d2t-x", 2)
    assert key_for(config, "0.3.35-cpu-d2t-x", 2).digest() == key.digest()  # stable
    others = [key_for(config, "0.3.35-cuda-d2t-x", 2), key_for(config, "0.3.35-cpu-d2t-x", 4),
              key_for(replace(config, n_gpu_layers=-1), "0.3.35-cpu-d2t-x", 2),
              key_for(replace(config, mode="embedded"), "0.3.35-cpu-d2t-x", 2),
              key_for(replace(config, rpc=("10.0.0.2:50052",)), "0.3.35-cpu-d2t-x", 2)]
    assert config.draft is not None
    config.draft.write_bytes(b"d" * 51)  # the sidecar replaced by another of the same name
    others.append(key_for(config, "0.3.35-cpu-d2t-x", 2))
    os.utime(config.target, ns=(1, 1))  # or the target touched
    others.append(key_for(config, "0.3.35-cpu-d2t-x", 2))
    digests = {k.digest() for k in others}
    assert key.digest() not in digests and len(digests) == len(others)
    # embedded mode has no sidecar: the draft file is not part of its key
    assert key_for(replace(config, mode="embedded"), "b", 2).draft is None


def test_a_record_comes_back_only_for_its_own_key_and_only_when_readable(tmp_path: Path) -> None:
    config = _files(tmp_path)
    memory, key = DepthMemory(tmp_path / "memory"), key_for(config, "backend", 2)
    assert memory.recall(key) is None  # nothing saved yet
    memory.remember(key, STATE)
    assert memory.recall(key) == STATE
    assert memory.recall(key_for(config, "backend", 3)) is None  # another thread count: another record
    record = json.loads(memory.path(key).read_text())
    record["key"]["threads"] = 7  # a record at this path that is not for this key (a digest collision)
    memory.path(key).write_text(json.dumps(record))
    assert memory.recall(key) is None
    for damaged in ("{not json", "[1, 2]", json.dumps({"key": record["key"], "state": "x"}), "\x00\xff"):
        memory.path(key).write_text(damaged)
        assert memory.recall(key) is None, damaged
    memory.remember(key, STATE)  # the next save replaces a damaged record
    assert memory.recall(key) == STATE


def test_a_failed_save_raises_for_the_caller_and_leaves_the_old_record_whole(tmp_path: Path) -> None:
    config = _files(tmp_path)
    memory, key = DepthMemory(tmp_path / "memory"), key_for(config, "backend", 2)
    memory.remember(key, STATE)
    blocked = memory.path(key).with_name(f".{memory.path(key).name}.{os.getpid()}.tmp")
    blocked.mkdir()  # the temporary file cannot be written: as a full disk would refuse it
    with pytest.raises(OSError):
        memory.remember(key, {**STATE, "current": 5})
    assert memory.recall(key) == STATE


def test_list_and_forget_name_every_record_damaged_ones_too(tmp_path: Path) -> None:
    config = _files(tmp_path)
    memory = DepthMemory(tmp_path / "memory")
    assert memory.entries() == [] and memory.forget() == 0  # no folder yet
    memory.remember(key_for(config, "backend", 2), STATE)
    (memory.folder / f"{'0' * 24}.depth.json").write_text("{damaged")
    entries = memory.entries()
    assert [e["damaged"] for e in entries] == [True, False]
    good = entries[1]
    assert good["target"] == str(config.target.resolve()) and good["depth"] == 3 and good["threads"] == 2
    assert memory.forget() == 2 and memory.entries() == []


def _cli(*args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "app", "depth-memory", *args, "--json"], capture_output=True,
                          text=True, check=True, env=os.environ.copy())
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_the_cli_lists_and_forgets_what_the_app_remembers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.paths import depth_memory_dir
    from app.engine.auto_mode import CANDIDATES, AutoDrafting, AutoMemory, auto_key

    # a data folder of its own: other tests' replies (Auto drafting's, adaptive depth's) leave records in the session's
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    config = _files(tmp_path)
    DepthMemory(depth_memory_dir()).remember(key_for(config, "backend", 2), STATE)
    AutoMemory(depth_memory_dir()).remember(auto_key(config.target, config.draft, "backend"),
                                            AutoDrafting(CANDIDATES))  # Auto drafting's record, beside it
    listed = _cli("list")
    assert listed["folder"] == str(depth_memory_dir())
    assert [e["target"] for e in listed["entries"]] == [str(config.target.resolve())]  # type: ignore[attr-defined]
    assert [(e["target"], e["winner"]) for e in listed["auto"]] == [  # type: ignore[attr-defined]
        (str(config.target.resolve()), None)]  # still measuring
    assert _cli("forget") == {"forgotten": 1, "auto_forgotten": 1}
    assert _cli("list")["entries"] == [] and _cli("list")["auto"] == []


# ------------------------------------------------------------------ on the real backend

needs_backend = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("memory-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")


def _reply(config: EngineConfig, demo: DemoModel) -> tuple[SpeculativeDecoder, list[int]]:
    decoder = SpeculativeDecoder(config)
    return decoder, decoder.generate(table_prompt(demo), 120, Sampler(SamplingParams())).tokens


@needs_backend
def test_the_next_load_of_the_same_files_starts_where_the_last_one_left_off(demo: DemoModel, tmp_path: Path) -> None:
    # a set thread count: records are kept per count, and one that follows the idle cores could differ between loads
    config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, adaptive=True, n_ctx=1024,
                          n_threads=1, depth_memory=tmp_path / "memory")
    first, tokens = _reply(config, demo)
    assert first.adaptive is not None and not first.adaptive.warm
    first.close()
    records = list((tmp_path / "memory").glob("*.depth.json"))
    assert len(records) == 1
    saved = json.loads(records[0].read_text())["state"]
    assert saved["rest"] and saved["current"] >= 0

    second = SpeculativeDecoder(config)
    try:
        assert second.adaptive is not None and second.adaptive.warm
        second.adaptive.log = []
        again = second.generate(table_prompt(demo), 120, Sampler(SamplingParams())).tokens
        assert again == tokens  # lossless either way
        decisions = second.adaptive.log
        # no "start" at depth 3 to measure from: it plays a depth the first load measured from the first round
        # on, and tries none of those again
        measured = {int(b) - 1 for b in saved["rest"]}
        assert decisions[0].reason == "best" and decisions[0].depth in measured
        assert not [d for d in decisions if d.reason == "start" or (d.reason == "explore" and d.depth in measured)]
    finally:
        second.close()
    # without a memory folder nothing is kept and every load starts cold
    cold, _ = _reply(replace(config, depth_memory=None), demo)
    assert cold.adaptive is not None and not cold.adaptive.warm
    cold.close()


@needs_backend
def test_a_damaged_record_or_a_blocked_folder_only_costs_the_warm_start(demo: DemoModel, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    memory = tmp_path / "memory"
    config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, adaptive=True, n_ctx=1024,
                          n_threads=1, depth_memory=memory)
    decoder, _ = _reply(config, demo)
    decoder.close()
    record = next(memory.glob("*.depth.json"))
    record.write_text(json.dumps({**json.loads(record.read_text()), "state": {**STATE, "version": 99}}))
    with caplog.at_level(logging.WARNING, logger="app.engine.speculative"):
        decoder, tokens = _reply(config, demo)
    assert decoder.adaptive is not None and not decoder.adaptive.warm
    assert decoder.adaptive.chosen[START_DEPTH] > 0 and tokens
    assert "not one this version can use" in caplog.text
    decoder.close()
    assert json.loads(record.read_text())["state"]["version"] == MEMORY_VERSION  # rewritten by the save

    blocked = tmp_path / "a-file"
    blocked.write_text("in the way of the folder")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.engine.speculative"):
        decoder, tokens = _reply(replace(config, depth_memory=blocked / "memory"), demo)
        decoder.close()
    assert tokens and "could not be saved" in caplog.text


@needs_backend
def test_each_thread_count_learns_and_remembers_its_own_depths(demo: DemoModel, tmp_path: Path) -> None:
    """A verify pass's cost has another shape at another thread count, so when the decode threads change (the idle
    cores did) adaptive depth saves what it learned at the old count and goes on with what it knows at the new one;
    coming back to a count takes up its estimates where they were, and a later load at a count finds its record."""
    from app.native.loader import backend_manifest

    memory = DepthMemory(tmp_path / "memory")
    config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, adaptive=True, n_ctx=1024,
                          n_threads=1, depth_memory=memory.folder)
    decoder, tokens = _reply(config, demo)
    try:
        one = decoder.adaptive
        assert one is not None and one.rounds > 0
        one.observe(one.depth(), 1, 1, RoundTiming(0.05, 0.04, 0.01, 0.0, 1))  # a round no reply's end saved
        one_rounds = one.rounds
        decoder.use_threads(2)
        assert decoder.threads == 2 and decoder.adaptive is not None and decoder.adaptive is not one
        assert decoder.adaptive.rounds == 0 and not decoder.adaptive.warm
        keyed = decoder.keyed_config  # as loaded: the attention kernel it chose is part of what a record is for
        saved = memory.recall(key_for(keyed, backend_manifest().id, 1))
        assert saved is not None and saved["rounds"] == one_rounds  # saved at the switch, under the count before
        decoder.reset()
        again = decoder.generate(table_prompt(demo), 120, Sampler(SamplingParams()))
        assert again.tokens == tokens and again.stats.threads == 2  # lossless at either count
        two_rounds = decoder.adaptive.rounds
        assert two_rounds > 0 and one.rounds == one_rounds  # the other count's estimates untouched
        decoder.use_threads(1)
        assert decoder.adaptive is one
        assert memory.recall(key_for(keyed, backend_manifest().id, 2))["rounds"] == two_rounds  # type: ignore[index]
    finally:
        decoder.close()
    for threads, warm in ((2, True), (1, True), (3, False)):
        later = SpeculativeDecoder(replace(config, n_threads=threads))
        try:
            assert later.adaptive is not None and later.adaptive.warm == warm, threads
        finally:
            later.close()


@needs_backend
@pytest.mark.parametrize("start", ["warm", "cold"])
def test_bench_spec_says_which_runs_started_warm(tmp_path: Path, start: str) -> None:
    """``bench spec``'s default: the first run's adaptive row starts cold, the next from what it learned (kept in
    OUT/depth-memory, emptied first); ``--adaptive-start cold``: every run cold and nothing kept."""
    stale = tmp_path / "depth-memory"
    stale.mkdir()
    (stale / f"{'1' * 24}.depth.json").write_text("{}")  # an earlier bench's record is not used
    done = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--size", "tiny", "--runs", "2", "--tokens",
                           "8", "--modes", "d2t", "--depths", "2", "--adaptive-max", "3", "--no-upstream",
                           "--adaptive-start", start, "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [r for r in json.loads(done.stdout)["rows"] if r["adaptive"]]
    expected = ["cold", "warm"] if start == "warm" else ["cold", "cold"]
    assert [r["starts"] for r in rows] == [expected, expected]  # document, reasoning
    decisions = [json.loads(line) for line in (tmp_path / "adaptive-decisions.jsonl").read_text().splitlines()]
    assert {(d["run"], d["warm"]) for d in decisions} == {(1, False), (2, start == "warm")}
    assert "| adaptive variant |" in (tmp_path / "spec.md").read_text()
    kept = [path.name for path in stale.glob("*.depth.json")]
    if start == "warm":  # the stale record gone, this bench's own in its place
        assert len(kept) == 1 and not kept[0].startswith("1" * 24)
    else:  # nothing kept, nothing touched
        assert kept == [f"{'1' * 24}.depth.json"]
