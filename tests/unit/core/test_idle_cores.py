"""Idle cores from the kernel's counters, and the decode threads chosen from them (``app.core.idle_cores``).

The samples are real: ``/proc/stat`` of this project's 2-core CI machine one second apart while a build kept both
cores busy (2026-12-03 18:23 UTC; the cpu lines and the start of the next), and ``/proc/<pid>/stat`` of a pytest
process there."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from app.core import idle_cores
from app.core.idle_cores import (
    CpuCounters,
    Sample,
    choose_threads,
    idle_between,
    parse_proc_stat,
    parse_self_stat,
    physical_cores,
    read_sample,
)

BUSY_BEFORE = """cpu  47443 0 6128 26328 3066 0 263 470 0 0
cpu0 21289 0 2363 16833 1060 0 76 245 0 0
cpu1 26154 0 3764 9495 2006 0 187 224 0 0
intr 314196 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 9 0 0 0 0 63 46 0 17 1 78638
"""
BUSY_AFTER = """cpu  47631 0 6139 26328 3066 0 264 471 0 0
cpu0 21382 0 2371 16833 1060 0 76 245 0 0
cpu1 26249 0 3768 9495 2006 0 188 225 0 0
"""
PYTEST_STAT = ("5377 (python) S 5376 2040 1325 0 -1 4194304 76100 80159 60 36 2876 247 129 56 20 0 2 0 25522 "
               "458723328 64136 18446744073709551615 94629771206656 94629771206997 140722746168688 0 0 0 0 "
               "16781313 134227178 0 0 0 17 1 0 0 0 0 0 94629771218352 94629771218968 94629894975488 "
               "140722746170003 140722746170049 140722746170049 140722746171367 0")


def test_the_aggregate_line_gives_busy_and_total_ticks_over_every_core() -> None:
    counters = parse_proc_stat(BUSY_BEFORE)
    # user + nice + system + irq + softirq + steal busy; idle + iowait idle; guest columns already in user
    assert counters == CpuCounters(busy=47443 + 6128 + 263 + 470, total=47443 + 6128 + 26328 + 3066 + 263 + 470,
                                   cpus=2)


def test_a_text_without_the_aggregate_line_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_proc_stat("cpu0 1 2 3 4\nintr 5\n")


def test_own_ticks_are_user_plus_system_counted_after_the_command_name() -> None:
    assert parse_self_stat(PYTEST_STAT) == 2876 + 247
    # a command name may hold spaces and parentheses: the fields are counted from its closing one
    assert parse_self_stat(PYTEST_STAT.replace("(python)", "(a b) c)")) == 2876 + 247


def test_both_cores_busy_with_others_leave_nothing_idle_and_one_thread() -> None:
    before, after = parse_proc_stat(BUSY_BEFORE), parse_proc_stat(BUSY_AFTER)
    assert after.total - before.total == 201  # one second of two cores at 100 ticks a second
    idle = idle_between(Sample(before, 0), Sample(after, 0))
    assert idle == 0.0
    assert choose_threads(idle, physical=2, fallback=1) == 1


def test_our_own_cpu_time_does_not_count_as_load() -> None:
    before, after = parse_proc_stat(BUSY_BEFORE), parse_proc_stat(BUSY_AFTER)
    # had half of that second's work been ours (one core's worth), one core was left to us by the others
    idle = idle_between(Sample(before, 1000), Sample(after, 1100))
    assert idle == pytest.approx(2 * (1 - 101 / 201))
    assert choose_threads(idle, physical=2, fallback=1) == 1
    # all of it ours: the machine is ours, every core counts as idle
    assert idle_between(Sample(before, 1000), Sample(after, 1201)) == 2.0


def test_no_time_between_samples_is_no_measure() -> None:
    counters = parse_proc_stat(BUSY_BEFORE)
    assert idle_between(Sample(counters, 5), Sample(counters, 5)) is None


@pytest.mark.parametrize(("idle", "physical", "threads"), [
    (2.0, 2, 2), (1.8, 2, 2),  # quiet: a stray tick of a daemon does not cost a thread
    (1.7, 2, 1), (1.0, 2, 1),  # one core busy elsewhere
    (0.0, 2, 1), (0.3, 2, 1),  # both busy: still one thread
    (7.9, 4, 4),  # never more than the physical cores (llama-server's default)
    (5.5, 8, 5),
])
def test_threads_are_the_whole_idle_cores_at_least_one_at_most_the_physical(idle: float, physical: int,
                                                                           threads: int) -> None:
    assert choose_threads(idle, physical, fallback=1) == threads


def test_without_a_measure_the_fixed_default_stands() -> None:
    assert choose_threads(None, physical=8, fallback=4) == 4


def _topology(root: Path, masks: list[str]) -> Path:
    for cpu, mask in enumerate(masks):
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings").write_text(mask + "\n")
    return root


def test_physical_cores_are_the_distinct_sibling_masks(tmp_path: Path) -> None:
    # two cores with two hardware threads each (cpu0+cpu2, cpu1+cpu3), as sysfs writes them
    assert physical_cores(_topology(tmp_path / "smt", ["5", "a", "5", "a"])) == 2
    assert physical_cores(tmp_path / "none") is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="no /proc here")
def test_this_machines_counters_read_and_move_on() -> None:
    first = read_sample()
    assert first.machine.cpus >= 1 and 0 <= first.machine.busy <= first.machine.total
    assert first.own >= 0
    sum(range(3_000_000))  # some CPU time of our own
    second = read_sample()
    assert second.own >= first.own and second.machine.total >= first.machine.total


@pytest.mark.skipif(sys.platform != "linux", reason="sysfs topology is Linux's")
def test_this_machine_has_physical_cores() -> None:
    cores = physical_cores()
    assert cores is not None and cores >= 1


def _quiet_since(seconds_ago: float) -> idle_cores._Reading:
    """A sample of this machine as it would have read ``seconds_ago``, had nothing but this process used the CPU."""
    now = idle_cores.read_sample()
    ticks = round(seconds_ago * 100) * now.machine.cpus
    machine = CpuCounters(busy=now.machine.busy, total=now.machine.total - ticks, cpus=now.machine.cpus)
    return idle_cores._Reading(time.monotonic() - seconds_ago, Sample(machine, now.own), None)


def test_a_reply_asked_for_after_a_pause_is_measured_since_the_last_reply_not_by_the_load_average(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine samples the counters at each reply's end. The next reply, a minute later, took the load average
    (its minute holds our own decoding): on a quiet 2-core machine, one thread after every long reply. Now the
    other processes' average since that sample answers; only past ``LONGEST_SPAN_S`` does the load average."""
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 8.0, 8.0))  # our own decoding of the minute before
    monkeypatch.setattr(idle_cores, "_latest", _quiet_since(60.0))
    cpus = idle_cores.read_sample().machine.cpus
    assert idle_cores.idle_cores_now() == pytest.approx(cpus, abs=0.05)
    monkeypatch.setattr(idle_cores, "_latest", _quiet_since(idle_cores.LONGEST_SPAN_S + 60.0))
    assert idle_cores.idle_cores_now() == 0.0  # too old to say anything: the load average


def test_the_first_check_in_a_process_measures_a_window_instead_of_taking_the_load_average(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model load asks first: 50 ms spent on a real window there is nothing, and a benchmark or a window started
    right after other work stopped would otherwise decode with the minute before's thread count."""
    cpus = idle_cores.read_sample().machine.cpus
    odd = 0.123456  # what the load average would answer: no window measure lands on it
    monkeypatch.setattr(os, "getloadavg", lambda: (cpus - odd, 0.0, 0.0))
    monkeypatch.setattr(idle_cores, "_latest", None)
    idle = idle_cores.idle_cores_now()
    assert idle is not None and 0.0 <= idle <= cpus and idle != pytest.approx(odd, abs=1e-9)
    assert idle_cores.last_idle() == idle
