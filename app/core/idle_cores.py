"""How many CPU cores the rest of the machine leaves idle right now: what the decode-thread default follows.

On a quiet 2-core machine two decode threads make a pass 0.55x the time of one; with both cores busy with other
work they make it 2-3x slower, because llama.cpp's threads spin at every barrier while a core is taken
(docs/benchmarks.md, "Threads"). So the default thread count is the idle cores, counted from the kernel's CPU
counters over a short window with this process's own CPU time taken out (our own decoding is not a reason to
decode with fewer threads), capped at the physical cores (llama-server's default, ``cpu_get_num_math``).

Where ``/proc`` is missing (macOS) the one-minute load average stands in; where that is missing too (Windows)
there is no measure and the caller keeps its fixed default. The parsing is pure, for tests with real samples.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

WINDOW_S = 0.05  # the counters' shortest window: 5 ticks of 100 Hz per core
MAX_SPAN_S = 2.0  # a sample older than this says nothing about now: a new window is measured ...
# ... but until a window has passed, the other processes' average since a sample up to this old answers (the time
# between two replies, our own CPU out), not the load average: its minute holds our own decoding, so on a quiet
# 2-core machine a reply after a long one, asked for more than 2 s later, got one thread instead of two
LONGEST_SPAN_S = 300.0
# a core counts as idle when at most this much of it is busy with other work: one stray tick in the shortest window
# (0.2 of a core on 2 cores) or a daemon's wake-up must not turn a quiet machine's 1.8 idle cores into one thread
SLACK = 0.25


@dataclass(frozen=True)
class CpuCounters:
    """The kernel's counters since boot, in clock ticks summed over every core: working, and in all."""

    busy: int
    total: int
    cpus: int


@dataclass(frozen=True)
class Sample:
    """One reading: the machine's counters and this process's own CPU ticks at the same moment."""

    machine: CpuCounters
    own: int


def parse_proc_stat(text: str) -> CpuCounters:
    """The aggregate ``cpu`` line of ``/proc/stat``: user nice system idle iowait irq softirq steal (guest time is
    already in user). Idle and iowait are idle; steal counts as busy (another guest has the core)."""
    fields: list[int] = []
    cpus = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "cpu":
            fields = [int(value) for value in rest.split()[:8]]
        elif name.startswith("cpu") and name[3:].isdigit():
            cpus += 1
    if len(fields) < 4:
        raise ValueError("no aggregate cpu line in /proc/stat")
    total = sum(fields)
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return CpuCounters(busy=total - idle, total=total, cpus=max(cpus, 1))


def parse_self_stat(text: str) -> int:
    """This process's CPU ticks (utime + stime, fields 14 and 15) from ``/proc/self/stat``. The command name in
    parentheses may hold spaces and parentheses, so the fields are counted from the last ``)``."""
    rest = text[text.rindex(")") + 1:].split()
    # rest[0] is field 3 (the state): field n is rest[n - 3]
    return int(rest[11]) + int(rest[12])


def idle_between(first: Sample, second: Sample) -> float | None:
    """Cores left idle by other processes between two samples (0 .. cpus); None when no time passed."""
    total = second.machine.total - first.machine.total
    if total <= 0:
        return None
    others = (second.machine.busy - first.machine.busy) - (second.own - first.own)
    busy_share = min(max(others / total, 0.0), 1.0)
    return second.machine.cpus * (1.0 - busy_share)


def choose_threads(idle: float | None, physical: int, fallback: int) -> int:
    """Decode threads for ``idle`` idle cores: the whole idle cores (``SLACK`` of a core forgiven), at least one,
    at most ``physical``; ``fallback`` when there is no measure."""
    if idle is None:
        return fallback
    return min(max(math.floor(idle + SLACK), 1), max(physical, 1))


def usable_cpus() -> int:
    """The logical CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def physical_cores(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Physical cores, counted as llama.cpp counts them (the distinct ``thread_siblings`` masks of cpu0, cpu1, ...,
    up to the first missing one), and no more than this process may run on; None without that folder."""
    siblings: set[str] = set()
    cpu = 0
    while True:
        try:
            siblings.add((sys_cpu / f"cpu{cpu}" / "topology" / "thread_siblings").read_text().strip())
        except OSError:
            break
        cpu += 1
    if not siblings:
        return None
    return max(1, min(len(siblings), usable_cpus()))


