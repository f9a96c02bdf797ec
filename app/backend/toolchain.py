"""Find the build tools and GPUs, and say in plain words what is missing and how to get it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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
                          "on Windows install Visual Studio Build Tools with the C++ workload; "
                          "on macOS run `xcode-select --install`.")
        if cuda and self.nvcc is None:
            advice.append("The CUDA compiler nvcc was not found: install the NVIDIA CUDA Toolkit (12.x or newer) "
                          "and make sure nvcc is on PATH or CUDA_PATH is set; or build the CPU backend.")
        elif cuda and self.cublas is None:
            advice.append("nvcc is there but the cuBLAS development files (cublas_v2.h, libcublas) are not: "
                          "install the full CUDA Toolkit (on Debian/Ubuntu: libcublas-dev for your CUDA version), "
                          "or run `pip install nvidia-cublas` inside the app's environment; the builder uses it.")
        return advice

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tool_dirs() -> list[str]:
    # the app's own environment (pip brings cmake and ninja) before PATH
    return [str(Path(sys.executable).parent)]


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
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
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
        if root and (Path(root) / "bin" / "nvcc").exists():
            return str(Path(root) / "bin" / "nvcc")
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
    for root in _cuda_roots(nvcc):
        for inc, lib in (("include", "lib64"), ("targets/x86_64-linux/include", "targets/x86_64-linux/lib"),
                         ("include", "lib/x86_64-linux-gnu"), ("include", "lib")):
            if (root / inc / "cublas_v2.h").is_file() and any((root / lib).glob("*cublas.*")):
                return Cublas(str(root / inc), str(root / lib), from_wheel=False)
    for entry in sys.path:
        for sub in ("nvidia/cu13", "nvidia/cublas"):
            base = Path(entry) / sub
            if (base / "include" / "cublas_v2.h").is_file() and any((base / "lib").glob("libcublas.so*")):
                return Cublas(str(base / "include"), str(base / "lib"), from_wheel=True)
    return None


def find_cuda_driver_lib(nvcc: str | None) -> str | None:
    """libcuda.so from the driver, or the toolkit's link stub."""
    folders = [root / sub for root in _cuda_roots(nvcc)
               for sub in ("lib64/stubs", "targets/x86_64-linux/lib/stubs", "lib64", "lib")]
    folders += [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib/wsl/lib")]
    for folder in folders:
        found = sorted(folder.glob("libcuda.so*"))
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
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []


def detect() -> Toolchain:
    dirs = _tool_dirs()
    nvcc = _nvcc_path()
    cc = os.environ.get("CC") or _which(["cc", "gcc", "clang"])
    cxx = os.environ.get("CXX") or _which(["c++", "g++", "clang++"])
    return Toolchain(
        cmake=_tool(_which(["cmake"], dirs)),
        ninja=_tool(_which(["ninja"], dirs)),
        c_compiler=_tool(cc),
        cxx_compiler=_tool(cxx),
        nvcc=_tool(nvcc, r"release (\d+\.\d+)"),
        ccache=_tool(_which(["ccache"])),
        gpus=detect_gpus(),
        cublas=find_cublas(nvcc) if nvcc else None,
        cuda_driver_lib=find_cuda_driver_lib(nvcc) if nvcc else None,
    )
