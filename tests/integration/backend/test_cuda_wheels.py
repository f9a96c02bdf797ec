"""The app's own CUDA toolkit from NVIDIA's pip wheels, for machines with the driver and no toolkit.

Real parts only: the versions a driver allows; pip fetching from a PEP 503 index served on
127.0.0.1 (the wheels come from the cache that `make test` fills, so nothing is downloaded from
the internet); the install into one toolkit root; and, with the system toolkit hidden, CMake
configuring the patched CUDA backend with only the wheels and nvcc compiling real ggml-cuda objects.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend import cuda_wheels, toolchain
from app.backend.builder import BuildOptions, Reporter, _manifest, plan_build, prepare_source
from app.core.cancel import CancelToken
from app.core.errors import BuildCancelled, ToolchainError
from tests.helpers.cuda_index import (
    NVIDIA_SMI_HEADER,
    PIN,
    LocalIndex,
    fake_nvidia_smi,
    isolate_pip,
    require_cached_wheelhouse,
    tiny_wheel,
)
from tests.helpers.module_folders import ModuleFolders

# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cached_wheelhouse() -> Path:
    """The CUDA 13.0 wheels `make test` fetched into the app cache; never downloaded here."""
    return require_cached_wheelhouse()


@pytest.fixture(scope="module")
def pip_isolated() -> Iterator[None]:
    """pip sees only what the tests give it: no config files, no find-links, no version check, no cache."""
    with pytest.MonkeyPatch.context() as mp:
        isolate_pip(mp)
        yield


@pytest.fixture(scope="module")
def index(cached_wheelhouse: Path, pip_isolated: None,
          module_tmp: ModuleFolders) -> Iterator[LocalIndex]:
    """The cached wheels, plus wheels that must not be picked: a newer CUDA 13.1 crt, CUDA 12 ones without nvcc."""
    decoys = module_tmp.mktemp("decoys")
    extra = [
        tiny_wheel(decoys, "nvidia-cuda-crt", "13.1.80", {"nvidia/cu13/include/crt/host_config.h": b"#error\n"}),
        tiny_wheel(decoys, "nvidia-cuda-nvcc-cu12", "12.4.131", {"nvidia/cuda_nvcc/bin/ptxas": b""}),
        tiny_wheel(decoys, "nvidia-cublas-cu12", "12.4.5.8", {"nvidia/cublas/include/cublas_v2.h": b""}),
    ]
    served = LocalIndex(module_tmp.mktemp("index"), sorted(cached_wheelhouse.glob("*.whl")) + extra)
    yield served
    served.close()


@pytest.fixture(scope="module")
def fetched(index: LocalIndex, module_tmp: ModuleFolders) -> tuple[Path, list[str]]:
    """The real fetch: pip downloads from the local index into a fresh wheelhouse."""
    house = module_tmp.mktemp("wheelhouse")
    log: list[str] = []
    assert cuda_wheels.fetch(PIN, house, index.url, log.append) == house
    return house, log


@pytest.fixture(scope="module")
def app_cache(fetched: tuple[Path, list[str]], module_tmp: ModuleFolders) -> Path:
    """A cache folder holding the app's CUDA 13.0 toolkit, installed from the fetched wheels by the CLI."""
    cache = module_tmp.mktemp("cache")
    proc = _cli("backend", "cuda-toolkit", "install", "--cuda", PIN, "--wheelhouse", str(fetched[0]), "--json",
                FASTMTP_CACHE_DIR=str(cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["root"] == str(cache / "cuda-toolkit" / PIN)
    return cache


def _cli(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *argv], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **env))


# ----------------------------------------------------------------------------- (a) versions


