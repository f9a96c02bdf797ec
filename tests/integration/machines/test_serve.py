"""``serve``: our patched llama-server with the demo model and its d2t sidecar behind an API key, end to end in a
real process on 127.0.0.1, with a real file-backed keyring; and the address rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from app.backend.registry import BackendManifest
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.engine.session import ChatSession
from app.gguftools.demo_model import DemoModel
from app.machines.remote_client import RemoteClient
from app.machines.remote_servers import RemoteServer
from app.machines.serve import ServeError, check_host
from app.machines.upstream_server import free_port
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.file_keyring import child_keyring_env
from tests.helpers.module_folders import ModuleFolders

MESSAGES = [Message("user", "Hello there")]
OPTIONS = ChatOptions(max_tokens=32, sampling=SamplingParams(temperature=0.0))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("serve-demo"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The commands' environment: a file-backed keyring and a config folder of this test's own."""
    return {**os.environ, **child_keyring_env(tmp_path), "FASTMTP_CONFIG_DIR": str(tmp_path / "config")}


def _serve(demo: DemoModel, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """``serve --json`` running; its first line (the address and, the first time, the key)."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--json", "--model", str(demo.target),
                             "--draft", str(demo.sidecar_d2t), "--port", str(free_port()), "--threads", "2",
                             "--ctx", "1024", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        pytest.fail(f"serve ended before it served: {_read(proc.stderr)[-2000:]}")
    return proc, json.loads(line)


def _read(stream: IO[str] | None) -> str:
    return stream.read() if stream is not None else ""


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _llama_server_pid(serve_pid: int) -> int:
    children = Path(f"/proc/{serve_pid}/task/{serve_pid}/children").read_text().split()
    return next(int(pid) for pid in children if "llama-server" in _cmdline(int(pid)))


def _wait_for_llama_server(serve: subprocess.Popen[str]) -> int:
    """The pid of ``serve``'s serving llama-server as soon as it exists (polling /proc: no event tells a test);
    not a short ``llama-server --version`` run before it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            pytest.fail(f"serve ended before it started llama-server: {_read(serve.stderr)[-2000:]}")
        children = Path(f"/proc/{serve.pid}/task/{serve.pid}/children").read_text().split()
        servers = [int(pid) for pid in children if "llama-server" in (line := _cmdline_or_empty(int(pid)))
                   and "--port" in line]
        if servers:
            return servers[0]
        time.sleep(0.01)  # polling the process table, not waiting out a guess
    pytest.fail("serve did not start llama-server within 300 s")


def _cmdline_or_empty(pid: int) -> str:
    try:
        return _cmdline(pid)
    except OSError:  # ended since it was listed
        return ""


def _gone(pid: int) -> bool:
    return "llama-server" not in _cmdline_or_empty(pid)


@pytest.mark.usefixtures("patched_backend")
def test_serve_answers_with_its_key_refuses_without_and_stops(demo: DemoModel, env: dict[str, str]) -> None:
    session = ChatSession(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_ctx=1024))
    try:
        local, _ = session.reply(MESSAGES, OPTIONS)
    finally:
        session.close()
    proc, info = _serve(demo, env)
    try:
        key = info["api_key"]
        assert info["kind"] == "serving" and info["api_key_created"] and len(key) >= 40
        assert info["url"] == info["local_url"] and info["url"].startswith("http://127.0.0.1:")
        assert info["draft"] == str(demo.sidecar_d2t) and info["warning"] is None
        server_pid = _llama_server_pid(proc.pid)
        assert key not in _cmdline(server_pid)  # the key travels in the environment, not on the command line
        # on a CPU it runs the plain attention kernel, as our engine does there (engine.attention)
        assert "--flash-attn off" in _cmdline(server_pid)

        with RemoteClient(RemoteServer("this", info["url"]), api_key=key) as client:
            loaded = client.load()
            done = list(client.generate(MESSAGES, OPTIONS))[-1]
        assert loaded["kind"] == "loaded" and loaded["server_kind"] == "llama-server"
        assert done["kind"] == "done" and done["tokens"] == local.tokens
        assert done["stats"]["drafted"] > 0  # the d2t sidecar drafts on the server too

        for wrong in (None, "not-the-key"):
            with RemoteClient(RemoteServer("this", info["url"]), api_key=wrong, use_keyring=False) as client:
                refused = client.load()
            assert refused["kind"] == "error" and "(HTTP 401)" in refused["message"]
        plain = httpx.post(info["url"] + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]},
                           trust_env=False)
        assert plain.status_code == 401

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert json.loads(_read(proc.stdout).strip()) == {"kind": "stopped"}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(httpx.TransportError):
        httpx.get(info["url"] + "/health", trust_env=False, timeout=2.0)
    assert _gone(server_pid)


