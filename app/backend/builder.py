"""Build the patched llama-cpp-python backend: source, patch, toolchain, compile, install, self-test, activate.

One entry point, ``build_backend``, reads top-down. Nothing becomes visible under
``<data>/backends/<id>`` until the self-test passed; the build tree is kept in the cache so
a rebuild with the same inputs only re-links what changed (seconds). ``build_program`` builds one more program
(llama-server, rpc-server) in that same tree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from app.backend import patching, registry, runtime_libs, source, toolchain
from app.backend.events import BuildEvent, EventKind, EventSink, ninja_fraction
from app.core import folder_lock, paths, processes
from app.core.cancel import CancelToken
from app.core.errors import BackendError, BuildCancelled, ToolchainError

Flavor = Literal["auto", "cpu", "cuda"]

# percent of the whole build at which each step starts
_STEP_START = {"toolchain": 0.0, "source": 1.0, "configure": 5.0, "compile": 10.0,
               "install": 92.0, "selftest": 94.0, "activate": 99.0}
# The tools and llama-server are configured in the backend's own tree (but only built on request, see
# upstream_server.py): the peer then links the backend's shared libraries instead of compiling ggml again.
# Every build has llama.cpp's RPC backend (one small source file; linked into libggml, or the module
# libggml-rpc.so beside the CPU modules of a GGML_BACKEND_DL build), so ``--rpc`` and ``rpc-worker`` (rpc.py) use
# the backend as it is. RDMA stays off: the same build on every machine, whatever libibverbs it has.
_COMMON_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAVA_BUILD=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_RPC=ON",
    "-DGGML_RPC_RDMA=OFF",
]
# A packaged app's CPU backend (``cpu_variants``): ggml loads its CPU code from a module at run time
# (GGML_BACKEND_DL) and picks the best one this processor can run. The base module is x86-64-v2 (SSE4.2,
# any x86-64 CPU since about 2009); each variant is one more module built from the same tree.
_X86_FEATURES = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI", "AVX512", "AVX512_VBMI",
                 "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8", "AMX_BF16")
_CPU_BASELINE = ("SSE42",)
CPU_VARIANTS: dict[str, tuple[str, ...]] = {
    "haswell": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"),  # x86-64-v3: most PCs since 2013
}


@dataclass
class BuildOptions:
    flavor: Flavor = "auto"
    cuda_archs: list[str] = field(default_factory=list)
    version: str = source.DEFAULT_VERSION
    patched: bool = True
    patch_file: Path | None = None  # a verified release patch instead of ours (see verified_release_patch)
    sdist: Path | None = None
    wheelhouse: Path | None = None
    jobs: int | None = None
    activate: bool = True
    portable: bool = False  # GGML_NATIVE=OFF: runs on another machine's CPU (a backend archive to carry)
    cpu_variants: bool = False  # CPU only: x86-64-v2 base plus CPU_VARIANTS, chosen at load (packaged apps)


@dataclass(frozen=True)
class BuildPlan:
    """Everything the build depends on, resolved; its hash names the backend."""

    pin: source.PinnedSource
    patch: patching.Patch | None
    flavor: Literal["cpu", "cuda"]
    cuda_archs: list[str]
    cmake_args: list[str]
    tools: toolchain.Toolchain
    cpu_variants: dict[str, list[str]] = field(default_factory=dict)  # variant name -> its CMake arguments

    @property
    def patch_sha256(self) -> str | None:
        return self.patch.sha256 if self.patch else None

    @property
    def backend_id(self) -> str:
        parts: list[object] = [self.pin.sha256, self.patch_sha256, self.cmake_args]
        if self.cpu_variants:
            parts.append(self.cpu_variants)
        key = json.dumps(parts, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        kind = self.flavor if self.flavor == "cpu" else "cuda-sm" + "_".join(self.cuda_archs)
        if self.cpu_variants:
            kind += "-any"
        return f"{self.pin.version}-{kind}-{'d2t' if self.patch else 'unpatched'}-{digest}"


def plan_build(options: BuildOptions, tools: toolchain.Toolchain | None = None) -> BuildPlan:
    """Resolve flavor, CUDA archs and CMake arguments; raise ToolchainError with advice if we can't build."""
    tools = tools or toolchain.detect()
    auto: Literal["cpu", "cuda"] = "cuda" if tools.can_build_cuda and tools.gpus else "cpu"
    flavor = auto if options.flavor == "auto" else options.flavor
    problems = tools.problems(cuda=flavor == "cuda")
    if problems:
        raise ToolchainError("The backend cannot be built on this machine yet.", "\n".join(problems),
                             kind="toolchain-missing")
    archs = sort_archs(options.cuda_archs or [gpu.cuda_arch for gpu in tools.gpus]) if flavor == "cuda" else []
    if flavor == "cuda" and not archs:
        raise ToolchainError("No NVIDIA GPU was found, so the CUDA architecture is unknown.",
                             "Pass --cuda-arch (for example --cuda-arch 89,90) or build with --cpu.",
                             kind="cuda-arch-unknown")
    args = list(_COMMON_CMAKE_ARGS)
    native = f"-DGGML_NATIVE={'OFF' if options.portable else 'ON'}"
    if flavor == "cuda":
        assert tools.nvcc is not None and tools.cublas is not None
        archs = sort_archs(toolchain.fit_cuda_archs(tools.nvcc.path, archs))  # newer than nvcc: PTX, JIT-compiled
        args += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}",
                 f"-DCMAKE_CUDA_COMPILER={tools.nvcc.path}", native]
        if tools.cublas.from_wheel:
            args += _wheel_cublas_args(tools.cublas, tools.cuda_toolkit)
        if tools.cuda_driver_lib is None:
            # no libcuda.so to link (compile-only machine without driver or stubs): use the legacy memory pool
            args.append("-DGGML_CUDA_NO_VMM=ON")
    else:
        args += ["-DGGML_CUDA=OFF", native]
    variants: dict[str, list[str]] = {}
    if options.cpu_variants:
        if flavor != "cpu":
            raise ToolchainError("CPU variants are for CPU builds.", "Build with --cpu together with --cpu-variants.",
                                 kind="bad-build-options")
        args = [*args[:-1], "-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=OFF"]
        if _is_x86():
            base = [arg for arg in args if not arg.startswith("-DGGML_NATIVE")]
            variants = {name: [*base, "-DGGML_NATIVE=OFF", *_x86_feature_args(features)]
                        for name, features in CPU_VARIANTS.items()}
            args += _x86_feature_args(_CPU_BASELINE)
    pin = source.pinned(options.version)
    patch = (patching.Patch(options.patch_file) if options.patch_file else patching.default_patch()) \
        if options.patched else None
    return BuildPlan(pin, patch, flavor, archs, args, tools, variants)


