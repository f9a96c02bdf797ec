"""``python -m app <command>``: every job of the app, headless, with ``--json`` for scripts."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.backend.events import BuildEvent, CancelToken
from app.errors import FastMTPError

Handler = Callable[[argparse.Namespace], int]


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _archs(text: str) -> list[str]:
    archs = [part.strip() for part in text.split(",") if part.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise argparse.ArgumentTypeError("CUDA architectures are numbers like 89,90")
    return archs


# ----------------------------------------------------------------------------- backend


def _build_event_printer(args: argparse.Namespace) -> Callable[[BuildEvent], None]:
    """Build events as JSON lines (``--json``) or as steps and 5% progress ticks."""
    last_percent = [-1.0]

    def on_event(event: BuildEvent) -> None:
        if args.json:
            print(event.to_json(), flush=True)
        elif event.kind == "step":
            print(f"==> [{event.percent:5.1f}%] {event.message}", flush=True)
        elif event.kind == "progress" and event.percent is not None and event.percent - last_percent[0] >= 5:
            last_percent[0] = event.percent
            print(f"    {event.percent:5.1f}%", flush=True)
        elif event.kind == "log" and args.verbose:
            print("    " + event.message, flush=True)
        elif event.kind == "done":
            print(event.message, flush=True)

    return on_event


def _cancel_on_signals() -> CancelToken:
    cancel = CancelToken()
    signal.signal(signal.SIGINT, lambda *_: cancel.cancel())
    signal.signal(signal.SIGTERM, lambda *_: cancel.cancel())
    return cancel


def cmd_backend_build(args: argparse.Namespace) -> int:
    from app.backend.builder import BuildOptions, Flavor, build_backend

    cancel = _cancel_on_signals()
    on_event = _build_event_printer(args)
    flavor: Flavor = "cpu" if args.cpu or args.cpu_variants else "cuda" if args.cuda else "auto"
    patch_file = None
    if args.release_patch:  # the publisher's patch, only once its signature chain and hash checked out
        from app.release.verify import verified_release_patch

        patch_file = verified_release_patch(args.release_patch, trust_fingerprint=args.trust_fingerprint)
    options = BuildOptions(flavor=flavor, cuda_archs=args.cuda_arch or [], version=args.version,
                           patched=not args.unpatched, patch_file=patch_file, sdist=args.sdist,
                           wheelhouse=args.wheelhouse, jobs=args.jobs, activate=not args.no_activate,
                           portable=args.portable or args.cpu_variants, cpu_variants=args.cpu_variants)
    if args.fetch_cuda_toolkit:
        from app.cli_cuda import fetch_toolkit_for_build

        fetch_toolkit_for_build(None if args.fetch_cuda_toolkit == "driver" else args.fetch_cuda_toolkit,
                                on_event, cancel)
    manifest = build_backend(options, on_event, cancel)
    if args.json:
        print(json.dumps({"kind": "result", "manifest": manifest.to_dict()}), flush=True)
    return 0


def cmd_backend_server(args: argparse.Namespace) -> int:
    """Build llama.cpp's own llama-server from the same patched tree (the side-by-side peer of bench spec)."""
    from app.backend.builder import BuildOptions
    from app.backend.upstream_server import build_server

    options = BuildOptions(flavor="cuda" if args.cuda else "cpu", version=args.version, jobs=args.jobs,
                           cuda_archs=args.cuda_arch or [], portable=args.portable)
    binary = build_server(options, _build_event_printer(args), _cancel_on_signals())
    if args.json:
        print(json.dumps({"kind": "result", "llama_server": str(binary)}), flush=True)
    else:
        print(binary)
    return 0