def test_a_detached_server_keeps_the_stored_key_and_stops_on_request(patched_backend: BackendManifest,
                                                                     demo: DemoModel, env: dict[str, str]) -> None:
    first, info = _serve(demo, env)  # makes and stores the key
    first_server = _llama_server_pid(first.pid)
    first.send_signal(signal.SIGTERM)  # as soon as it has announced itself
    first.wait(timeout=30)
    assert _gone(first_server)
    detached = subprocess.run([sys.executable, "-m", "app", "serve", "--json", "--detach", "--model",
                               str(demo.target), "--no-draft", "--port", str(free_port()), "--threads", "2"],
                              capture_output=True, text=True, env=env, timeout=300)
    assert detached.returncode == 0, detached.stderr
    again = json.loads(detached.stdout)
    try:
        assert again["api_key"] is None and not again["api_key_created"]  # shown once: not again
        status = json.loads(subprocess.run([sys.executable, "-m", "app", "serve", "--status", "--json"],
                                           capture_output=True, text=True, env=env, check=True).stdout)
        assert status["running"] and status["server"]["pid"] == again["pid"]
        with RemoteClient(RemoteServer("this", again["url"]), api_key=info["api_key"]) as client:
            assert client.load()["kind"] == "loaded"
    finally:
        stopped = subprocess.run([sys.executable, "-m", "app", "serve", "--stop", "--json"], capture_output=True,
                                 text=True, env=env, timeout=60)
    assert json.loads(stopped.stdout)["stopped"] is True
    assert _gone(again["pid"])
    with pytest.raises(httpx.TransportError):
        httpx.get(again["url"] + "/health", trust_env=False, timeout=2.0)


@pytest.mark.usefixtures("patched_backend")
def test_serve_stopped_while_its_server_starts_stops_that_server(demo: DemoModel, env: dict[str, str]) -> None:
    """SIGTERM the moment llama-server exists, while it still loads the model: ``serve`` stops it and ends cleanly.
    Before, a SIGTERM before ``serve`` announced itself ended it by default and left llama-server running."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--json", "--model", str(demo.target), "--no-draft",
                             "--port", str(free_port()), "--threads", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        server_pid = _wait_for_llama_server(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, _read(proc.stderr)[-2000:]
        assert json.loads(_read(proc.stdout).strip().splitlines()[-1]) == {"kind": "stopped"}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _gone(server_pid)


def test_serve_refuses_a_public_address_before_starting_anything(env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--host", "0.0.0.0"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert "every network interface" in done.stderr and "--i-understand-no-tls" in done.stderr


def test_serve_address_rules() -> None:
    assert check_host("127.0.0.1") is None and check_host("localhost") is None
    warning = check_host("192.168.1.20")
    assert warning is not None and "plain HTTP" in warning
    for public in ("8.8.8.8", "0.0.0.0", "::"):
        with pytest.raises(ServeError, match="would let the internet reach it"):
            check_host(public)
    assert "plain HTTP" in (check_host("0.0.0.0", allow_public=True) or "")