_BUILD_ARCH = re.compile(r"^(\d{2,3})([af]?)(-real|-virtual)?$")


def parse_archs(text: str) -> list[str]:
    """``--cuda-arch``: CMake's CUDA_ARCHITECTURES, separated by ``;`` or ``,``: ``86`` (the GPU's code and PTX),
    ``86-real`` (code only), ``90-virtual`` (PTX only, compiled by the driver for newer GPUs), ``120a`` (the
    architecture-specific features of exactly that GPU), as llama.cpp's releases list them:
    ``75-virtual;80-virtual;86;89;90-virtual;120a;121a``.

    Raises:
        ValueError: an entry is none of these (the message names it).
    """
    archs = [part.strip().lower().removeprefix("sm_") for part in re.split(r"[;,]", text) if part.strip()]
    bad = [arch for arch in archs if not _BUILD_ARCH.match(arch)]
    if not archs or bad:
        raise ValueError(f"{', '.join(bad) or repr(text)} is not a CUDA architecture: give numbers like 89 or "
                         "86;89, with -real, -virtual or an a suffix where wanted (75-virtual;86;120a)")
    return sort_archs(archs)


def sort_archs(archs: list[str]) -> list[str]:
    """Each architecture once, by number (``75-virtual`` before ``120a``), so one list always gives one id."""
    def key(arch: str) -> tuple[int, str]:
        match = _BUILD_ARCH.match(arch)
        return (int(match.group(1)), arch) if match else (10**6, arch)

    return sorted(set(archs), key=key)


