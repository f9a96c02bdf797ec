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
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as token_source
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app import netaddr, paths, secrets
from app.backend import processes
from app.backend.upstream_server import UpstreamServer
from app.engine.config import DEFAULT_DRAFT_DEPTH
from app.errors import FastMTPError

KEY_NAME = "serve-api-key"
DEFAULT_PORT = 8080
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
    ctx_size: int = 4096
    n_gpu_layers: int = 0
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    threads: int | None = None
    rpc: list[str] = field(default_factory=list)
    alias: str = "fastmtp"


def check_host(host: str, allow_public: bool = False) -> str | None:
    """Refuse a public address (llama-server speaks plain HTTP) unless ``allow_public``; the warning to show."""
    reach = netaddr.classify(host)
    if reach == "loopback":
        return None
    if reach == "unresolved":
        raise ServeError(f"The address {host!r} cannot be resolved on this machine.",
                         "Give one of this machine's addresses, such as 127.0.0.1 or its 192.168.x.x address.")
    plain = ("llama-server speaks plain HTTP: the API key and the chats cross the network unencrypted")
    if reach == "public" and not allow_public:
        where = "every network interface" if host in netaddr.EVERY_INTERFACE else f"{host}, a public address"
        raise ServeError(f"Serving on {where} would let the internet reach this server, and {plain}.",
                         "Use this machine's local-network address (192.168.x.x, 10.x.x.x) or a VPN address, or "
                         "pass --i-understand-no-tls if a firewall or a TLS proxy in front of it protects it.")
    return f"Serving on {host}: {plain}. Use it only on a network you trust."


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
    from app.backend.upstream_server import build_server

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
        from app.release.installed import list_installed, model_roots

        for model in list_installed(*model_roots()):
            if str(model.target) == chat_model:
                return model.target, model.sidecar_d2t if draft else None
        return Path(chat_model), None
    from app.builtin_demo import ensure_demo_model

    demo = ensure_demo_model(paths.demo_model_dir())
    return demo.target, demo.sidecar_d2t if draft else None


def make_server(plan: ServePlan, binary: Path, api_key: str) -> UpstreamServer:
    return UpstreamServer(binary, plan.target, draft=plan.draft, draft_depth=plan.draft_depth, threads=plan.threads,
                          ctx_size=plan.ctx_size, n_gpu_layers=plan.n_gpu_layers, host=plan.host, port=plan.port,
                          parallel=plan.parallel, api_key=api_key, rpc=plan.rpc or None, alias=plan.alias)


# ----------------------------------------------------------------------------- a detached server's state


def state_path() -> Path:
    return paths.cache_dir() / STATE_FILE


def write_state(server: UpstreamServer, plan: ServePlan) -> None:
    assert server.proc is not None
    data = {"pid": server.proc.pid, "url": server.url, "host": plan.host, "port": server.port,
            "log": str(server.log_path), "plan": {k: str(v) if isinstance(v, Path) else v
                                                  for k, v in asdict(plan).items()}}
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def running() -> dict[str, Any] | None:
    """The detached server's state while its process lives; a stale file is removed."""
    path = state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        pid = int(data["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not processes.pid_alive(pid):
        path.unlink(missing_ok=True)
        return None
    result: dict[str, Any] = data
    return result


def stop_detached(timeout: float = 15.0) -> dict[str, Any] | None:
    """End the detached server (SIGTERM, the way llama-server shuts down cleanly; SIGKILL after ``timeout``) and
    wait until it is gone; its state, or None when none was running."""
    state = running()
    if state is None:
        return None
    pid = int(state["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while processes.pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.05)  # waiting on a process that is not our child (it cannot be waited for)
    state_path().unlink(missing_ok=True)
    return state
