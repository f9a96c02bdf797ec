"""Issue 37 item 2: a build-times.json of the right type and the wrong size, or not a file at all, never breaks the
estimate (``backend build``, the window when no backend exists): set aside or skipped, read within a cap."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from app.backend import build_estimate
from app.backend.build_estimate import estimate
from app.backend.builder import BuildOptions

CPU = BuildOptions(flavor="cpu")


@pytest.fixture(autouse=True)
def own_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path))
    return tmp_path


def history(own_data: Path) -> Path:
    return own_data / build_estimate.HISTORY_FILE


@pytest.mark.parametrize("text", [
    '[{"flavor": "cpu", "cached": false, "seconds": NaN}]',
    '[{"flavor": "cpu", "cached": false, "seconds": 1e999}]',
    '[{"flavor": "cpu", "cached": false, "seconds": Infinity}]',
    "[" * 100_000 + "]" * 100_000,
    '{"flavor": "cpu"}'])
def test_a_damaged_file_is_set_aside_and_the_estimate_comes_from_the_cores(own_data: Path, text: str) -> None:
    history(own_data).write_text(text)
    assert estimate(CPU, cached=False, cores=2, load=0.0).basis == "cores"
    assert history(own_data).with_name(build_estimate.HISTORY_FILE + ".bad").exists()
    assert not history(own_data).exists()


@pytest.mark.parametrize("record", [
    {"seconds": True}, {"seconds": 10**400}, {"seconds": -5}, {"seconds": 0}, {"seconds": "100"},
    {"seconds": 100, "archs": 10**400}, {"seconds": 100, "archs": "abc"}, {"seconds": 100, "archs": 0},
    {"seconds": 100, "archs": True}, {"seconds": 100, "cached": "no"}, {"seconds": 100, "flavor": 7}])
def test_a_bad_record_is_skipped_and_the_good_ones_count(own_data: Path, record: dict[str, object]) -> None:
    good = {"flavor": "cpu", "cached": False, "seconds": 1500.0}
    history(own_data).write_text(json.dumps([{**good, **record}, good, [], "x", None]))
    result = estimate(CPU, cached=False, cores=2, load=0.0)
    assert result.basis == "measured" and result.seconds == 1500.0


def test_a_fifo_is_refused_unread_and_does_not_hang(own_data: Path) -> None:
    os.mkfifo(history(own_data))
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(estimate(CPU, cached=False, cores=2, load=0.0).basis),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert done == ["cores"]


def test_a_link_to_dev_zero_is_refused_unread(own_data: Path) -> None:
    history(own_data).symlink_to("/dev/zero")
    assert estimate(CPU, cached=False, cores=2, load=0.0).basis == "cores"
    build_estimate.record("cpu", False, 100.0)  # the next build writes a real file again
    assert estimate(CPU, cached=False).basis == "measured"


def test_a_file_over_its_cap_is_not_read(own_data: Path) -> None:
    history(own_data).write_text("[" + " " * (build_estimate.HISTORY_MAX_BYTES + 10) + "]")
    assert estimate(CPU, cached=False, cores=2, load=0.0).basis == "cores"
