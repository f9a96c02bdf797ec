"""Toolchain detection on real folder layouts: a CUDA toolkit, the nvidia-cublas wheel, driver stubs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.backend import toolchain
from app.backend.builder import BuildOptions, plan_build


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_cublas_is_found_in_a_toolkit_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _touch(tmp_path / "cuda" / "include" / "cublas_v2.h")
    _touch(tmp_path / "cuda" / "lib64" / "libcublas.so.13")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    found = toolchain.find_cublas(None)
    assert found == toolchain.Cublas(str(tmp_path / "cuda" / "include"), str(tmp_path / "cuda" / "lib64"), False)


def test_cublas_from_the_pip_wheel_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    _touch(site / "nvidia" / "cu13" / "include" / "cublas_v2.h")
    _touch(site / "nvidia" / "cu13" / "lib" / "libcublas.so.13")
    _touch(site / "nvidia" / "cu13" / "lib" / "libcublasLt.so.13")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "no-toolkit"))
    monkeypatch.setattr(toolchain, "_cuda_roots", lambda _nvcc: [tmp_path / "no-toolkit"])
    monkeypatch.setattr(sys, "path", [str(site)])
    found = toolchain.find_cublas("/usr/local/bin/nvcc")
    assert found is not None and found.from_wheel
    tools = toolchain.detect()
    tools.nvcc = toolchain.Tool("/usr/local/bin/nvcc", "13.0")
    tools.cublas = found
    tools.cuda_driver_lib = None
    plan = plan_build(BuildOptions(flavor="cuda", cuda_archs=["90"]), tools)
    lib = site / "nvidia" / "cu13" / "lib"
    assert f"-DCUDA_cublas_LIBRARY={lib / 'libcublas.so.13'}" in plan.cmake_args
    assert f"-DCUDA_cublasLt_LIBRARY={lib / 'libcublasLt.so.13'}" in plan.cmake_args
    assert f"-DCMAKE_CUDA_FLAGS=-I{site / 'nvidia' / 'cu13' / 'include'}" in plan.cmake_args
    assert "-DGGML_CUDA_NO_VMM=ON" in plan.cmake_args  # no libcuda.so to link on this layout


def test_driver_stub_enables_vmm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = _touch(tmp_path / "cuda" / "lib64" / "stubs" / "libcuda.so")
    monkeypatch.setattr(toolchain, "_cuda_roots", lambda _nvcc: [tmp_path / "cuda"])
    assert toolchain.find_cuda_driver_lib("/x/nvcc") == str(stub)
    tools = toolchain.detect()
    tools.nvcc = toolchain.Tool("/x/nvcc", "13.0")
    tools.cublas = toolchain.Cublas("/x/include", "/x/lib64", from_wheel=False)
    tools.cuda_driver_lib = str(stub)
    assert "-DGGML_CUDA_NO_VMM=ON" not in plan_build(BuildOptions(flavor="cuda", cuda_archs=["89"]), tools).cmake_args


def test_auto_builds_cpu_when_cuda_cannot_be_built() -> None:
    tools = toolchain.detect()
    tools.gpus = [toolchain.Gpu("NVIDIA H100", "9.0", 81559)]
    tools.nvcc = toolchain.Tool("/x/nvcc", "13.0")
    tools.cublas = None
    assert plan_build(BuildOptions(flavor="auto"), tools).flavor == "cpu"
    tools.cublas = toolchain.Cublas("/x/include", "/x/lib64", from_wheel=False)
    plan = plan_build(BuildOptions(flavor="auto"), tools)
    assert plan.flavor == "cuda" and plan.cuda_archs == ["90"]
