"""llama.cpp's RPC backend: one model's layers spread over several machines' devices.

The RPC code lives in a second build tree beside the backend's own, ``<cache>/build/<backend id>-rpc``: the same
patched source and CMake arguments plus ``-DGGML_RPC=ON``. Why not switch RPC on in the common arguments: every
backend id would change, so every installed backend and its llama-server would be rebuilt once (5 minutes per CPU
tree here, about an hour for CUDA), for a feature few machines use. The RPC tree is built only where RPC is
asked for, and only the targets that machine needs: ``ggml-rpc-server`` on a helper (``rpc-worker``), ``llama``
for the local engine (staged as a backend folder of its own), ``llama-server`` for ``serve --rpc``.

The RPC protocol has no authentication and no encryption: whoever reaches the port can run work on the device
and read what it holds. ``check_bind_address`` keeps a worker on loopback or the local network unless the user
said they understand.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from app import netaddr, paths
from app.backend import buildlock, registry
from app.backend.builder import (
    BuildOptions,
    BuildPlan,
    Reporter,
    _install,
    build_dir_of,
    check_cancel,
    compile_target,
    configure,
    plan_build,
    prepare_source,
)
from app.backend.events import CancelToken, EventSink
from app.errors import BackendError, FastMTPError

RPC_CMAKE_ARGS = ["-DGGML_RPC=ON", "-DGGML_RPC_RDMA=OFF"]  # RDMA off: the same build on every machine
WORKER_TARGET = "ggml-rpc-server"
DEFAULT_PORT = 50052  # llama.cpp's rpc-server default
START_TIMEOUT_S = 60.0
NO_AUTH_WARNING = ("llama.cpp's RPC protocol has no password and no encryption: anyone who can reach the port can "
                   "run work on this machine's device and read the model data sent to it.")


class RpcError(FastMTPError):
    """An RPC worker address, build or connection cannot be used."""


def active_options() -> BuildOptions:
    """The build options of the active backend (its flavour, CUDA architectures, portability), so its own tree and
    its RPC twin are the ones used."""
    manifest = registry.active()
    if manifest is None:
        return BuildOptions(flavor="cpu")
    return BuildOptions(flavor="cuda" if manifest.flavor == "cuda" else "cpu", cuda_archs=list(manifest.cuda_archs),
                        portable=manifest.portable, patched=manifest.patched)


def rpc_plan(options: BuildOptions) -> BuildPlan:
    """The backend's plan with the RPC backend switched on (the tree of ``rpc_build_dir``)."""
    plan = plan_build(options)
    return dataclasses.replace(plan, cmake_args=[*plan.cmake_args, *RPC_CMAKE_ARGS], cpu_variants={})


def rpc_build_dir(options: BuildOptions) -> Path:
    """``<cache>/build/<backend id>-rpc``: named after the backend it is the RPC twin of."""
    main = build_dir_of(plan_build(options))
    return main.with_name(main.name + "-rpc")


def build_rpc_targets(options: BuildOptions, targets: list[str], on_event: EventSink | None = None,
                      cancel: CancelToken | None = None) -> Path:
    """Configure (once) and build ``targets`` in the RPC tree; return its ``bin`` folder.

    Raises:
        ToolchainError, PatchError, BuildCancelled, BackendError: as ``build_backend``.
    """
    report = Reporter(on_event or (lambda _event: None))
    cancel = cancel or CancelToken()
    report.start("toolchain", "checking the build tools")
    plan = rpc_plan(options)
    report.start("source", f"getting llama-cpp-python {plan.pin.version} source")
    tree = prepare_source(plan, options, report)
    build_dir = rpc_build_dir(options)
    with buildlock.locked(build_dir, report.log):
        report.start("configure", "configuring the RPC build tree with CMake")
        configure(plan, tree, build_dir, report, cancel)
        for target in targets:
            check_cancel(cancel)
            report.start("compile", f"compiling {target} with the RPC backend (a full compile the first time)")
            compile_target(plan, options, tree, build_dir, target, report, cancel)
    report.emit("done", f"{', '.join(targets)} ready in {build_dir / 'bin'}", 100.0)
    return build_dir / "bin"