def _is_x86() -> bool:
    import platform

    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _x86_feature_args(enabled: tuple[str, ...]) -> list[str]:
    """``-DGGML_<feature>=ON|OFF`` for every x86 feature ggml knows, so nothing is left to defaults."""
    return [f"-DGGML_{feature}={'ON' if feature in enabled else 'OFF'}" for feature in _X86_FEATURES]


def _wheel_cublas_args(cublas: toolchain.Cublas, toolkit: toolchain.CudaToolkit | None = None) -> list[str]:
    """Point CMake's FindCUDAToolkit at the ``nvidia-cublas`` wheel (versioned .so names, own include dir).

    The app's own toolkit (all wheels merged into one root) is a whole toolkit: CUDAToolkit_ROOT names it, and
    the linker finds libcublasLt (which libcublas needs) in its lib folder (``-rpath-link``: at link time only).
    No RUNPATH names it: the install copies libcudart/libcublas beside the backend (``$ORIGIN``, see
    :func:`_install`), so the backend runs the same here and on a machine with only the driver.
    """
    if toolkit is not None and toolkit.source == "app":
        root = Path(toolkit.root)
        link = f"-Wl,-rpath-link,{root / 'lib'}"
        return [f"-DCUDAToolkit_ROOT={root}", f"-DCMAKE_SHARED_LINKER_FLAGS={link}", f"-DCMAKE_EXE_LINKER_FLAGS={link}"]
    lib = Path(cublas.lib_dir)
    found = {name: sorted(lib.glob(f"lib{name}.so*")) for name in ("cublas", "cublasLt")}
    args = [f"-DCUDA_{name}_LIBRARY={paths[0]}" for name, paths in found.items() if paths]
    flags = f"-I{cublas.include_dir}"
    return [*args, f"-DCMAKE_CUDA_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]


class Reporter:
    """Turns step progress into whole-build percentages for the event sink."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.step = "toolchain"
        self.started = time.monotonic()

    def emit(self, kind: EventKind, message: str, percent: float | None) -> None:
        elapsed = round(time.monotonic() - self.started, 2)
        self.sink(BuildEvent(kind, message, percent, self.step, elapsed))

    def start(self, step: str, message: str) -> None:
        self.step = step
        self.emit("step", message, _STEP_START[step])

    def log(self, line: str) -> None:
        self.emit("log", line, None)

    def within(self, fraction: float) -> None:
        steps = list(_STEP_START)
        start = _STEP_START[self.step]
        following = steps.index(self.step) + 1
        end = _STEP_START[steps[following]] if following < len(steps) else 100.0
        self.emit("progress", "", round(start + (end - start) * fraction, 1))


def build_backend(options: BuildOptions, on_event: EventSink | None = None,
                  cancel: CancelToken | None = None) -> registry.BackendManifest:
    """Build, self-test and install a backend; returns its manifest.

    Raises:
        ToolchainError: a needed tool is missing (the advice says how to get it).
        PatchError: the d2t patch does not apply to the source.
        BuildCancelled: ``cancel`` was triggered; nothing was installed.
        BackendError: configure, compile, install or self-test failed; nothing was installed.
    """
    sink: EventSink = on_event or (lambda _event: None)
    cancel = cancel or CancelToken()
    report = Reporter(sink)
    started = time.monotonic()
    registry.cleanup_stale_staging()

    report.start("toolchain", "checking the build tools")
    plan = plan_build(options)
    report.log(f"building backend {plan.backend_id} ({plan.flavor}"
               + (f", CUDA archs {','.join(plan.cuda_archs)}" if plan.cuda_archs else "") + ")")
    virtual = [arch for arch in plan.cuda_archs if arch.endswith("-virtual")]
    if virtual:
        report.log(f"the GPU is newer than this CUDA compiler knows: building PTX ({', '.join(virtual)}), which the "
                   "driver compiles for the GPU on first use (the first start takes longer)")

    report.start("source", f"getting llama-cpp-python {plan.pin.version} source")
    tree = prepare_source(plan, options, report)
    check_cancel(cancel)

    build_dir = build_dir_of(plan)
    staging = paths.backends_dir() / f"{registry.STAGING_PREFIX}{plan.backend_id}-{os.getpid()}"
    try:
        with folder_lock.locked(build_dir, report.log):
            report.start("configure", "configuring with CMake")
            configure(plan, tree, build_dir, report, cancel)
            report.start("compile", "compiling llama.cpp (this takes a few minutes the first time)")
            compile_target(plan, options, tree, build_dir, "llama", report, cancel)
            variant_libs = _compile_cpu_variants(plan, options, tree, build_dir, report, cancel)
            report.start("install", "installing into a staging folder")
            _install(tree, build_dir, staging, runtime_dirs(plan) if plan.flavor == "cuda" else None)
            for name, lib in variant_libs.items():
                shutil.copy2(lib, staging / "llama_cpp" / "lib" / cpu_variant_library(name, lib))
        manifest = _manifest(plan, time.monotonic() - started)
        manifest.write(staging)
        check_cancel(cancel)

        report.start("selftest", "self-testing the new backend")
        manifest.selftest = run_selftest_subprocess(staging, report, cancel)
        manifest.build_seconds = round(time.monotonic() - started, 1)
        manifest.write(staging)
        if not manifest.selftest_ok:
            raise BackendError(f"The new backend failed its self-test: {manifest.selftest.get('error')}",
                               "Nothing was installed. See the log above; report it with the log attached.",
                               kind="selftest-failed")
        check_cancel(cancel)

        report.start("activate", "installing the backend")
        final = registry.backend_dir(plan.backend_id)
        _replace_dir(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if options.activate:
        registry.set_active(plan.backend_id, allow_unpatched=not plan.patch)
    report.within(1.0)
    report.emit("done", f"backend {plan.backend_id} ready in {manifest.build_seconds:.0f} s", 100.0)
    return manifest


def build_dir_of(plan: BuildPlan) -> Path:
    """The cached CMake/ninja tree of a plan: the backend, its llama-server and its rpc-server are built here."""
    return paths.cache_dir() / "build" / plan.backend_id


def options_of(manifest: registry.BackendManifest) -> BuildOptions:
    """The options that plan ``manifest``'s backend again (flavour, CUDA architectures, version, patch, portability,
    CPU modules), so a program built for it comes from its own build tree."""
    return BuildOptions(flavor="cuda" if manifest.flavor == "cuda" else "cpu", cuda_archs=list(manifest.cuda_archs),
                        version=manifest.llama_cpp_python_version, patched=manifest.patched,
                        portable=manifest.portable, cpu_variants=manifest.loads_backends_at_start)


def active_options() -> BuildOptions:
    """``options_of`` the active backend; a CPU build's when none is installed yet."""
    manifest = registry.active()
    return options_of(manifest) if manifest is not None else BuildOptions(flavor="cpu")