def test_the_drivers_cuda_version_comes_from_the_nvidia_smi_header(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert cuda_wheels.parse_driver_cuda_version(NVIDIA_SMI_HEADER) == "13.0"
    assert cuda_wheels.parse_driver_cuda_version("CUDA Version: 12.4") == "12.4"
    assert cuda_wheels.parse_driver_cuda_version("NVIDIA-SMI has failed because it couldn't communicate") is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert cuda_wheels.driver_cuda_version() is None
    with pytest.raises(ToolchainError) as caught:
        cuda_wheels.resolve_cuda(None)
    assert "--cuda" in caught.value.advice
    smi = fake_nvidia_smi(tmp_path)
    assert cuda_wheels.driver_cuda_version() == "13.0"
    assert cuda_wheels.resolve_cuda(None) == "13.0"
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    assert cuda_wheels.driver_cuda_version() is None


def test_requirements_are_not_newer_than_the_driver() -> None:
    reqs = cuda_wheels.requirements("13.0")
    assert [str(r) for r in reqs] == [f"{name}>=13.0,<13.1" for name in (
        "nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cuda-runtime",
        "nvidia-cuda-culibos", "nvidia-cublas")]
    nvcc = reqs[0]
    assert nvcc.matches(Path("nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl"))
    assert not nvcc.matches(Path("nvidia_cuda_nvcc-13.1.80-py3-none-manylinux2014_x86_64.whl"))
    assert not nvcc.matches(Path("nvidia_cuda_nvcc_cu12-12.9.86-py3-none-manylinux2014_x86_64.whl"))
    assert all(str(r).endswith(">=13.0,<13.3") for r in cuda_wheels.requirements("13.2"))  # 13.0 … 13.2
    cu12 = cuda_wheels.requirements("12.4")
    assert [r.name for r in cu12] == ["nvidia-cuda-nvcc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12",
                                      "nvidia-cublas-cu12"]
    assert all(str(r).endswith(">=12.0,<12.5") for r in cu12)
    assert cu12[3].matches(Path("nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl"))
    assert cu12[2].matches(Path("nvidia_cuda_cccl_cu12-12.4.127.post1-py3-none-manylinux2014_x86_64.whl"))
    with pytest.raises(ToolchainError, match=r"CUDA 11\.8"):
        cuda_wheels.requirements("11.8")
    with pytest.raises(ToolchainError, match="not a CUDA version"):
        cuda_wheels.requirements("thirteen")


# ----------------------------------------------------------------------------- (b) fetch and install


def test_fetch_downloads_through_pip_from_the_index(fetched: tuple[Path, list[str]], cached_wheelhouse: Path,
                                                    index: LocalIndex) -> None:
    house, log = fetched
    assert any(index.url in line for line in log)  # pip looked in our index, and only there
    assert not any("pypi.org" in line for line in log)
    got = sorted(p.name for p in house.glob("*.whl"))
    assert got == sorted(p.name for p in cached_wheelhouse.glob("*.whl"))
    assert "nvidia_cuda_crt-13.1.80-py3-none-any.whl" not in got  # newer than the driver: not taken
    assert all((house / name).stat().st_size == (cached_wheelhouse / name).stat().st_size for name in got)
    again: list[str] = []
    cuda_wheels.fetch(PIN, house, "http://127.0.0.1:9/simple/", again.append)  # complete: pip is not run
    assert not any(line.startswith("$ ") for line in again)


def test_cuda12_wheels_without_nvcc_stop_before_the_cublas_download(index: LocalIndex, tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as caught:
        cuda_wheels.fetch("12.4", tmp_path, index.url)
    assert "holds no nvcc" in caught.value.message and "580" in caught.value.advice
    assert not list(tmp_path.glob("nvidia_cublas*"))


def test_an_unreachable_index_names_the_packages_and_how_to_fetch_elsewhere(pip_isolated: None,
                                                                             tmp_path: Path) -> None:
    with pytest.raises(cuda_wheels.CudaWheelsUnreachable) as caught:
        cuda_wheels.fetch(PIN, tmp_path / "house", "http://127.0.0.1:9/simple/")
    error = caught.value
    assert isinstance(error, ToolchainError) and error.exit_code == 3
    assert "not reachable" in error.message and "nvidia-cuda-nvcc" in error.message
    assert "--wheelhouse DIR" in error.advice and "'nvidia-cublas>=13.0,<13.1'" in error.advice


def test_install_merges_the_wheels_into_one_toolkit_root(app_cache: Path) -> None:
    root = app_cache / "cuda-toolkit" / PIN
    for name in ("bin/nvcc", "nvvm/bin/cicc", "nvvm/libdevice/libdevice.10.bc", "include/cublas_v2.h",
                 "include/cuda_runtime.h", "include/crt/host_config.h", "include/cccl/cub/cub.cuh",
                 "lib/libcudart_static.a", "lib/libculibos.a"):
        assert (root / name).is_file(), name
    for link, target in (("libcublas.so", "libcublas.so.13"), ("libcublasLt.so", "libcublasLt.so.13"),
                         ("libcudart.so", "libcudart.so.13"), ("libnvvm.so", "libnvvm.so.4")):
        assert os.readlink(root / "lib" / link) == target and (root / "lib" / link).is_file()
    assert not list(root.rglob("__init__.py"))
    marker = json.loads((root / cuda_wheels.MARKER).read_text())
    assert marker["cuda"] == PIN and marker["nvcc_version"] == PIN
    assert {name: version.rsplit(".", 1)[0][:4] for name, version in marker["packages"].items()} == {
        name: "13.0" for name in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl",
                                  "nvidia-cuda-runtime", "nvidia-cuda-culibos", "nvidia-cublas")}
    assert sorted(p.name for p in (app_cache / "cuda-toolkit").iterdir()) == [PIN]  # no staging left


def test_a_cancelled_install_leaves_nothing_behind(fetched: tuple[Path, list[str]], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path))
    cancel = CancelToken()

    def on_line(line: str) -> None:
        if line.startswith("Processing"):  # pip is unpacking the wheels
            cancel.cancel()

    started = time.monotonic()
    with pytest.raises(BuildCancelled):
        cuda_wheels.install(PIN, fetched[0], on_line, cancel)
    assert time.monotonic() - started < 30
    assert list((tmp_path / "cuda-toolkit").iterdir()) == []
    assert cuda_wheels.installed_toolkits() == []
    with pytest.raises(ToolchainError, match="cuda-toolkit fetch"):
        cuda_wheels.install(PIN, tmp_path / "empty-wheelhouse")


