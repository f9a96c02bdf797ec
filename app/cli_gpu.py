"""CLI for the lent GPU machine: ``gpu-check``, ``backend pack|unpack`` (and ``install``) and ``bench lossless``."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from app import cli_backend_install
from app.errors import FastMTPError


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str), flush=True)


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from app.bench import gpu_check

    work = args.work or Path(tempfile.mkdtemp(prefix="fastmtp-gpu-check-"))
    options = gpu_check.CheckOptions(out=args.out, work=work, size=args.size, acceptance=args.acceptance,
                                     gpu_layers=args.gpu_layers, runs=args.runs, tokens=args.tokens,
                                     budget_s=args.budget, archive=args.archive, threads=args.threads)
    check = gpu_check.run(options, log=lambda line: print(line, file=sys.stderr, flush=True))
    ok = all(step.ok for step in check.steps)
    files = sorted(str(p) for p in args.out.iterdir())
    if args.json:
        _print({"ok": ok, "out": str(args.out), "files": files,
                "steps": [{"name": s.name, "ok": s.ok, "seconds": s.seconds, "note": s.note} for s in check.steps]})
    else:
        print((args.out / gpu_check.SUMMARY).read_text())
        print(f"results in {args.out}: {', '.join(Path(f).name for f in files)}")
    return 0 if ok else 1


def cmd_gpu_prepare(args: argparse.Namespace) -> int:
    from app.bench import gpu_check

    data = gpu_check.prepare_carry(args.out, flavor="cpu" if args.cpu else "cuda", cuda_archs=args.cuda_arch,
                                   python_version=args.python, log=lambda line: print(line, file=sys.stderr))
    if args.json:
        _print(data)
    else:
        print(f"{data['out']}: {data['archive']} ({data['archive_bytes'] / 2**20:.1f} MiB) and "
              f"{len(data['wheels'])} wheels, {data['total_bytes'] / 2**20:.1f} MiB in all")
    return 0


def cmd_backend_pack(args: argparse.Namespace) -> int:
    from app.backend import archive, registry

    backend_id = args.id or registry.active_id()
    if backend_id is None:
        raise FastMTPError("No backend to pack.", "Build one with `python -m app backend build`.")
    server = None
    if args.server:
        from app.backend.builder import BuildOptions
        from app.backend.upstream_server import build_server

        manifest = registry.get(backend_id)
        server = build_server(BuildOptions(flavor="cuda" if manifest.flavor == "cuda" else "cpu",
                                           cuda_archs=manifest.cuda_archs, version=manifest.llama_cpp_python_version,
                                           portable=manifest.portable))
    out = archive.pack(backend_id, args.out, server)
    data = {"archive": str(out), "bytes": out.stat().st_size, "backend": backend_id,
            "server": server is not None}
    if args.json:
        _print(data)
    else:
        print(f"packed {backend_id}{' with llama-server' if server else ''} into {out} "
              f"({out.stat().st_size / 1e6:.1f} MB)")
    return 0


def cmd_backend_unpack(args: argparse.Namespace) -> int:
    from app.backend import archive

    got = archive.unpack(args.archive, activate=not args.no_activate)
    data = {"backend": got.manifest.id, "folder": str(got.folder), "flavor": got.manifest.flavor,
            "cuda_archs": got.manifest.cuda_archs, "server": str(got.server) if got.server else None,
            "active": not args.no_activate}
    if args.json:
        _print(data)
    else:
        print(f"installed {got.manifest.id} in {got.folder}" + (f"; llama-server {got.server}" if got.server else ""))
    return 0


def cmd_bench_lossless(args: argparse.Namespace) -> int:
    from app.bench import lossless
    from app.bench.spec import load_prompts, tokenize_prompts
    from app.gguftools.d2t import check_sidecars_for
    from app.gguftools.inspect import inspect_gguf

    if not args.target:  # a real target alone is fine here: its embedded head is checked
        from app.cli_bench import bench_demo

        demo = bench_demo(args.size, args.acceptance)
        args.target, args.full, args.d2t = demo.target, demo.sidecar_full, demo.sidecar_d2t
    check_sidecars_for(args.target, args.full, args.d2t)
    prompts = tokenize_prompts(args.target, {name: load_prompts(name)[:args.prompts]
                                             for name in ("document", "reasoning")})
    info = inspect_gguf(args.target)
    variants = lossless.default_variants(bool(info.nextn_layers), args.d2t, args.full)
    result = lossless.run(args.target, [p for group in prompts.values() for p in group], variants,
                          n_tokens=args.tokens, n_gpu_layers=args.gpu_layers, n_threads=args.threads)
    _print(result.to_dict()) if args.json else print(result.markdown())
    return 0 if result.ok else 1


def add_backend_commands(bsub: Any, command: Any) -> None:
    pk = command(bsub, "pack", cmd_backend_pack, "pack an installed backend (and llama-server) to carry elsewhere")
    pk.add_argument("id", nargs="?", help="backend id (default: the active one)")
    pk.add_argument("--out", type=Path, required=True, help="the .tar.xz to write")
    pk.add_argument("--server", action="store_true", help="build llama-server in its tree and include it")
    up = command(bsub, "unpack", cmd_backend_unpack, "install a backend archive made by `backend pack`")
    up.add_argument("archive", type=Path)
    up.add_argument("--no-activate", action="store_true", help="install but keep the current active backend")
    cli_backend_install.add_backend_commands(bsub, command)


def add_bench_commands(bsub: Any, command: Any) -> None:
    ll = command(bsub, "lossless", cmd_bench_lossless,
                 "every drafting variant vs plain decoding, token for token, at temperature 0 and 0.8")
    ll.add_argument("--size", choices=["tiny", "small", "27b"], default="tiny", help="demo model to use")
    ll.add_argument("--acceptance", type=float, default=0.8, help="the demo model's draft agreement")
    ll.add_argument("--target", type=Path, help="real files instead: the target ...")
    ll.add_argument("--full", type=Path, help="... its full sidecar ...")
    ll.add_argument("--d2t", type=Path, help="... and its d2t sidecar")
    ll.add_argument("--prompts", type=int, default=2, help="prompts per prompt set")
    ll.add_argument("--tokens", type=int, default=64)
    ll.add_argument("--threads", type=int)
    ll.add_argument("--gpu-layers", type=int, default=0, help="-1 offloads everything (CUDA backends)")


def add_commands(sub: Any, command: Any) -> None:
    gc = command(sub, "gpu-check", cmd_gpu_check,
                 "one-shot GPU check: self-test, demo model, losslessness, op profile, draft head, bench spec")
    gc.add_argument("--out", type=Path, required=True, help="folder for the result files (at most 8)")
    gc.add_argument("--archive", type=Path, help="backend archive to install first (from `backend pack --server`)")
    gc.add_argument("--size", choices=["tiny", "small", "27b"], default="27b", help="demo model size")
    gc.add_argument("--acceptance", type=float, default=0.92)
    gc.add_argument("--gpu-layers", type=int, default=-1, help="0 runs everything on the CPU")
    gc.add_argument("--runs", type=int, default=2, help="interleaved runs of bench spec")
    gc.add_argument("--tokens", type=int, default=128, help="tokens per prompt in bench spec")
    gc.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check")
    gc.add_argument("--threads", type=int)
    gc.add_argument("--work", type=Path, help="scratch folder for the demo model (default: a temp folder)")
    gp = command(sub, "gpu-prepare", cmd_gpu_prepare,
                 "build, pack and gather what gpu-check needs on an offline GPU machine (under 64 MiB)")
    gp.add_argument("--out", type=Path, default=Path("gpu-carry"), help="folder to fill (default gpu-carry)")
    gp.add_argument("--cpu", action="store_true", help="pack the portable CPU backend (to rehearse the check)")
    gp.add_argument("--cuda-arch", type=lambda text: [a.strip() for a in text.split(",") if a.strip()],
                    default=["90"], help="CUDA architectures (default 90: H100/H200)")
    gp.add_argument("--python", default="3.12", help="the GPU machine's Python version, for the wheels")