def build_program(options: BuildOptions, target: str, on_event: EventSink | None = None,
                  cancel: CancelToken | None = None) -> Path:
    """Build one program (``llama-server``, ``ggml-rpc-server``) in the backend's own tree of ``options``; return it.

    The tree is configured with the tools (``_COMMON_CMAKE_ARGS``), so the program links the shared libraries
    the backend build already compiled: seconds of extra work on the CPU, minutes instead of an hour on CUDA.
    ``cmake --build`` runs the ninja that configured the tree (a different ninja version would discard the
    build log and recompile everything).

    Raises:
        ToolchainError, PatchError, BuildCancelled, BackendError: as ``build_backend``.
    """
    report = Reporter(on_event or (lambda _event: None))
    cancel = cancel or CancelToken()
    report.start("toolchain", "checking the build tools")
    plan = plan_build(options)
    report.start("source", f"getting llama-cpp-python {plan.pin.version} source")
    tree = prepare_source(plan, options, report)
    build_dir = build_dir_of(plan)
    with folder_lock.locked(build_dir, report.log):
        report.start("configure", "configuring with CMake (the backend's build tree)")
        configure(plan, tree, build_dir, report, cancel)
        report.start("compile", f"compiling {target} (a few minutes the first time)")
        compile_target(plan, options, tree, build_dir, target, report, cancel)
    binary = build_dir / "bin" / target
    if not binary.is_file():
        raise BackendError(f"The build finished but {binary} is missing.", f"Delete {build_dir} and build again.",
                           kind="build-output-missing")
    report.emit("done", f"{target} ready: {binary}", 100.0)
    return binary