def cmd_backend_status(args: argparse.Namespace) -> int:
    from app.backend import registry, toolchain

    active = registry.active()
    tools = toolchain.detect()
    data = {"active": active.to_dict() if active else None, "toolchain": tools.to_dict(),
            "advice": tools.problems(cuda=bool(tools.gpus))}
    if args.json:
        print_json(data)
        return 0
    if active is None:
        print("No active backend. Build one with: python -m app backend build")
    else:
        patched = f"d2t patch {active.patch_sha256[:12]}" if active.patch_sha256 else "UNPATCHED"
        print(f"Active backend: {active.id}  ({active.flavor}, llama-cpp-python {active.llama_cpp_python_version}, "
              f"llama.cpp {active.llama_cpp_commit}, {patched}, self-test {'ok' if active.selftest_ok else 'FAILED'})")
    _print_toolchain(tools)
    return 0


def _print_toolchain(tools: Any) -> None:
    for name in ("cmake", "ninja", "c_compiler", "cxx_compiler", "nvcc", "ccache"):
        tool = getattr(tools, name)
        print(f"  {name:13} {tool.version + '  ' + tool.path if tool else 'not found'}")
    if tools.gpus:
        for gpu in tools.gpus:
            print(f"  GPU           {gpu.name}, compute capability {gpu.compute_capability}, {gpu.memory_mib} MiB")
    else:
        print("  GPU           no NVIDIA GPU found (nvidia-smi)")
    toolkit = tools.cuda_toolkit
    print(f"  cuda toolkit  {toolkit.source + ' ' + toolkit.version + '  ' + toolkit.root if toolkit else 'none'}"
          + ("  (the app's own, from pip wheels)" if toolkit and toolkit.source == "app" else ""))
    for line in tools.problems(cuda=bool(tools.gpus)):
        print("  ! " + line)


def cmd_backend_doctor(args: argparse.Namespace) -> int:
    from app.backend import toolchain

    tools = toolchain.detect()
    note = toolchain.platform_note()  # macOS: no CUDA, the backend is CPU + Metal
    if args.json:
        print_json({"toolchain": tools.to_dict(), "can_build_cpu": tools.can_build_cpu,
                     "can_build_cuda": tools.can_build_cuda, "advice": tools.problems(cuda=bool(tools.gpus)),
                     "platform_note": note})
    else:
        _print_toolchain(tools)
        if note:
            print(f"  {'note':13} {note}")
    return 0 if tools.can_build_cpu else 1


def cmd_backend_list(args: argparse.Namespace) -> int:
    from app.backend import registry

    registry.cleanup_stale_staging()
    active = registry.active_id()
    backends = registry.list_backends()
    if args.json:
        print_json([dict(m.to_dict(), active=m.id == active) for m in backends])
        return 0
    if not backends:
        print("No backends installed.")
    for m in backends:
        mark = "*" if m.id == active else " "
        patch = "d2t" if m.patched else "unpatched"
        print(f"{mark} {m.id:40} {m.flavor:5} {patch:9} built {m.built_at} in {m.build_seconds:.0f} s, "
              f"self-test {'ok' if m.selftest_ok else 'FAILED'}")
    return 0


def cmd_backend_use(args: argparse.Namespace) -> int:
    from app.backend import registry

    manifest = registry.set_active(args.id, allow_unpatched=args.allow_unpatched)
    if args.json:
        print_json({"active": manifest.id})
    else:
        print(f"Active backend: {manifest.id}")
    return 0


def cmd_backend_remove(args: argparse.Namespace) -> int:
    from app.backend import registry

    registry.remove(args.id)
    if args.json:
        print_json({"removed": args.id})
    else:
        print(f"Removed backend {args.id}")
    return 0


def cmd_backend_selftest(args: argparse.Namespace) -> int:
    from app.backend import registry
    from app.backend.builder import run_selftest_subprocess

    backend_id = args.id or registry.active_id()
    if backend_id is None:
        raise FastMTPError("No backend to test.", "Build one with `python -m app backend build`.")
    result = run_selftest_subprocess(registry.backend_dir(registry.get(backend_id).id))
    if args.json:
        print_json(result)
    else:
        print(f"self-test of {backend_id}: {'ok' if result.get('ok') else 'FAILED: ' + str(result.get('error'))}")
    return 0 if result.get("ok") else 1


