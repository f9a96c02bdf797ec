"""``bench adaptive-load`` end to end on the tiny demo: three phases (quiet, loaded by children the benchmark starts and
stops, quiet again), each with the interleaved runs asked for (medians over them), with adaptive depth's memory
carried along."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.adaptive_load import decisions_file

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_every_phase_runs_the_runs_asked_for(tmp_path: Path) -> None:
    """A screen of a millionth: after each phase's first run only the fastest fixed depth of that run (of drafting off
    and depth 1) runs again, beside adaptive depth."""
    done = subprocess.run([sys.executable, "-m", "app", "bench", "adaptive-load", "--size", "tiny", "--tokens", "8",
                           "--depths", "1", "--adaptive-max", "2", "--busy-cores", "1", "--runs", "2",
                           "--screen", "0.000001", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert json.loads((tmp_path / "adaptive-load.json").read_text()) == result
    assert result["runs"] == 2
    phases = result["phases"]
    assert [(p["phase"], p["busy_cores"]) for p in phases] == [("quiet", 0), ("loaded", 1), ("quiet again", 0)]
    for phase in phases:
        assert set(phase["fixed_tps"]) == {"0", "1"} and all(v > 0 for v in phase["fixed_tps"].values())
        assert phase["adaptive_tps"] > 0 and phase["best_fixed_depth"] in (0, 1)
        assert len(phase["adaptive_warm"]) == 2, phase  # one adaptive sample per run
        # the phase's ratio: the median of the runs' side-by-side ratios (each rounded to 3 places)
        assert phase["adaptive_vs_best"] == pytest.approx(statistics.median(phase["adaptive_vs_best_runs"]), abs=1e-3)
        assert abs(sum(phase["adaptive_depths"].values()) - 1.0) < 0.01
        assert len(phase["own_clock_runs"]) == 2  # each run priced on its own clock, or None where too short
        # the slower of the two in the first run was left out of the second; the verdict is against the other
        assert len(phase["screened_out"]) == 1 and phase["best_fixed_depth"] not in phase["screened_out"]
        replies = phase["replies"]
        left_out = "off" if phase["screened_out"] == [0] else "d2t sidecar k=1"
        kept = "d2t sidecar k=1" if left_out == "off" else "off"
        assert len(replies[left_out]) == 1 and len(replies[kept]) == 2
        assert len(replies["d2t sidecar adaptive k<=2"]) == 2
        assert all(len(run) == 4 and all(tokens > 0 and seconds > 0 for tokens, seconds in run)
                   for runs in replies.values() for run in runs)  # each reply of the four prompts: tokens, seconds
    assert phases[0]["adaptive_warm"][0] is False  # the memory is emptied at the start: the first run is cold
    table = (tmp_path / "adaptive-load.md").read_text()
    assert "2 interleaved runs a phase" in table and "| loaded | 1 |" in table
    assert "¹ the first run only: more than 0% slower than the fastest fixed depth in it" in table
    assert (tmp_path / "depth-memory").is_dir()
    for phase in phases:  # every phase's adaptive rounds, logged with the run they belong to
        log = tmp_path / decisions_file(phase["phase"])
        rounds = [json.loads(line) for line in log.read_text().splitlines()]
        assert rounds and {r["run"] for r in rounds} == {1, 2} and all(0 <= r["depth"] <= 2 for r in rounds)
        # a round of two drafts or more times its first draft step apart: the load reading (``RoundTiming``)
        assert all((r["first_step"] is not None) == (r["batch"] >= 3) for r in rounds)
        assert all(0.0 < r["first_step"] <= r["draft_steps"] for r in rounds if r["batch"] >= 3)
