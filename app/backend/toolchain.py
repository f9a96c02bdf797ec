"""Find the build tools and GPUs, and say in plain words what is missing and how to get it."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import Any, Literal

from app.backend import cuda_wheels
from app.core import processes
from app.core.errors import ToolchainError

ToolkitMode = Literal["auto", "system", "app"]


@dataclass(frozen=True)
class Tool:
    path: str
    version: str


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str  # "9.0"
    memory_mib: int

    @property
    def cuda_arch(self) -> str:  # "90"
        return self.compute_capability.replace(".", "")


@dataclass(frozen=True)
class Cublas:
    """Where cuBLAS headers and libraries are: the CUDA toolkit's own, or the ``nvidia-cublas`` wheel."""

    include_dir: str
    lib_dir: str
    from_wheel: bool


@dataclass(frozen=True)
class CudaToolkit:
    """Which CUDA toolkit a CUDA build uses: the system's, or the app's own from pip wheels (its cache)."""

    source: Literal["system", "app"]
    root: str
    version: str


@dataclass
class Toolchain:
    cmake: Tool | None
    ninja: Tool | None
    c_compiler: Tool | None
    cxx_compiler: Tool | None
    nvcc: Tool | None
    ccache: Tool | None
    gpus: list[Gpu] = field(default_factory=list)
    cublas: Cublas | None = None
    cuda_driver_lib: str | None = None  # libcuda.so (driver or toolkit stub); without it, no CUDA VMM
    cuda_toolkit: CudaToolkit | None = None  # where nvcc (and cuBLAS) come from
    build_env: dict[str, str] = field(default_factory=dict)  # Windows: what vcvarsall.bat sets (MSVC), else empty

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str] | None:
        """The environment of the build's commands: ``base`` (this process's) with ``build_env`` over it.

        None when there is nothing to add, so the commands simply inherit this process's environment.
        """
        if not self.build_env:
            return None
        return merge_env(os.environ if base is None else base, self.build_env)

    @property
    def can_build_cpu(self) -> bool:
        return None not in (self.cmake, self.ninja, self.c_compiler, self.cxx_compiler)

    @property
    def can_build_cuda(self) -> bool:
        return self.can_build_cpu and self.nvcc is not None and self.cublas is not None

    def problems(self, cuda: bool) -> list[str]:
        """Plain-words advice for every missing piece a build of this kind needs."""
        advice: list[str] = []
        if self.cmake is None:
            advice.append("CMake was not found: reinstall the app's Python environment (it brings cmake), "
                          "or install CMake 3.21+ from https://cmake.org/download/.")
        if self.ninja is None:
            advice.append("Ninja was not found: reinstall the app's Python environment (it brings ninja).")
        if self.c_compiler is None or self.cxx_compiler is None:
            advice.append("No C/C++ compiler was found: on Debian/Ubuntu run `sudo apt install build-essential`; "
                          "on Windows install Visual Studio Build Tools with the \"Desktop development with C++\" "
                          "workload (the app finds it by itself, no Developer prompt needed); "
                          "on macOS run `xcode-select --install`.")
        fetch = ("`python -m app backend cuda-toolkit install` (NVIDIA's pip wheels matching your driver, "
                 "about 530 MB to download, into the app's cache; or `backend build --cuda --fetch-cuda-toolkit`)")
        if cuda and self.nvcc is None:
            advice.append("The CUDA compiler nvcc was not found: let the app fetch its own CUDA toolkit with "
                          f"{fetch}, or install the NVIDIA CUDA Toolkit (12.x or newer) and make sure nvcc is on "
                          "PATH or CUDA_PATH is set; or build the CPU backend.")
        elif cuda and self.cublas is None:
            advice.append("nvcc is there but the cuBLAS development files (cublas_v2.h, libcublas) are not: "
                          "install the full CUDA Toolkit (on Debian/Ubuntu: libcublas-dev for your CUDA version), "
                          "or run `pip install nvidia-cublas` inside the app's environment; the builder uses it. "
                          f"Or let the app fetch a whole CUDA toolkit with {fetch}.")
        return advice

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tool_dirs(python: PurePath, platform: str = sys.platform) -> list[str]:
    """Where pip put cmake and ninja for this Python, searched before PATH: its own folder (a venv's ``bin``
    or ``Scripts``), and on Windows also ``Scripts`` beside a base install's ``python.exe``."""
    folders = [python.parent, python.parent / "Scripts"] if platform == "win32" else [python.parent]
    return [str(folder) for folder in folders]


def _tool_dirs() -> list[str]:
    return tool_dirs(Path(sys.executable))


def _which(names: list[str], extra_dirs: list[str] | None = None) -> str | None:
    for name in names:
        for folder in extra_dirs or []:
            found = shutil.which(name, path=folder)
            if found:
                return found
        found = shutil.which(name)
        if found:
            return found
    return None


