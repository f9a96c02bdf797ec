"""``backend pack`` makes an archive that runs with only the NVIDIA driver: what the backend's binaries need from a
CUDA toolkit is copied in, found through ``$ORIGIN``, and an archive that would look outside itself is refused.

Real parts: shared libraries compiled here with gcc, standing in for ggml-cuda and a toolkit's cuBLAS pair
(libcublas needs libcublasLt, both with RUNPATH ``$ORIGIN`` as NVIDIA ships them), and, where ``make test``
fetched NVIDIA's CUDA 13.0 wheels, the real ``libcudart.so.13`` from them. A real CUDA build of ggml takes an
hour; the release workflow checks its archive with ``python -m installers.elf_needs`` (the same check as here).
The backend is packed by the real CLI, the archive checked with binutils' readelf (installers/elf_needs.py, a
reader apart from the packer's), then unpacked and loaded with the toolkit folder gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from app import __version__
from app.backend import cuda_wheels, elf, registry
from installers import elf_needs
from tests.helpers.signed_backend import last_json

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not shutil.which("gcc") or not shutil.which("readelf"),
                                reason="Linux ELF binaries built with gcc, read with binutils' readelf")

RELEASE_13 = ["75-virtual", "80-virtual", "86", "89", "90-virtual", "120a", "121a"]
BLAS, BLAS_LT = "libtoolkitblas.so.9", "libtoolkitblasLt.so.9"
CUDART = "libcudart.so.13"


def gcc(out: Path, source: str, *args: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *args], check=True,
                   capture_output=True, text=True)
    src.unlink()
    return out


@pytest.fixture
def toolkit(tmp_path: Path) -> Path:
    """A toolkit's lib folder: the blas pair, each found by the other through ``$ORIGIN``."""
    lib = tmp_path / "toolkit" / "lib"
    lib.mkdir(parents=True)
    gcc(lib / BLAS_LT, "int blaslt_gemm(int x) { return x * 3; }\n", f"-Wl,-soname,{BLAS_LT}")
    gcc(lib / BLAS, "int blaslt_gemm(int);\nint blas_gemm(int x) { return blaslt_gemm(x) + 1; }\n",
        f"-Wl,-soname,{BLAS}", f"-L{lib}", f"-l:{BLAS_LT}", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    (lib / "libtoolkitblas.so").symlink_to(BLAS)
    return lib


def install_backend(data: Path, backend_id: str, lib: Path, runtime: list[str]) -> Path:
    """An installed CUDA backend as an older build left it: RUNPATH ``$ORIGIN`` plus the toolkit's folder."""
    folder = data / "backends" / backend_id
    (folder / "llama_cpp" / "lib").mkdir(parents=True)
    (folder / "llama_cpp" / "__init__.py").write_text("")
    manifest = registry.BackendManifest(
        id=backend_id, llama_cpp_python_version="0.3.35", llama_cpp_commit="c", sdist_sha256="s", patch_name="p",
        patch_sha256="ab", flavor="cuda", cmake_args=["-DGGML_CUDA=ON", "-DGGML_NATIVE=OFF"], cuda_version="13.0",
        cuda_archs=RELEASE_13, compiler="gcc", built_at="2026-12-03T00:00:00+00:00", build_seconds=1.0,
        selftest={"ok": True}, runtime_lib_dirs=runtime)
    manifest.write(folder)
    shutil.copy2(lib, folder / "llama_cpp" / "lib" / lib.name)
    return folder


def pack(data: Path, backend_id: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FASTMTP_DATA_DIR=str(data))
    env.pop("FASTMTP_BACKEND_DIR", None)
    env.pop("LD_LIBRARY_PATH", None)
    return subprocess.run([sys.executable, "-m", "app", "backend", "pack", backend_id, "--out", str(out), "--json"],
                          env=env, capture_output=True, text=True, timeout=300)


def load_and_call(library: Path, function: str, argument: int | None) -> int:
    """Load ``library`` in a fresh process with no LD_LIBRARY_PATH and call ``function``: the loader alone finds
    what it needs."""
    call = f"lib.{function}({argument})" if argument is not None else \
        f"(lambda v: (lib.{function}(ctypes.byref(v)), v.value)[1])(ctypes.c_int(0))"
    code = f"import ctypes; lib = ctypes.CDLL({str(library)!r}); print({call})"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_pack_carries_what_the_backend_needs_and_points_at_it_with_origin(toolkit: Path, tmp_path: Path) -> None:
    lib = gcc(tmp_path / "libggml-cuda.so", "int blas_gemm(int);\nint ggml_cuda_mul(int x) { return blas_gemm(x); }\n",
              f"-L{toolkit}", f"-l:{BLAS}", f"-Wl,-rpath-link,{toolkit}", f"-Wl,-rpath,$ORIGIN:{toolkit}",
              "-Wl,--enable-new-dtags")
    data = tmp_path / "data"
    folder = install_backend(data, "0.3.35-cuda-sm75-virtual-d2t-0000", lib, [str(toolkit)])
    out = tmp_path / "dist"
    out.mkdir()
    done = pack(data, "0.3.35-cuda-sm75-virtual-d2t-0000", out)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    archive = Path(got["archive"])
    assert archive.parent == out and archive.name == f"fastmtp-backend-{__version__}-cuda13.0-linux-x86_64.tar.xz"
    assert sorted(got["bundled"]) == [BLAS, BLAS_LT]  # and what that needs in turn
    assert got["runpaths_fixed"] == ["llama_cpp/lib/libggml-cuda.so"]
    assert sorted(p.name for p in out.iterdir()) == [archive.name]  # no staging or .partial left
    assert elf_needs.check_archive(archive) == []  # readelf: every NEEDED inside or the system's, every RUNPATH in
    # the installed backend is left as it was; only the packed copy changed
    assert elf.read(folder / "llama_cpp" / "lib" / "libggml-cuda.so").runpath == f"$ORIGIN:{toolkit}"

    unpacked = elf_needs.unpack(archive, tmp_path / "unpacked") / "0.3.35-cuda-sm75-virtual-d2t-0000"
    carried = unpacked / "llama_cpp" / "lib"
    assert elf_needs.runpath(carried / "libggml-cuda.so") == "$ORIGIN"
    assert json.loads((unpacked / registry.MANIFEST).read_text())["runtime_lib_dirs"] == []  # no build folders
    assert json.loads((unpacked / registry.MANIFEST).read_text())["cuda_archs"] == RELEASE_13
    shutil.rmtree(toolkit.parent)  # the machine it runs on has no toolkit
    assert load_and_call(carried / "libggml-cuda.so", "ggml_cuda_mul", 5) == 16


def test_the_real_cuda_runtime_is_carried_from_the_toolkit_wheels(tmp_path: Path) -> None:
    """Where the CUDA 13.0 wheels are cached (``make test`` fetches them): NVIDIA's own libcudart.so.13."""
    wheels = sorted(cuda_wheels.wheelhouse_dir("13.0").glob("nvidia_cuda_runtime-13.0*.whl"))
    if not wheels:
        pytest.skip("the CUDA 13.0 runtime wheel is not cached (`backend cuda-toolkit fetch --cuda 13.0`)")
    toolkit = tmp_path / "cu13" / "lib"
    toolkit.mkdir(parents=True)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        (toolkit / CUDART).write_bytes(wheel.read(f"nvidia/cu13/lib/{CUDART}"))
    lib = gcc(tmp_path / "libggml-cuda.so",
              "int cudaRuntimeGetVersion(int *v);\nint runtime_version(int *v) { return cudaRuntimeGetVersion(v); }\n",
              f"-L{toolkit}", f"-l:{CUDART}", f"-Wl,-rpath,{toolkit}", "-Wl,--enable-new-dtags")
    data = tmp_path / "data"
    install_backend(data, "cuda13-runtime", lib, [])  # found through the library's own RUNPATH
    done = pack(data, "cuda13-runtime", tmp_path / "dist")
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    assert got["bundled"] == [CUDART]
    archive = Path(got["archive"])
    assert elf_needs.check_archive(archive) == []
    with tarfile.open(archive) as tar:
        assert f"cuda13-runtime/llama_cpp/lib/{CUDART}" in tar.getnames()
    unpacked = elf_needs.unpack(archive, tmp_path / "unpacked") / "cuda13-runtime" / "llama_cpp" / "lib"
    shutil.rmtree(toolkit.parent)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(["ldd", str(unpacked / "libggml-cuda.so")], capture_output=True, text=True, env=env).stdout
    assert f"{CUDART} => {unpacked / CUDART}" in ldd  # the carried one, before any system copy
    assert load_and_call(unpacked / "libggml-cuda.so", "runtime_version", None) == 13000  # no GPU needed for it


def test_a_library_found_nowhere_is_named_and_nothing_is_packed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    gcc(elsewhere / "libnowhere.so.3", "int nowhere(void) { return 1; }\n", "-Wl,-soname,libnowhere.so.3")
    lib = gcc(tmp_path / "libggml-cuda.so", "int nowhere(void);\nint f(void) { return nowhere(); }\n",
              f"-L{elsewhere}", "-l:libnowhere.so.3", "-Wl,-rpath,$ORIGIN")
    shutil.rmtree(elsewhere)
    data = tmp_path / "data"
    install_backend(data, "lacking", lib, [])
    out = tmp_path / "dist"
    out.mkdir()
    done = pack(data, "lacking", out)
    assert done.returncode != 0
    error = last_json(done)
    assert error["kind"] == "backend-library-missing"
    assert "libnowhere.so.3" in error["message"] and "libggml-cuda.so" in error["message"]
    assert "LD_LIBRARY_PATH" in error["advice"]
    assert list(out.iterdir()) == []


def test_a_runpath_outside_that_cannot_be_rewritten_is_refused(toolkit: Path, tmp_path: Path) -> None:
    """A RUNPATH shorter than ``$ORIGIN`` cannot be rewritten in place; without patchelf the archive is refused."""
    short = Path("/o")
    lib = gcc(tmp_path / "libggml-cuda.so", "int blas_gemm(int);\nint f(int x) { return blas_gemm(x); }\n",
              f"-L{toolkit}", f"-l:{BLAS}", f"-Wl,-rpath-link,{toolkit}", f"-Wl,-rpath,{short}",
              "-Wl,--enable-new-dtags")
    data = tmp_path / "data"
    install_backend(data, "short-runpath", lib, [str(toolkit)])
    out = tmp_path / "dist"
    out.mkdir()
    done = pack(data, "short-runpath", out)
    if elf.patchelf() is not None:  # rewritten by patchelf instead
        assert done.returncode == 0, done.stdout + done.stderr
        assert elf_needs.check_archive(Path(json.loads(done.stdout)["archive"])) == []
        return
    assert done.returncode != 0
    error = last_json(done)
    assert error["kind"] == "backend-runpath-outside"
    assert "'/o'" in error["message"] and "patchelf" in error["advice"]
    assert list(out.iterdir()) == []


def test_the_in_place_rewrite_keeps_the_binary_whole(toolkit: Path, tmp_path: Path) -> None:
    """The pure-Python reader agrees with readelf, and a shortened RUNPATH leaves every other entry as it was."""
    lib = gcc(tmp_path / "libx.so", "int blas_gemm(int);\nint f(int x) { return blas_gemm(x); }\n",
              f"-L{toolkit}", f"-l:{BLAS}", f"-Wl,-rpath-link,{toolkit}", f"-Wl,-rpath,{toolkit}:/opt/more",
              "-Wl,--enable-new-dtags", "-Wl,-soname,libx.so.1")
    info = elf.read(lib)
    assert list(info.needed) == elf_needs.needed(lib) and info.soname == "libx.so.1"
    assert info.runpath == elf_needs.runpath(lib) == f"{toolkit}:/opt/more"
    before = elf_needs.glibc_versions(lib)
    assert elf.set_runpath(lib, "$ORIGIN") == "in place"
    assert elf_needs.runpath(lib) == "$ORIGIN" and elf_needs.needed(lib) == list(info.needed)
    assert elf_needs.glibc_versions(lib) == before and elf.read(lib).soname == "libx.so.1"
    shutil.copy2(toolkit / BLAS, tmp_path / BLAS)
    shutil.copy2(toolkit / BLAS_LT, tmp_path / BLAS_LT)
    shutil.rmtree(toolkit.parent)
    assert load_and_call(lib, "f", 2) == 7


def test_a_cuda_build_installs_with_its_runtime_beside_it(toolkit: Path, tmp_path: Path) -> None:
    """The build's install step (builder._install) copies what the new libraries need from the toolkit's folders,
    so the installed backend already runs with $ORIGIN alone, here as on a driver-only machine."""
    from app.backend.builder import _install

    tree, build_dir, staging = tmp_path / "tree", tmp_path / "build", tmp_path / "staging"
    (tree / "llama_cpp").mkdir(parents=True)
    (tree / "llama_cpp" / "__init__.py").write_text("")
    (build_dir / "bin").mkdir(parents=True)
    gcc(build_dir / "bin" / "libggml-cuda.so", "int blas_gemm(int);\nint g(int x) { return blas_gemm(x); }\n",
        f"-L{toolkit}", f"-l:{BLAS}", f"-Wl,-rpath-link,{toolkit}", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    gcc(build_dir / "bin" / "libllama.so", "int g(int);\nint llama_f(int x) { return g(x) * 2; }\n",
        f"-L{build_dir / 'bin'}", "-l:libggml-cuda.so", f"-Wl,-rpath-link,{toolkit}", "-Wl,-rpath,$ORIGIN",
        "-Wl,--enable-new-dtags")
    _install(tree, build_dir, staging, [str(toolkit)])
    lib = staging / "llama_cpp" / "lib"
    assert sorted(p.name for p in lib.iterdir()) == sorted([BLAS, BLAS_LT, "libggml-cuda.so", "libllama.so"])
    _install(tree, build_dir, tmp_path / "cpu-staging")  # a CPU build (no runtime folders): nothing added
    assert sorted(p.name for p in (tmp_path / "cpu-staging" / "llama_cpp" / "lib").iterdir()) == \
        ["libggml-cuda.so", "libllama.so"]
    shutil.rmtree(toolkit.parent)
    assert elf_needs.unresolved(staging) == {} and elf_needs.outside_runpaths(staging) == {}
    assert load_and_call(lib / "libllama.so", "llama_f", 1) == 8
