"""Shared benchmark plumbing: the device description, medians, and recording into docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from app.backend import toolchain


def spread(values: Sequence[float], unit: str, digits: int) -> dict[str, float]:
    """``median_<unit>``, ``min_<unit>`` and ``max_<unit>`` of a benchmark's samples, rounded; zeros for none."""
    if not values:
        return {f"{name}_{unit}": 0.0 for name in ("median", "min", "max")}
    return {f"median_{unit}": round(statistics.median(values), digits), f"min_{unit}": round(min(values), digits),
            f"max_{unit}": round(max(values), digits)}


def device_description() -> str:
    gpus = toolchain.detect_gpus()
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} logical cores"
    if gpus:
        text += "; " + ", ".join(f"{g.name} (sm{g.cuda_arch}, {g.memory_mib} MiB)" for g in gpus)
    return text


def round_or_none(value: float | None, digits: int) -> float | None:
    """``round(value, digits)``, None kept: the figures a benchmark writes to its JSON."""
    return None if value is None else round(value, digits)


def median_ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1000.0, 3)


def this_command() -> str:
    """The command line that ran this benchmark, as it is written into docs/benchmarks.md."""
    return "python -m app " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def record(path: Path, title: str, command: str, table: str, notes: str = "") -> None:
    """Append one measured section to a markdown file (docs/benchmarks.md)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (f"\n## {title}\n\n{stamp}, device: {device_description()}\n\n"
               f"Command: `{command}`\n\n{table}\n" + (f"\n{notes}\n" if notes else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(section)
