"""``bench adaptive-load``: adaptive depth against each fixed depth in phases of changing load (quiet, loaded, quiet
again), with a load generator the benchmark starts and stops itself (``app.bench.adaptive_load``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli.common import (
    acceptance_argument,
    busy_cores_argument,
    command,
    depth_argument,
    emit,
    log_stderr,
    real_number,
    runs_argument,
    tokens_argument,
)
from app.core import engine_limits, paths
from app.engine.config import DRAFT_DEPTH_MAX


def cmd_bench_adaptive_load(args: argparse.Namespace) -> int:
    from app.bench import adaptive_load
    from app.bench.report import record, this_command
    from app.cli.bench import bench_files

    target, _full, d2t, name = bench_files(args, args.acceptance)
    out: Path = args.out or paths.cache_dir() / "bench-adaptive-load"
    out.mkdir(parents=True, exist_ok=True)
    result = adaptive_load.run(target, d2t, depths=[int(d) for d in args.depths.split(",")],
                               adaptive_max=args.adaptive_max, n_tokens=args.tokens, busy_cores=args.busy_cores,
                               n_threads=args.threads, memory=out / "depth-memory", log=log_stderr, runs=args.runs,
                               decisions=out, screen=args.screen)
    result.model = name
    (out / "adaptive-load.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    (out / "adaptive-load.md").write_text(result.markdown())
    emit(args, result.to_dict(), result.markdown)
    print(f"wrote {out / 'adaptive-load.json'} and {out / 'adaptive-load.md'}; adaptive depth's decisions in "
          f"{out}/adaptive-decisions-<phase>.jsonl", file=sys.stderr)
    if args.record:
        record(args.record, f"Adaptive depth under changing load ({name})", this_command(), result.markdown(),
               f"{args.runs} interleaved run(s) per phase, medians; the loaded phase adds child processes spinning on "
               "cores, started and stopped by the benchmark. Adaptive depth's memory is carried from phase to phase. "
               "Figures from a shared machine: indicative.")
    return 0


def add_command(bsub: Any) -> None:
    """Register ``bench adaptive-load`` under ``bench``."""
    al = command(bsub, "adaptive-load", cmd_bench_adaptive_load,
                 "adaptive depth vs each fixed depth in phases of changing load (quiet, loaded, quiet again), "
                 "the load started and stopped by the benchmark")
    al.description = (f"{al.description}. The defaults are the shape adaptive depth's 0.97x bar is measured on "
                      "(docs/benchmarks.md): the built-in demo, replies as long as a thinking model's, two cores kept "
                      "busy in the loaded phase, five runs; 20-25 minutes on 2 cores. A quick look: --size small "
                      "--tokens 64 --runs 3")
    al.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="scaled",
                    help="demo model to run (default scaled: the built-in demo, shaped like the real model)")
    al.add_argument("--acceptance", type=acceptance_argument, default=0.8,
                    help="the demo model's draft agreement")
    al.add_argument("--target", type=Path, help="run real files instead: the target ...")
    al.add_argument("--full", type=Path, help="... its full sidecar ...")
    al.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    al.add_argument("--tokens", type=tokens_argument, default=512,
                    help="tokens generated per prompt (default 512)")
    al.add_argument("--depths", default="1,2,3,4", help="fixed draft depths (default 1,2,3,4)")
    al.add_argument("--adaptive-max", type=depth_argument, default=DRAFT_DEPTH_MAX,
                    help=f"deepest depth adaptive may choose (default {DRAFT_DEPTH_MAX})")
    al.add_argument("--busy-cores", type=busy_cores_argument, default=2,
                    help="cores kept busy in the loaded phase (default 2)")
    al.add_argument("--runs", type=runs_argument, default=5,
                    help="interleaved runs per phase: the figures are medians over them, and adaptive depth's ratio "
                         "the median of its ratios in each run; several make the 3%% verdict against the best fixed "
                         "depth fair (one run's best fixed depth is its luckiest) (default 5)")
    al.add_argument("--screen", type=real_number("the share behind the fastest fixed depth", 0.0, 0.9),
                    help="after a phase's first run, leave out the fixed depths (and drafting off) this share slower "
                         "than the fastest fixed one in it, so the runs that decide come closer together; 0 runs "
                         "every depth every time (default 0.15)")
    al.add_argument("--threads", type=engine_limits.threads_argument)
    al.add_argument("--out", type=Path, help="folder for adaptive-load.json and .md (default: the cache folder)")
    al.add_argument("--record", type=Path, help="append the table to this markdown file (docs/benchmarks.md)")
