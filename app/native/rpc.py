"""Offer the engine the devices of llama.cpp RPC workers (``rpc-worker`` on other machines).

ggml registers each worker as a backend with its own devices; a model loaded afterwards with ``n_gpu_layers``
spreads those layers over every registered device, local GPUs and RPC workers alike. Every backend build has the
RPC backend (``GGML_RPC=ON``, see ``app/backend/rpc.py``); one built before that is refused in words.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from app.backend.rpc import RpcError, require_rpc
from app.native.loader import backend_folder, backend_manifest, import_llama_cpp

_connected: set[str] = set()


def _ggml() -> ctypes.CDLL:
    import_llama_cpp()  # loads the backend's libraries first; the same file gives the same handle
    lib_dir = backend_folder() / "llama_cpp" / "lib"
    found = next((lib_dir / name for name in ("libggml.so", "libggml.dylib", "ggml.dll") if (lib_dir / name).exists()),
                 None)
    if found is None:
        raise RpcError(f"The backend in {backend_folder()} has no ggml library.", "Build the backend again.")
    ggml = ctypes.CDLL(str(found))
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_register.restype = None
    ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    return ggml


def connect(endpoints: Sequence[str]) -> int:
    """Register every ``host:port`` worker's devices with ggml (once per process); return how many devices the
    workers added. Raises RpcError in words when the backend has no RPC or a worker cannot be reached."""
    require_rpc(backend_manifest())
    ggml = _ggml()
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError(f"The backend in {backend_folder()} was built with the RPC backend, but ggml did not load it.",
                       "Its libggml-rpc library may be missing: build the backend again (`python -m app backend "
                       "build`).")
    address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not address:
        raise RpcError("The RPC backend has no ggml_backend_rpc_add_server.", "Build the RPC backend again.")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    devices = 0
    for endpoint in endpoints:
        worker = add_server(endpoint.encode())
        if not worker:
            raise RpcError(f"The RPC worker {endpoint} cannot be reached.",
                           f"Start it on that machine (`python -m app rpc-worker --host ADDRESS --port "
                           f"{endpoint.rsplit(':', 1)[-1]}`) and check that this machine can reach the address.")
        if endpoint not in _connected:
            ggml.ggml_backend_register(worker)
            _connected.add(endpoint)
        devices += int(ggml.ggml_backend_reg_dev_count(worker))
    return devices