def _compile_cpu_variants(plan: BuildPlan, options: BuildOptions, tree: Path, build_dir: Path, report: Reporter,
                          cancel: CancelToken) -> dict[str, Path]:
    """Build each extra CPU module (only ggml-base and ggml-cpu) in its own tree next to the main one."""
    built: dict[str, Path] = {}
    for name, args in plan.cpu_variants.items():
        variant_dir = build_dir.with_name(f"{build_dir.name}-cpu-{name}")
        report.log(f"compiling the {name} CPU variant")
        configure(dataclasses.replace(plan, cmake_args=args), tree, variant_dir, report, cancel)
        compile_target(plan, options, tree, variant_dir, "ggml-cpu", report, cancel)
        libs = [p for p in (variant_dir / "bin").iterdir() if re.match(r"^(lib)?ggml-cpu\.(so|dylib|dll)$", p.name)]
        if not libs:
            raise BackendError(f"The {name} CPU variant produced no ggml-cpu library in {variant_dir / 'bin'}.",
                               "Delete the build cache folder named above and build again.",
                               kind="build-output-missing")
        built[name] = libs[0]
    return built


def cpu_variant_library(name: str, base_library: Path) -> str:
    """``libggml-cpu-haswell.so``: the file name ggml's loader scores against the processor at start."""
    stem, suffix = base_library.name.split(".", 1)
    return f"{stem}-{name}.{suffix}"


def compile_target(plan: BuildPlan, options: BuildOptions, tree: Path, build_dir: Path, target: str,
                   report: Reporter, cancel: CancelToken) -> None:
    """Build one target of a configured tree with the ninja that configured it (``cmake --build``)."""
    jobs = options.jobs or os.cpu_count() or 2
    run_build_command([cmake_path(plan), "--build", str(build_dir), "--target", target, "-j", str(jobs)],
                      tree, report, cancel, f"Compiling {target} failed", progress=True, env=plan.tools.child_env())


def cmake_path(plan: BuildPlan) -> str:
    return plan.tools.cmake.path if plan.tools.cmake else "cmake"


def check_cancel(cancel: CancelToken) -> None:
    if cancel.cancelled:
        raise BuildCancelled("The backend build was cancelled; nothing was installed.")


