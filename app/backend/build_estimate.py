"""How long a backend build will take here, said before it starts and kept honest while it runs.

A first-run card once promised "a few minutes" for a build that took 25 on a busy 2-core machine. The estimate
now comes from what decides it:

- **a cached build tree** (the CMake/ninja tree of the same plan in the cache): ninja has nothing to compile,
  so the build is the source check, a re-link, the install and the self-test: seconds;
- **this machine's own past builds** (``build-times.json`` in the data folder, written after every build):
  the median of the same flavour and cache state, scaled by the CUDA architectures;
- otherwise **the cores**: the core-seconds a fresh build of the pinned source costs (measured on the project's
  2-core build machine), divided by the cores that are free (the cores less the load average).

While it runs, :func:`remaining` extrapolates from the compile step's own ``[n/N]`` progress once enough of it
is done, and falls back to the estimate before that.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from app.backend import registry
from app.backend.builder import BuildOptions, build_backend, build_dir_of, plan_build
from app.backend.events import EventSink
from app.core import paths, settings_file
from app.core.cancel import CancelToken
from app.core.errors import FastMTPError

Basis = Literal["cached", "measured", "cores"]
HISTORY_FILE = "build-times.json"
HISTORY_KEEP = 20  # the newest records kept
HISTORY_MAX_BYTES = 64 * 1024  # 20 records are about 2 KiB
MAX_RECORD_SECONDS = 7 * 24 * 3600.0  # a record of a longer build is not one of ours
MAX_ARCHS = 64  # CUDA architectures in one build
# core-seconds of a fresh build (source, configure, compile, install, self-test) of the pinned version, measured
# on a quiet 2-core EPYC: a CPU build in 228 s (docs/benchmarks.md), a one-architecture CUDA build in about 56 min
FRESH_CORE_SECONDS = {"cpu": 480.0, "cuda": 6700.0}
CACHED_SECONDS = 5.0  # a cached tree: the source check, a re-link (if any), the install and the self-test
# the compile step is most of a fresh build; before this share of it is done, its rate says little yet
EXTRAPOLATE_FROM = 0.1


@dataclass(frozen=True)
class BuildEstimate:
    """Seconds a build should take, and why: the card says the words before the click."""

    seconds: float
    basis: Basis
    flavor: str
    cores: int
    cached: bool  # whether the plan's build tree was in the cache when estimated

    def words(self) -> str:
        """``about 5 seconds (the build tree is cached)``, ``about 25 minutes (from this machine's 2 cores)``."""
        reason = {"cached": "the build tree is cached",
                  "measured": "from this machine's earlier builds",
                  "cores": f"from this machine's {self.cores} {'core' if self.cores == 1 else 'cores'}"}[self.basis]
        return f"about {duration_words(self.seconds)} ({reason})"


def duration_words(seconds: float) -> str:
    """``40 seconds``, ``1 minute``, ``25 minutes``, ``1 hour 10 minutes``: rounded as a person would say it."""
    if seconds < 55:
        return f"{max(5, round(seconds / 5) * 5)} seconds"
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return "1 minute" if minutes == 1 else f"{minutes} minutes"
    hours, rest = divmod(minutes, 60)
    rest = round(rest / 5) * 5
    head = "1 hour" if hours == 1 else f"{hours} hours"
    return head if rest == 0 else f"{head} {rest} minutes"


def free_cores(cores: int | None = None, load: float | None = None) -> float:
    """The cores a build gets: the machine's, less what else is running (the 1-minute load average), at least 1."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on Windows
            load = 0.0
    return max(1.0, cores - load)


def is_cached(options: BuildOptions) -> bool:
    """Whether the plan's build tree is in the cache with its compiled library (ninja would only re-link)."""
    try:
        tree = build_dir_of(plan_build(options))
    except FastMTPError:  # no compiler yet: nothing can be cached either
        return False
    return (tree / "build.ninja").is_file() and any(tree.glob("**/libllama.*"))


def _history_path() -> Path:
    return paths.data_dir() / HISTORY_FILE


def _history() -> list[dict[str, object]]:
    """The kept records, each checked (``flavor``, ``cached``, a finite ``seconds`` in range, a count of ``archs``);
    a bad record is dropped. The file goes through the state-file rules: a regular file of at most
    ``HISTORY_MAX_BYTES`` (a FIFO or a link to ``/dev/zero`` is refused unread), JSON with finite numbers and no
    deep nesting; a damaged one is set aside as ``build-times.json.bad`` with a warning, and the estimate comes
    from the cores."""
    path = _history_path()
    try:
        records = settings_file.read_json(path, HISTORY_MAX_BYTES)
    except settings_file.DamagedFile as exc:
        settings_file.set_aside(path, str(exc))
        return []
    if records is not None and not isinstance(records, list):
        settings_file.set_aside(path, "it is not a JSON list")
        return []
    return [r for r in records or [] if _good_record(r)]


def _good_record(record: object) -> bool:
    if not isinstance(record, dict):
        return False
    seconds, archs = record.get("seconds"), record.get("archs", 1)
    return (isinstance(record.get("flavor"), str) and isinstance(record.get("cached"), bool)
            and isinstance(seconds, int | float) and not isinstance(seconds, bool)
            and 0 < seconds <= MAX_RECORD_SECONDS
            and isinstance(archs, int) and not isinstance(archs, bool) and 1 <= archs <= MAX_ARCHS)


def record(flavor: str, cached: bool, seconds: float, archs: int = 1) -> None:
    """Remember a finished build (its flavour, whether its tree was cached, wall seconds, CUDA architectures)."""
    records = _history()[-(HISTORY_KEEP - 1):]
    records.append({"flavor": flavor, "cached": cached, "seconds": round(seconds, 1), "archs": max(1, archs),
                    "cores": os.cpu_count() or 1})
    path = _history_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # an estimate's memory is worth no failed build


def estimate(options: BuildOptions, cached: bool | None = None, cores: int | None = None,
             load: float | None = None) -> BuildEstimate:
    """The estimate for building ``options`` here (``cached`` is looked up when not given)."""
    flavor = "cuda" if options.flavor == "cuda" else "cpu"
    archs = max(1, len(options.cuda_archs)) if flavor == "cuda" else 1
    machine_cores = cores or os.cpu_count() or 1
    cached = is_cached(options) if cached is None else cached
    same = [float(str(r["seconds"])) / int(str(r.get("archs", 1))) * archs for r in _history()
            if r.get("flavor") == flavor and r.get("cached") == cached]
    if same:
        return BuildEstimate(statistics.median(same), "measured", flavor, machine_cores, cached)
    if cached:
        return BuildEstimate(CACHED_SECONDS, "cached", flavor, machine_cores, cached)
    seconds = FRESH_CORE_SECONDS[flavor] * archs / free_cores(machine_cores, load)
    return BuildEstimate(seconds, "cores", flavor, machine_cores, cached)


def remaining(estimate_s: float, elapsed_s: float, compile_fraction: float | None,
              compile_elapsed_s: float | None) -> float:
    """Seconds left: from the compile step's own rate once ``EXTRAPOLATE_FROM`` of it is done (plus a little for
    install and self-test), else what the estimate leaves; never below a few seconds while running."""
    if compile_fraction is not None and compile_elapsed_s and compile_fraction >= EXTRAPOLATE_FROM:
        left = compile_elapsed_s * (1 - compile_fraction) / compile_fraction + CACHED_SECONDS / 2
    else:
        left = estimate_s - elapsed_s
    return max(5.0, left)


def build_and_record(options: BuildOptions, on_event: EventSink | None = None, cancel: CancelToken | None = None,
                     cached: bool | None = None) -> registry.BackendManifest:
    """``build_backend``, then remember how long it took (and whether its tree was cached: the caller's estimate
    knows, else it is looked up) for the next estimate."""
    cached = is_cached(options) if cached is None else cached
    started = time.monotonic()
    manifest = build_backend(options, on_event, cancel)
    record(manifest.flavor, cached, time.monotonic() - started, len(manifest.cuda_archs))
    return manifest


def as_dict(value: BuildEstimate) -> dict[str, object]:
    """For ``--json``: the estimate and its words."""
    return {**asdict(value), "words": value.words()}
