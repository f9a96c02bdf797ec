"""llama.cpp's own ``llama-server``, built from the same patched vendored tree: the article's usage, run as a peer.

It proves the sidecar and the patch work outside our loop (the side-by-side test) and is the
yardstick of ``bench spec``. It is built in the backend's own build tree (``<cache>/build/<backend id>``),
so a rebuild with the same inputs is a no-op for ninja.
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

from app.backend import archive
from app.backend.builder import BuildOptions, build_dir_of, build_program, plan_build
from app.backend.events import EventSink
from app.backend.toolchain import cpu_has_amx
from app.core import defaults, paths, processes
from app.core.cancel import CancelToken
from app.core.errors import EngineError
from app.gguftools.d2t import check_d2t

TARGET = "llama-server"
START_TIMEOUT_S = 120.0


def server_binary(options: BuildOptions) -> Path:
    """Where ``llama-server`` of ``options`` lives once built: beside the backend's libraries in its build tree."""
    return build_dir_of(plan_build(options)) / "bin" / TARGET


def build_server(options: BuildOptions, on_event: EventSink | None = None,
                 cancel: CancelToken | None = None) -> Path:
    """Build ``llama-server`` in the backend's own build tree of ``options`` (``builder.build_program``); return it.

    Raises:
        ToolchainError, PatchError, BuildCancelled, BackendError: as ``build_backend``.
    """
    return build_program(options, TARGET, on_event, cancel)


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
    def generated(self) -> int:
        """Tokens generated, the first included (``predicted_n``)."""
        return int(self.timings.get("predicted_n", len(self.tokens)))

    @property
    def decode_span_seconds(self) -> float:
        """Its time from the first generated token to the last (``predicted_ms``; the first is in the prompt's)."""
        return float(self.timings.get("predicted_ms", 0.0)) / 1000.0

    @property
    def decode_tps(self) -> float:
        """llama-server's own figure: the tokens after the first over the time from the first to the last, the
        same definition as ``app.engine.stats.decode_tps``."""
        return float(self.timings.get("predicted_per_second", 0.0))