def cmd_backend_fetch(args: argparse.Namespace) -> int:
    from app.backend import source

    got = []
    for version in args.version or [source.DEFAULT_VERSION]:
        pin = source.pinned(version)
        path = source.fetch_sdist(pin, wheelhouse=args.wheelhouse, log=lambda line: print(line, file=sys.stderr))
        got.append({"version": version, "path": str(path), "sha256": pin.sha256})
    if args.json:
        print_json(got)
    else:
        for item in got:
            print(f"llama-cpp-python {item['version']}: {item['path']} (sha256 verified)")
    return 0


def cmd_backend_patch_check(args: argparse.Namespace) -> int:
    from app.backend import patching, source

    pin = source.pinned(args.version)
    tree = source.pristine_tree(pin) / "vendor" / "llama.cpp"
    patch = patching.default_patch()
    patching.check(tree, patch)
    data = {"version": pin.version, "llama_cpp_commit": pin.llama_cpp_commit, "patch": patch.name,
            "patch_sha256": patch.sha256, "applies": True}
    if args.json:
        print_json(data)
    else:
        print(f"{patch.name} applies cleanly to llama-cpp-python {pin.version} (llama.cpp {pin.llama_cpp_commit})")
    return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastmtp-chat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(parent: Any, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(handler=handler)
        return p

    w = command(sub, "window", cmd_window, "open the desktop app (what the bare command does)")
    w.add_argument("--check", action="store_true",
                   help="open the window, print what it shows as JSON once it is up, and close (packaging checks)")
    backend = sub.add_parser("backend", help="build and manage the patched llama.cpp backend")
    bsub = backend.add_subparsers(dest="backend_command", required=True)
    b = command(bsub, "build", cmd_backend_build, "build the d2t-patched llama-cpp-python backend")
    kind = b.add_mutually_exclusive_group()
    kind.add_argument("--auto", action="store_true", help="CUDA when nvcc and a GPU are present (default)")
    kind.add_argument("--cpu", action="store_true", help="CPU-only build")
    kind.add_argument("--cuda", action="store_true", help="CUDA build")
    b.add_argument("--cuda-arch", type=_archs, help="CUDA architectures, e.g. 89,90 (default: detected GPUs)")
    b.add_argument("--version", default="0.3.35", help="llama-cpp-python version (pinned ones only)")
    b.add_argument("--unpatched", action="store_true", help="build without the d2t patch (for diagnosis)")
    b.add_argument("--no-activate", action="store_true", help="install but keep the current active backend")
    b.add_argument("--release-patch", type=Path, metavar="DIR",
                   help="build with the release's own patch from this verified release folder (ours is the default)")
    b.add_argument("--trust-fingerprint", help="publisher key fingerprint for --release-patch")
    b.add_argument("--sdist", type=Path, help="use this llama-cpp-python sdist file (offline machines)")
    b.add_argument("--wheelhouse", type=Path, help="folder holding the sdist (offline machines)")
    b.add_argument("--jobs", type=int, help="parallel compile jobs")
    b.add_argument("--fetch-cuda-toolkit", nargs="?", const="driver", metavar="CUDA",
                   help="without nvcc/cuBLAS: get the CUDA toolkit as pip wheels first (for the driver's CUDA "
                        "version, or this one, e.g. 13.0)")
    b.add_argument("--portable", action="store_true",
                   help="no -march=native: the build runs on other machines' CPUs too (to pack and carry)")
    b.add_argument("--cpu-variants", action="store_true",
                   help="CPU build for any x86-64 PC: an x86-64-v2 base and an AVX2 module, the best chosen at start "
                        "(the packaged app's backend)")
    b.add_argument("-v", "--verbose", action="store_true", help="print every build log line")
    sv = command(bsub, "server", cmd_backend_server,
                 "build llama.cpp's own llama-server from the same patched tree (for bench spec)")
    sv.add_argument("--cuda", action="store_true", help="CUDA build (default: CPU)")
    sv.add_argument("--version", default="0.3.35", help="llama-cpp-python version (pinned ones only)")
    sv.add_argument("--cuda-arch", type=_archs, help="CUDA architectures of the backend's build")
    sv.add_argument("--portable", action="store_true", help="the tree of a --portable backend build")
    sv.add_argument("--jobs", type=int, help="parallel compile jobs")
    sv.add_argument("-v", "--verbose", action="store_true", help="print every build log line")
    command(bsub, "status", cmd_backend_status, "show the active backend and the build tools")
    command(bsub, "doctor", cmd_backend_doctor, "check the build tools and say what is missing")
    command(bsub, "list", cmd_backend_list, "list installed backends")
    u = command(bsub, "use", cmd_backend_use, "make an installed backend the active one")
    u.add_argument("id")
    u.add_argument("--allow-unpatched", action="store_true")
    r = command(bsub, "remove", cmd_backend_remove, "delete an installed backend")
    r.add_argument("id")
    s = command(bsub, "selftest", cmd_backend_selftest, "run the self-test of a backend again")
    s.add_argument("id", nargs="?")
    f = command(bsub, "fetch", cmd_backend_fetch, "download and verify the pinned backend source")
    f.add_argument("--version", action="append", help="version(s) to fetch (default 0.3.35)")
    f.add_argument("--wheelhouse", type=Path)
    pc = command(bsub, "patch-check", cmd_backend_patch_check, "check that the d2t patch applies to a version")
    pc.add_argument("--version", default="0.3.35")

    from app import cli_bench, cli_engine, cli_gpu, cli_history, cli_models, cli_release

    cli_gpu.add_backend_commands(bsub, command)
    cli_gpu.add_commands(sub, command)

    from app import cli_cuda

    cli_cuda.add_backend_commands(bsub, command)
    cli_models.add_commands(sub, command)
    cli_engine.add_commands(sub, command)
    cli_history.add_commands(sub, command)
    cli_bench.add_commands(sub, command)
    cli_release.add_commands(sub, command)

    from app import cli_remote, cli_update

    cli_update.add_commands(sub, command)
    cli_remote.add_commands(sub, command)
    return parser


def cmd_window(args: argparse.Namespace) -> int:
    from app.gui.main import qt_start_problem, run

    problem = qt_start_problem()
    if problem is not None:
        raise FastMTPError(problem, "Install the libraries named above, or use the terminal: `quickstart`, `chat`.")
    return run(sys.argv[:1], check=args.check)


def _has_display() -> bool:
    """False on a Linux machine without X11/Wayland (a server, CI), unless Qt is told a platform."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _install_bundled_backend() -> None:
    """A packaged app's first start: its prebuilt CPU backend becomes the active one (no compiler needed)."""
    from app.backend import bundled

    try:
        bundled.ensure_installed(lambda line: print(line, file=sys.stderr, flush=True))
    except FastMTPError as exc:  # the app still works: the Backend page and `backend build` remain
        print(f"The bundled backend could not be installed: {exc.message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    _install_bundled_backend()
    if not (sys.argv[1:] if argv is None else argv):  # no command: open the desktop app
        if not _has_display():
            print("No display found: running the terminal quickstart instead of the window.", file=sys.stderr)
            return main(["quickstart"])
        try:
            from app.gui.main import qt_start_problem, run
        except ImportError as exc:  # Qt's own libraries (libEGL, libGL, …) are missing
            problem: str | None = f"Qt cannot be loaded: {exc}"
        else:
            problem = qt_start_problem()
        if problem is not None:
            print(problem, file=sys.stderr)
            print("Running the terminal quickstart instead of the window.", file=sys.stderr)
            return main(["quickstart"])
        return run()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except FastMTPError as exc:
        if getattr(args, "json", False):
            print(json.dumps(exc.to_dict()), flush=True)
        else:
            print(f"error: {exc.message}", file=sys.stderr)
            if exc.advice:
                print(f"what to do: {exc.advice}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
