"""Serve this machine: our patched ``llama-server`` with the chosen model and its FastMTP sidecar, for another
machine's FastMTP Chat or any OpenAI client.

The server is the one built in the backend's own tree (``backend server``: it links the backend's libraries, no
second compile of ggml); it takes RPC workers too (every backend build has the RPC backend, ``backend/rpc.py``;
one built before that is refused in words). It needs an API key: one is
generated on first use, kept in the keyring and shown once (``--new-key`` makes another). The key goes to the
server through its environment, never its command line.

llama-server is built without TLS, so the key and the chats cross the network as plain HTTP: the address is
loopback by default, a local-network address is allowed (with a warning), a public one (or every interface,
``0.0.0.0``) only when the user says they understand. A server started with ``--detach`` (or the window's "keep
running") outlives its starter; ``serve --stop`` ends it, through the state file ``<cache>/serve.json``.

That file names a process to signal, so it is believed only when it proves the process is still ours: it records
the pid with the process's start time (``/proc/PID/stat`` field 22 on Linux, ``ps -o lstart=`` elsewhere) and its
command line, and ``--stop``/``--status`` act only while both still match. A pid that is not an int in 2..pid_max
(0 would signal our own process group, -1 every process we may reach) makes the file damaged (moved aside as
``serve.json.bad``); a pid that is gone, or now another process (after a reboot), makes it stale (removed). Either
way nothing is signalled, the user is told, and ``serve`` may start.
"""

from __future__ import annotations

import contextlib
import os
import secrets as token_source
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core import defaults, netaddr, paths, secrets, settings_file
from app.core.errors import FastMTPError
from app.engine.config import DEFAULT_DRAFT_DEPTH
from app.machines.upstream_server import UpstreamServer

KEY_NAME = "serve-api-key"
DEFAULT_PORT = defaults.SERVER_PORT
STATE_FILE = "serve.json"


class ServeError(FastMTPError):
    """This machine cannot be served as asked: the address, the model, or a server already running."""


@dataclass
class ServePlan:
    """What to serve and where."""

    target: Path
    draft: Path | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    parallel: int = 1
    ctx_size: int = defaults.CONTEXT_SIZE
    n_gpu_layers: int = 0
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    threads: int | None = None
    rpc: list[str] = field(default_factory=list)
    alias: str = "fastmtp"


SERVER = netaddr.Listener("llama-server", "llama-server speaks plain HTTP: the API key and the chats cross the "
                          "network unencrypted.", "llama-server speaks plain HTTP",
                          "pass --i-understand-no-tls if a firewall or a TLS proxy in front of it protects it",
                          ServeError)


def check_host(host: str, allow_public: bool = False) -> str | None:
    """Where the server may listen: the one bind rule (``netaddr.check_bind``) in llama-server's words."""
    return netaddr.check_bind(host, allow_public, SERVER)


def ensure_key(new: bool = False) -> tuple[str, bool]:
    """The server's API key from the keyring, or a new one stored there; ``(key, created)``."""
    if not new:
        stored = secrets.get_secret(KEY_NAME)
        if stored:
            return stored, False
    key = token_source.token_urlsafe(32)
    secrets.set_secret(KEY_NAME, key, "the server's API key")
    return key, True


def server_binary(rpc: bool, on_event: Any = None) -> Path:
    """The llama-server to run: the active backend's carried one, or the one built in its tree (built first when
    missing: seconds on the CPU once the backend is built). ``rpc``: RpcError in words when the backend was built
    without the RPC backend."""
    from app.backend import archive, registry
    from app.backend.builder import active_options
    from app.backend.rpc import rpc_options
    from app.machines.upstream_server import build_server

    options = rpc_options() if rpc else active_options()
    manifest = registry.active()
    if manifest is not None:
        carried = archive.installed_server(registry.backend_dir(manifest.id))
        if carried is not None:
            return carried
    return build_server(options, on_event)


def chat_model_files(chat_model: str, draft: bool = True) -> tuple[Path, Path | None]:
    """The target and d2t sidecar of the chat's model (the settings' ``chat_model``): an installed model, a target
    path, or the built-in demo model (written first when needed)."""
    if chat_model and not chat_model.startswith("remote:"):
        from app.models.installed import list_installed, model_roots

        for model in list_installed(*model_roots()):
            if str(model.target) == chat_model:
                return model.target, model.sidecar_d2t if draft else None
        return Path(chat_model), None
    from app.gguftools.builtin_demo import ensure_demo_model

    demo = ensure_demo_model(paths.demo_model_dir())
    return demo.target, demo.sidecar_d2t if draft else None


def make_server(plan: ServePlan, binary: Path, api_key: str) -> UpstreamServer:
    return UpstreamServer(binary, plan.target, draft=plan.draft, draft_depth=plan.draft_depth, threads=plan.threads,
                          ctx_size=plan.ctx_size, n_gpu_layers=plan.n_gpu_layers, host=plan.host, port=plan.port,
                          parallel=plan.parallel, api_key=api_key, rpc=plan.rpc or None, alias=plan.alias)