class UpstreamServer:
    """A running ``llama-server``; use as a context manager so it is always stopped.

    By default it listens on 127.0.0.1 with one slot, no key (the side-by-side peer). ``serve`` sets the address,
    the port, the slots, an API key (given through the environment, never on the command line where any user
    of the machine could read it) and RPC workers (``--rpc``: every backend build has llama.cpp's RPC backend).
    """

    def __init__(self, binary: Path, model: Path, draft: Path | None = None, draft_depth: int = defaults.DRAFT_DEPTH,
                 threads: int | None = None, ctx_size: int = defaults.CONTEXT_SIZE, p_min: float = 0.0,
                 n_gpu_layers: int = 0, extra_args: list[str] | None = None, *, host: str = "127.0.0.1",
                 port: int | None = None, parallel: int = 1, api_key: str | None = None,
                 rpc: list[str] | None = None, alias: str | None = None, owner_token: str | None = None) -> None:
        self.host = host
        self.owner_token = owner_token  # serve's proof that the process is ours (serve.TOKEN_ENV)
        self.port = port or free_port()
        local = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # where this machine reaches it
        self.url = f"http://{'[' + local + ']' if ':' in local else local}:{self.port}"
        cmd = [str(binary), "-m", str(model), "--host", host, "--port", str(self.port),
               "-c", str(ctx_size * parallel), "-np", str(parallel), "-ngl", str(n_gpu_layers), "--no-webui"]
        if threads:
            cmd += ["-t", str(threads), "-tb", str(threads)]
        if cpu_has_amx():  # as our engine loads its weights there (``toolchain.cpu_has_amx``)
            cmd.append("--no-repack")
        if draft is not None:
            cmd += ["--spec-type", "draft-mtp", "--spec-draft-model", str(draft),
                    "--spec-draft-n-max", str(draft_depth), "--spec-draft-n-min", "0",
                    "--spec-draft-p-min", str(p_min), "--spec-draft-ngl", str(n_gpu_layers)]
        if rpc:
            cmd += ["--rpc", ",".join(rpc)]
        if alias:
            cmd += ["--alias", alias]
        self.cmd = cmd + (extra_args or [])
        self.model = Path(model)
        self.draft = draft
        self.api_key = api_key
        self.log_path = paths.cache_dir() / "logs" / f"llama-server-{os.getpid()}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0), trust_env=False, headers=headers)

    def __enter__(self) -> UpstreamServer:
        self.start()
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.stop()

    def start(self, detach: bool = False) -> None:
        """Start the server and wait until ``/health`` answers 200; raise EngineError with its log if it dies.

        Whatever goes wrong while waiting (even Ctrl+C), the server process is stopped, never leaked.
        A d2t sidecar is checked first (SidecarError), as for our own loads. ``detach``: in a session of its own,
        so it outlives the program that started it (a terminal's Ctrl+C does not reach it either).
        """
        if self.draft is not None:
            check_d2t(self.draft)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log, processes.stop_signals_held():  # the child keeps its own handle
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self._env(), start_new_session=detach)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _env(self) -> dict[str, str]:
        """A server carried inside a backend folder (``backend unpack``) finds its libraries beside it."""
        env = dict(os.environ)
        env.pop("LLAMA_API_KEY", None)
        if self.api_key:
            env["LLAMA_API_KEY"] = self.api_key  # not in argv: any user of the machine can read a command line
        env.pop("FASTMTP_SERVE_TOKEN", None)
        if self.owner_token:
            env["FASTMTP_SERVE_TOKEN"] = self.owner_token  # serve.TOKEN_ENV; as private as the key
        binary = Path(self.cmd[0])
        if binary.parent.name == archive.SERVER_DIR:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [*archive.server_library_path(binary), *filter(None, [env.get("LD_LIBRARY_PATH")])])
        return env

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(f"llama-server exited with code {self.proc.returncode} while starting with the "
                                  f"model {self.model}. " + self._last_lines(),
                                  "Check the model and sidecar paths; an unpatched build refuses a d2t sidecar.")
            try:
                if self.client.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # polling a child process we do not control; not test synchronisation
        raise EngineError(f"llama-server did not become ready within {START_TIMEOUT_S:.0f} s.",
                          "Last lines:\n" + self.log_tail())

    def _last_lines(self) -> str:
        """The log's last lines for an error message, or why there are none: llama-server writes its log from a
        thread of its own and does not wait for it when it exits at once, so a server that failed at the start can
        leave an empty log (seen under load; upstream's choice, llama.cpp issue 22142)."""
        tail = self.log_tail()
        if tail:
            return "Last lines:\n" + tail
        return f"It wrote no log lines before it ended (its log: {self.log_path})."

    def log_tail(self, lines: int = 30) -> str:
        """The last non-empty lines the server wrote (its log file survives it, for bug reports)."""
        return processes.file_tail(self.log_path, lines)

    def complete(self, prompt: list[int], n_predict: int, temperature: float = 0.0, seed: int = 0, *,
                 top_k: int = 40, top_p: float = 1.0, min_p: float = 0.0, repeat_penalty: float = 1.0,
                 repeat_last_n: int = 64, cache_prompt: bool = False) -> Completion:
        """Generate ``n_predict`` tokens after the prompt token ids (no prompt cache unless ``cache_prompt``, so runs
        are independent; with it the server reads only what follows the previous request's common prefix).

        The sampling knobs are our engine's (app/engine/config.py SamplingParams), so a seeded run here and
        one of ours with the same values can be compared token for token."""
        body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "temperature": temperature,
                                "seed": seed, "cache_prompt": cache_prompt, "return_tokens": True,
                                "top_k": 1 if temperature == 0 else top_k, "top_p": top_p, "min_p": min_p,
                                "repeat_penalty": repeat_penalty, "repeat_last_n": repeat_last_n}
        response = self.client.post(self.url + "/completion", json=body)
        if response.status_code != 200:
            raise EngineError(f"llama-server answered {response.status_code}: {response.text[:300]}",
                              "Last lines:\n" + self.log_tail())
        data = response.json()
        return Completion([int(t) for t in data.get("tokens", [])], str(data.get("content", "")),
                          dict(data.get("timings", {})))

    def stop(self) -> None:
        self.client.close()
        processes.stop_process(self.proc)