def prepare_source(plan: BuildPlan, options: BuildOptions, report: Reporter) -> Path:
    """The working source tree for this plan: a patched (or pristine) copy, made once and reused."""
    sdist = source.fetch_sdist(plan.pin, options.sdist, options.wheelhouse, log=report.log)
    pristine = source.unpack(plan.pin, sdist, paths.cache_dir() / "src" / f"{plan.pin.version}-pristine",
                             report.log)
    report.within(0.5)
    if plan.patch is None:
        return pristine
    tree = paths.cache_dir() / "src" / f"{plan.pin.version}-d2t-{(plan.patch_sha256 or '')[:12]}"
    marker = tree / ".fastmtp-patched"
    with folder_lock.locked(tree, report.log):
        if not marker.is_file():
            shutil.rmtree(tree, ignore_errors=True)
            partial = tree.with_name(tree.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(pristine, partial, symlinks=True)
            vendored = partial / "vendor" / "llama.cpp"
            report.log(f"checking and applying {plan.patch.name}")
            patching.apply(vendored, plan.patch)
            os.replace(partial, tree)
            marker.write_text((plan.patch_sha256 or "") + "\n")
    report.log(f"source tree {tree} (patch {plan.patch.name}, sha256 {plan.patch_sha256})")
    return tree


def configure(plan: BuildPlan, tree: Path, build_dir: Path, report: Reporter, cancel: CancelToken) -> None:
    """Configure ``build_dir`` once; a tree that is already configured is reused as it is, unless the ninja it was
    configured with is gone (a virtual environment or checkout removed since): then it is configured again in place,
    keeping its compiled objects, with the ninja of now."""
    ninja = plan.tools.ninja.path if plan.tools.ninja else "ninja"
    if (build_dir / "build.ninja").is_file() and (build_dir / "CMakeCache.txt").is_file():
        program = _configured_make_program(build_dir / "CMakeCache.txt")
        if program is None or shutil.which(program) is not None:
            report.log("reusing the cached build tree")
            return
        report.log(f"the cached build tree's ninja ({program}) is gone: configuring it again with {ninja}")
    else:
        shutil.rmtree(build_dir, ignore_errors=True)
        build_dir.mkdir(parents=True)
    cmd = [cmake_path(plan), "-S", str(tree), "-B", str(build_dir), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
           *plan.cmake_args]
    try:
        run_build_command(cmd, tree, report, cancel, "Configuring the build with CMake failed",
                          env=plan.tools.child_env())
    except BackendError:
        shutil.rmtree(build_dir, ignore_errors=True)  # a half-configured tree must not be reused
        raise


def _configured_make_program(cache: Path) -> str | None:
    """The ``CMAKE_MAKE_PROGRAM`` a CMake cache records (None when it records none or cannot be read)."""
    try:
        for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("CMAKE_MAKE_PROGRAM:"):
                return line.split("=", 1)[1].strip() or None
    except OSError:
        return None
    return None


def run_build_command(cmd: list[str], cwd: Path, report: Reporter, cancel: CancelToken, failure: str,
         progress: bool = False, env: dict[str, str] | None = None) -> None:
    """Run a build command, streaming its lines as events; cancel kills its whole process group."""
    check_cancel(cancel)
    report.log("$ " + " ".join(cmd))

    def on_line(line: str) -> None:
        report.log(line)
        fraction = ninja_fraction(line) if progress else None
        if fraction is not None:
            report.within(fraction)

    code, tail = processes.run_streaming(cmd, on_line, cancel, cwd=cwd, env=env)  # env: MSVC's on Windows
    check_cancel(cancel)
    if code != 0:
        raise BackendError(f"{failure} (exit code {code}). Last lines:\n" + "\n".join(tail),
                           "Nothing was installed. Fix the cause named above and build again; "
                           "`python -m app backend doctor` checks the tools.", kind="build-failed")


_SHARED_LIB = re.compile(r"^(lib)?(llama|ggml[\w-]*)\.(so(\.\d+)*|dylib|dll)$")


def runtime_dirs(plan: BuildPlan) -> list[str]:
    """Where a CUDA build's runtime libraries (libcudart, libcublas, libcublasLt) are: its toolkit's lib folders."""
    tools = plan.tools
    dirs = [tools.cublas.lib_dir] if tools.cublas else []
    if tools.cuda_toolkit is not None:
        dirs += [str(Path(tools.cuda_toolkit.root) / sub) for sub in ("lib", "lib64", "targets/x86_64-linux/lib")]
    return dirs


def _install(tree: Path, build_dir: Path, staging: Path, runtime: list[str] | None = None) -> None:
    """Stage ``llama_cpp/``: the Python bindings from the sdist plus the freshly built shared libraries.

    Only the ``llama`` target and what it links are built, so the libraries are copied straight
    from the build tree (their RUNPATH is ``$ORIGIN``), instead of a full ``cmake --install``. A CUDA build
    (``runtime``: its toolkit's lib folders) gets the CUDA runtime libraries it needs copied beside them, so it
    runs with only the NVIDIA driver, here and wherever it is carried (``runtime_libs.bundle``).
    """
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(tree / "llama_cpp", staging / "llama_cpp",
                    ignore=shutil.ignore_patterns("lib", "__pycache__"))
    lib_dir = staging / "llama_cpp" / "lib"
    lib_dir.mkdir()
    built = [p for p in (build_dir / "bin").iterdir() if _SHARED_LIB.match(p.name)]
    if not any(p.name.startswith(("libllama", "llama")) for p in built):
        raise BackendError(f"The build produced no llama library in {build_dir / 'bin'}.",
                           "Delete the build cache folder named above and build again.", kind="build-output-missing")
    for path in built:
        if path.is_symlink():
            (lib_dir / path.name).symlink_to(os.readlink(path))
        else:
            shutil.copy2(path, lib_dir / path.name)
    if runtime is not None and sys.platform.startswith("linux"):
        runtime_libs.bundle(lib_dir, lib_dir, runtime)


def _replace_dir(new: Path, final: Path) -> None:
    """Move ``new`` to ``final``; an older install of the same id is swapped out, then deleted."""
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if final.exists():
        os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)


