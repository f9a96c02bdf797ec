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
running") outlives its starter; ``serve --stop`` ends it, through the state file ``<config>/serve.json`` (the
config folder, beside the window's state: a cache folder may be emptied at any time, and it is shared by every
test worker, two of which once found each other's detached server there and refused to serve).

That file names a process to signal, and whoever can write the config folder can write it, so nothing in it is
proof by itself. The proof is a secret the server was started with: a random token (``FASTMTP_SERVE_TOKEN``) in the
server's environment, recorded in serve.json. ``--stop``/``--status`` believe the file only while the process it
names holds that exact token in its own environment (``/proc/PID/environ`` on Linux, readable only by its owner;
``ps -E`` elsewhere; Windows: never believed). A forged file naming some other process (its pid, start time and
command line copied) names a process without the token: refused in words, nothing signalled. On Linux the process is
held by a pidfd from the check to the signal, so a pid reused in between cannot be hit either. A pid that is not an
int in 2..pid_max (0 would signal our own process group, -1 every process we may reach) or a missing token makes the
file damaged (moved aside as ``serve.json.bad``); a pid that is gone, or another process, makes it stale (removed).
Either way nothing is signalled, the user is told, and ``serve`` may start.
"""

from __future__ import annotations

import re
import secrets as token_source
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core import defaults, netaddr, paths, secrets, settings_file
from app.core.errors import FastMTPError
from app.core.processes import OwnedProcess
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
    """The server of ``plan``, with a fresh secret in its environment (``write_state`` records it)."""
    return UpstreamServer(binary, plan.target, draft=plan.draft, draft_depth=plan.draft_depth, threads=plan.threads,
                          ctx_size=plan.ctx_size, n_gpu_layers=plan.n_gpu_layers, extra_args=attention_args(plan),
                          host=plan.host, port=plan.port, parallel=plan.parallel, api_key=api_key,
                          rpc=plan.rpc or None, alias=plan.alias, owner_token=new_token())


SERVER_UBATCH = 512  # llama-server's physical batch, which the plain attention kernel's scores are sized by


def attention_args(plan: ServePlan) -> list[str]:
    """``--flash-attn off`` where our engine would run the plain kernel on the same machine (``engine.attention``:
    on a CPU it decodes long chats up to 2.5x faster); nothing (llama-server's own choice) elsewhere."""
    from app.engine.attention import default_kernel, head_count

    try:
        n_head = head_count(plan.target)
    except FastMTPError:  # not a model file we can read: llama-server says so itself, in its own words
        return []
    if n_head is None:
        return []
    kernel = default_kernel(n_ctx=plan.ctx_size * plan.parallel, n_batch=SERVER_UBATCH, n_head=n_head,
                            on_cpu=plan.n_gpu_layers == 0 and not plan.rpc)
    return ["--flash-attn", "off"] if kernel is False else []


# ----------------------------------------------------------------------------- a detached server's state


def state_path() -> Path:
    return paths.config_dir() / STATE_FILE


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


TOKEN_ENV = "FASTMTP_SERVE_TOKEN"
"""The environment variable that carries a detached server's secret: the proof that a process is ours."""
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def new_token() -> str:
    """A fresh secret for one server (43 URL-safe characters, 256 bits)."""
    return token_source.token_urlsafe(32)


def write_state(server: UpstreamServer, plan: ServePlan) -> None:
    """Record the detached server: its pid, its secret (the proof it is ours), where it listens and what it serves."""
    assert server.proc is not None and server.owner_token
    data = {"pid": server.proc.pid, "token": server.owner_token, "url": server.url, "host": plan.host,
            "port": server.port, "log": str(server.log_path),
            "plan": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(plan).items()}}
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    settings_file.write_json(path, data)


def _check_state(data: dict[str, Any]) -> None:
    check_pid(data.get("pid"))
    token = data.get("token")
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise ValueError("it does not record the secret the server was started with (a server started by an older "
                         "version cannot be proven ours: stop it by hand)")
    if not isinstance(data.get("url"), str):
        raise ValueError("it does not record the server's address")


def _prove(state: dict[str, Any]) -> OwnedProcess | None:
    return OwnedProcess.prove(int(state["pid"]), TOKEN_ENV, str(state["token"]))


def _find(path: Path) -> tuple[dict[str, Any] | None, OwnedProcess | None, str | None]:
    data, damaged = settings_file.check_state(path, _check_state)
    if data is None:
        return None, None, (f"serve.json was damaged ({damaged}); it is set aside as serve.json.bad" if damaged
                            else None)
    owned = _prove(data)
    if owned is None:
        path.unlink(missing_ok=True)
        return None, None, (f"serve.json was stale or forged: pid {data['pid']} is not a server this app started (it "
                            "does not hold the secret its server was started with: ended, another process, or "
                            "this system cannot tell); it is removed")
    return data, owned, None


def find_running() -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)`` while the detached server that ``serve.json`` names still runs, as proven by the secret in
    its environment; else ``(None, why the file was not believed)`` (the file is gone: a damaged one moved aside
    as ``serve.json.bad``, a stale or forged one removed), or ``(None, None)`` when there is no file."""
    data, owned, why = _find(state_path())
    if owned is not None:
        owned.close()
    return _shown(data), why


def _shown(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The state without its secret (it is printed, and ``--json`` output may be pasted anywhere)."""
    return None if data is None else {k: v for k, v in data.items() if k != "token"}


def running() -> dict[str, Any] | None:
    """The detached server's state while its process lives; a stale or damaged file is removed."""
    return find_running()[0]


def stop_detached(timeout: float = 15.0) -> dict[str, Any] | None:
    """End the detached server (SIGTERM, the way llama-server shuts down cleanly; SIGKILL after ``timeout``) and
    wait until it is gone; its state, or None when none was running. Only a process proven to be the server
    (the secret in its environment) is signalled."""
    return stop_detached_checked(timeout)[0]


def stop_detached_checked(timeout: float = 15.0) -> tuple[dict[str, Any] | None, str | None]:
    """``stop_detached`` with ``find_running``'s reason when nothing was signalled."""
    data, owned, why = _find(state_path())
    if owned is None:
        return None, why
    try:
        owned.signal(signal.SIGTERM)
        if not owned.wait_gone(timeout):
            owned.signal(signal.SIGKILL)
            owned.wait_gone(timeout)
    finally:
        owned.close()
    state_path().unlink(missing_ok=True)
    return _shown(data), None
