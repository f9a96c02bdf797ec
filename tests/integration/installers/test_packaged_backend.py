"""The packaged app's backend: a CPU build for any x86-64 PC, carried as an archive and installed on first start.

A real ``--cpu-variants`` build (cached after the first run: the base tree plus one ggml-cpu module),
loaded through the app's own loader in the self-test child, and unpacked by the first command a fresh
user runs. The packaged app itself is built and run by installers/smoke.py (`make test`).
"""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

import pytest

from app import cli
from app.backend import archive, bundled, registry
from app.backend.builder import BuildOptions, build_backend, run_selftest_subprocess
from app.backend.registry import BackendManifest

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the CPU variants are x86-64 modules")


@pytest.fixture(scope="module")
def any_cpu_backend() -> BackendManifest:
    return build_backend(BuildOptions(flavor="cpu", portable=True, cpu_variants=True, activate=False))


def _has_avx2() -> bool:
    return " avx2 " in f" {Path('/proc/cpuinfo').read_text().replace(chr(10), ' ')} "


def test_the_build_carries_a_base_module_and_the_avx2_variant(any_cpu_backend: BackendManifest) -> None:
    lib = registry.backend_dir(any_cpu_backend.id) / "llama_cpp" / "lib"
    assert (lib / "libggml-cpu.so").is_file() and (lib / "libggml-cpu-haswell.so").is_file()
    assert (lib / "libggml-rpc.so").is_file() and any_cpu_backend.has_rpc  # the RPC module, loaded beside them
    assert any_cpu_backend.cpu_variants == ["haswell"] and any_cpu_backend.loads_backends_at_start
    assert "-DGGML_AVX2=OFF" in any_cpu_backend.cmake_args and "-DGGML_NATIVE=OFF" in any_cpu_backend.cmake_args
    assert any_cpu_backend.id.startswith("0.3.35-cpu-any-d2t-") and any_cpu_backend.selftest_ok


def test_the_loader_picks_the_best_module_this_processor_runs(any_cpu_backend: BackendManifest,
                                                              tmp_path: Path) -> None:
    chosen = str(any_cpu_backend.selftest["system_info"])
    assert ("AVX2 = 1" in chosen) == _has_avx2()
    base_only = tmp_path / "base-only"
    shutil.copytree(registry.backend_dir(any_cpu_backend.id), base_only, symlinks=True)
    (base_only / "llama_cpp" / "lib" / "libggml-cpu-haswell.so").unlink()
    result = run_selftest_subprocess(base_only)
    assert result["ok"], result
    assert "AVX2 = 1" not in str(result["system_info"]) and "SSE3 = 1" in str(result["system_info"])
    assert result["d2t"]["loaded"]  # type: ignore[index]


def test_without_any_cpu_module_the_error_says_what_to_do(any_cpu_backend: BackendManifest, tmp_path: Path) -> None:
    broken = tmp_path / "no-cpu"
    shutil.copytree(registry.backend_dir(any_cpu_backend.id), broken, symlinks=True)
    for module in (broken / "llama_cpp" / "lib").glob("libggml-cpu*.so"):
        module.unlink()
    result = run_selftest_subprocess(broken)
    assert not result["ok"]
    assert "can run on this processor" in str(result.get("error")), result


def test_a_fresh_user_gets_the_bundled_backend_on_first_command(any_cpu_backend: BackendManifest, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    carried = tmp_path / "bundle"
    archive.pack(any_cpu_backend.id, carried / f"fastmtp-backend-{any_cpu_backend.id}.tar.xz")
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "fresh-data"))
    monkeypatch.setenv("FASTMTP_BUNDLED_BACKENDS", str(carried))
    assert registry.active_id() is None

    assert cli.main(["backend", "status", "--json"]) == 0
    assert registry.active_id() == any_cpu_backend.id
    out, err = capsys.readouterr()
    assert "installing the bundled CPU backend" in err and any_cpu_backend.id in out

    registry.set_active(any_cpu_backend.id)  # a second command finds it active and unpacks nothing
    (carried / f"fastmtp-backend-{any_cpu_backend.id}.tar.xz").unlink()
    assert bundled.ensure_installed() is None


def test_a_damaged_bundled_archive_is_reported_and_the_app_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    carried = tmp_path / "bundle"
    carried.mkdir()
    (carried / "fastmtp-backend-x.tar.xz").write_bytes(b"not an archive")
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "fresh-data"))
    monkeypatch.setenv("FASTMTP_BUNDLED_BACKENDS", str(carried))
    assert cli.main(["backend", "list", "--json"]) == 0
    assert registry.active_id() is None
    out, err = capsys.readouterr()
    assert json.loads(out) == []
    assert "The bundled backend could not be installed" in err and "not an archive" not in out
