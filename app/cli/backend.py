"""``backend ...``: build, install and manage the patched llama.cpp backend, carry it to another machine
(``pack|unpack``, signed ``install``), and the app's own CUDA toolkit (``cuda-toolkit``).

``backend cuda-toolkit`` is for the many GPU owners who have the NVIDIA driver but no CUDA Toolkit: the wheels
matching the driver's CUDA version go into the app's cache, and ``backend build --cuda`` finds them there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.backend.events import BuildEvent
from app.cli.common import Subparsers, cancel_on_signals, command, emit, emit_line, group, trust_prompt
from app.core.cancel import CancelToken
from app.core.errors import FastMTPError, ToolchainError
from app.core.units import format_bytes

# ----------------------------------------------------------------------------- build, server


def _build_event_printer(args: argparse.Namespace) -> Callable[[BuildEvent], None]:
    """Build events as JSON lines (``--json``) or as steps and 5% progress ticks."""
    last_percent = [-1.0]

    def human(event: BuildEvent) -> str | None:
        if event.kind == "step":
            return f"==> [{event.percent:5.1f}%] {event.message}"
        if event.kind == "progress" and event.percent is not None and event.percent - last_percent[0] >= 5:
            last_percent[0] = event.percent
            return f"    {event.percent:5.1f}%"
        if event.kind == "log" and args.verbose:
            return "    " + event.message
        if event.kind == "done":
            return event.message
        return None

    return lambda event: emit_line(args, event.to_json(), human(event), file=sys.stdout)


def cmd_backend_build(args: argparse.Namespace) -> int:
    from app.backend.builder import BuildOptions, Flavor

    cancel = cancel_on_signals()
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
        fetch_toolkit_for_build(None if args.fetch_cuda_toolkit == "driver" else args.fetch_cuda_toolkit,
                                on_event, cancel)
    from app.backend import build_estimate

    wait = build_estimate.estimate(options)  # said first, as the window's first-run card says it
    emit_line(args, {"kind": "estimate", **build_estimate.as_dict(wait)}, f"==> the build takes {wait.words()}",
              file=sys.stdout)
    manifest = build_estimate.build_and_record(options, on_event, cancel, wait.cached)  # remembered for next time
    emit_line(args, {"kind": "result", "manifest": manifest.to_dict()})  # people saw the "done" event
    return 0


def _build_archs(text: str) -> list[str]:
    """``--cuda-arch``: CMake's list (``75-virtual;86;120a`` or ``89,90``), checked and sorted (parse_archs)."""
    from app.backend.builder import parse_archs

    try:
        return parse_archs(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_backend_server(args: argparse.Namespace) -> int:
    """Build llama.cpp's own llama-server from the same patched tree (the side-by-side peer of bench spec)."""
    from app.backend.builder import BuildOptions
    from app.machines.upstream_server import build_server

    options = BuildOptions(flavor="cuda" if args.cuda else "cpu", version=args.version, jobs=args.jobs,
                           cuda_archs=args.cuda_arch or [], portable=args.portable)
    binary = build_server(options, _build_event_printer(args), cancel_on_signals())
    emit(args, {"kind": "result", "llama_server": str(binary)}, str(binary), compact=True)
    return 0


# ----------------------------------------------------------------------------- status, doctor, list, use, remove


def cmd_backend_status(args: argparse.Namespace) -> int:
    from app.backend import registry, toolchain

    active = registry.active()
    tools = toolchain.detect()
    data = {"active": active.to_dict() if active else None, "toolchain": tools.to_dict(),
            "advice": tools.problems(cuda=bool(tools.gpus))}

    def text() -> None:
        if active is None:
            print("No active backend. Build one with: python -m app backend build")
        else:
            patched = f"d2t patch {active.patch_sha256[:12]}" if active.patch_sha256 else "UNPATCHED"
            print(f"Active backend: {active.id}  ({active.flavor}, llama-cpp-python "
                  f"{active.llama_cpp_python_version}, llama.cpp {active.llama_cpp_commit}, {patched}, self-test "
                  f"{'ok' if active.selftest_ok else 'FAILED'})")
        _print_toolchain(tools)

    emit(args, data, text)
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

    def text() -> None:
        _print_toolchain(tools)
        if note:
            print(f"  {'note':13} {note}")

    emit(args, {"toolchain": tools.to_dict(), "can_build_cpu": tools.can_build_cpu,
                "can_build_cuda": tools.can_build_cuda, "advice": tools.problems(cuda=bool(tools.gpus)),
                "platform_note": note}, text)
    return 0 if tools.can_build_cpu else 1


def cmd_backend_list(args: argparse.Namespace) -> int:
    from app.backend import archive, registry

    registry.cleanup_stale_staging()
    active = registry.active_id()
    backends = registry.list_backends()

    origins = {m.id: archive.read_origin(registry.backend_dir(m.id)) for m in backends}
    labels = {backend_id: archive.origin_label(origin) for backend_id, origin in origins.items()}
    rows = [dict(m.to_dict(), active=m.id == active, origin=(o.to_dict() if (o := origins[m.id]) else None),
                 origin_label=labels[m.id]) for m in backends]
    emit(args, rows, "\n".join(_backend_row(m, m.id == active, labels[m.id]) for m in backends)
         or "No backends installed.")
    return 0


def _backend_row(m: Any, active: bool, origin: str) -> str:
    mark = "*" if active else " "
    patch = "d2t" if m.patched else "unpatched"
    return (f"{mark} {m.id:40} {m.flavor:5} {patch:9} {origin}; built {m.built_at} in {m.build_seconds:.0f} s, "
            f"self-test {'ok' if m.selftest_ok else 'FAILED'}")


def cmd_backend_use(args: argparse.Namespace) -> int:
    from app.backend import registry

    manifest = registry.set_active(args.id, allow_unpatched=args.allow_unpatched)
    emit(args, {"active": manifest.id}, f"Active backend: {manifest.id}")
    return 0


def cmd_backend_remove(args: argparse.Namespace) -> int:
    from app.backend import registry

    registry.remove(args.id)
    emit(args, {"removed": args.id}, f"Removed backend {args.id}")
    return 0


def cmd_backend_selftest(args: argparse.Namespace) -> int:
    from app.backend import registry
    from app.backend.builder import run_selftest_subprocess

    backend_id = args.id or registry.active_id()
    if backend_id is None:
        raise FastMTPError("No backend to test.", "Build one with `python -m app backend build`.")
    result = run_selftest_subprocess(registry.backend_dir(registry.get(backend_id).id))
    emit(args, result,
         f"self-test of {backend_id}: {'ok' if result.get('ok') else 'FAILED: ' + str(result.get('error'))}")
    return 0 if result.get("ok") else 1


# ----------------------------------------------------------------------------- source: fetch, patch-check


def cmd_backend_fetch(args: argparse.Namespace) -> int:
    from app.backend import source

    got = []
    for version in args.version or [source.DEFAULT_VERSION]:
        pin = source.pinned(version)
        path = source.fetch_sdist(pin, wheelhouse=args.wheelhouse, log=lambda line: print(line, file=sys.stderr))
        got.append({"version": version, "path": str(path), "sha256": pin.sha256})
    emit(args, got, "\n".join(f"llama-cpp-python {item['version']}: {item['path']} (sha256 verified)"
                              for item in got))
    return 0


def cmd_backend_patch_check(args: argparse.Namespace) -> int:
    from app.backend import patching, source

    pin = source.pinned(args.version)
    tree = source.pristine_tree(pin) / "vendor" / "llama.cpp"
    patch = patching.default_patch()
    patching.check(tree, patch)
    data = {"version": pin.version, "llama_cpp_commit": pin.llama_cpp_commit, "patch": patch.name,
            "patch_sha256": patch.sha256, "applies": True}
    emit(args, data,
         f"{patch.name} applies cleanly to llama-cpp-python {pin.version} (llama.cpp {pin.llama_cpp_commit})")
    return 0


# ----------------------------------------------------------------------------- carry: pack, unpack, install


def cmd_backend_pack(args: argparse.Namespace) -> int:
    from app.backend import archive, registry

    backend_id = args.id or registry.active_id()
    if backend_id is None:
        raise FastMTPError("No backend to pack.", "Build one with `python -m app backend build`.")
    server = None
    if args.server:
        from app.backend.builder import BuildOptions
        from app.machines.upstream_server import build_server

        manifest = registry.get(backend_id)
        server = build_server(BuildOptions(flavor="cuda" if manifest.flavor == "cuda" else "cpu",
                                           cuda_archs=manifest.cuda_archs, version=manifest.llama_cpp_python_version,
                                           portable=manifest.portable))
    packed = archive.pack_archive(backend_id, args.out, server)
    out = packed.archive
    data = {"archive": str(out), "name": out.name, "bytes": out.stat().st_size, "backend": backend_id,
            "server": server is not None, "bundled": list(packed.bundled),
            "runpaths_fixed": list(packed.runpaths_fixed)}
    carried = f"; carries {', '.join(packed.bundled)}" if packed.bundled else ""
    emit(args, data, lambda: f"packed {backend_id}{' with llama-server' if server else ''} into {out} "
                             f"({format_bytes(out.stat().st_size)}){carried}")
    return 0


def cmd_backend_unpack(args: argparse.Namespace) -> int:
    from app.backend import archive

    got = archive.unpack(args.archive, activate=not args.no_activate)
    data = {"backend": got.manifest.id, "folder": str(got.folder), "flavor": got.manifest.flavor,
            "cuda_archs": got.manifest.cuda_archs, "server": str(got.server) if got.server else None,
            "active": not args.no_activate}
    emit(args, data,
         f"installed {got.manifest.id} in {got.folder}" + (f"; llama-server {got.server}" if got.server else ""))
    return 0


def cmd_backend_install(args: argparse.Namespace) -> int:
    """A signed prebuilt backend: signature, sha256 and self-test, then activate; ``--feed``: the one for this
    machine from the signed backend feed."""
    from app.backend.prebuilt import install_prebuilt

    def on_event(event: BuildEvent) -> None:
        emit_line(args, event.to_json(), f"==> {event.message}" if event.kind in ("step", "done") else None)

    if args.feed is not None or args.source is None:
        return _install_from_feed(args, on_event)
    if args.gpu_arch is not None or args.driver is not None:
        raise FastMTPError("--gpu-arch and --driver choose an archive from the feed.",
                           "Use them with --feed URL (or without ARCHIVE|URL: the catalog's feed).")
    got = install_prebuilt(args.source, repo=args.repo, trust_fingerprint=args.trust_fingerprint,
                           confirm=trust_prompt(args), activate=not args.no_activate,
                           on_event=on_event, cancel=cancel_on_signals())
    state = "active now" if got.active else "installed, not active (`backend use` makes it active)"
    emit(args, dict(got.to_dict(), kind="result"),
         f"{got.manifest.id}: {state}; {got.origin.describe()}; self-test passed here.", compact=True)
    return 0


def _gpu_archs(text: str) -> list[str]:
    """``--gpu-arch 89,90`` (``sm_89``, ``8.9`` too); ``none`` or ``cpu``: act as a machine without a GPU."""
    if text.strip().lower() in ("none", "cpu"):
        return []
    from app.backend.feed import normalize_arch
    from app.core.errors import VerificationError

    try:
        return [normalize_arch(part) for part in text.split(",") if part.strip()] or [normalize_arch(text)]
    except VerificationError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _install_from_feed(args: argparse.Namespace, on_event: Callable[[BuildEvent], None]) -> int:
    """Fetch and verify the feed, say which archive fits this machine and why, install it; none fits: the reason
    and "build here" (exit 1, ``kind`` no-fitting-archive in ``--json``)."""
    from app.backend.feed import Selection, detect_machine, install_from_feed

    def on_selection(selection: Selection) -> None:
        chosen = selection.archive
        text = (f"==> picked {chosen.name} ({chosen.label()}) for {selection.machine.describe()}: {selection.reason}"
                if chosen else f"==> no archive fits {selection.machine.describe()}: {selection.reason}")
        if args.verbose:
            text += "".join(f"\n    passed over {line}" for line in selection.passed_over)
        emit_line(args, {"kind": "selection", **selection.to_dict()}, text)

    machine = detect_machine(args.gpu_arch, args.driver)
    got = install_from_feed(args.feed, machine=machine, repo=args.repo, trust_fingerprint=args.trust_fingerprint,
                            confirm=trust_prompt(args), activate=not args.no_activate, on_event=on_event,
                            on_selection=on_selection, cancel=cancel_on_signals())
    installed = got.installed
    state = "active now" if installed.active else "installed, not active (`backend use` makes it active)"
    emit(args, dict(got.to_dict(), kind="result"),
         f"{installed.manifest.id} from {got.selection.archive.name if got.selection.archive else '?'}: {state}; "
         f"{installed.origin.describe()}; self-test passed here.", compact=True)
    return 0


def cmd_backend_sign_feed(args: argparse.Namespace) -> int:
    """The publisher's side: one signed feed listing signed archives (their claims say what each holds)."""
    from app.backend.feed import feed_entry, write_feed
    from app.backend.signing import check_archive, manifest_name, parse_claim, signature_name
    from app.release import signing
    from app.release.verify import read_capped

    key = signing.load_private_key(args.key)
    fp = signing.fingerprint(key.public_key())
    entries = []
    for item in args.archive:
        platform, _, named = item.partition("=") if item.split("=", 1)[0] in ("linux", "windows") else ("", "", item)
        platform = platform or args.platform
        if platform is None:
            raise FastMTPError(f"Which platform is {item} for?", "Give it as linux=PATH or windows=PATH, or pass "
                                                                  "--platform for all of them.")
        path = Path(named)
        manifest, signature = path.with_name(manifest_name(path.name)), path.with_name(signature_name(path.name))
        if not manifest.is_file() or not signature.is_file():
            raise FastMTPError(f"{path.name} has no signed manifest beside it.",
                               "Sign it first: `python -m app release sign-backend --archive … --key …`.")
        data = read_capped(manifest, "signed manifest")
        # signed with this very key (the publisher's own check; the trust store is the users' side)
        signing.verify(key.public_key(), data, signing.decode_signature(read_capped(signature, "signature"),
                                                                        signature.name), manifest.name)
        claim = parse_claim(data, manifest.name)
        check_archive(claim, path)  # the bytes beside it are the ones signed
        entries.append(feed_entry(path, claim, platform="windows" if platform == "windows" else "linux",
                                  min_driver=args.min_driver))
    if args.feed_version is not None and args.feed_version < 1:
        raise FastMTPError(f"--feed-version {args.feed_version}: a feed version is a whole number from 1.",
                           "Give one larger than the last feed's, or leave it out (the signing time).")
    if args.valid_days <= 0:
        raise FastMTPError(f"--valid-days {args.valid_days}: a feed must be valid for some days.",
                           "Give a number of days, e.g. 180 (the default).")
    written = write_feed(entries, key, args.out, repo=args.repo, version=args.feed_version,
                         valid_days=args.valid_days)
    expires = written.body.expires.date().isoformat() if written.body.expires else "?"
    emit(args, written.to_dict(), f"Signed the backend feed {written.feed} ({len(entries)} archives, version "
                                  f"{written.body.version}, expires {expires}) with {fp}; publish it and its .sig "
                                  "beside the archives, and sign it again before it expires.")
    return 0


# ----------------------------------------------------------------------------- cuda-toolkit


def _stderr(line: str) -> None:
    print("    " + line, file=sys.stderr, flush=True)


def cmd_cuda_toolkit(args: argparse.Namespace) -> int:
    from app.backend import cuda_wheels

    if args.action == "status":
        data = cuda_wheels.status(args.cuda)
        emit(args, data, lambda: _toolkit_status(data))
        return 0
    cancel = cancel_on_signals()
    cuda = cuda_wheels.resolve_cuda(args.cuda)
    if args.action == "fetch":
        house = cuda_wheels.fetch(cuda, args.wheelhouse, args.index_url, _stderr, cancel)
        wheels = sorted(p.name for p in house.glob("*.whl"))
        emit(args, {"cuda": cuda, "wheelhouse": str(house), "wheels": wheels},
             f"CUDA {cuda} wheels in {house}: {len(wheels)} files")
        return 0
    cuda_wheels.fetch(cuda, args.wheelhouse, args.index_url, _stderr, cancel)
    toolkit = cuda_wheels.install(cuda, args.wheelhouse, _stderr, cancel)
    emit(args, toolkit.to_dict(), f"CUDA toolkit {toolkit.nvcc_version} installed in {toolkit.root}; "
                                  "`python -m app backend build --cuda` uses it")
    return 0


def _toolkit_status(data: dict[str, Any]) -> None:
    print(f"driver's CUDA version: {data['driver_cuda'] or 'unknown (no nvidia-smi)'}")
    for tk in data["installed"]:
        print(f"installed: CUDA {tk['cuda']} toolkit (nvcc {tk['nvcc_version']}) in {tk['root']}")
    if not data["installed"]:
        print("no CUDA toolkit installed by the app")
    if data.get("requirements"):
        missing = data["wheelhouse_missing"]
        print(f"wheels for CUDA {data['cuda']}: {', '.join(data['requirements'])}")
        print(f"wheelhouse {data['wheelhouse']}: " + (f"missing {', '.join(missing)}" if missing else "complete"))


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


# ----------------------------------------------------------------------------- registration


def add_commands(sub: Subparsers) -> None:
    """Every ``backend`` subcommand."""
    bsub = group(sub, "backend", "build and manage the patched llama.cpp backend")
    b = command(bsub, "build", cmd_backend_build, "build the d2t-patched llama-cpp-python backend")
    kind = b.add_mutually_exclusive_group()
    kind.add_argument("--auto", action="store_true", help="CUDA when nvcc and a GPU are present (default)")
    kind.add_argument("--cpu", action="store_true", help="CPU-only build")
    kind.add_argument("--cuda", action="store_true", help="CUDA build")
    b.add_argument("--cuda-arch", type=_build_archs, metavar="ARCHS",
                   help="CUDA architectures, e.g. 89,90 or llama.cpp's release list "
                        "'75-virtual;80-virtual;86;89;90-virtual;120a;121a' (-virtual: PTX the driver compiles for "
                        "newer GPUs; a: that GPU only); default: the detected GPUs. Recorded in the manifest")
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
    sv.add_argument("--cuda-arch", type=_build_archs, metavar="ARCHS", help="CUDA architectures of the backend's build")
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

    pk = command(bsub, "pack", cmd_backend_pack, "pack an installed backend (and llama-server) to carry elsewhere")
    pk.add_argument("id", nargs="?", help="backend id (default: the active one)")
    pk.add_argument("--out", type=Path, required=True,
                    help="the .tar.xz to write, or a folder: the archive is named from its manifest there "
                         "(fastmtp-backend-VERSION-KIND-OS-ARCH.tar.xz, e.g. …-0.9.0-cuda13.0-linux-x86_64)")
    pk.add_argument("--server", action="store_true", help="build llama-server in its tree and include it")
    up = command(bsub, "unpack", cmd_backend_unpack, "install a backend archive made by `backend pack`")
    up.add_argument("archive", type=Path)
    up.add_argument("--no-activate", action="store_true", help="install but keep the current active backend")
    ins = command(bsub, "install", cmd_backend_install,
                  "install a signed prebuilt backend (file or URL): signature, sha256, self-test, then activate")
    ins.add_argument("source", metavar="ARCHIVE|URL", nargs="?",
                     help="a .tar.xz from `backend pack` with its signed manifest beside it, or its http(s) URL "
                          "(without it: the archive for this machine from the catalog's signed backend feed)")
    ins.add_argument("--feed", metavar="URL",
                     help="the signed backend feed to pick from (default: the catalog's [backend_feed])")
    ins.add_argument("--gpu-arch", type=_gpu_archs, metavar="ARCHS",
                     help="with the feed: these GPU architectures (e.g. 89 or sm_86,sm_89; none: no GPU) instead of "
                          "the detected ones")
    ins.add_argument("--driver", metavar="VERSION",
                     help="with the feed: this NVIDIA driver version (e.g. 550.54.14) instead of the detected one")
    ins.add_argument("-v", "--verbose", action="store_true", help="with the feed: say why each other archive "
                                                                  "was passed over")
    ins.add_argument("--repo", help="repository whose trusted key must have signed it (default: the app's own, "
                                    "[app_updates] repo; an older archive or feed claiming the model publisher's "
                                    "is checked with that repository's trusted key)")
    ins.add_argument("--trust-fingerprint", help="trust the signing key with this fingerprint (no prompt)")
    ins.add_argument("--no-activate", action="store_true", help="install but keep the current active backend")
    sf = command(bsub, "sign-feed", cmd_backend_sign_feed,
                 "publisher: write and sign the backend feed listing signed archives (fastmtp-backends.json)")
    sf.add_argument("archive", nargs="+", metavar="[PLATFORM=]ARCHIVE.tar.xz",
                    help="archives signed by `release sign-backend` with the same key, each with its platform "
                         "(linux=… or windows=…) unless --platform names it for all")
    sf.add_argument("--platform", choices=["linux", "windows"], help="the platform of archives named without one")
    sf.add_argument("--min-driver", help="the oldest NVIDIA driver they run on (default: what the CUDA version "
                                         "they were built with needs)")
    sf.add_argument("--key", type=Path, required=True, metavar="PRIVATE.pem")
    sf.add_argument("--out", type=Path, required=True, help="folder for the feed and its .sig")
    sf.add_argument("--repo", help="repository id whose key signs it (default: the app's own, [app_updates] repo)")
    sf.add_argument("--feed-version", type=int, metavar="N",
                    help="the feed's monotonic version, larger than the last one published (default: the signing "
                         "time in seconds since 1970); the app refuses a feed older than the last it verified")
    sf.add_argument("--valid-days", type=float, default=180, metavar="DAYS",
                    help="days until the feed expires and the app refuses it as stale (default: 180)")

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
