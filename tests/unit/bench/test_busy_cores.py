"""The load generator keeps cores busy while it runs and leaves nothing behind after."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from app.bench.busy_cores import BusyCores, main
from app.core.processes import pid_alive


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc (Linux)")
def test_each_child_spins_until_stopped_and_is_reaped() -> None:
    with BusyCores(2) as load:
        pids = [child.pid for child in load._children]
        assert len(pids) == 2 and load.running
        deadline = time.monotonic() + 120
        while min(_cpu_seconds(pid) for pid in pids) < 0.3:  # each one burns CPU, not waits
            assert time.monotonic() < deadline, "a busy child used no CPU"
            time.sleep(0.05)  # polling the children's CPU clocks, not waiting for an event
    assert not load.running
    assert not any(pid_alive(pid) for pid in pids)  # stopped and reaped: no zombie either


def test_a_command_runs_under_load_and_its_exit_code_is_returned() -> None:
    assert main(["--cores", "1", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3


@pytest.mark.parametrize("cores", [-1, 100_000])
def test_a_core_count_out_of_range_is_refused(cores: int) -> None:
    with pytest.raises(ValueError, match="between 0 and"):
        BusyCores(cores)
