"""Which archive runs on which GPU (PTX for newer GPUs, compiled code within a major), the driver table, the
``--cuda-arch`` list llama.cpp's releases use, and the versioned archive names: pure functions, no backend."""

from __future__ import annotations

import pytest

from app.backend.archive import archive_name
from app.backend.builder import parse_archs, sort_archs
from app.backend.feed import (
    MIN_DRIVER,
    FeedArchive,
    Machine,
    arch_runs,
    min_driver_for,
    normalize_build_arch,
    select_archive,
    sm,
)
from app.backend.registry import BackendManifest
from app.core.errors import VerificationError

RELEASE_13 = ("75-virtual", "80-virtual", "86", "89", "90-virtual", "120a", "121a")  # llama.cpp's CUDA 13 list
SHA = "ab" * 32


def cuda(name: str, version: str, driver: str, archs: tuple[str, ...]) -> FeedArchive:
    return FeedArchive(name, 1000, SHA, "cuda", "linux", version, driver, archs, "0.3.35", "cd" * 32)


def test_ptx_of_an_older_architecture_runs_on_newer_gpus_compiled_code_only_within_its_major() -> None:
    assert arch_runs("90-virtual", "100") == "ptx" and arch_runs("90-virtual", "120") == "ptx"
    assert arch_runs("90-virtual", "89") is None  # PTX never runs on an older GPU
    assert arch_runs("86", "86") == "code" and arch_runs("86", "89") == "code"  # same major, newer minor
    assert arch_runs("86", "75") is None and arch_runs("86", "90") is None  # older GPU; another major
    assert arch_runs("86-real", "89") == "code" and arch_runs("75-virtual", "75") == "ptx"
    assert arch_runs("120a", "120") == "code" and arch_runs("120a", "121") is None  # arch-specific: that GPU only
    assert arch_runs("120", "121") is None  # ggml builds a plain 12x as 12xa
    assert arch_runs("120a-virtual", "120") == "ptx" and arch_runs("120a-virtual", "121") is None


def test_the_release_list_covers_every_gpu_from_turing_on_and_says_which_by_ptx() -> None:
    feed = (cuda("fastmtp-backend-1.0.0-cuda13.0-linux-x86_64.tar.xz", "13.0", "580.65.06", RELEASE_13),)
    for gpu, way in (("75", "ptx"), ("80", "ptx"), ("86", "code"), ("87", "code"), ("89", "code"), ("90", "ptx"),
                     ("100", "ptx"), ("103", "ptx"), ("120", "code"), ("121", "code")):
        chosen = select_archive(feed, Machine("linux", (gpu,), "580.65.06"))
        assert chosen.archive is not None, (gpu, chosen.reason)
        assert ("from PTX" in chosen.reason) == (way == "ptx"), (gpu, chosen.reason)
    older = select_archive(feed, Machine("linux", ("70",), "580.65.06"))
    assert older.archive is None and older.reason.startswith("No archive for sm_70")
    assert "compute_75 (PTX)" in older.reason and "sm_120a" in older.reason


def test_compiled_code_is_preferred_to_ptx_at_the_same_cuda() -> None:
    ptx_only = cuda("a.tar.xz", "13.0", "580.65.06", ("80-virtual",))
    compiled = cuda("b.tar.xz", "13.0", "580.65.06", ("86",))
    for order in ((ptx_only, compiled), (compiled, ptx_only)):
        chosen = select_archive(order, Machine("linux", ("86",), "590")).archive
        assert chosen is not None and chosen.name == "b.tar.xz"


def test_build_architectures_are_read_as_cmake_names_them() -> None:
    assert normalize_build_arch("sm_86", "feed") == "86" and normalize_build_arch("8.6", "feed") == "86"
    assert normalize_build_arch("compute_90", "feed") == "90-virtual"
    assert normalize_build_arch("120A", "feed") == "120a" and normalize_build_arch("90-virtual", "feed") == "90-virtual"
    for bad in ("ampere", "90-fake", "9", "1200"):
        with pytest.raises(VerificationError, match="not a GPU architecture"):
            normalize_build_arch(bad, "feed")
    assert sm(["86", "90-virtual", "120a"]) == "sm_86, compute_90 (PTX), sm_120a"


def test_the_driver_table_covers_cuda_12_8_and_13() -> None:
    assert MIN_DRIVER["linux"]["12.8"].startswith("570.") and MIN_DRIVER["windows"]["12.8"].startswith("570.")
    assert min_driver_for("13.0", "linux") == "580.65.06" and min_driver_for("13.0", "windows") == "580.88"
    # a later 13.x minor: the first 13 release's driver (NVIDIA's minor version compatibility)
    assert min_driver_for("13.2", "linux") == "580.65.06" and min_driver_for("13.1", "windows") == "580.88"
    assert min_driver_for("14.0", "linux") is None and min_driver_for("11.2", "linux") is None


def test_the_cuda_arch_option_takes_llama_cpps_release_list() -> None:
    assert parse_archs("75-virtual;80-virtual;86;89;90-virtual;120a;121a") == list(RELEASE_13)
    assert parse_archs("121a,86;sm_89, 86") == ["86", "89", "121a"]  # sorted by number, each once
    assert sort_archs(["100", "89"]) == ["89", "100"]
    for bad in ("", "ampere", "86;9x", "90-fake"):
        with pytest.raises(ValueError, match="not a CUDA architecture"):
            parse_archs(bad)


def _manifest(**changes: object) -> BackendManifest:
    base: dict[str, object] = dict(
        id="0.3.35-cuda-x", llama_cpp_python_version="0.3.35", llama_cpp_commit="c", sdist_sha256="s",
        patch_name="p", patch_sha256="ab", flavor="cuda", cmake_args=["-DGGML_NATIVE=OFF"], cuda_version="13.0",
        cuda_archs=list(RELEASE_13), compiler="gcc", built_at="", build_seconds=0.0)
    base.update(changes)
    return BackendManifest(**base)  # type: ignore[arg-type]


def test_archive_names_carry_the_versions_and_what_they_run_on() -> None:
    assert archive_name(_manifest(), "linux", "x86_64", app="1.2.0") == \
        "fastmtp-backend-1.2.0-cuda13.0-linux-x86_64.tar.xz"
    assert archive_name(_manifest(cuda_version="12.8"), "win32", "AMD64", app="1.2.0") == \
        "fastmtp-backend-1.2.0-cuda12.8-windows-x86_64.tar.xz"
    cpu = _manifest(flavor="cpu", cuda_version=None, cuda_archs=[])
    assert archive_name(cpu, "linux", "x86_64", app="1.2.0") == "fastmtp-backend-1.2.0-cpu-linux-x86_64.tar.xz"
    native = _manifest(flavor="cpu", cmake_args=["-DGGML_NATIVE=ON"], patch_sha256=None)
    assert archive_name(native, "darwin", "arm64", app="1.2.0") == \
        "fastmtp-backend-1.2.0-cpu-native-unpatched-macos-arm64.tar.xz"
