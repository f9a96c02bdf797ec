"""The lent GPU machine: ``gpu-prepare`` (gather what it needs here) and ``gpu-check`` (the one-shot check there).

``backend pack|unpack`` carry the backend (app/cli/backend.py) and ``bench lossless`` is one of the checks
(app/cli/bench.py)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from app.cli.common import (
    Subparsers,
    acceptance_argument,
    command,
    emit,
    log_stderr,
    runs_argument,
    seconds_argument,
    tokens_argument,
)
from app.core import engine_limits


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from app.bench import gpu_check

    work = args.work or Path(tempfile.mkdtemp(prefix="fastmtp-gpu-check-"))
    options = gpu_check.CheckOptions(out=args.out, work=work, size=args.size, acceptance=args.acceptance,
                                     gpu_layers=args.gpu_layers, runs=args.runs, tokens=args.tokens,
                                     budget_s=args.budget, archive=args.archive, threads=args.threads)
    check = gpu_check.run(options, log=log_stderr)
    ok = all(step.ok for step in check.steps)
    files = sorted(str(p) for p in args.out.iterdir())
    emit(args, {"ok": ok, "out": str(args.out), "files": files,
                "steps": [{"name": s.name, "ok": s.ok, "seconds": s.seconds, "note": s.note} for s in check.steps]},
         lambda: f"{(args.out / gpu_check.SUMMARY).read_text()}\n"
                 f"results in {args.out}: {', '.join(Path(f).name for f in files)}")
    return 0 if ok else 1


def cmd_gpu_prepare(args: argparse.Namespace) -> int:
    from app.bench import gpu_check

    data = gpu_check.prepare_carry(args.out, flavor="cpu" if args.cpu else "cuda", cuda_archs=args.cuda_arch,
                                   python_version=args.python, log=log_stderr)
    emit(args, data, lambda: f"{data['out']}: {data['archive']} ({data['archive_bytes'] / 2**20:.1f} MiB) and "
                             f"{len(data['wheels'])} wheels, {data['total_bytes'] / 2**20:.1f} MiB in all")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``gpu-check`` and ``gpu-prepare``."""
    gc = command(sub, "gpu-check", cmd_gpu_check,
                 "one-shot GPU check: self-test, demo model, losslessness, op profile, draft head, bench spec")
    gc.add_argument("--out", type=Path, required=True, help="folder for the result files (at most 8)")
    gc.add_argument("--archive", type=Path, help="backend archive to install first (from `backend pack --server`)")
    gc.add_argument("--size", choices=["tiny", "small", "scaled", "27b"], default="27b", help="demo model size")
    gc.add_argument("--acceptance", type=acceptance_argument, default=0.92)
    gc.add_argument("--gpu-layers", type=engine_limits.gpu_layers_argument, default=-1,
                    help="0 runs everything on the CPU")
    gc.add_argument("--runs", type=runs_argument, default=2, help="interleaved runs of bench spec")
    gc.add_argument("--tokens", type=tokens_argument, default=128, help="tokens per prompt in bench spec")
    gc.add_argument("--budget", type=seconds_argument, default=540.0, help="seconds for the whole check")
    gc.add_argument("--threads", type=engine_limits.threads_argument)
    gc.add_argument("--work", type=Path, help="scratch folder for the demo model (default: a temp folder)")
    gp = command(sub, "gpu-prepare", cmd_gpu_prepare,
                 "build, pack and gather what gpu-check needs on an offline GPU machine (under 64 MiB)")
    gp.add_argument("--out", type=Path, default=Path("gpu-carry"), help="folder to fill (default gpu-carry)")
    gp.add_argument("--cpu", action="store_true", help="pack the portable CPU backend (to rehearse the check)")
    gp.add_argument("--cuda-arch", type=lambda text: [a.strip() for a in text.split(",") if a.strip()],
                    default=["90"], help="CUDA architectures (default 90: H100/H200)")
    gp.add_argument("--python", default="3.12", help="the GPU machine's Python version, for the wheels")