def read_sample(proc: Path = Path("/proc")) -> Sample:
    """The counters now (``OSError`` where ``/proc`` is missing)."""
    machine = parse_proc_stat((proc / "stat").read_text())
    try:
        own = parse_self_stat((proc / "self" / "stat").read_text())
    except (OSError, ValueError, IndexError):
        times = os.times()
        own = round((times.user + times.system) * os.sysconf("SC_CLK_TCK"))
    return Sample(machine, own)


def load_average_idle() -> float | None:
    """Where ``/proc`` is missing: the cores less the one-minute load average (it counts our own recent decoding
    too, so it errs towards fewer threads); None where there is no load average (Windows)."""
    if not hasattr(os, "getloadavg"):
        return None
    try:
        return max(0.0, (os.cpu_count() or 1) - os.getloadavg()[0])
    except OSError:
        return None


def measure(window_s: float = WINDOW_S) -> float | None:
    """Idle cores over a new window of ``window_s`` seconds from now, sharing nothing with ``idle_cores_now``;
    the load average's complement where ``/proc`` is missing, None where that is too."""
    try:
        first = read_sample()
        time.sleep(window_s)  # the window the counters are compared over, not a wait for anything
        return idle_between(first, read_sample())
    except (OSError, ValueError):
        return load_average_idle()


@dataclass(frozen=True)
class _Reading:
    at: float  # time.monotonic() of the sample
    sample: Sample
    idle: float | None  # idle cores over the window that ended with this sample (None: only a mark)


_latest: _Reading | None = None
_last_idle: float | None = None  # the latest measure's answer, whatever it came from


def last_idle() -> float | None:
    """The idle cores the latest ``idle_cores_now`` measured (None before one): what the latest default thread count
    was chosen from, for a report or a test."""
    return _last_idle


def mark() -> None:
    """Take a sample now (a fraction of a millisecond), so that an ``idle_cores_now`` within ``MAX_SPAN_S`` measures
    from here and waits less or not at all: the engine marks the end of each reply."""
    global _latest
    try:
        _latest = _Reading(time.monotonic(), read_sample(), None)
    except (OSError, ValueError):
        _latest = None


def idle_cores_now(window_s: float = WINDOW_S) -> float | None:
    """Cores left idle by other processes since the latest sample, when it is at least ``window_s`` and at most
    ``MAX_SPAN_S`` old. It waits for a window only at the first check in this process (a model load, where 50 ms is
    nothing); later, without such a sample, the other processes' average since an older one (up to
    ``LONGEST_SPAN_S``: the previous reply's end, say) answers, else the load average, and a sample is taken for the
    next check. A measure that ended less than ``window_s`` ago is reused (a target and its draft context ask one
    after the other). The load average's complement where ``/proc`` is missing, None where that is too."""
    global _latest, _last_idle
    now = time.monotonic()
    if _latest is not None and _latest.idle is not None and now - _latest.at < window_s:
        return _latest.idle
    _last_idle = _measure(now, window_s)
    return _last_idle


def _measure(now: float, window_s: float) -> float | None:
    global _latest
    recent = _latest if _latest is not None and now - _latest.at <= MAX_SPAN_S else None
    older = _latest if recent is None and _latest is not None and now - _latest.at <= LONGEST_SPAN_S else None
    try:
        first, started = (recent.sample, recent.at) if recent is not None else (read_sample(), now)
    except (OSError, ValueError):
        return load_average_idle()
    if _latest is None:  # the first check in this process (a model being loaded): a window is worth its wait
        time.sleep(window_s)  # the window the counters are compared over, not a wait for anything
    elif time.monotonic() - started < window_s:  # no window yet: never make a reply wait for one
        _latest = _Reading(started, first, None)  # the next check measures from here
        since = idle_between(older.sample, first) if older is not None else None
        return since if since is not None else load_average_idle()
    try:
        second = read_sample()
    except (OSError, ValueError):
        return load_average_idle()
    idle = idle_between(first, second)
    _latest = _Reading(time.monotonic(), second, idle)
    return idle