def _manifest(plan: BuildPlan, seconds: float) -> registry.BackendManifest:
    compiler = plan.tools.cxx_compiler
    return registry.BackendManifest(
        id=plan.backend_id,
        llama_cpp_python_version=plan.pin.version,
        llama_cpp_commit=plan.pin.llama_cpp_commit,
        sdist_sha256=plan.pin.sha256,
        patch_name=plan.patch.name if plan.patch else None,
        patch_sha256=plan.patch_sha256,
        flavor=plan.flavor,
        cmake_args=plan.cmake_args,
        cpu_variants=sorted(plan.cpu_variants),
        cuda_version=plan.tools.nvcc.version if plan.flavor == "cuda" and plan.tools.nvcc else None,
        cuda_archs=plan.cuda_archs,
        compiler=f"{compiler.path} {compiler.version}" if compiler else "unknown",
        runtime_lib_dirs=[plan.tools.cublas.lib_dir] if plan.flavor == "cuda" and plan.tools.cublas
        and plan.tools.cublas.from_wheel else [],
        built_at=datetime.now(UTC).isoformat(timespec="seconds"),
        build_seconds=round(seconds, 1),
    )


def run_selftest_subprocess(folder: Path, report: Reporter | None = None,
                            cancel: CancelToken | None = None) -> dict[str, object]:
    """Run the self-test in a child process, so a native crash cannot take the caller down."""
    env = dict(os.environ, FASTMTP_BACKEND_DIR=str(folder), PYTHONDONTWRITEBYTECODE="1")
    cmd = [processes.child_python(), "-m", "app.native.selftest", str(folder)]  # Windows app: its console program
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            errors="replace", start_new_session=True, creationflags=processes.creationflags())
    if cancel is not None:
        cancel.set_kill(lambda: processes.kill_group(proc))
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.rstrip())
            if report is not None and not raw.startswith("{"):
                report.log(raw.rstrip())
        code = proc.wait()
    finally:
        if cancel is not None:
            cancel.set_kill(None)
    if cancel is not None:
        check_cancel(cancel)
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                result: dict[str, object] = json.loads(line)
                return result
            except ValueError:
                break
    return {"ok": False, "error": f"the self-test process ended with code {code} and no result",
            "log_tail": lines[-20:]}
