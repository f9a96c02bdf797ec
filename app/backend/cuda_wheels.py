"""The CUDA Toolkit from NVIDIA's pip wheels, for machines that have the driver but no toolkit.

Most GPU owners have the NVIDIA driver, not nvcc and cuBLAS. NVIDIA publishes the pieces a CUDA
build needs as pip wheels (nvcc, cicc, headers, cudart, cuBLAS), so the app downloads them into a
wheelhouse in its cache (``fetch``), then installs them as one toolkit folder that CMake's
FindCUDAToolkit accepts (``install``): ``<cache>/cuda-toolkit/<cuda>/{bin,include,lib,nvvm}``.

The versions follow CUDA's minor-version compatibility: the same major version as the driver and a
minor version not newer than the driver's, so the backend built with them runs on that driver.
Qt-free; the CLI and the GUI call it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core import paths, processes
from app.core.cancel import CancelToken
from app.core.errors import BuildCancelled, ToolchainError

MARKER = "fastmtp-cuda-toolkit.json"
TOOLKIT_ENV = "FASTMTP_CUDA_TOOLKIT"  # auto | system | app: which CUDA toolkit a build uses
_STAGING = ".staging-"

Log = Callable[[str], None]

# The wheels that make a toolkit, per CUDA major version. CUDA 13 wheels all install under
# nvidia/cu13/; the CUDA 12 ones under nvidia/<component>/ (merged into one root on install).
_PACKAGES: dict[int, list[str]] = {
    13: ["nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime",
         "nvidia-cuda-culibos", "nvidia-cublas"],
    # PyPI's nvidia-cuda-nvcc-cu12 holds ptxas and libnvvm but no nvcc (checked 12.0 … 12.9); fetch
    # says so before the large cuBLAS download.
    12: ["nvidia-cuda-nvcc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12", "nvidia-cublas-cu12"],
}
_NVCC_PACKAGE = {13: "nvidia-cuda-nvcc", 12: "nvidia-cuda-nvcc-cu12"}
# what a finished root must hold for CMake to configure the CUDA backend with it
_REQUIRED_FILES = ["bin/nvcc", "nvvm/bin/cicc", "include/cuda_runtime.h", "include/cublas_v2.h",
                   "lib/libcudart.so", "lib/libcublas.so", "lib/libcublasLt.so"]


class CudaWheelsUnreachable(ToolchainError):
    """The package index could not be reached: a network problem (CLI exit code 3)."""

    kind = "cuda-wheels-unreachable"  # exit code 3 (core.errors.EXIT_CODES)


@dataclass(frozen=True)
class Requirement:
    """One wheel with its version range: ``>=major.0,<major.(minor+1)``."""

    name: str
    low: tuple[int, ...]
    high: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name}>={_dotted(self.low)},<{_dotted(self.high)}"

    def matches(self, wheel: Path) -> bool:
        """Whether a wheel file in a wheelhouse is this package in this range."""
        parsed = _wheel_name_version(wheel)
        return parsed is not None and parsed[0] == _normalize(self.name) and self.low <= parsed[1] < self.high


@dataclass
class AppToolkit:
    """An installed toolkit root in the app's cache, as its marker file describes it."""

    root: Path
    cuda: str  # the CUDA version it was installed for ("13.0")
    packages: dict[str, str] = field(default_factory=dict)  # wheel name -> version
    nvcc_version: str = "unknown"

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def include_dir(self) -> Path:
        return self.root / "include"

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "cuda": self.cuda, "packages": self.packages,
                "nvcc_version": self.nvcc_version}


# ----------------------------------------------------------------------------- versions


