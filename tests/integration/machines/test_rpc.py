"""Splitting a model over machines with llama.cpp's RPC backend, which every backend build has: a real
``rpc-server`` built in the backend's own tree on 127.0.0.1, the demo target's layers offloaded to it, the same tokens
as unsplit; a backend built before RPC refused in words; and the address rules of a protocol without
authentication."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend import registry
from app.backend.builder import BuildOptions, build_backend, build_dir_of, plan_build
from app.backend.registry import BackendManifest
from app.backend.rpc import (
    RpcError,
    RpcWorker,
    build_worker,
    check_bind_address,
    parse_endpoints,
    require_rpc,
)
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.engine.session import ChatSession
from app.gguftools.demo_model import DemoModel
from app.machines.upstream_server import free_port
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.file_keyring import child_keyring_env
from tests.helpers.module_folders import ModuleFolders

MESSAGES = [Message("user", "Hello there")]
OPTIONS = ChatOptions(max_tokens=40, sampling=SamplingParams(temperature=0.0))
SPLIT_LAYERS = 3  # the last three of the demo's layers (its trunk, the MTP block, the output) on the worker


@pytest.fixture(scope="module")
def worker_binary() -> Path:
    return build_worker(BuildOptions(flavor="cpu"))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("rpc-demo"))


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


def test_every_backend_build_has_the_rpc_backend_without_rdma() -> None:
    for options in (BuildOptions(flavor="cpu"), BuildOptions(flavor="cpu", portable=True, cpu_variants=True)):
        args = plan_build(options).cmake_args
        assert "-DGGML_RPC=ON" in args and "-DGGML_RPC_RDMA=OFF" in args


def test_the_worker_is_built_in_the_backends_own_tree(worker_binary: Path, patched_backend: BackendManifest) -> None:
    build_dir = build_dir_of(plan_build(BuildOptions(flavor="cpu")))
    assert build_dir.name == patched_backend.id and patched_backend.has_rpc
    assert worker_binary == build_dir / "bin" / "ggml-rpc-server"
    linked = subprocess.run(["ldd", str(worker_binary)], capture_output=True, text=True, check=True).stdout
    assert str(build_dir / "bin" / "libggml.so") in linked  # the backend's ggml, not a second compile
    assert (registry.backend_dir(patched_backend.id) / "llama_cpp" / "lib" / "libggml-rpc.so").is_file()


def _without_rpc(manifest: BackendManifest) -> BackendManifest:
    """``manifest`` as a backend built before RPC joined the common CMake arguments."""
    args = [arg for arg in manifest.cmake_args if not arg.startswith("-DGGML_RPC")]
    return dataclasses.replace(manifest, id="0.3.35-cpu-d2t-00000000", cmake_args=args)


def test_a_backend_built_without_rpc_is_refused_with_the_rebuild_command(patched_backend: BackendManifest) -> None:
    old = _without_rpc(patched_backend)
    with pytest.raises(RpcError) as caught:
        require_rpc(old)
    assert caught.value.message.startswith(f"This backend ({old.id}) was built without the RPC backend; rebuild it "
                                           "with `python -m app backend build --cpu` (")
    any_cpu = dataclasses.replace(old, cmake_args=[*old.cmake_args, "-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON"])
    with pytest.raises(RpcError, match=r"`python -m app backend build --cpu --cpu-variants`"):
        require_rpc(any_cpu)
    require_rpc(patched_backend)


def test_rpc_commands_refuse_an_active_backend_built_without_rpc(patched_backend: BackendManifest, demo: DemoModel,
                                                                 tmp_path: Path) -> None:
    """``rpc-worker``, ``serve --rpc`` and ``generate --rpc`` say to rebuild before building or loading anything."""
    old = _without_rpc(patched_backend)
    folder = tmp_path / "data" / "backends" / old.id
    shutil.copytree(registry.backend_dir(patched_backend.id), folder, symlinks=True)
    old.write(folder)
    (folder.parent / "active.json").write_text(json.dumps({"id": old.id}) + "\n")
    env = {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_BACKEND_DIR": "",
           **child_keyring_env(tmp_path),
           "FASTMTP_CONFIG_DIR": str(tmp_path / "config")}
    endpoint = f"127.0.0.1:{free_port()}"
    commands = [["rpc-worker", "--port", str(free_port())],
                ["serve", "--model", str(demo.target), "--no-draft", "--port", str(free_port()), "--rpc", endpoint],
                ["generate", "--model", str(demo.target), "--gpu-layers", "2", "--rpc", endpoint, "--prompt", "Hi"]]
    for command in commands:
        done = subprocess.run([sys.executable, "-m", "app", *command], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 1, (command, done.stderr[-2000:])
        assert f"This backend ({old.id}) was built without the RPC backend" in done.stderr, done.stderr[-2000:]
        assert "python -m app backend build --cpu" in done.stderr


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
        split_pid = client.pid
        # ggml keeps a worker registered for the life of the process: a load without it runs in a fresh one
        assert client.load(dataclasses.replace(config, rpc=()))["kind"] == "loaded"
        assert client.pid != split_pid
        alone = list(client.generate(MESSAGES, OPTIONS))[-1]
        assert "RPC0" not in client.log_path.read_text(encoding="utf-8", errors="replace")
    assert alone["kind"] == "done" and alone["tokens"] == unsplit
    assert done["kind"] == "done" and done["tokens"] == unsplit
    assert done["stats"]["drafted"] > 0
    # llama.cpp put the last layers on the worker's device, the first ones stayed here
    assert f"offloaded {SPLIT_LAYERS}/{demo.shape.n_trunk + 2} layers" in log
    first_remote = demo.shape.n_trunk + 2 - SPLIT_LAYERS
    assert "layer   0 assigned to device CPU" in log and f"layer {first_remote:3d} assigned to device RPC0" in log
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


def test_a_cpu_variants_backend_loads_its_rpc_module_and_splits_the_model(worker_binary: Path, demo: DemoModel,
                                                                          unsplit: list[int]) -> None:
    """The packaged app's backend: RPC is the module libggml-rpc.so that the loader loads beside the CPU modules."""
    any_cpu = build_backend(BuildOptions(flavor="cpu", portable=True, cpu_variants=True, activate=False))
    folder = registry.backend_dir(any_cpu.id)
    assert any_cpu.has_rpc and (folder / "llama_cpp" / "lib" / "libggml-rpc.so").is_file()
    with RpcWorker(worker_binary, port=free_port(), threads=1) as worker:
        generated = subprocess.run([sys.executable, "-m", "app", "generate", "--model", str(demo.target), "--mtp",
                                    "sidecar", "--draft", str(demo.sidecar_d2t), "--ctx", "1024", "--gpu-layers",
                                    str(SPLIT_LAYERS), "--rpc", worker.endpoint, "--prompt", "Hello there",
                                    "--max-tokens", "40", "--json"],
                                   capture_output=True, text=True, timeout=600,
                                   env={**os.environ, "FASTMTP_BACKEND_DIR": str(folder)})
        assert "Accepted client connection" in worker.log_tail()
    assert generated.returncode == 0, generated.stderr[-2000:]
    assert json.loads(generated.stdout)["tokens"] == unsplit


def test_serve_with_rpc_workers_answers_with_the_unsplit_tokens(worker_binary: Path, demo: DemoModel,
                                                                unsplit: list[int], tmp_path: Path) -> None:
    """``serve --rpc``: the backend's own llama-server (llama.cpp offers --rpc only with the RPC backend built in)."""
    from app.machines.remote_client import RemoteClient
    from app.machines.remote_servers import RemoteServer

    env = {**os.environ, **child_keyring_env(tmp_path), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
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
    assert f"offloaded {SPLIT_LAYERS}/{demo.shape.n_trunk + 2} layers" in server_log
    assert f"RPC0[{worker.endpoint}] model buffer size" in server_log
