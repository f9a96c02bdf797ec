"""The build's wait, said before it starts: a cached tree in seconds, this machine's own history, else its cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.backend import build_estimate
from app.backend.build_estimate import duration_words, estimate, free_cores, record, remaining
from app.backend.builder import BuildOptions

CPU = BuildOptions(flavor="cpu")


@pytest.fixture(autouse=True)
def own_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("seconds", "words"), [(3, "5 seconds"), (42, "40 seconds"), (61, "1 minute"),
                                                 (25 * 60 + 10, "25 minutes"), (56 * 60, "56 minutes"),
                                                 (70 * 60, "1 hour 10 minutes"), (2 * 3600, "2 hours")])
def test_durations_in_words(seconds: float, words: str) -> None:
    assert duration_words(seconds) == words


def test_a_fresh_build_is_the_core_seconds_over_the_free_cores() -> None:
    quiet = estimate(CPU, cached=False, cores=2, load=0.0)
    busy = estimate(CPU, cached=False, cores=2, load=1.5)
    assert quiet.basis == "cores" and quiet.seconds == build_estimate.FRESH_CORE_SECONDS["cpu"] / 2
    assert busy.seconds == build_estimate.FRESH_CORE_SECONDS["cpu"]  # one free core at the least
    assert "from this machine's 2 cores" in quiet.words() and "4 minutes" in quiet.words()
    cuda = estimate(BuildOptions(flavor="cuda", cuda_archs=["86", "90"]), cached=False, cores=16, load=0.0)
    assert cuda.seconds == 2 * build_estimate.FRESH_CORE_SECONDS["cuda"] / 16  # each architecture compiles again


def test_a_cached_tree_is_seconds() -> None:
    cached = estimate(CPU, cached=True, cores=2)
    assert cached.basis == "cached" and cached.seconds < 60 and "the build tree is cached" in cached.words()


def test_this_machines_own_builds_beat_the_model(own_data: Path) -> None:
    for seconds in (1500.0, 1400.0, 1600.0):
        record("cpu", False, seconds)
    record("cpu", True, 4.0)
    record("cuda", False, 3000.0, archs=2)
    fresh = estimate(CPU, cached=False, cores=2, load=0.0)
    assert fresh.basis == "measured" and fresh.seconds == 1500.0 and "earlier builds" in fresh.words()
    assert estimate(CPU, cached=True).seconds == 4.0
    assert estimate(BuildOptions(flavor="cuda", cuda_archs=["90"]), cached=False).seconds == 1500.0  # per arch
    kept = json.loads((own_data / build_estimate.HISTORY_FILE).read_text())
    assert len(kept) == 5 and kept[-1]["archs"] == 2


def test_a_damaged_history_is_ignored(own_data: Path) -> None:
    (own_data / build_estimate.HISTORY_FILE).write_text("{not json")
    assert estimate(CPU, cached=False, cores=2, load=0.0).basis == "cores"
    record("cpu", False, 100.0)  # and the next build writes a good one
    assert estimate(CPU, cached=False).basis == "measured"


def test_the_history_keeps_the_newest_records(own_data: Path) -> None:
    for n in range(build_estimate.HISTORY_KEEP + 5):
        record("cpu", False, float(n))
    kept = json.loads((own_data / build_estimate.HISTORY_FILE).read_text())
    assert len(kept) == build_estimate.HISTORY_KEEP and kept[-1]["seconds"] == build_estimate.HISTORY_KEEP + 4


def test_the_time_left_comes_from_the_compile_rate_once_it_says_enough() -> None:
    assert remaining(600, 100, None, None) == 500  # no compile progress yet: the estimate
    assert remaining(600, 100, 0.05, 50) == 500  # too little compiled to trust its rate
    left = remaining(600, 400, 0.5, 300)  # half compiled in 300 s: about 300 s more, whatever the estimate said
    assert 300 <= left <= 300 + build_estimate.CACHED_SECONDS
    assert remaining(60, 500, None, None) == 5.0  # past the estimate: still running, never zero


def test_free_cores_never_below_one() -> None:
    assert free_cores(2, 5.0) == 1.0 and free_cores(16, 2.0) == 14.0
