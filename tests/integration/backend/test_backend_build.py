"""The backend builder against a real CPU build of the pinned source (built once, cached)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend import registry, toolchain
from app.backend.builder import BuildOptions, build_backend, plan_build
from app.backend.events import BuildEvent, ninja_fraction
from app.backend.patching import default_patch
from app.backend.registry import BackendManifest, backend_dir
from app.core import paths
from app.core.cancel import CancelToken
from app.core.errors import BackendError, BuildCancelled, ToolchainError


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), check=False, timeout=1200)


def test_patched_build_manifest_records_what_it_is(patched_backend: BackendManifest) -> None:
    m = patched_backend
    assert m.llama_cpp_python_version == "0.3.35"
    assert m.llama_cpp_commit == "4df29be"
    assert m.patch_sha256 == default_patch().sha256
    assert m.flavor == "cpu" and m.cuda_archs == [] and m.cuda_version is None
    assert "-DGGML_CUDA=OFF" in m.cmake_args
    assert m.has_rpc  # llama.cpp's RPC backend is in every build
    assert m.selftest["ok"] is True
    assert m.selftest["d2t"]["loaded"] is True
    assert m.selftest["d2t"]["all_minus_inf_elsewhere"] is True
    folder = registry.backend_dir(m.id)
    assert (folder / "llama_cpp" / "__init__.py").is_file()
    assert any((folder / "llama_cpp" / "lib").glob("libllama*"))
    assert (folder / "llama_cpp" / "lib" / "libggml-rpc.so").is_file()
    assert registry.active_id() == m.id


def test_unpatched_build_is_refused_d2t_and_never_activated(patched_backend: BackendManifest,
                                                           unpatched_backend: BackendManifest) -> None:
    assert unpatched_backend.patch_sha256 is None
    assert unpatched_backend.selftest["ok"] is True
    assert unpatched_backend.selftest["d2t"]["loaded"] is False
    assert "not patched" in unpatched_backend.selftest["d2t"]["refused_with"]
    assert registry.active_id() == patched_backend.id
    with pytest.raises(BackendError, match="without the FastMTP d2t patch"):
        registry.set_active(unpatched_backend.id)


def test_rebuild_with_identical_inputs_compiles_nothing(patched_backend: BackendManifest) -> None:
    events: list[BuildEvent] = []
    again = build_backend(BuildOptions(flavor="cpu"), events.append)
    assert again.id == patched_backend.id
    compiled = [e.message for e in events if e.kind == "log" and "Building C" in e.message]
    assert compiled == []
    assert any("reusing the cached build tree" in e.message for e in events)
    percents = [e.percent for e in events if e.percent is not None]
    assert percents == sorted(percents) and percents[-1] == 100.0


def test_cancelled_build_installs_nothing(patched_backend: BackendManifest) -> None:
    before = {m.id for m in registry.list_backends()}
    registry.remove(patched_backend.id)
    cancel = CancelToken()

    def on_event(event: BuildEvent) -> None:
        if event.kind == "step" and event.step == "compile":
            cancel.cancel()

    with pytest.raises(BuildCancelled):
        build_backend(BuildOptions(flavor="cpu"), on_event, cancel)
    assert patched_backend.id not in {m.id for m in registry.list_backends()}
    assert not list(paths.backends_dir().glob(registry.STAGING_PREFIX + "*"))
    rebuilt = build_backend(BuildOptions(flavor="cpu"))  # restore for the other tests
    assert {m.id for m in registry.list_backends()} == before
    assert rebuilt.id == patched_backend.id


def test_killed_build_leaves_no_backend_and_no_staging(patched_backend: BackendManifest) -> None:
    registry.remove(patched_backend.id)
    proc = subprocess.Popen([sys.executable, "-m", "app", "backend", "build", "--cpu", "--json"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if event.get("kind") == "step" and event.get("step") == "selftest":
            proc.send_signal(signal.SIGKILL)  # mid self-test: the staging folder exists
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert registry.active_id() is None
    listed = run_cli("backend", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert patched_backend.id not in [item["id"] for item in json.loads(listed.stdout)]
    assert not list(paths.backends_dir().glob(registry.STAGING_PREFIX + "*"))
    build_backend(BuildOptions(flavor="cpu"))  # restore
    assert registry.active_id() == patched_backend.id


def test_cli_list_status_use_remove(patched_backend: BackendManifest, unpatched_backend: BackendManifest) -> None:
    listed = json.loads(run_cli("backend", "list", "--json").stdout)
    by_id = {item["id"]: item for item in listed}
    assert by_id[patched_backend.id]["active"] is True
    assert by_id[unpatched_backend.id]["active"] is False
    status = json.loads(run_cli("backend", "status", "--json").stdout)
    assert status["active"]["id"] == patched_backend.id
    refused = run_cli("backend", "use", unpatched_backend.id)
    assert refused.returncode == 1
    assert "without the FastMTP d2t patch" in refused.stderr
    missing = run_cli("backend", "remove", "no-such-backend", "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"] == "BackendError"


def test_failed_configure_installs_nothing_and_keeps_no_half_tree(patched_backend: BackendManifest,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = toolchain.detect()
    broken = toolchain.Toolchain(real.cmake, real.ninja, real.c_compiler, real.cxx_compiler,
                                 toolchain.Tool("/bin/false", "13.0"), None, [],
                                 toolchain.Cublas("/nonexistent/include", "/nonexistent/lib", False), None)
    monkeypatch.setattr(toolchain, "detect", lambda: broken)
    before = [m.id for m in registry.list_backends()]
    with pytest.raises(BackendError) as caught:
        build_backend(BuildOptions(flavor="cuda", cuda_archs=["90"]))
    assert "Configuring the build with CMake failed" in caught.value.message
    assert "Nothing was installed" in caught.value.advice
    assert [m.id for m in registry.list_backends()] == before
    assert registry.active_id() == patched_backend.id
    plan = plan_build(BuildOptions(flavor="cuda", cuda_archs=["90"]), broken)
    assert not (paths.cache_dir() / "build" / plan.backend_id).exists()


def test_plan_names_missing_compiler_in_plain_words() -> None:
    tools = toolchain.detect()
    tools.c_compiler = None
    with pytest.raises(ToolchainError) as caught:
        plan_build(BuildOptions(flavor="cpu"), tools)
    assert "build-essential" in caught.value.advice


def test_cuda_build_without_gpu_needs_an_arch_and_uses_it() -> None:
    tools = toolchain.detect()
    tools.gpus = []
    if tools.nvcc is None:
        tools.nvcc = toolchain.Tool("/usr/local/cuda/bin/nvcc", "13.0")
    if tools.cublas is None:
        tools.cublas = toolchain.Cublas("/usr/local/cuda/include", "/usr/local/cuda/lib64", from_wheel=False)
    with pytest.raises(ToolchainError, match="--cuda-arch"):
        plan_build(BuildOptions(flavor="cuda"), tools)
    plan = plan_build(BuildOptions(flavor="cuda", cuda_archs=["90", "89"]), tools)
    assert "-DCMAKE_CUDA_ARCHITECTURES=89;90" in plan.cmake_args
    assert plan.backend_id.startswith("0.3.35-cuda-sm89_90-d2t-")
    assert plan_build(BuildOptions(flavor="auto"), tools).flavor == "cpu"


def test_cuda_without_nvcc_is_explained() -> None:
    tools = toolchain.detect()
    tools.nvcc = None
    with pytest.raises(ToolchainError) as caught:
        plan_build(BuildOptions(flavor="cuda", cuda_archs=["90"]), tools)
    assert "CUDA Toolkit" in caught.value.advice


def test_cuda_without_cublas_is_explained() -> None:
    tools = toolchain.detect()
    tools.nvcc = tools.nvcc or toolchain.Tool("/usr/local/cuda/bin/nvcc", "13.0")
    tools.cublas = None
    with pytest.raises(ToolchainError) as caught:
        plan_build(BuildOptions(flavor="cuda", cuda_archs=["90"]), tools)
    assert "cuBLAS" in caught.value.advice and "pip install nvidia-cublas" in caught.value.advice


def test_ninja_progress_and_nvidia_smi_parsing() -> None:
    assert ninja_fraction("[21/211] Building CXX object x.o") == pytest.approx(21 / 211)
    assert ninja_fraction("-- Configuring done") is None
    gpus = toolchain.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 81559\nNVIDIA GeForce RTX 4090, 8.9, 24564\n")
    assert [(g.name, g.cuda_arch, g.memory_mib) for g in gpus] == [
        ("NVIDIA H100 80GB HBM3", "90", 81559), ("NVIDIA GeForce RTX 4090", "89", 24564)]


def test_engine_imports_llama_cpp_from_the_backend_folder(patched_backend: BackendManifest) -> None:
    code = "from app.native.loader import import_llama_cpp; print(import_llama_cpp().__file__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                          check=True)
    assert Path(proc.stdout.strip()).is_relative_to(registry.backend_dir(patched_backend.id))


def test_the_release_patch_is_used_only_after_its_signature_chain_checks_out(
        patched_backend: BackendManifest, tmp_path: Path) -> None:
    from app.release.catalog import load_catalog
    from app.release.publish import keygen, sign_release

    release = tmp_path / "release"
    release.mkdir()
    name = load_catalog().integrity.patch
    (release / name).write_bytes(default_patch().path.read_bytes())  # the publisher ships the same patch
    (release / "model.gguf").write_bytes(b"GGUF not really")
    key = keygen(tmp_path / "keys")
    signed = sign_release(release, key.private)
    proc = run_cli("backend", "build", "--cpu", "--no-activate", "--json", "--release-patch", str(release),
                   "--trust-fingerprint", signed.fingerprint)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])["manifest"]
    assert result["patch_sha256"] == default_patch().sha256 and result["id"] == patched_backend.id
    (release / name).write_bytes(default_patch().path.read_bytes() + b"\n// extra\n")
    tampered = run_cli("backend", "build", "--cpu", "--no-activate", "--json", "--release-patch", str(release),
                       "--trust-fingerprint", signed.fingerprint)
    assert tampered.returncode == 4
    assert name in json.loads(tampered.stdout.splitlines()[-1])["message"]


def test_selftest_runs_offline_with_an_empty_cache(patched_backend: BackendManifest, tmp_path: Path) -> None:
    """A backend carried to a machine with no sdist and no network still self-tests (the app carries the vocab)."""
    env = dict(os.environ, FASTMTP_CACHE_DIR=str(tmp_path / "cache"), PIP_NO_INDEX="1",
               PIP_INDEX_URL="http://127.0.0.1:9/simple", FASTMTP_BACKEND_DIR=str(backend_dir(patched_backend.id)))
    done = subprocess.run([sys.executable, "-m", "app.native.selftest", str(backend_dir(patched_backend.id))],
                          env=env, capture_output=True, text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] is True, result
    assert not (tmp_path / "cache" / "sources").exists()