# ----------------------------------------------------------------------------- (c) detection and the build


def test_detection_finds_the_apps_toolkit_and_the_plan_builds_with_it(app_cache: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = app_cache / "cuda-toolkit" / PIN
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(app_cache))
    monkeypatch.setenv(cuda_wheels.TOOLKIT_ENV, "app")
    tools = toolchain.detect()
    assert tools.cuda_toolkit == toolchain.CudaToolkit("app", str(root), PIN)
    assert tools.nvcc == toolchain.Tool(str(root / "bin" / "nvcc"), PIN)
    assert tools.can_build_cuda and tools.problems(cuda=True) == []
    assert toolchain.fit_cuda_archs(str(root / "bin" / "nvcc"), ["89", "90"]) == ["89", "90"]
    # a GPU newer than this nvcc: PTX of the newest arch it knows that ggml does not make arch-specific
    assert toolchain.fit_cuda_archs(str(root / "bin" / "nvcc"), ["130"]) == ["110-virtual"]
    tools.gpus = [toolchain.Gpu("NVIDIA H200", "9.0", 143771)]
    plan = plan_build(BuildOptions(flavor="auto"), tools)
    assert plan.flavor == "cuda" and plan.cuda_archs == ["90"]
    assert f"-DCMAKE_CUDA_COMPILER={root / 'bin' / 'nvcc'}" in plan.cmake_args
    assert f"-DCUDAToolkit_ROOT={root}" in plan.cmake_args
    # the linker finds the toolkit's libraries, no RUNPATH names the cache: the install carries them ($ORIGIN)
    assert f"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,{root / 'lib'}" in plan.cmake_args
    assert not any(f"-rpath,{root}" in arg for arg in plan.cmake_args)
    manifest = _manifest(plan, 0.0)
    assert manifest.runtime_lib_dirs == [str(root / "lib")] and manifest.cuda_version == PIN

    monkeypatch.setenv(cuda_wheels.TOOLKIT_ENV, "system")  # the app's toolkit is ignored
    system = toolchain.detect()
    assert system.cuda_toolkit is None or system.cuda_toolkit.source == "system"
    assert system.nvcc is None or not system.nvcc.path.startswith(str(app_cache))
    monkeypatch.setenv(cuda_wheels.TOOLKIT_ENV, "app")
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(app_cache / "elsewhere"))  # no app toolkit there
    bare = toolchain.detect()
    assert bare.nvcc is None and not bare.can_build_cuda
    assert any("backend cuda-toolkit install" in line for line in bare.problems(cuda=True))
    doctor = json.loads(_cli("backend", "doctor", "--json", FASTMTP_CACHE_DIR=str(app_cache),
                             FASTMTP_CUDA_TOOLKIT="app").stdout)
    assert doctor["toolchain"]["cuda_toolkit"] == {"source": "app", "root": str(root), "version": PIN}
    assert doctor["can_build_cuda"]
    status = json.loads(_cli("backend", "cuda-toolkit", "status", "--cuda", PIN, "--json",
                             FASTMTP_CACHE_DIR=str(app_cache)).stdout)
    assert [tk["root"] for tk in status["installed"]] == [str(root)]
    monkeypatch.setenv(cuda_wheels.TOOLKIT_ENV, "maybe")
    with pytest.raises(ToolchainError, match="auto, system or app"):
        toolchain.detect()


