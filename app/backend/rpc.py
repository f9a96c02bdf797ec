"""llama.cpp's RPC backend: one model's layers spread over several machines' devices.

Every backend build has the RPC backend (``-DGGML_RPC=ON`` is one of the builder's common CMake arguments: one small
source file, linked into libggml, or the module ``libggml-rpc.so`` beside the CPU modules of a ``--cpu-variants``
build). So the engine's ``--rpc`` and ``serve --rpc`` use the active backend and its llama-server as they are, and
``rpc-worker`` builds llama.cpp's ``rpc-server`` (target ``ggml-rpc-server``) in the backend's own build tree, where
it links the libraries already compiled (seconds). A backend built before that has no RPC: ``require_rpc`` says to
rebuild it.

The RPC protocol has no authentication and no encryption: whoever reaches the port can run work on the device
and read what it holds. ``check_bind_address`` keeps a worker on loopback or the local network unless the user
said they understand.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from app.backend import registry
from app.backend.builder import BuildOptions, active_options, build_program
from app.backend.events import EventSink
from app.backend.registry import BackendManifest
from app.core import defaults, netaddr, paths, processes
from app.core.cancel import CancelToken
from app.core.errors import FastMTPError

WORKER_TARGET = "ggml-rpc-server"
DEFAULT_PORT = defaults.RPC_PORT
START_TIMEOUT_S = 60.0
NO_AUTH_WARNING = ("llama.cpp's RPC protocol has no password and no encryption: anyone who can reach the port can "
                   "run work on this machine's device and read the model data sent to it.")


class RpcError(FastMTPError):
    """An RPC worker address, build or connection cannot be used."""


def require_rpc(manifest: BackendManifest) -> None:
    """Raise RpcError in words when ``manifest``'s backend was built before RPC was part of every build."""
    if manifest.has_rpc:
        return
    raise RpcError(f"This backend ({manifest.id}) was built without the RPC backend; rebuild it with "
                   f"`{rebuild_command(manifest)}` (every build has it now; a few minutes on the CPU, about an hour "
                   "with CUDA).",
                   "The rebuilt backend becomes the active one; --rpc, serve --rpc and rpc-worker then use it.")


def rebuild_command(manifest: BackendManifest) -> str:
    """The ``backend build`` command that builds ``manifest``'s kind of backend again (with today's arguments)."""
    words = ["python -m app backend build", "--cuda" if manifest.flavor == "cuda" else "--cpu"]
    if manifest.loads_backends_at_start:
        words.append("--cpu-variants")
    elif manifest.portable:
        words.append("--portable")
    if not manifest.patched:
        words.append("--unpatched")
    return " ".join(words)


def rpc_options() -> BuildOptions:
    """``active_options()`` for a program that needs RPC: RpcError in words when the active backend has none."""
    manifest = registry.active()
    if manifest is not None:
        require_rpc(manifest)
    return active_options()


def build_worker(options: BuildOptions, on_event: EventSink | None = None, cancel: CancelToken | None = None) -> Path:
    """llama.cpp's ``rpc-server`` (target ``ggml-rpc-server``), built in the backend's own tree of ``options``.

    Raises:
        ToolchainError, PatchError, BuildCancelled, BackendError: as ``build_backend``.
    """
    return build_program(options, WORKER_TARGET, on_event, cancel)


# ----------------------------------------------------------------------------- addresses


WORKER = netaddr.Listener("The RPC worker", NO_AUTH_WARNING, "the RPC worker has no password",
                          "pass --i-understand-no-auth if this network is yours alone", RpcError)


def check_bind_address(host: str, allow_public: bool = False) -> str | None:
    """Where a worker may listen: the one bind rule (``netaddr.check_bind``) in the RPC worker's words."""
    return netaddr.check_bind(host, allow_public, WORKER)


def parse_endpoints(text: str) -> list[str]:
    """``host:port[,host:port]`` as a list of ``host:port``; raise RpcError in words when one is malformed."""
    endpoints = [part.strip() for part in text.split(",") if part.strip()]
    if not endpoints:
        raise RpcError("No RPC worker was given.", "Write them as host:port, separated by commas.")
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RpcError(f"{endpoint!r} is not host:port.",
                           f"Write each RPC worker as host:port, such as 192.168.1.20:{DEFAULT_PORT}.")
    return endpoints


# ----------------------------------------------------------------------------- the worker process


@dataclass
class RpcWorker:
    """A running ``rpc-server``: the backend's own device(s) offered to other machines over RPC.

    It runs from the backend's build tree, on that tree's libraries. Use as a context manager so it is always stopped.
    """

    binary: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    threads: int | None = None
    cache: bool = False

    def __post_init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = paths.cache_dir() / "logs" / f"rpc-worker-{os.getpid()}-{self.port}.log"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(self.binary), "--host", self.host, "--port", str(self.port)]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        if self.cache:
            cmd.append("--cache")
        return cmd

    def start(self) -> None:
        """Start it and wait until the port accepts connections; raise RpcError with its log if it exits."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log, processes.stop_signals_held():  # a stop waits for the handle
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        connect_to = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RpcError(f"The RPC worker exited with code {self.proc.returncode} while starting. Last lines:\n"
                               + self.log_tail(), "Check that the port is free and the address is this machine's.")
            try:
                with socket.create_connection((connect_to, self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.1)  # polling a child process we do not control; not test synchronisation
        raise RpcError(f"The RPC worker did not open port {self.port} within {START_TIMEOUT_S:.0f} s.",
                       "Last lines:\n" + self.log_tail())

    def log_tail(self, lines: int = 20) -> str:
        return processes.file_tail(self.log_path, lines)

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self) -> None:
        processes.stop_process(self.proc)

    def __enter__(self) -> RpcWorker:
        self.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()
