"""installers/cuda_redist.py: the Windows CUDA toolkit from NVIDIA's redistributable archives, against a redist
folder served on 127.0.0.1 (a redistrib JSON and real zip archives laid out as NVIDIA's are), and the runtime
DLLs the release copies beside a Windows backend (issue 35)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from installers import cuda_redist, release_steps
from installers.cuda_redist import RedistError
from installers.release_steps import StepFailed

FILES = {
    "cuda_cudart": {"bin/x64/cudart64_13.dll": b"cudart", "lib/x64/cuda.lib": b"cuda.lib",
                    "include/cuda_runtime.h": b"/* h */"},
    "cuda_nvcc": {"bin/nvcc.exe": b"MZ nvcc"},
    "cuda_nvrtc": {"bin/x64/nvrtc64_130_0.dll": b"nvrtc"},
    "libcublas": {"bin/x64/cublas64_13.dll": b"cublas", "bin/x64/cublasLt64_13.dll": b"cublasLt",
                  "lib/x64/cublas.lib": b"cublas.lib"},
    "cuda_cccl": {"include/cub/cub.cuh": b"/* cub */"},
    "cuda_crt": {"include/crt/host_config.h": b"/* crt */"},
}


def _redist(folder: Path, files: dict[str, dict[str, bytes]], *, extra: dict[str, bytes] | None = None) -> dict:
    """A redist folder: each component's zip under <name>/windows-x86_64/, and the index naming them."""
    index: dict[str, object] = {"release_label": "13.0.0", "release_product": "cuda"}
    for name, content in files.items():
        rel = f"{name}/windows-x86_64/{name}-windows-x86_64-13.0.48-archive.zip"
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        top = f"{name}-windows-x86_64-13.0.48-archive"
        with zipfile.ZipFile(path, "w") as zipped:
            for inner, data in {**content, **(extra if name == "cuda_nvcc" and extra else {})}.items():
                zipped.writestr(inner if inner.startswith("../") else f"{top}/{inner}", data)
        index[name] = {"name": name, "version": "13.0.48",
                       "windows-x86_64": {"relative_path": rel, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                          "size": str(path.stat().st_size)},
                       "linux-x86_64": {"relative_path": "elsewhere", "sha256": "0" * 64}}
    (folder / "redistrib_13.0.0.json").write_text(json.dumps(index))
    return index


def test_the_toolkit_is_put_together_from_the_checked_archives(tmp_path: Path) -> None:
    served = tmp_path / "redist"
    _redist(served, FILES)
    out = tmp_path / "cuda"
    env, path = tmp_path / "github_env", tmp_path / "github_path"
    with release_steps.serve(served) as url:
        assert cuda_redist.main(["--cuda", "13.0.0", "--out", str(out), "--base-url", url, "--github-env", str(env),
                                 "--github-path", str(path)]) == 0
    assert (out / "bin" / "nvcc.exe").read_bytes() == b"MZ nvcc"
    assert (out / "lib" / "x64" / "cublas.lib").is_file() and (out / "include" / "crt" / "host_config.h").is_file()
    assert env.read_text() == f"CUDA_PATH={out.resolve()}\n" and path.read_text() == f"{out.resolve() / 'bin'}\n"
    assert not any(p.name.endswith("-archive") for p in out.iterdir())  # the archives' top folders are dropped


def test_an_archive_whose_sha256_differs_is_refused(tmp_path: Path) -> None:
    served = tmp_path / "redist"
    index = _redist(served, FILES)
    entry = index["libcublas"]
    assert isinstance(entry, dict)
    entry["windows-x86_64"]["sha256"] = "f" * 64
    (served / "redistrib_13.0.0.json").write_text(json.dumps(index))
    with release_steps.serve(served) as url, pytest.raises(RedistError, match=r"libcublas-.*sha256 .* says f{64}"):
        cuda_redist.install("13.0.0", tmp_path / "cuda", base_url=url)
    assert not (tmp_path / "cuda" / "lib" / "x64" / "cublas.lib").exists()


def test_a_missing_component_or_a_path_out_of_the_archive_is_named(tmp_path: Path) -> None:
    without = {k: v for k, v in FILES.items() if k not in ("cuda_nvrtc", "cuda_cccl")}
    with pytest.raises(RedistError, match="no windows-x86_64 archive of cuda_nvrtc, cuda_cccl"):
        cuda_redist.plan(_redist(tmp_path / "a", without))
    served = tmp_path / "b"
    _redist(served, FILES, extra={"../../evil.dll": b"x"})
    with release_steps.serve(served) as url, pytest.raises(RedistError, match="outside its folder"):
        cuda_redist.install("13.0.0", tmp_path / "cuda", base_url=url)
    assert not (tmp_path / "evil.dll").exists()


