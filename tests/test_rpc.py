"""Splitting a model over machines with llama.cpp's RPC backend: a real ``rpc-server`` from the RPC twin of the
backend's build tree on 127.0.0.1, the demo target's layers offloaded to it, the same tokens as unsplit; and the
address rules of a protocol without authentication."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.builder import BuildOptions, build_dir_of, plan_build
from app.backend.registry import BackendManifest
from app.backend.rpc import (
    RPC_CMAKE_ARGS,
    RpcError,
    RpcWorker,
    build_worker,
    check_bind_address,
    parse_endpoints,
    rpc_build_dir,
    rpc_plan,
)
from app.backend.upstream_server import free_port
from app.builtin_demo import ensure_demo_model
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.sampling import SamplingParams
from app.engine.session import ChatOptions, ChatSession
from app.engine.speculative import EngineConfig
from app.gguftools.demo_model import DemoModel

MESSAGES = [Message("user", "Hello there")]
OPTIONS = ChatOptions(max_tokens=40, sampling=SamplingParams(temperature=0.0))
SPLIT_LAYERS = 3  # of the tiny demo's 6 (4 trunk, the MTP block, the output): the last three on the worker


@pytest.fixture(scope="module")
def worker_binary() -> Path:
    return build_worker(BuildOptions(flavor="cpu"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoModel:
    return ensure_demo_model(tmp_path_factory.mktemp("rpc-demo"))


@pytest.fixture(scope="module")
def unsplit(demo: DemoModel, patched_backend: BackendManifest) -> list[int]:
    session = ChatSession(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_ctx=1024))
    try:
        reply, _ = session.reply(MESSAGES, OPTIONS)
    finally:
        session.close()
    return reply.tokens


# ----------------------------------------------------------------------------- address rules


def test_a_worker_binds_to_loopback_quietly_and_to_the_local_network_with_a_warning() -> None:
    assert check_bind_address("127.0.0.1") is None and check_bind_address("localhost") is None
    for private in ("192.168.1.20", "10.1.2.3", "172.16.0.9", "fd12::1"):
        warning = check_bind_address(private)
        assert warning is not None and "no password and no encryption" in warning


@pytest.mark.parametrize("host", ["8.8.8.8", "0.0.0.0", "::", "2001:4860:4860::8888"])
def test_a_public_worker_address_needs_the_users_word(host: str) -> None:
    with pytest.raises(RpcError) as caught:
        check_bind_address(host)
    assert "has no password" in caught.value.message and "--i-understand-no-auth" in caught.value.advice
    assert "no password and no encryption" in (check_bind_address(host, allow_public=True) or "")


def test_worker_lists_are_host_port_pairs() -> None:
    assert parse_endpoints("192.168.1.20:50052, 10.0.0.2:50053") == ["192.168.1.20:50052", "10.0.0.2:50053"]
    for bad in ("", "host", "host:", "host:port", "host:70000", ":50052"):
        with pytest.raises(RpcError):
            parse_endpoints(bad)


def test_the_rpc_worker_command_refuses_a_public_address_before_building(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "rpc-worker", "--host", "0.0.0.0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert "has no password" in done.stderr and "--i-understand-no-auth" in done.stderr


def test_the_rpc_tree_is_the_backends_twin_and_leaves_backend_ids_alone() -> None:
    options = BuildOptions(flavor="cpu")
    main = plan_build(options)
    assert not any("RPC" in arg for arg in main.cmake_args)  # every installed backend keeps its id
    assert rpc_plan(options).cmake_args == [*main.cmake_args, *RPC_CMAKE_ARGS]
    assert rpc_build_dir(options) == build_dir_of(main).with_name(build_dir_of(main).name + "-rpc")


# ----------------------------------------------------------------------------- a real split


def test_the_demo_split_over_a_local_rpc_worker_gives_the_unsplit_tokens(worker_binary: Path, demo: DemoModel,
                                                                         unsplit: list[int], tmp_path: Path) -> None:
    with RpcWorker(worker_binary, port=free_port(), threads=1) as worker, EngineClient() as client:
        client.log_path = tmp_path / "engine.log"  # this test's own: other engine runs rotate the shared one
        client.previous_log_path = tmp_path / "engine.log.1"
        config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_ctx=1024,
                              n_gpu_layers=SPLIT_LAYERS, rpc=(worker.endpoint,))
        loaded = client.load(config)
        assert loaded["kind"] == "loaded", loaded
        done = list(client.generate(MESSAGES, OPTIONS))[-1]
        log = client.log_path.read_text(encoding="utf-8", errors="replace")
    assert done["kind"] == "done" and done["tokens"] == unsplit
    assert done["stats"]["drafted"] > 0
    # llama.cpp put the last layers on the worker's device, the first ones stayed here
    assert f"offloaded {SPLIT_LAYERS}/6 layers" in log
    assert "layer   0 assigned to device CPU" in log and "layer   3 assigned to device RPC0" in log
    assert f"RPC0[{worker.endpoint}] model buffer size" in log
    assert "Accepted client connection" in worker.log_tail()


def test_an_unreachable_worker_is_named_in_words(worker_binary: Path, demo: DemoModel) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    with EngineClient() as client:
        loaded = client.load(EngineConfig(demo.target, n_gpu_layers=2, rpc=(endpoint,)))
    assert loaded["kind"] == "error" and loaded["error"] == "RpcError"
    assert loaded["message"] == f"The RPC worker {endpoint} cannot be reached."


def test_rpc_worker_and_generate_rpc_commands_split_the_model(worker_binary: Path, demo: DemoModel,
                                                               unsplit: list[int]) -> None:
    port = free_port()
    worker = subprocess.Popen([sys.executable, "-m", "app", "rpc-worker", "--port", str(port), "--threads", "1",
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        info = json.loads(worker.stdout.readline())
        assert info == {**info, "kind": "rpc-worker", "endpoint": f"127.0.0.1:{port}", "warning": None}
        generated = subprocess.run([sys.executable, "-m", "app", "generate", "--model", str(demo.target), "--mtp",
                                    "sidecar", "--draft", str(demo.sidecar_d2t), "--ctx", "1024", "--gpu-layers",
                                    str(SPLIT_LAYERS), "--rpc", info["endpoint"], "--prompt", "Hello there",
                                    "--max-tokens", "40", "--json"],
                                   capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "FASTMTP_BACKEND_DIR": ""})
        assert generated.returncode == 0, generated.stderr[-2000:]
        assert json.loads(generated.stdout)["tokens"] == unsplit
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_serve_with_rpc_workers_answers_with_the_unsplit_tokens(worker_binary: Path, demo: DemoModel,
                                                                unsplit: list[int], tmp_path: Path) -> None:
    """``serve --rpc``: the RPC tree's llama-server (llama.cpp offers --rpc only with the RPC backend built in)."""
    from app.engine.remote import RemoteClient
    from app.remote_servers import RemoteServer

    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring",
           "XDG_DATA_HOME": str(tmp_path / "xdg"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
           "LLAMA_ARG_LOG_VERBOSITY": "4"}  # llama-server's log then names where each layer went
    with RpcWorker(worker_binary, port=free_port(), threads=1) as worker:
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--json", "--model", str(demo.target),
                                 "--draft", str(demo.sidecar_d2t), "--port", str(free_port()), "--threads", "2",
                                 "--ctx", "1024", "--gpu-layers", str(SPLIT_LAYERS), "--rpc", worker.endpoint],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.communicate(timeout=30)[1][-2000:]
            info = json.loads(line)
            assert info["rpc"] == [worker.endpoint]
            with RemoteClient(RemoteServer("split", info["url"]), api_key=info["api_key"]) as client:
                assert client.load()["kind"] == "loaded"
                done = list(client.generate(MESSAGES, OPTIONS))[-1]
            server_log = Path(info["log"]).read_text(encoding="utf-8", errors="replace")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        assert "Accepted client connection" in worker.log_tail()
    assert done["kind"] == "done" and done["tokens"] == unsplit
    assert f"offloaded {SPLIT_LAYERS}/6 layers" in server_log
    assert f"RPC0[{worker.endpoint}] model buffer size" in server_log
