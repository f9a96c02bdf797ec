"""What the About dialog says (issue 13, build 4), from the Qt-free core: the active backend's manifest, and the
driver as ``nvidia-smi`` reports it (a stand-in ``nvidia-smi`` on PATH plays a GPU machine)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from app import __version__
from app.backend import about
from app.backend.registry import BackendManifest

SMI = """#!/bin/sh
if [ "$1" = "--query-gpu=name,driver_version" ]; then
  echo "NVIDIA H200, 570.124.06"
  echo "NVIDIA H200, 570.124.06"
else
  echo "| NVIDIA-SMI 570.124.06    Driver Version: 570.124.06    CUDA Version: 12.8     |"
fi
"""


def test_parse_driver_query_reads_the_driver_and_every_gpu() -> None:
    assert about.parse_driver_query("NVIDIA GeForce RTX 4090, 550.54.15\nNVIDIA A100-SXM4-80GB, 550.54.15\n") == \
        ("550.54.15", ["NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB"])
    assert about.parse_driver_query("") == (None, [])
    assert about.parse_driver_query("garbage without a comma") == (None, [])


def test_versions_name_the_active_backend_and_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         patched_backend: BackendManifest) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    versions = about.collect()
    assert (versions.app, versions.backend_id, versions.llama_cpp_commit) == \
        (__version__, patched_backend.id, patched_backend.llama_cpp_commit)
    assert (versions.driver, versions.driver_cuda, versions.gpus) == ("570.124.06", "12.8", ("NVIDIA H200",) * 2)
    rows = dict(versions.rows())
    assert rows["Backend"] == f"{patched_backend.id} (cpu, d2t patch)"
    assert rows["NVIDIA driver"] == "570.124.06 (CUDA 12.8)" and "CUDA (built with)" not in rows
    assert f"llama-cpp-python: {patched_backend.llama_cpp_python_version}" in versions.text()


def test_a_cuda_backend_names_its_cuda_and_archs_and_no_backend_or_driver_is_said_in_words() -> None:
    cuda = about.Versions("0.1.0", "3.11", backend_id="0.3.35-cuda-d2t-1", backend_flavor="cuda",
                          llama_cpp_python="0.3.35", llama_cpp_commit="4df29be", patched=True, cuda_build="13.0",
                          cuda_archs=("89", "90"))
    rows = dict(cuda.rows())
    assert rows["CUDA (built with)"] == "13.0 for sm_89, sm_90"
    assert rows["NVIDIA driver"].startswith("none found")
    bare = dict(about.Versions("0.1.0", "3.11").rows())
    assert bare["Backend"].startswith("none yet") and "llama.cpp commit" not in bare
