"""Auto drafting (issue 26): off, the embedded head and the d2t sidecar take turns over the first replies with a
model, after a warm-up; the measured winner is remembered per model files, backend and machine, beside depth
memory, and used from then on. Simulated machines feed it replies (given speeds, no timing); the records are
real files in a temporary folder, and a damaged one is a cold start. The last test runs ``chat --mtp auto`` on
the real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.auto_mode import CANDIDATES, SUFFIX, AutoDrafting, AutoMemory, auto_key
from app.engine.depth_memory import DepthMemory
from app.engine.verdict import MIN_SAMPLES, MIN_TOKENS, Condition
from tests.helpers.demo_copies import DemoCopies

pytestmark = pytest.mark.usefixtures("steady_load")  # recalls right after saves: the load held still

REPLIES_TO_DECIDE = 1 + MIN_SAMPLES * len(CANDIDATES)  # a warm-up, then each mode in turn until 3 each


def condition(mode: str, sampling: str = "temperature 0.7") -> Condition:
    return Condition(mode, "" if mode == "off" else "adaptive depth ≤8", sampling, "/models/m.gguf", None)


def machine(speeds: dict[str, list[float]]) -> dict[str, Iterator[float]]:
    """Each mode's replies' decode speeds, in the order they come (a reply's luck and the load in them)."""
    return {mode: iter(values) for mode, values in speeds.items()}


def run(auto: AutoDrafting, speeds: dict[str, Iterator[float]], replies: int,
        sampling: str = "temperature 0.7") -> list[str]:
    """``replies`` replies, each from the mode Auto asks for; the modes used, in order."""
    used = []
    for _ in range(replies):
        mode = auto.next_mode()
        used.append(mode)
        assert auto.observe(mode, condition(mode, sampling), next(speeds[mode]), tokens=96, load=1.2)
    return used


# the warm-up reply is off's first; then off, embedded, d2t in turn
OFF_WINS = {"off": [20.0, 36.0, 37.0, 35.5], "embedded": [30.0, 31.0, 29.5], "d2t": [33.0, 34.0, 32.0]}
EMBEDDED_WINS = {"off": [20.0, 36.0, 37.0, 35.5], "embedded": [52.0, 55.0, 51.0], "d2t": [44.0, 46.0, 45.0]}
D2T_WINS = {"off": [20.0, 36.0, 37.0, 35.5], "embedded": [40.0, 41.0, 39.0], "d2t": [47.0, 49.0, 48.5]}


@pytest.mark.parametrize(("speeds", "winner", "status"), [
    (OFF_WINS, "off", "Auto uses drafting off: no draft head was clearly faster here (embedded 0.83x (slower), "
                      "d2t 0.92x (slower))."),
    (EMBEDDED_WINS, "embedded", "Auto uses embedded: 1.44x drafting off's speed (median 52 against 36 tok/s, 3 "
                                "replies each, temperature 0.7)."),
    (D2T_WINS, "d2t", "Auto uses d2t: 1.35x drafting off's speed (median 48 against 36 tok/s, 3 replies each, "
                      "temperature 0.7)."),
])
def test_auto_picks_the_measured_winner(speeds: dict[str, list[float]], winner: str, status: str) -> None:
    auto = AutoDrafting(CANDIDATES)
    used = run(auto, machine(speeds), REPLIES_TO_DECIDE)
    assert used == ["off", "embedded", "d2t", "off", "embedded", "d2t", "off", "embedded", "d2t", "off"]
    assert auto.winner == winner and not auto.measuring and auto.decided_at
    assert auto.next_mode() == winner  # from now on every reply uses it
    assert auto.status() == status
    other = next(m for m in CANDIDATES if m != winner)
    assert not auto.observe(other, condition(other), 99.0, tokens=96)  # decided: a mode not asked for is not taken
    assert auto.observe(winner, condition(winner), 99.0, tokens=96) and auto.since_check == 1  # toward a re-check


def test_auto_refuses_to_decide_before_enough_samples() -> None:
    auto = AutoDrafting(CANDIDATES)
    run(auto, machine(D2T_WINS), REPLIES_TO_DECIDE - 1)
    assert auto.measuring and auto.winner is None and auto.next_mode() == "off"
    assert auto.counts() == {"off": 2, "embedded": 3, "d2t": 3}  # the warm-up is not counted
    assert auto.status() == "Auto is measuring (off 2/3, embedded 3/3, d2t 3/3); next reply: off."


def test_auto_says_no_clear_winner_is_off_and_counts_only_what_it_asked_for() -> None:
    close = {"off": [20.0, 36.0, 40.0, 35.5], "embedded": [30.0, 31.0, 29.5], "d2t": [37.0, 41.0, 36.0]}
    auto = AutoDrafting(CANDIDATES)
    assert not auto.observe("d2t", condition("d2t"), 50.0, tokens=96)  # not the mode it asked for
    assert not auto.observe("off", condition("off"), 50.0, tokens=MIN_TOKENS - 1)  # too short to tell
    assert auto.samples == [] and auto.next_mode() == "off"
    run(auto, machine(close), REPLIES_TO_DECIDE)
    assert auto.winner == "off"  # d2t's 36-41 overlaps off's 35.5-40: no clear gain is no reason to draft
    assert "d2t 1.03x (no clear difference)" in auto.status()


def test_replies_at_another_sampling_start_the_count_again() -> None:
    auto = AutoDrafting(CANDIDATES)
    speeds = machine({m: v * 3 for m, v in D2T_WINS.items()})
    run(auto, speeds, 7, sampling="greedy")
    run(auto, speeds, 3, sampling="temperature 0.7")  # the chat's sampling from here on
    assert auto.measuring  # the greedy replies are not compared with these
    assert auto.counts() == {"off": 1, "embedded": 1, "d2t": 1}


def test_a_model_without_draft_files_uses_off_without_measuring() -> None:
    auto = AutoDrafting(("off",))
    assert auto.winner == "off" and not auto.measuring
    assert auto.status() == "Auto uses drafting off: this model has no draft head or sidecar to try."
    two = AutoDrafting(("off", "d2t"))  # a model without an MTP head: off and d2t take turns
    assert run(two, machine(D2T_WINS), 1 + 2 * MIN_SAMPLES) == ["off", "d2t"] * MIN_SAMPLES + ["off"]
    assert two.winner == "d2t"


# ------------------------------------------------------------------------------------------ the records


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    target, d2t = tmp_path / "target.gguf", tmp_path / "target-d2t.gguf"
    target.write_bytes(b"GGUF target")
    d2t.write_bytes(b"GGUF d2t")
    return target, d2t


def test_what_auto_measured_is_kept_across_starts_and_the_winner_is_used(tmp_path: Path,
                                                                         files: tuple[Path, Path]) -> None:
    memory = AutoMemory(tmp_path / "depth-memory")
    key = auto_key(*files, backend="cpu-1", threads=None)
    auto = memory.recall(key, CANDIDATES)
    assert auto.measuring and auto.samples == []  # nothing saved yet: a cold start
    speeds = machine(D2T_WINS)
    run(auto, speeds, 5)
    memory.remember(key, auto)
    again = memory.recall(key, CANDIDATES)  # the app started again
    assert again.samples == auto.samples and again.next_mode() == auto.next_mode() == "d2t"
    mode = again.next_mode()
    assert again.observe(mode, condition(mode), 47.5, tokens=96)
    assert not again.samples[-1].warm  # each start's first reply is a warm-up again
    more = machine({m: v * 3 for m, v in D2T_WINS.items()})
    # off and d2t had two counted replies each before: three more rounds bring d2t's third, not all ten again
    assert run(again, more, 6) == ["off", "embedded", "d2t"] * 2
    assert again.winner == "d2t"
    memory.remember(key, again)
    decided = memory.recall(key, CANDIDATES)
    assert decided.winner == "d2t" and decided.next_mode() == "d2t" and decided.status() == again.status()
    # another backend, other threads or another sidecar file is another record
    assert memory.recall(auto_key(*files, backend="cuda-1"), CANDIDATES).measuring
    assert memory.recall(auto_key(*files, backend="cpu-1", threads=4), CANDIDATES).measuring
    os.utime(files[1], ns=(1, 1))  # the sidecar replaced by another of the same name
    assert memory.recall(auto_key(*files, backend="cpu-1"), CANDIDATES).measuring
    # it lives beside depth memory, which keeps its own records
    assert [p.name.endswith(SUFFIX) for p in (tmp_path / "depth-memory").iterdir()] == [True]
    assert DepthMemory(tmp_path / "depth-memory").entries() == []
    listed = memory.entries()
    assert len(listed) == 1 and listed[0]["winner"] == "d2t" and listed[0]["status"].startswith("Auto uses d2t")
    assert memory.forget() == 1 and memory.entries() == []


@pytest.mark.parametrize("damage", ["not json", "list", "other key", "other version", "bad sample",
                                    "winner the samples do not back", "other candidates"])
def test_a_damaged_winner_record_is_a_cold_start(tmp_path: Path, files: tuple[Path, Path], damage: str) -> None:
    memory = AutoMemory(tmp_path)
    key = auto_key(*files, backend="cpu-1")
    decided = AutoDrafting(CANDIDATES)
    run(decided, machine(D2T_WINS), REPLIES_TO_DECIDE)
    memory.remember(key, decided)
    path = memory.path(key)
    record = json.loads(path.read_text())
    if damage == "not json":
        path.write_text('{"key": {"target": ')
    elif damage == "list":
        path.write_text("[1, 2]")
    else:
        state = record["state"]
        if damage == "other key":
            record["key"]["backend"] = "cuda-9"
        elif damage == "other version":
            state["version"] = 99
        elif damage == "bad sample":
            state["samples"][3]["tps"] = "fast"
        elif damage == "winner the samples do not back":
            state["winner"] = "embedded"
        elif damage == "other candidates":
            state["candidates"] = ["off", "d2t"]
        path.write_text(json.dumps(record))
    again = memory.recall(key, CANDIDATES)
    assert again.measuring and again.samples == [] and again.next_mode() == "off"
    if damage not in ("other key", "other candidates"):  # those two are readable records, for other setups
        unreadable = damage in ("not json", "list")  # set aside as .bad by the recall, and still listed
        assert memory.entries() == [{"file": str(path) + (".bad" if unreadable else ""), "damaged": True}]
    memory.remember(key, again)  # the next save rewrites it
    assert memory.recall(key, CANDIDATES).measuring


# ------------------------------------------------------------------------------------------ headless, real engine


def _app(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True,
                          env=os.environ.copy(), check=False, timeout=900)


@pytest.mark.usefixtures("patched_backend")
def test_chat_with_mtp_auto_takes_turns_and_generate_waits_for_a_winner(tmp_path: Path,
                                                                         default_demo: DemoCopies) -> None:
    demo = default_demo.copy_to(tmp_path / "demo")
    model = ["--model", str(demo.target), "--draft", str(demo.sidecar_d2t), "--mtp", "auto", "--temp", "0"]
    chat = _app("chat", *model, "--no-status", stdin="Tell me about lighthouses\nAnd their keepers?\n/quit\n")
    assert chat.returncode == 0, chat.stderr[-2000:]
    said = [line for line in chat.stderr.splitlines() if line.startswith("auto: ")]
    assert said == ["auto: Auto is measuring (off 0/3, embedded 0/3, d2t 0/3); next reply: off.",
                    "auto: Auto is measuring (off 0/3, embedded 0/3, d2t 0/3); next reply: embedded.",  # a warm-up
                    "auto: Auto is measuring (off 0/3, embedded 1/3, d2t 0/3); next reply: d2t."]
    listed = json.loads(_app("depth-memory", "list", "--json").stdout)["auto"]
    mine = [e for e in listed if e["target"] == str(demo.target.resolve())]
    assert len(mine) == 1 and mine[0]["winner"] is None and mine[0]["samples"] == 1
    one = _app("generate", *model, "--prompt", "Hi", "--max-tokens", "8")  # one reply compares nothing
    assert one.returncode == 0, one.stderr[-2000:]
    assert "auto: Auto is measuring" in one.stderr and "this one uses drafting off" in one.stderr
