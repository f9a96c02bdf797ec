"""Import ``llama_cpp`` from the active backend's folder, never from an unpatched copy in site-packages."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from types import ModuleType

from app.backend import registry
from app.backend.registry import BackendManifest
from app.core.errors import BackendError

_loaded: tuple[Path, ModuleType] | None = None


def backend_folder() -> Path:
    """``FASTMTP_BACKEND_DIR`` when set (self-test, tests, workers), else the active backend."""
    override = os.environ.get("FASTMTP_BACKEND_DIR")
    if override:
        return Path(override).resolve()
    manifest = registry.active()
    if manifest is None:
        raise BackendError("No llama.cpp backend is installed yet.",
                           "Run `python -m app backend build` (it builds the patched backend once: a few minutes).")
    return registry.backend_dir(manifest.id).resolve()


def backend_manifest() -> BackendManifest:
    return BackendManifest.read(backend_folder())


def import_llama_cpp() -> ModuleType:
    """Return the ``llama_cpp`` module of the backend folder; loads it on first call."""
    global _loaded
    folder = backend_folder()
    if _loaded is not None:
        if _loaded[0] != folder:
            raise BackendError(f"This process already loaded the backend in {_loaded[0]}.",
                               "Switching backends needs a restart of the engine process.")
        return _loaded[1]
    if not (folder / "llama_cpp" / "__init__.py").is_file():
        raise BackendError(f"{folder} does not hold a built llama_cpp package.",
                           "Rebuild the backend with `python -m app backend build`.")
    stray = sys.modules.get("llama_cpp")
    if stray is not None and not _is_inside(Path(stray.__file__ or ""), folder):
        raise BackendError(f"Another llama_cpp was imported first, from {stray.__file__}.",
                           "Import nothing from llama_cpp before the app does.")
    _preload_runtime_libs(folder)
    sys.path.insert(0, str(folder))
    import llama_cpp

    if not _is_inside(Path(llama_cpp.__file__ or ""), folder):
        raise BackendError(f"llama_cpp was imported from {llama_cpp.__file__}, not from the backend {folder}.")
    module: ModuleType = llama_cpp
    _load_backend_modules(folder)
    _loaded = (folder, module)
    return module


def _load_backend_modules(folder: Path) -> None:
    """Load a GGML_BACKEND_DL build's backend modules (the best CPU variant, and RPC) from its own lib folder.

    ggml would otherwise search the Python executable's folder and the working directory, find
    nothing, and every model load would fail with "no backends are loaded".
    """
    try:
        manifest = BackendManifest.read(folder)
    except BackendError:
        return
    if not manifest.loads_backends_at_start:
        return
    lib_dir = folder / "llama_cpp" / "lib"
    ggml = _ggml(folder)
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.restype = None
    ggml.ggml_backend_load_all_from_path(str(lib_dir).encode())
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    if not ggml.ggml_backend_reg_by_name(b"CPU"):  # the RPC module loads on any processor: look for the CPU one
        raise BackendError(f"None of the backend's CPU modules in {lib_dir} can run on this processor.",
                           "This processor lacks SSE4.2; build the backend on this machine instead "
                           "(`python -m app backend build`).")


def _ggml(folder: Path) -> ctypes.CDLL:
    """The backend's own ggml library (already loaded by llama_cpp: the same handle)."""
    lib_dir = folder / "llama_cpp" / "lib"
    names = ("libggml.so", "libggml.dylib", "ggml.dll")
    found = next((lib_dir / name for name in names if (lib_dir / name).exists()), None)
    if found is None:
        raise BackendError(f"The backend in {folder} has no ggml library.",
                           "Install the backend again (`python -m app backend build`).")
    return ctypes.CDLL(str(found))


_GPU_DEVICE_TYPES = (1, 2)  # ggml_backend_dev_type: GPU, IGPU (not CPU, ACCEL, META, nor an RPC server)


def gpu_devices() -> list[str]:
    """Descriptions of the GPUs this backend can offload to (loads the backend first).

    Not ``llama_supports_gpu_offload``: it also answers yes for a build with the RPC backend, which
    offloads to other machines, not to a GPU here.
    """
    import_llama_cpp()
    ggml = _ggml(backend_folder())
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_type.restype = ctypes.c_int
    ggml.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_description.restype = ctypes.c_char_p
    found: list[str] = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        if ggml.ggml_backend_dev_type(device) in _GPU_DEVICE_TYPES:
            found.append((ggml.ggml_backend_dev_description(device) or b"GPU").decode(errors="replace"))
    return found


def _preload_runtime_libs(folder: Path) -> None:
    """Load libraries the build linked from outside the system paths (a pip cuBLAS) before llama_cpp does."""
    try:
        dirs = BackendManifest.read(folder).runtime_lib_dirs
    except BackendError:
        return
    for lib_dir in dirs:
        for name in ("cublasLt", "cublas"):
            for path in sorted(Path(lib_dir).glob(f"lib{name}.so*")):
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                break


def _is_inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except ValueError:
        return False
    return True