def parse_cuda_version(text: str) -> tuple[int, int]:
    """``"13.0"`` -> (13, 0); raises ToolchainError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", text)
    if match is None:
        raise ToolchainError(f"{text!r} is not a CUDA version.", "Give it as major.minor, for example --cuda 13.0.")
    return int(match.group(1)), int(match.group(2))


def parse_driver_cuda_version(text: str) -> str | None:
    """The driver's CUDA version from the header of plain ``nvidia-smi`` output ("CUDA Version: 13.0")."""
    match = re.search(r"CUDA Version\s*:\s*(\d+)\.(\d+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def driver_cuda_version() -> str | None:
    """What CUDA version the installed driver supports; None without nvidia-smi or a working driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_driver_cuda_version(proc.stdout) if proc.returncode == 0 else None


def requirements(cuda: str) -> list[Requirement]:
    """The wheels for a driver's CUDA version: same major, minor not newer than the driver's."""
    major, minor = parse_cuda_version(cuda)
    names = _PACKAGES.get(major)
    if names is None:
        known = ", ".join(f"{m}.x" for m in sorted(_PACKAGES))
        raise ToolchainError(f"The app knows no CUDA Toolkit wheels for CUDA {major}.{minor} (it knows {known}).",
                             "Install the CUDA Toolkit from https://developer.nvidia.com/cuda-downloads, "
                             "or update the NVIDIA driver.")
    return [Requirement(name, (major, 0), (major, minor + 1)) for name in names]


def resolve_cuda(cuda: str | None) -> str:
    """The CUDA version to fetch for: the one given, else the driver's."""
    if cuda:
        major, minor = parse_cuda_version(cuda)
        return f"{major}.{minor}"
    found = driver_cuda_version()
    if found is None:
        raise ToolchainError("The NVIDIA driver's CUDA version is unknown (nvidia-smi was not found or failed).",
                             "Pass --cuda with the version `nvidia-smi` shows on the GPU machine, "
                             "for example --cuda 13.0.")
    return found


# ----------------------------------------------------------------------------- folders


def wheelhouse_dir(cuda: str) -> Path:
    return paths.cache_dir() / "cuda-wheels" / cuda


def toolkits_dir() -> Path:
    return paths.cache_dir() / "cuda-toolkit"


def toolkit_dir(cuda: str) -> Path:
    return toolkits_dir() / cuda


def read_toolkit(root: Path) -> AppToolkit | None:
    """The toolkit in ``root`` if its install finished (the marker is written last)."""
    try:
        data = json.loads((root / MARKER).read_text())
        return AppToolkit(root, str(data["cuda"]), dict(data.get("packages", {})),
                          str(data.get("nvcc_version", "unknown")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def installed_toolkits() -> list[AppToolkit]:
    """Every finished toolkit in the cache, newest CUDA version first."""
    base = toolkits_dir()
    if not base.is_dir():
        return []
    found = [tk for entry in base.iterdir() if not entry.name.startswith(".")
             if (tk := read_toolkit(entry)) is not None]
    return sorted(found, key=lambda tk: _version_key(tk.cuda), reverse=True)


def find_toolkit(driver_cuda: str | None = None) -> AppToolkit | None:
    """The installed toolkit to build with: the newest that the driver can run (any, if the driver is unknown)."""
    toolkits = installed_toolkits()
    if driver_cuda is None or not toolkits:
        return toolkits[0] if toolkits else None
    major, minor = parse_cuda_version(driver_cuda)
    for tk in toolkits:
        tk_major, tk_minor = _version_key(tk.cuda)[:2]
        if tk_major == major and tk_minor <= minor:
            return tk
    return None


# ----------------------------------------------------------------------------- fetch


def missing_wheels(cuda: str, wheelhouse: Path | None = None) -> list[Requirement]:
    """The requirements the wheelhouse holds no matching wheel for."""
    house = wheelhouse or wheelhouse_dir(cuda)
    wheels = sorted(house.glob("*.whl")) if house.is_dir() else []
    return [req for req in requirements(cuda) if not any(req.matches(w) for w in wheels)]


def fetch(cuda: str, wheelhouse: Path | None = None, index_url: str | None = None,
          log: Log | None = None, cancel: CancelToken | None = None) -> Path:
    """Download the wheels for ``cuda`` into the wheelhouse (the network, unless it holds them all already).

    Raises:
        CudaWheelsUnreachable: the index could not be reached; the advice says how to fetch elsewhere.
        ToolchainError: the index has no matching wheels, or the nvcc wheel holds no nvcc.
        BuildCancelled: ``cancel`` was triggered (finished wheels stay; pip's partial files do not).
    """
    say = log or (lambda _line: None)
    cancel = cancel or CancelToken()
    house = wheelhouse or wheelhouse_dir(cuda)
    house.mkdir(parents=True, exist_ok=True)
    missing = missing_wheels(cuda, house)
    if not missing:
        say(f"the wheelhouse {house} already holds every CUDA {cuda} wheel")
        return house
    nvcc_name = _NVCC_PACKAGE[parse_cuda_version(cuda)[0]]
    # the nvcc wheel first and alone: if it holds no nvcc, stop before the large cuBLAS download
    batches = [[req for req in missing if req.name == nvcc_name], [req for req in missing if req.name != nvcc_name]]
    for batch in (b for b in batches if b):
        say("downloading " + ", ".join(map(str, batch)))
        # no pip cache: the wheelhouse is the cache, a second copy of cuBLAS would only take disk space
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--progress-bar", "off", "--dest", str(house)]
        if index_url:
            cmd += ["--index-url", index_url]
        code, tail = _run([*cmd, *map(str, batch)], say, cancel)
        if code != 0:
            raise _fetch_error(cuda, missing_wheels(cuda, house), tail, house)
        if batch[0].name == nvcc_name:
            _check_nvcc_wheel(cuda, batch[0], house)
    still = missing_wheels(cuda, house)
    if still:
        raise ToolchainError(f"pip finished, but {house} still lacks: {', '.join(map(str, still))}.",
                             "Run the fetch again; if it keeps failing, report it with this message.")
    return house


def _check_nvcc_wheel(cuda: str, req: Requirement, house: Path) -> None:
    """Stop before the large downloads when the nvcc wheel holds no nvcc (PyPI's CUDA 12 wheels)."""
    for wheel in house.glob("*.whl"):
        if req.matches(wheel):
            with zipfile.ZipFile(wheel) as archive:
                if any(name.endswith("/bin/nvcc") for name in archive.namelist()):
                    return
            raise ToolchainError(
                f"The {wheel.name} wheel holds no nvcc compiler (PyPI publishes nvcc itself only for CUDA 13), "
                f"so the app cannot make a CUDA {cuda} toolkit from pip wheels.",
                "Update the NVIDIA driver to 580 or newer (CUDA 13) and run this again, or install the "
                "CUDA Toolkit from https://developer.nvidia.com/cuda-downloads; or build the CPU backend.")


def _fetch_error(cuda: str, missing: list[Requirement], tail: list[str], house: Path) -> ToolchainError:
    text = "\n".join(tail)
    reqs = " ".join(f"'{req}'" for req in missing)
    elsewhere = (f"On a Linux x86-64 machine with internet run `python -m app backend cuda-toolkit fetch "
                 f"--cuda {cuda} --wheelhouse DIR` (or `pip download --no-deps --only-binary=:all: -d DIR {reqs}`), "
                 f"copy DIR here and run `python -m app backend cuda-toolkit install --cuda {cuda} --wheelhouse DIR`.")
    network = re.search(r"NewConnectionError|Failed to establish|Connection refused|Name or service not known|"
                        r"Temporary failure in name resolution|Network is unreachable|timed out|ConnectionError|"
                        r"ProxyError|SSLError", text)
    if network:
        return CudaWheelsUnreachable(
            f"The CUDA {cuda} wheels could not be downloaded: the package index was not reachable. "
            f"Still missing: {', '.join(req.name for req in missing)}.\nLast lines:\n{text}",
            "Check the internet connection (or pip's proxy settings) and run it again. " + elsewhere)
    return ToolchainError(
        f"pip could not download the CUDA {cuda} wheels into {house}. Still missing: "
        f"{', '.join(req.name for req in missing)}.\nLast lines:\n{text}",
        "If the index has no such versions, your driver's CUDA version may be too new or too old for the "
        "wheels on PyPI: try --cuda with an older minor version of the same major. " + elsewhere)


# ----------------------------------------------------------------------------- install


def install(cuda: str, wheelhouse: Path | None = None, log: Log | None = None,
            cancel: CancelToken | None = None) -> AppToolkit:
    """Install the wheelhouse's wheels as one toolkit root; nothing is left behind if it fails or is cancelled.

    pip installs into a staging folder, every ``nvidia/<component>/`` folder is merged into one root
    (bin, include, lib, nvvm), the unversioned library links CMake looks for are made, nvcc is run
    once, then the root is renamed into place and its marker written last.
    """
    say = log or (lambda _line: None)
    cancel = cancel or CancelToken()
    house = wheelhouse or wheelhouse_dir(cuda)
    missing = missing_wheels(cuda, house)
    if missing:
        raise ToolchainError(f"The wheelhouse {house} lacks: {', '.join(map(str, missing))}.",
                             f"Run `python -m app backend cuda-toolkit fetch --cuda {cuda}` first "
                             "(or pass --wheelhouse with a folder that holds them).")
    wheels = _chosen_wheels(cuda, house)
    final = toolkit_dir(cuda)
    final.parent.mkdir(parents=True, exist_ok=True)
    cleanup_stale_staging()
    staging = final.parent / f"{_STAGING}{cuda}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        target = staging / "pip"
        say(f"installing {len(wheels)} wheels from {house}")
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
               "--disable-pip-version-check", "--find-links", str(house), "--target", str(target),
               *map(str, wheels)]
        code, tail = _run(cmd, say, cancel)
        if code != 0:
            raise ToolchainError(f"pip could not install the CUDA {cuda} wheels (exit code {code}). Last lines:\n"
                                 + "\n".join(tail),
                                 "Nothing was installed. Delete the wheelhouse named above and fetch again.")
        root = staging / "root"
        _merge(target / "nvidia", root, say)
        _check_cancel(cancel)
        _link_unversioned(root / "lib")
        if not (root / "lib64").exists():
            (root / "lib64").symlink_to("lib")
        absent = [name for name in _REQUIRED_FILES if not (root / name).exists()]
        if absent:
            raise ToolchainError(f"The CUDA {cuda} wheels do not make a complete toolkit: no {', '.join(absent)}.",
                                 "Nothing was installed. Install the CUDA Toolkit from "
                                 "https://developer.nvidia.com/cuda-downloads instead.")
        nvcc_version = _nvcc_release(root / "bin" / "nvcc")
        if nvcc_version is None:
            raise ToolchainError(f"The nvcc from the CUDA {cuda} wheels does not run.",
                                 "Nothing was installed. Fetch the wheels again (delete the wheelhouse first).")
        packages = dict(sorted(p for w in wheels if (p := _wheel_name_version_text(w)) is not None))
        toolkit = AppToolkit(final, cuda, packages, nvcc_version)
        _check_cancel(cancel)
        old = final.with_name(f"{_STAGING}old-{cuda}-{os.getpid()}")
        if final.exists():
            os.replace(final, old)
        os.replace(root, final)
        shutil.rmtree(old, ignore_errors=True)
        _write_marker(toolkit)
        say(f"CUDA toolkit {nvcc_version} (from wheels for CUDA {cuda}) installed in {final}")
        return toolkit
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure(cuda: str, wheelhouse: Path | None = None, index_url: str | None = None,
           log: Log | None = None, cancel: CancelToken | None = None) -> AppToolkit:
    """The installed toolkit for ``cuda``; fetches what the wheelhouse lacks and installs when missing."""
    existing = read_toolkit(toolkit_dir(cuda))
    if existing is not None:
        return existing
    fetch(cuda, wheelhouse, index_url, log, cancel)
    return install(cuda, wheelhouse, log, cancel)


def status(cuda: str | None = None) -> dict[str, Any]:
    """What is fetched and installed, and what the driver supports."""
    driver = driver_cuda_version()
    wanted = cuda or driver
    data: dict[str, Any] = {"driver_cuda": driver, "cuda": wanted,
                            "installed": [tk.to_dict() for tk in installed_toolkits()]}
    if wanted:
        data["requirements"] = [str(req) for req in requirements(wanted)]
        data["wheelhouse"] = str(wheelhouse_dir(wanted))
        data["wheelhouse_missing"] = [req.name for req in missing_wheels(wanted)]
    return data


def cleanup_stale_staging() -> None:
    """Remove staging folders of installs that were killed; they were never usable."""
    base = toolkits_dir()
    for entry in base.glob(_STAGING + "*") if base.is_dir() else []:
        pid = processes.parse_pid(entry.name.rsplit("-", 1)[-1])
        if pid is not None and pid != os.getpid() and processes.pid_alive(pid):
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _chosen_wheels(cuda: str, house: Path) -> list[Path]:
    """The newest matching wheel for each requirement."""
    chosen = []
    for req in requirements(cuda):
        matching = [w for w in house.glob("*.whl") if req.matches(w)]
        chosen.append(max(matching, key=lambda w: (_wheel_name_version(w) or ("", ()))[1]))
    return chosen


def _merge(nvidia: Path, root: Path, say: Log) -> None:
    """Move every ``nvidia/<component>/`` tree into ``root``; both wheel layouts end up one shape."""
    root.mkdir(parents=True)
    components = sorted(p for p in nvidia.iterdir() if p.is_dir() and p.name != "__pycache__") \
        if nvidia.is_dir() else []
    for component in components:
        for path in sorted(component.rglob("*")):
            if path.is_dir() or path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(component)
            if rel.parts[0] == "lib64":  # the CUDA 12 wheels' nvvm/lib64 stays; a top-level lib64 joins lib
                rel = Path("lib", *rel.parts[1:])
            dest = root / rel
            if dest.exists() or dest.is_symlink():
                say(f"keeping the first copy of {rel} (also in {component.name})")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)


def _link_unversioned(lib: Path) -> None:
    """``libcublas.so -> libcublas.so.13``: the wheels ship only versioned names, CMake looks for plain ones."""
    if not lib.is_dir():
        return
    for path in sorted(lib.glob("lib*.so.*")):
        plain = lib / (path.name.split(".so.")[0] + ".so")
        if not plain.exists() and not plain.is_symlink():
            plain.symlink_to(path.name)


def _nvcc_release(nvcc: Path) -> str | None:
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release (\d+\.\d+)", proc.stdout)
    return match.group(1) if proc.returncode == 0 and match else None


def _write_marker(toolkit: AppToolkit) -> None:
    data = dict(toolkit.to_dict(), installed_at=datetime.now(UTC).isoformat(timespec="seconds"))
    data.pop("root")
    tmp = toolkit.root / (MARKER + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, toolkit.root / MARKER)


# ----------------------------------------------------------------------------- helpers


def _run(cmd: list[str], say: Log, cancel: CancelToken) -> tuple[int, list[str]]:
    """Run pip, streaming its lines; cancel kills its whole process group (like the builder's commands)."""
    _check_cancel(cancel)
    if getattr(sys, "frozen", False):
        raise ToolchainError("The installed app has no pip, so it cannot download the CUDA toolkit wheels.",
                             "Install a prebuilt CUDA backend instead (Backend page: Install a prebuilt backend…, "
                             "or `fastmtp-chat backend install URL`), or install NVIDIA's CUDA Toolkit and build.")
    say("$ " + " ".join(cmd))
    code, tail = processes.run_streaming(cmd, say, cancel, keep=20)
    _check_cancel(cancel)
    return code, tail


def _check_cancel(cancel: CancelToken) -> None:
    if cancel.cancelled:
        raise BuildCancelled("Getting the CUDA toolkit was cancelled; no half-installed toolkit was kept.")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _version_key(text: str) -> tuple[int, ...]:
    """Release numbers of a version ("12.4.127.post1" -> (12, 4, 127)); enough for NVIDIA's versions."""
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _dotted(key: tuple[int, ...]) -> str:
    return ".".join(map(str, key))


def _wheel_name_version_text(wheel: Path) -> tuple[str, str] | None:
    parts = wheel.name.split("-")
    if not wheel.name.endswith(".whl") or len(parts) < 5:
        return None
    return parts[0].lower().replace("_", "-"), parts[1]


def _wheel_name_version(wheel: Path) -> tuple[str, tuple[int, ...]] | None:
    parsed = _wheel_name_version_text(wheel)
    return (_normalize(parsed[0]), _version_key(parsed[1])) if parsed else None