def _version(cmd: list[str], pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False,
                              creationflags=processes.creationflags())
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(pattern, proc.stdout + proc.stderr)
    return match.group(1) if match else "unknown"


def _tool(path: str | None, pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> Tool | None:
    return Tool(path, _version([path, "--version"], pattern)) if path else None


def _nvcc_path() -> str | None:
    found = _which(["nvcc"])
    if found:
        return found
    for env in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(env)
        found = shutil.which("nvcc", path=str(Path(root) / "bin")) if root else None  # nvcc.exe on Windows
        if found:
            return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.exists() else None


def _cuda_roots(nvcc: str | None) -> list[Path]:
    roots = [Path(os.environ[env]) for env in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(env)]
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    roots += [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"), reverse=True), Path("/usr")]
    return roots


def find_cublas(nvcc: str | None) -> Cublas | None:
    """cuBLAS next to the CUDA toolkit (or the system), else from a pip ``nvidia-cublas`` wheel."""
    # the last layout is the Windows toolkit's (lib\x64\cublas.lib)
    for root in _cuda_roots(nvcc):
        for inc, lib in (("include", "lib64"), ("targets/x86_64-linux/include", "targets/x86_64-linux/lib"),
                         ("include", "lib/x86_64-linux-gnu"), ("include", "lib"), ("include", "lib/x64")):
            if (root / inc / "cublas_v2.h").is_file() and any((root / lib).glob("*cublas.*")):
                return Cublas(str(root / inc), str(root / lib), from_wheel=False)
    for entry in sys.path:
        for sub in ("nvidia/cu13", "nvidia/cublas"):
            base = Path(entry) / sub
            if (base / "include" / "cublas_v2.h").is_file() and any((base / "lib").glob("libcublas.so*")):
                return Cublas(str(base / "include"), str(base / "lib"), from_wheel=True)
    return None


def find_cuda_driver_lib(nvcc: str | None) -> str | None:
    """libcuda.so from the driver, or the toolkit's link stub; on Windows the toolkit's cuda.lib (for nvcuda.dll)."""
    folders = [root / sub for root in _cuda_roots(nvcc)
               for sub in ("lib64/stubs", "targets/x86_64-linux/lib/stubs", "lib64", "lib", "lib/x64")]
    folders += [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib/wsl/lib")]
    for folder in folders:
        found = sorted(folder.glob("libcuda.so*")) or sorted(folder.glob("cuda.lib"))
        if found:
            return str(found[0])
    return None


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader,nounits``."""
    gpus: list[Gpu] = []
    for line in text.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not re.fullmatch(r"\d+\.\d+", parts[1]):
            continue
        memory = int(parts[2]) if parts[2].isdigit() else 0
        gpus.append(Gpu(parts[0], parts[1], memory))
    return gpus


def detect_gpus() -> list[Gpu]:
    smi = _which(["nvidia-smi"])
    if smi is None:
        return []
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=False, creationflags=processes.creationflags(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []


def toolkit_mode() -> ToolkitMode:
    """``FASTMTP_CUDA_TOOLKIT``: ``auto`` (the system's when complete, else the app's), ``system`` or ``app``."""
    value = (os.environ.get(cuda_wheels.TOOLKIT_ENV) or "auto").strip().lower()
    if value == "auto":
        return "auto"
    if value == "system":
        return "system"
    if value == "app":
        return "app"
    raise ToolchainError(f"{cuda_wheels.TOOLKIT_ENV}={value!r} is not a choice.",
                         f"Set {cuda_wheels.TOOLKIT_ENV} to auto, system or app (or unset it).")


def nvcc_gpu_codes(nvcc: str) -> list[int]:
    """The real architectures this nvcc can compile for (``nvcc --list-gpu-code``: sm_75 … sm_121), oldest first."""
    try:
        proc = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, timeout=30, check=False,
                              creationflags=processes.creationflags())
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted({int(code) for code in re.findall(r"^sm_(\d+)\w*$", proc.stdout, re.MULTILINE)})


def _app_toolkit() -> cuda_wheels.AppToolkit | None:
    if not cuda_wheels.installed_toolkits():
        return None  # no need to ask nvidia-smi
    return cuda_wheels.find_toolkit(cuda_wheels.driver_cuda_version())


def detect() -> Toolchain:
    """The build tools; for CUDA, the system toolkit when it is complete, else the app's own (``toolkit_mode``)."""
    dirs = _tool_dirs()
    mode = toolkit_mode()
    nvcc = _nvcc_path() if mode != "app" else None
    nvcc_tool = _tool(nvcc, r"release (\d+\.\d+)")
    cublas = find_cublas(nvcc) if nvcc else None
    cuda_toolkit = CudaToolkit("system", str(Path(nvcc).resolve().parent.parent), nvcc_tool.version) \
        if nvcc and nvcc_tool else None
    # an nvcc that does not run (a wrapper whose toolkit is gone) has no version: it is no toolkit
    system_complete = nvcc_tool is not None and nvcc_tool.version != "unknown" and cublas is not None
    if mode != "system" and not system_complete:
        app = _app_toolkit()
        if app is not None:
            nvcc = str(app.nvcc)
            nvcc_tool = Tool(nvcc, app.nvcc_version)
            cublas = Cublas(str(app.include_dir), str(app.lib_dir), from_wheel=True)
            cuda_toolkit = CudaToolkit("app", str(app.root), app.nvcc_version)
    build_env = msvc_build_env() if sys.platform == "win32" else {}
    cc, cxx = _compilers(build_env, sys.platform)
    return Toolchain(
        cmake=_tool(_which(["cmake"], dirs)),
        ninja=_tool(_which(["ninja"], dirs)),
        c_compiler=_tool(cc),
        cxx_compiler=_tool(cxx),
        nvcc=nvcc_tool,
        ccache=_tool(_which(["ccache"])),
        gpus=detect_gpus(),
        cublas=cublas,
        cuda_driver_lib=find_cuda_driver_lib(nvcc) if nvcc else None,
        cuda_toolkit=cuda_toolkit,
        build_env=build_env,
    )


def _compilers(build_env: Mapping[str, str], platform: str) -> tuple[str | None, str | None]:
    """CC/CXX when set; on Windows MSVC's cl (on PATH, or on the PATH vcvarsall gives); else cc/c++ and kin."""
    cc, cxx = os.environ.get("CC"), os.environ.get("CXX")
    if platform == "win32":
        cl = shutil.which("cl", path=build_env["PATH"]) if build_env.get("PATH") else _which(["cl"])
        cc, cxx = cc or cl, cxx or cl
    return cc or _which(["cc", "gcc", "clang"]), cxx or _which(["c++", "g++", "clang++"])


def platform_note(platform: str = sys.platform) -> str | None:
    """What a user of this system should know about the backend it can build, beyond the missing tools."""
    if platform == "darwin":
        return ("On macOS there is no CUDA (NVIDIA's GPUs are not supported there): the backend is built for the "
                "CPU, with llama.cpp's Metal support for the Apple GPU. The C/C++ compiler comes with the Xcode "
                "command line tools (`xcode-select --install`).")
    if platform == "win32":
        return ("On Windows the backend is built with Visual Studio's C++ compiler (MSVC, from Visual Studio or "
                "its Build Tools), which the app finds by itself; a Developer prompt is not needed.")
    return None


# ---------------------------------------------------------------- MSVC on Windows

VC_TOOLS_COMPONENT = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"
_VCVARSALL = ("VC", "Auxiliary", "Build", "vcvarsall.bat")


def vswhere_path(program_files_x86: Path) -> Path:
    """Where the Visual Studio Installer keeps vswhere.exe (the same place for VS 2017 and newer)."""
    return program_files_x86 / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"


def vswhere_command(vswhere: Path) -> list[str]:
    """Ask vswhere for the newest installation (Build Tools too) that has the x64 C++ compiler."""
    return [str(vswhere), "-latest", "-products", "*", "-requires", VC_TOOLS_COMPONENT,
            "-property", "installationPath", "-utf8"]


def find_vcvarsall(program_files_x86: Path, program_files: Path | None = None) -> Path | None:
    """vcvarsall.bat of the newest Visual Studio or Build Tools with the C++ workload, or None.

    vswhere answers first; without it (or when it finds nothing), the usual folders
    ``<Program Files>\\Microsoft Visual Studio\\<year>\\<edition>`` are searched, newest year first.
    """
    vswhere = vswhere_path(program_files_x86)
    if vswhere.is_file():
        try:
            proc = subprocess.run(vswhere_command(vswhere), capture_output=True, timeout=60, check=False,
                                  creationflags=processes.creationflags())
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0:
            for line in proc.stdout.decode("utf-8", errors="replace").splitlines():
                candidate = Path(line.strip(), *_VCVARSALL)
                if line.strip() and candidate.is_file():
                    return candidate
    roots = [root for root in (program_files, program_files_x86) if root is not None]
    found = [path for root in roots for path in (root / "Microsoft Visual Studio").glob("*/*/" + "/".join(_VCVARSALL))
             if path.is_file()]
    found.sort(key=lambda path: (_vs_major(path.parents[4].name), path.parents[3].name), reverse=True)
    return found[0] if found else None


def _vs_major(folder: str) -> int:
    """Visual Studio's major version from its folder: ``2022`` is 17, and VS 2026 names its folder ``18``."""
    if not folder.isdigit():
        return 0
    number = int(folder)
    return number if number < 100 else {2017: 15, 2019: 16, 2022: 17}.get(number, 0)


def vcvars_command(vcvarsall: PurePath, arch: str = "x64", comspec: str = "cmd.exe") -> str:
    """One cmd line that runs vcvarsall.bat and prints the environment it leaves (UTF-16 with ``/u``).

    ``/s`` makes cmd drop only the outer quotes, so the quoted path inside survives spaces.
    """
    return f'"{comspec}" /u /s /c "call "{vcvarsall}" {arch} >nul && set"'


def parse_set_output(text: str) -> dict[str, str]:
    """``NAME=value`` lines of cmd's ``set``, names upper-cased (Windows names ignore case).

    Lines without ``=`` and cmd's hidden per-drive entries (``=C:=C:\\...``) are skipped.
    """
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            env[name.upper()] = value
    return env


def parse_set_bytes(raw: bytes) -> dict[str, str]:
    """``set`` as ``cmd /u`` writes it into a pipe: UTF-16-LE, so a user name like Núñez survives."""
    return parse_set_output(raw.decode("utf-16-le", errors="replace"))


def env_delta(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    """What ``after`` sets differently from ``before`` (names compared regardless of case)."""
    old = {name.upper(): value for name, value in before.items()}
    return {name.upper(): value for name, value in after.items() if old.get(name.upper()) != value}


def merge_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``overrides`` over it; a ``Path`` in ``base`` gives way to ``PATH`` (no name twice)."""
    replaced = {name.upper() for name in overrides}
    merged = {name: value for name, value in base.items() if name.upper() not in replaced}
    merged.update(overrides)
    return merged


@functools.cache
def msvc_environment(vcvarsall: Path, arch: str = "x64") -> dict[str, str]:
    """The variables vcvarsall.bat sets (PATH, INCLUDE, LIB, …) for ``arch``; empty when it fails.

    Run once per process: vcvarsall takes seconds.
    """
    comspec = os.environ.get("COMSPEC", "cmd.exe")
    try:
        proc = subprocess.run(vcvars_command(vcvarsall, arch, comspec), capture_output=True, timeout=120,
                              check=False, creationflags=processes.creationflags())
    except (OSError, subprocess.TimeoutExpired):
        return {}
    after = parse_set_bytes(proc.stdout)
    if proc.returncode != 0 or "INCLUDE" not in after or "LIB" not in after:
        return {}
    return env_delta(os.environ, after)


def msvc_build_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Windows: MSVC's environment for the build, unless cl is already on PATH (a Developer prompt) or CC is set.

    So a backend build works when the app is started from the Start menu.
    """
    environ = os.environ if environ is None else environ
    if environ.get("CC") or shutil.which("cl", path=environ.get("PATH")):
        return {}
    program_files_x86 = Path(environ.get("ProgramFiles(x86)") or environ.get("PROGRAMFILES(X86)")
                             or r"C:\Program Files (x86)")
    program_files = Path(environ.get("ProgramFiles") or environ.get("PROGRAMFILES") or r"C:\Program Files")
    vcvarsall = find_vcvarsall(program_files_x86, program_files)
    return msvc_environment(vcvarsall) if vcvarsall else {}


def fit_cuda_archs(nvcc: str, archs: list[str]) -> list[str]:
    """Archs this nvcc knows stay; one newer than it knows becomes PTX of the newest arch it knows.

    The driver JIT-compiles that PTX for the newer GPU (slower first start, still correct). 12x archs are
    not used for it: ggml turns them into the arch-specific 12xa, whose PTX runs on no other GPU.
    """
    known = nvcc_gpu_codes(nvcc)
    fitted: list[str] = []
    for arch in archs:
        if not arch.isdigit() or not known or int(arch) in known or int(arch) < known[0]:
            fitted.append(arch)
            continue
        portable = [code for code in known if not 120 <= code <= 129 and code < int(arch)]
        fitted.append(f"{(portable or known)[-1]}-virtual")
    return sorted(set(fitted))


@functools.cache
def cpu_has_amx() -> bool:
    """Whether this processor has AMX (``amx_int8`` in /proc/cpuinfo's flags), so llama.cpp's CPU backend uses its
    AMX weight buffers: their path segfaults in ``llama_decode`` on Q4_K/Q6_K weights in the pinned build, so the
    engine (``native.handles.Model``) and llama-server (``--no-repack``) keep weights in plain buffers there, the
    same on both sides. ``FASTMTP_EXTRA_BUFFERS=1`` keeps the extra buffers on, to check a newer build."""
    if os.environ.get("FASTMTP_EXTRA_BUFFERS") == "1":
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return any(line.startswith("flags") and " amx_int8" in line for line in handle)
    except OSError:
        return False