# ----------------------------------------------------------------------------- a detached server's state


def state_path() -> Path:
    return paths.cache_dir() / STATE_FILE


PID_CEILING = 2**22  # Linux's largest pid_max; no system hands out larger pids


def pid_limit() -> int:
    """The largest pid this system can hand out (``/proc/sys/kernel/pid_max``, else 2**22)."""
    try:
        return min(PID_CEILING, int(Path("/proc/sys/kernel/pid_max").read_text(encoding="ascii").strip()))
    except (OSError, ValueError):
        return PID_CEILING


def check_pid(value: Any) -> int:
    """``value`` as a pid a server of ours could have: an int from 2 to the system's pid_max; ``ValueError`` in
    words otherwise (0 is our own process group, -1 every process, 1 init)."""
    if type(value) is not int:
        raise ValueError(f"its pid {str(value)[:40]!r} is not a whole number")
    if value <= 1 or value > pid_limit():
        raise ValueError(f"its pid {str(value)[:40]} is not one a server of ours can have")
    return value


def process_identity(pid: int) -> dict[str, Any] | None:
    """What proves which process ``pid`` is: ``{"start": its start time, "cmdline": its arguments}``; None when
    there is no such process or the system does not say (then nothing may be signalled)."""
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self/stat").exists():
        try:
            fields = (proc / "stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()
            raw = (proc / "cmdline").read_bytes()
        except (OSError, IndexError):
            return None
        if len(fields) < 20 or fields[0] == "Z":  # a zombie has ended
            return None
        return {"start": fields[19], "cmdline": [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]}
    if sys.platform == "win32":
        return None
    try:
        start = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
        command = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True,
                                 timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if start.returncode != 0 or not start.stdout.strip():
        return None
    return {"start": start.stdout.strip(), "cmdline": command.stdout.split()}


def write_state(server: UpstreamServer, plan: ServePlan) -> None:
    assert server.proc is not None
    identity = process_identity(server.proc.pid) or {"start": None, "cmdline": []}
    data = {"pid": server.proc.pid, "start": identity["start"], "cmdline": identity["cmdline"], "url": server.url,
            "host": plan.host, "port": server.port, "log": str(server.log_path),
            "plan": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(plan).items()}}
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    settings_file.write_json(path, data)


def _check_state(data: dict[str, Any]) -> None:
    check_pid(data.get("pid"))
    if not isinstance(data.get("start"), str):
        raise ValueError("it does not record the server's start time")
    cmdline = data.get("cmdline")
    if not isinstance(cmdline, list) or not cmdline or not all(isinstance(a, str) for a in cmdline):
        raise ValueError("it does not record the server's command line")
    if not isinstance(data.get("url"), str):
        raise ValueError("it does not record the server's address")


def _is_our_server(state: dict[str, Any]) -> bool:
    identity = process_identity(int(state["pid"]))
    return identity is not None and identity["start"] == state["start"] and identity["cmdline"] == state["cmdline"]


def find_running() -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)`` while the detached server that ``serve.json`` names still runs, as proven by its pid, start
    time and command line; else ``(None, why the file was not believed)`` (the file is gone: a damaged one moved
    aside as ``serve.json.bad``, a stale one removed), or ``(None, None)`` when there is no file."""
    path = state_path()
    data, damaged = settings_file.check_state(path, _check_state)
    if data is None:
        return None, (f"serve.json was damaged ({damaged}); it is set aside as serve.json.bad" if damaged else None)
    if not _is_our_server(data):
        path.unlink(missing_ok=True)
        return None, (f"serve.json was stale: pid {data['pid']} is no longer the server it recorded (ended, or "
                      "another process since a restart); it is removed")
    return data, None


def running() -> dict[str, Any] | None:
    """The detached server's state while its process lives; a stale or damaged file is removed."""
    return find_running()[0]


def stop_detached(timeout: float = 15.0) -> dict[str, Any] | None:
    """End the detached server (SIGTERM, the way llama-server shuts down cleanly; SIGKILL after ``timeout``) and
    wait until it is gone; its state, or None when none was running. Only a process proven to be the server
    (its pid, start time and command line as recorded) is signalled."""
    return stop_detached_checked(timeout)[0]


def stop_detached_checked(timeout: float = 15.0) -> tuple[dict[str, Any] | None, str | None]:
    """``stop_detached`` with ``find_running``'s reason when nothing was signalled."""
    state, stale = find_running()
    if state is None:
        return None, stale
    pid = int(state["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_our_server(state):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.05)  # waiting on a process that is not our child (it cannot be waited for)
    state_path().unlink(missing_ok=True)
    return state, None