def test_optional_components_are_taken_only_when_listed(tmp_path: Path) -> None:
    planned = [c.name for c in cuda_redist.plan(_redist(tmp_path, FILES))]
    assert planned == ["cuda_cudart", "cuda_nvcc", "cuda_nvrtc", "libcublas", "cuda_cccl", "cuda_crt"]


def test_the_cuda_runtime_dlls_go_beside_the_backend(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    for rel in ("bin/x64/cudart64_13.dll", "bin/x64/cublas64_13.dll", "bin/x64/cublasLt64_13.dll", "bin/nvcc.exe"):
        (cuda / rel).parent.mkdir(parents=True, exist_ok=True)
        (cuda / rel).write_bytes(rel.encode())
    vs = tmp_path / "vs"
    for dll in release_steps.WINDOWS_RUNTIME_DLLS:
        kind = "OpenMP" if dll == "vcomp140.dll" else "CRT"
        target = vs / "VC" / "Redist" / "MSVC" / "14.40.33807" / "x64" / f"Microsoft.VC143.{kind}" / dll
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"msvc")
    lib = tmp_path / "lib"
    lib.mkdir()
    release_steps.add_windows_runtime(lib, [vs], cuda_path=cuda)
    assert sorted(p.name for p in lib.iterdir()) == sorted([*release_steps.WINDOWS_RUNTIME_DLLS, "cudart64_13.dll",
                                                            "cublas64_13.dll", "cublasLt64_13.dll"])
    (cuda / "bin" / "x64" / "cublasLt64_13.dll").unlink()
    with pytest.raises(StepFailed, match=r"No cublasLt64_\*\.dll under"):
        release_steps.add_windows_runtime(lib, [vs], cuda_path=cuda)


def _linux_redist(folder: Path, link_target: str = "libcudart.so.12") -> None:
    """A CUDA 12 Linux redist: .tar.xz archives with an executable nvcc and a library's symlink."""
    import io
    import tarfile

    index: dict[str, object] = {"release_label": "12.8.1"}
    contents = {"cuda_cudart": [("lib/libcudart.so.12", b"ELF cudart", 0o644), ("lib/libcudart.so", link_target, 0)],
                "cuda_nvcc": [("bin/nvcc", b"#!nvcc", 0o755), ("nvvm/bin/cicc", b"cicc", 0o755)],
                "cuda_nvrtc": [("lib/libnvrtc.so.12", b"nvrtc", 0o644)],
                "libcublas": [("lib/libcublas.so.12", b"cublas", 0o644)],
                "cuda_cccl": [("include/cub/cub.cuh", b"cub", 0o644)]}
    for name, members in contents.items():
        rel = f"{name}/linux-x86_64/{name}-linux-x86_64-12.8.90-archive.tar.xz"
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:xz") as tar:
            for inner, data, mode in members:
                info = tarfile.TarInfo(f"{name}-linux-x86_64-12.8.90-archive/{inner}")
                if isinstance(data, str):
                    info.type, info.linkname = tarfile.SYMTYPE, data
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(data), mode
                    tar.addfile(info, io.BytesIO(data))
        index[name] = {"version": "12.8.90", "linux-x86_64": {
            "relative_path": rel, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "size": "1"}}
    (folder / "redistrib_12.8.1.json").write_text(json.dumps(index))


def test_a_linux_toolkit_keeps_its_library_links_and_executables(tmp_path: Path) -> None:
    """CUDA 12 on Linux: PyPI's nvcc wheel has no nvcc, so the release's CUDA 12.8 job takes these archives."""
    _linux_redist(tmp_path / "redist")
    out = tmp_path / "cuda"
    with release_steps.serve(tmp_path / "redist") as url:
        cuda_redist.install("12.8.1", out, base_url=url, platform="linux-x86_64")
    assert (out / "lib" / "libcudart.so").is_symlink() and (out / "lib" / "libcudart.so").read_bytes() == b"ELF cudart"
    assert (out / "bin" / "nvcc").stat().st_mode & 0o111
    assert not (out / "lib" / "libcublas.so.12").stat().st_mode & 0o111


def test_a_library_link_out_of_the_toolkit_is_refused(tmp_path: Path) -> None:
    _linux_redist(tmp_path / "redist", link_target="../../../etc/passwd")
    with release_steps.serve(tmp_path / "redist") as url, pytest.raises(RedistError, match="outside its folder"):
        cuda_redist.install("12.8.1", tmp_path / "cuda", base_url=url, platform="linux-x86_64")
    assert not (tmp_path / "cuda" / "lib" / "libcudart.so").exists()