def build_worker(options: BuildOptions, on_event: EventSink | None = None, cancel: CancelToken | None = None) -> Path:
    """llama.cpp's ``rpc-server`` (target ``ggml-rpc-server``) from the RPC tree."""
    binary = build_rpc_targets(options, [WORKER_TARGET], on_event, cancel) / WORKER_TARGET
    if not binary.is_file():
        raise BackendError(f"The build finished but {binary} is missing.",
                           f"Delete {binary.parent.parent} and build again.")
    return binary


def build_server(options: BuildOptions, on_event: EventSink | None = None, cancel: CancelToken | None = None) -> Path:
    """``llama-server`` with ``--rpc`` (llama.cpp offers the flag only when the RPC backend is built in)."""
    binary = build_rpc_targets(options, ["llama-server"], on_event, cancel) / "llama-server"
    if not binary.is_file():
        raise BackendError(f"The build finished but {binary} is missing.",
                           f"Delete {binary.parent.parent} and build again.")
    return binary


def build_engine_backend(options: BuildOptions, on_event: EventSink | None = None,
                         cancel: CancelToken | None = None) -> Path:
    """A backend folder for the local engine with RPC devices: the active backend's bindings with the RPC tree's
    libraries, staged in ``<rpc tree>/backend`` (the engine worker imports it through ``FASTMTP_BACKEND_DIR``).

    The folder is rebuilt whenever a library in the tree is newer than the staged copy.
    """
    bin_dir = build_rpc_targets(options, ["llama"], on_event, cancel)
    build_dir = bin_dir.parent
    folder = build_dir / "backend"
    stamp = folder / ".staged"
    newest = max((p.stat().st_mtime for p in bin_dir.iterdir() if p.is_file()), default=0.0)
    if stamp.is_file() and stamp.stat().st_mtime >= newest:
        return folder
    plan = rpc_plan(options)
    tree = prepare_source(plan, options, Reporter(on_event or (lambda _event: None)))
    with buildlock.locked(folder, lambda _line: None):
        staging = folder.with_name(folder.name + f".staging-{os.getpid()}")
        _install(tree, build_dir, staging)
        main_id = build_dir_of(plan_build(options)).name
        manifest_file = registry.backend_dir(main_id) / registry.MANIFEST
        data = json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.is_file() else {}
        data.update(id=f"{main_id}-rpc", cmake_args=plan.cmake_args)
        (staging / registry.MANIFEST).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
        stamp.write_text(str(time.time()) + "\n", encoding="utf-8")
    return folder


# ----------------------------------------------------------------------------- addresses


def check_bind_address(host: str, allow_public: bool = False) -> str | None:
    """Refuse a worker address reachable from the internet unless ``allow_public``; return the warning to show
    (None on loopback). ``0.0.0.0`` and ``::`` listen on every network, so they count as public."""
    kind = netaddr.classify(host)
    if kind == "loopback":
        return None
    if kind == "unresolved":
        raise RpcError(f"The address {host!r} cannot be resolved on this machine.",
                       "Give an IP address of this machine, such as 127.0.0.1 or its local-network address.")
    if kind == "public" and not allow_public:
        raise RpcError(f"{host} is reachable from outside the local network, and the RPC worker has no password.",
                       f"{NO_AUTH_WARNING} Bind to 127.0.0.1 or a local-network address (192.168.x.x, 10.x.x.x), "
                       "or pass --i-understand-no-auth if this network is yours alone.")
    return f"The RPC worker listens on {host}. {NO_AUTH_WARNING} Run it only on a network you trust."


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

    Its libraries are the RPC tree's. Use as a context manager so it is always stopped.
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
        with self.log_path.open("wb") as log:
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
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> RpcWorker:
        self.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()