_CHILD = r"""
import json, re, shutil, subprocess, sys
from pathlib import Path
from app.backend import toolchain
from app.backend.builder import BuildOptions, Reporter, configure, plan_build
from app.core.cancel import CancelToken

tree, build_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
system_nvcc = shutil.which("nvcc")
system_nvcc_runs = False
if system_nvcc:
    system_nvcc_runs = subprocess.run([system_nvcc, "--version"], capture_output=True).returncode == 0
tools = toolchain.detect()
plan = plan_build(BuildOptions(flavor="cuda", cuda_archs=["90"]), tools)
log = []
configure(plan, tree, build_dir, Reporter(lambda event: log.append(event.message)), CancelToken())
ninja = tools.ninja.path
listed = subprocess.run([ninja, "-C", str(build_dir), "-t", "targets", "all"], capture_output=True, text=True,
                        check=True).stdout
targets = re.findall(r"^(\S*/ggml-cuda\.dir/(?:arange|fill|sum)\.cu\.o):", listed, re.MULTILINE)
commands = subprocess.run([ninja, "-C", str(build_dir), "-t", "commands", *targets], capture_output=True,
                          text=True, check=True).stdout
built = subprocess.run([ninja, "-C", str(build_dir), "-j2", *targets], capture_output=True, text=True)
json.dump({"toolkit": tools.cuda_toolkit.__dict__ if tools.cuda_toolkit else None,
           "nvcc": tools.nvcc.path if tools.nvcc else None, "system_nvcc": system_nvcc,
           "system_nvcc_runs": system_nvcc_runs, "cmake_args": plan.cmake_args, "targets": targets,
           "commands": commands.splitlines(), "build_rc": built.returncode,
           "build_tail": (built.stdout + built.stderr)[-4000:]}, out.open("w"))
"""


def _hide_system_toolkit() -> tuple[list[str], str]:
    """A command prefix that runs the child with /usr/local/cuda* hidden (root: a private mount namespace)."""
    roots = sorted({str(p.resolve()) for p in Path("/usr/local").glob("cuda*") if p.is_dir()})
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("mount") and roots \
            and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0:
        return roots, "unshare"
    return roots, "switch"


@pytest.mark.slow
def test_the_cuda_backend_configures_and_compiles_with_only_the_wheels(app_cache: Path, tmp_path: Path) -> None:
    """CMake configures the real patched tree with the app's toolkit, and nvcc compiles real ggml-cuda objects."""
    source_plan = plan_build(BuildOptions(flavor="cpu"))
    tree = prepare_source(source_plan, BuildOptions(flavor="cpu"), Reporter(lambda _event: None))
    root = app_cache / "cuda-toolkit" / PIN
    build_dir, out, empty = tmp_path / "build", tmp_path / "result.json", tmp_path / "empty"
    empty.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, FASTMTP_CACHE_DIR=str(app_cache), PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    hidden, how = _hide_system_toolkit()
    child = [sys.executable, str(script), str(tree), str(build_dir), str(out)]
    if how == "unshare":
        mounts = " && ".join(f"mount --bind {empty} {r}" for r in hidden)
        cmd = ["unshare", "-m", "sh", "-c", f"{mounts} && exec \"$@\"", "sh", *child]
        env.pop(cuda_wheels.TOOLKIT_ENV, None)  # auto: the system toolkit is simply not there
    else:
        cmd = child
        env[cuda_wheels.TOOLKIT_ENV] = "app"
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    print(f"system toolkit hidden by {how} ({', '.join(hidden) or 'none there'}); "
          f"configure + 3 objects in {time.monotonic() - started:.0f} s")
    if how == "unshare":
        assert not result["system_nvcc_runs"]  # /usr/local/bin/nvcc may remain, but its toolkit is gone
    assert result["toolkit"] == {"source": "app", "root": str(root), "version": PIN}
    assert result["nvcc"] == str(root / "bin" / "nvcc")
    assert f"-DCUDAToolkit_ROOT={root}" in result["cmake_args"]
    cache = (build_dir / "CMakeCache.txt").read_text()
    assert f"CMAKE_CUDA_COMPILER:STRING={root}/bin/nvcc" in cache or f"CMAKE_CUDA_COMPILER:FILEPATH={root}/bin/nvcc" \
        in cache
    assert f"CUDA_cublas_LIBRARY:FILEPATH={root}/lib/libcublas.so" in cache
    assert f"CUDA_cudart_LIBRARY:FILEPATH={root}/lib/libcudart.so" in cache
    link = (build_dir / "build.ninja").read_text()
    assert f"-Wl,-rpath-link,{root}/lib" in link  # the linker finds the toolkit; the install carries its libraries
    assert len(result["targets"]) == 3, result["targets"]
    assert len(result["commands"]) == 3 and all(line.startswith(f"{root}/bin/nvcc ") for line in result["commands"])
    assert all("arch=compute_90" in line for line in result["commands"])
    assert result["build_rc"] == 0, result["build_tail"]
    for target in result["targets"]:
        obj = build_dir / target
        assert obj.stat().st_size > 10_000
        sections = subprocess.run(["readelf", "-S", str(obj)], capture_output=True, text=True).stdout \
            if shutil.which("readelf") else ".nv_fatbin"
        assert ".nv_fatbin" in sections  # device code for the GPU was embedded
