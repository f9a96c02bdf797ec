"""What this installation is, for the About dialog and bug reports: the app's version, the active backend (its
id, llama-cpp-python version, llama.cpp commit, flavour, the CUDA it was built with and for which GPUs) from
the backend registry's manifest, and the NVIDIA driver and its CUDA version from ``nvidia-smi``.

Qt-free, and no ctypes: nothing here loads the backend; the manifest says what was built.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass, field

from app import __version__
from app.backend import cuda_wheels, registry
from app.core import processes

UNKNOWN = "not known"


@dataclass(frozen=True)
class Versions:
    """The versions one About dialog shows; None where there is nothing to know (no backend, no driver)."""

    app: str
    python: str
    backend_id: str | None = None
    backend_flavor: str | None = None  # "cpu" | "cuda"
    llama_cpp_python: str | None = None
    llama_cpp_commit: str | None = None
    patched: bool | None = None  # built with our d2t patch
    cuda_build: str | None = None  # the CUDA toolkit the backend was built with
    cuda_archs: tuple[str, ...] = ()
    driver: str | None = None  # the NVIDIA driver's version
    driver_cuda: str | None = None  # the newest CUDA version the driver runs
    gpus: tuple[str, ...] = field(default_factory=tuple)

    def rows(self) -> list[tuple[str, str]]:
        """(what, value) lines in words, in the dialog's order."""
        if self.backend_id is None:
            backend = [("Backend", "none yet (the first-run panel or the Backend page builds one)")]
        else:
            patch = "" if self.patched is None else (", d2t patch" if self.patched else ", without the d2t patch")
            backend = [("Backend", f"{self.backend_id} ({self.backend_flavor or UNKNOWN}{patch})"),
                       ("llama-cpp-python", self.llama_cpp_python or UNKNOWN),
                       ("llama.cpp commit", self.llama_cpp_commit or UNKNOWN)]
            if self.backend_flavor == "cuda":
                archs = f" for sm_{', sm_'.join(self.cuda_archs)}" if self.cuda_archs else ""
                backend.append(("CUDA (built with)", f"{self.cuda_build or UNKNOWN}{archs}"))
        if self.driver is None:
            driver = [("NVIDIA driver", "none found (nvidia-smi is not there or did not answer)")]
        else:
            driver = [("NVIDIA driver", self.driver + (f" (CUDA {self.driver_cuda})" if self.driver_cuda else ""))]
            driver += [("GPU", name) for name in self.gpus]
        return [("FastMTP Chat", self.app), *backend, *driver, ("Python", self.python)]

    def text(self) -> str:
        """The rows as plain text, one ``what: value`` a line (the dialog's Copy button)."""
        return "\n".join(f"{what}: {value}" for what, value in self.rows())


def parse_driver_query(text: str) -> tuple[str | None, list[str]]:
    """The driver version and the GPU names from ``nvidia-smi --query-gpu=name,driver_version
    --format=csv,noheader`` (one ``name, version`` line per GPU)."""
    driver: str | None = None
    gpus: list[str] = []
    for line in text.strip().splitlines():
        name, _, version = line.rpartition(",")
        if name.strip() and version.strip():
            gpus.append(name.strip())
            driver = driver or version.strip()
    return driver, gpus


def driver_versions() -> tuple[str | None, str | None, list[str]]:
    """(driver version, the driver's CUDA version, GPU names) from ``nvidia-smi``; Nones without a driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, None, []
    try:
        query = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30, check=False,
                               creationflags=processes.creationflags())
    except (OSError, subprocess.TimeoutExpired):
        return None, None, []
    if query.returncode != 0:
        return None, None, []
    driver, gpus = parse_driver_query(query.stdout)
    return driver, cuda_wheels.driver_cuda_version() if driver else None, gpus


def collect(ask_driver: bool = True) -> Versions:
    """The versions of this installation; ``ask_driver`` runs ``nvidia-smi`` (up to a few seconds: the About
    dialog does it in the background)."""
    manifest = registry.active()
    driver, driver_cuda, gpus = driver_versions() if ask_driver else (None, None, [])
    python = f"{platform.python_version()} ({platform.system()} {platform.machine()})"
    if manifest is None:
        return Versions(__version__, python, driver=driver, driver_cuda=driver_cuda, gpus=tuple(gpus))
    return Versions(__version__, python, backend_id=manifest.id, backend_flavor=manifest.flavor,
                    llama_cpp_python=manifest.llama_cpp_python_version, llama_cpp_commit=manifest.llama_cpp_commit,
                    patched=manifest.patched, cuda_build=manifest.cuda_version, cuda_archs=tuple(manifest.cuda_archs),
                    driver=driver, driver_cuda=driver_cuda, gpus=tuple(gpus))
