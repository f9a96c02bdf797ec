"""``backend cuda-toolkit fetch|install|status``: the app's own CUDA toolkit, from NVIDIA's pip wheels.

For the many GPU owners who have the NVIDIA driver but no CUDA Toolkit: the wheels matching the
driver's CUDA version go into the app's cache, and ``backend build --cuda`` finds them there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.backend.events import BuildEvent, CancelToken
from app.errors import ToolchainError


def _stderr(line: str) -> None:
    print("    " + line, file=sys.stderr, flush=True)


def cmd_cuda_toolkit(args: argparse.Namespace) -> int:
    from app.backend import cuda_wheels
    from app.cli import _cancel_on_signals, print_json

    if args.action == "status":
        data = cuda_wheels.status(args.cuda)
        if args.json:
            print_json(data)
            return 0
        print(f"driver's CUDA version: {data['driver_cuda'] or 'unknown (no nvidia-smi)'}")
        for tk in data["installed"]:
            print(f"installed: CUDA {tk['cuda']} toolkit (nvcc {tk['nvcc_version']}) in {tk['root']}")
        if not data["installed"]:
            print("no CUDA toolkit installed by the app")
        if data.get("requirements"):
            missing = data["wheelhouse_missing"]
            print(f"wheels for CUDA {data['cuda']}: {', '.join(data['requirements'])}")
            print(f"wheelhouse {data['wheelhouse']}: " + (f"missing {', '.join(missing)}" if missing else "complete"))
        return 0
    cancel = _cancel_on_signals()
    cuda = cuda_wheels.resolve_cuda(args.cuda)
    if args.action == "fetch":
        house = cuda_wheels.fetch(cuda, args.wheelhouse, args.index_url, _stderr, cancel)
        wheels = sorted(p.name for p in house.glob("*.whl"))
        if args.json:
            print_json({"cuda": cuda, "wheelhouse": str(house), "wheels": wheels})
        else:
            print(f"CUDA {cuda} wheels in {house}: {len(wheels)} files")
        return 0
    cuda_wheels.fetch(cuda, args.wheelhouse, args.index_url, _stderr, cancel)
    toolkit = cuda_wheels.install(cuda, args.wheelhouse, _stderr, cancel)
    if args.json:
        print_json(toolkit.to_dict())
    else:
        print(f"CUDA toolkit {toolkit.nvcc_version} installed in {toolkit.root}; "
              "`python -m app backend build --cuda` uses it")
    return 0


def fetch_toolkit_for_build(cuda: str | None, on_event: Callable[[BuildEvent], None], cancel: CancelToken) -> None:
    """``backend build --fetch-cuda-toolkit``: get the app's toolkit when the machine cannot build CUDA yet."""
    from app.backend import cuda_wheels, toolchain

    tools = toolchain.detect()
    if tools.can_build_cuda:
        source = tools.cuda_toolkit.source if tools.cuda_toolkit else "system"
        on_event(BuildEvent("log", f"the {source} CUDA toolkit is complete; nothing to fetch", None, "toolchain"))
        return
    if toolchain.toolkit_mode() == "system":
        raise ToolchainError(f"{cuda_wheels.TOOLKIT_ENV}=system: the app's own CUDA toolkit would not be used.",
                             f"Unset {cuda_wheels.TOOLKIT_ENV} (or set it to auto or app) to build with it.")
    version = cuda_wheels.resolve_cuda(cuda)
    on_event(BuildEvent("step", f"getting the CUDA {version} toolkit as pip wheels", 0.0, "toolchain"))
    cuda_wheels.ensure(version, log=lambda line: on_event(BuildEvent("log", line, None, "toolchain")), cancel=cancel)


def add_backend_commands(bsub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    ct = command(bsub, "cuda-toolkit", cmd_cuda_toolkit,
                 "the CUDA toolkit (nvcc, cuBLAS) as NVIDIA's pip wheels in the app's cache, for machines "
                 "with the driver only")
    ct.add_argument("action", nargs="?", choices=["fetch", "install", "status"], default="status",
                    help="fetch: download the wheels; install: fetch what is missing, then install; "
                         "status (default): what is there")
    ct.add_argument("--cuda", help="CUDA version, e.g. 13.0 (default: the driver's, from nvidia-smi)")
    ct.add_argument("--wheelhouse", type=Path,
                    help="folder of the wheels (default: the app's cache); offline machines: fetch elsewhere")
    ct.add_argument("--index-url", help="package index to download from (default: pip's, PyPI)")
