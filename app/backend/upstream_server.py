"""llama.cpp's own ``llama-server``, built from the same patched vendored tree: the article's usage, run as a peer.

It proves the sidecar and the patch work outside our loop (the side-by-side test) and is the
yardstick of ``bench spec``. The build is cached under ``<cache>/upstream/<backend id>`` and a
rebuild with the same inputs is a no-op for ninja.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from app import paths
from app.backend.builder import BuildOptions, Reporter, cmake_path, plan_build, prepare_source, run_build_command
from app.backend.events import CancelToken, EventSink
from app.errors import BackendError, EngineError

TARGET = "llama-server"
# the server and its tools, statically linked, with no web UI download, no TLS and no curl
_SERVER_CMAKE_ARGS = [
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
]
START_TIMEOUT_S = 120.0


def server_build_dir(options: BuildOptions) -> Path:
    return paths.cache_dir() / "upstream" / plan_build(options).backend_id


def build_server(options: BuildOptions, on_event: EventSink | None = None,
                 cancel: CancelToken | None = None) -> Path:
    """Configure (once) and build ``llama-server`` from the patched tree of ``options``; return the binary.

    Raises:
        ToolchainError, PatchError, BuildCancelled, BackendError: as ``build_backend``.
    """
    report = Reporter(on_event or (lambda _event: None))
    cancel = cancel or CancelToken()
    report.start("toolchain", "checking the build tools")
    plan = plan_build(options)
    report.start("source", f"getting llama-cpp-python {plan.pin.version} source")
    tree = prepare_source(plan, options, report) / "vendor" / "llama.cpp"
    build_dir = paths.cache_dir() / "upstream" / plan.backend_id
    report.start("configure", "configuring llama.cpp's server with CMake")
    if not (build_dir / "build.ninja").is_file():
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [a for a in plan.cmake_args if not a.startswith("-DLLAMA_BUILD_")] + _SERVER_CMAKE_ARGS
        ninja = plan.tools.ninja.path if plan.tools.ninja else "ninja"
        try:
            run_build_command([cmake_path(plan), "-S", str(tree), "-B", str(build_dir), "-G", "Ninja",
                               f"-DCMAKE_MAKE_PROGRAM={ninja}", *args],
                              tree, report, cancel, "Configuring llama-server failed")
        except BackendError:
            (build_dir / "build.ninja").unlink(missing_ok=True)
            raise
    report.start("compile", "compiling llama-server (a few minutes the first time)")
    jobs = options.jobs or os.cpu_count() or 2
    run_build_command([cmake_path(plan), "--build", str(build_dir), "--target", TARGET, "-j", str(jobs)],
                      tree, report, cancel, "Compiling llama-server failed", progress=True)
    binary = build_dir / "bin" / TARGET
    if not binary.is_file():
        raise BackendError(f"The build finished but {binary} is missing.",
                           f"Delete {build_dir} and build again.")
    report.emit("done", f"{TARGET} ready: {binary}", 100.0)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Completion:
    """One ``/completion`` reply: the generated token ids and the server's own timings."""

    tokens: list[int]
    text: str
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def drafted(self) -> int:
        return int(self.timings.get("draft_n", 0))

    @property
    def accepted(self) -> int:
        return int(self.timings.get("draft_n_accepted", 0))

    @property
    def decode_tps(self) -> float:
        return float(self.timings.get("predicted_per_second", 0.0))


class UpstreamServer:
    """A running ``llama-server`` on 127.0.0.1; use as a context manager so it is always stopped."""

    def __init__(self, binary: Path, model: Path, draft: Path | None = None, n_max: int = 3,
                 threads: int | None = None, ctx_size: int = 4096, p_min: float = 0.0,
                 n_gpu_layers: int = 0, extra_args: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
               "-c", str(ctx_size), "-np", "1", "-ngl", str(n_gpu_layers), "--no-webui"]
        if threads:
            cmd += ["-t", str(threads), "-tb", str(threads)]
        if draft is not None:
            cmd += ["--spec-type", "draft-mtp", "--spec-draft-model", str(draft),
                    "--spec-draft-n-max", str(n_max), "--spec-draft-n-min", "0",
                    "--spec-draft-p-min", str(p_min), "--spec-draft-ngl", str(n_gpu_layers)]
        self.cmd = cmd + (extra_args or [])
        self.log_path = paths.cache_dir() / "logs" / f"llama-server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0), trust_env=False)

    def __enter__(self) -> UpstreamServer:
        self.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and wait until ``/health`` answers 200; raise EngineError with its log if it dies.

        Whatever goes wrong while waiting (even Ctrl+C), the server process is stopped, never leaked.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:  # the child keeps its own handle
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(f"llama-server exited with code {self.proc.returncode} while starting. "
                                  "Last lines:\n" + self.log_tail(),
                                  "Check the model and sidecar paths; an unpatched build refuses a d2t sidecar.")
            try:
                if self.client.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # polling a child process we do not control; not test synchronisation
        raise EngineError(f"llama-server did not become ready within {START_TIMEOUT_S:.0f} s.",
                          "Last lines:\n" + self.log_tail())

    def log_tail(self, lines: int = 30) -> str:
        """The last non-empty lines the server wrote (its log file survives it, for bug reports)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])

    def complete(self, prompt: list[int], n_predict: int, temperature: float = 0.0, seed: int = 0) -> Completion:
        """Generate ``n_predict`` tokens after the prompt token ids (no prompt cache, so runs are independent)."""
        body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "temperature": temperature,
                                "seed": seed, "cache_prompt": False, "return_tokens": True,
                                "top_k": 1 if temperature == 0 else 40, "top_p": 1.0, "min_p": 0.0,
                                "repeat_penalty": 1.0}
        response = self.client.post(self.url + "/completion", json=body)
        if response.status_code != 200:
            raise EngineError(f"llama-server answered {response.status_code}: {response.text[:300]}",
                              "Last lines:\n" + self.log_tail())
        data = response.json()
        return Completion([int(t) for t in data.get("tokens", [])], str(data.get("content", "")),
                          dict(data.get("timings", {})))

    def stop(self) -> None:
        self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
