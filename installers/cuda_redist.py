"""The CUDA toolkit for a Windows build job from NVIDIA's redistributable archives, as llama.cpp's Windows CUDA jobs
install it: the release's ``redistrib_<version>.json`` names each component's archive with its sha256; the
components a llama.cpp build needs are downloaded, checked and merged into one folder that then looks like an
installed toolkit (``bin/nvcc.exe``, ``lib/x64/cublas.lib``, ``lib/x64/cuda.lib``, ``include/``), and
``CUDA_PATH`` (for ``backend build --cuda``) and its ``bin`` go to the job's environment. With ``--platform
linux-x86_64`` it does the same from the ``.tar.xz`` archives, for CUDA 12.x on Linux, whose PyPI nvcc wheel holds
no nvcc (so ``backend cuda-toolkit`` cannot make that toolkit).

No installer, no administrator, nothing but the parts needed (a few hundred MB instead of 3 GB).

    python installers/cuda_redist.py --cuda 13.0.0 --out "$RUNNER_TEMP/cuda" --github-env "$GITHUB_ENV" \
        --github-path "$GITHUB_PATH"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

BASE_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"
PLATFORM = "windows-x86_64"
# What a llama.cpp CUDA build compiles and links with (llama.cpp's windows-setup-cuda action, less the profilers).
REQUIRED = ("cuda_cudart", "cuda_nvcc", "cuda_nvrtc", "libcublas", "cuda_cccl")
# Split out of cuda_nvcc in CUDA 13 (the crt headers, NVVM), or only for MSBuild and tools: taken when listed.
OPTIONAL = ("cuda_crt", "libnvvm", "cuda_nvtx", "cuda_profiler_api", "visual_studio_integration")
TIMEOUT = 120


class RedistError(Exception):
    """The toolkit could not be put together; the message says which part and why."""


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    path: str  # relative to the redist base URL
    sha256: str
    size: int


def plan(index: dict[str, object], platform: str = PLATFORM) -> list[Component]:
    """The components to fetch from a ``redistrib_<version>.json``: every required one (or an error naming what is
    missing) and the optional ones it lists for ``platform``."""
    chosen = []
    missing = []
    for name in (*REQUIRED, *OPTIONAL):
        entry = index.get(name)
        build = entry.get(platform) if isinstance(entry, dict) else None
        if not isinstance(build, dict):
            if name in REQUIRED:
                missing.append(name)
            continue
        path, digest = build.get("relative_path"), build.get("sha256")
        if not isinstance(path, str) or not isinstance(digest, str) or len(digest) != 64:
            raise RedistError(f"{name} for {platform} has no archive path or sha256 in the redist index.")
        if ".." in PurePosixPath(path).parts or path.startswith("/"):
            raise RedistError(f"{name}: the archive path {path!r} leaves the redist folder.")
        assert isinstance(entry, dict)
        chosen.append(Component(name, str(entry.get("version", "?")), path, digest.lower(),
                                int(str(build.get("size", "0")) or 0)))
    if missing:
        raise RedistError(f"The redist index has no {platform} archive of {', '.join(missing)}; is the CUDA version "
                          "right (e.g. 13.0.0, 12.8.1)?")
    return chosen


def _download(url: str, dest: Path) -> str:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response, dest.open("wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def _inner(name: str, archive: Path) -> PurePosixPath | None:
    """A member's path below the archive's top folder; None for the top folder itself; refused when it leaves."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2:
        return None
    inner = PurePosixPath(*parts[1:])
    if ".." in inner.parts or inner.is_absolute() or ":" in name or name.startswith("/"):
        raise RedistError(f"{archive.name} holds {name!r}, a path outside its folder.")
    return inner


def _merge_tar(archive: Path, out: Path) -> int:
    """A Linux component (``.tar.xz``): files and the symlinks of its libraries (``libcudart.so`` ->
    ``libcudart.so.12``), each kept inside its folder."""
    count = 0
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            inner = _inner(member.name, archive)
            if inner is None or member.isdir():
                continue
            target = out.joinpath(*inner.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            if member.issym():
                link = PurePosixPath(member.linkname)
                if link.is_absolute() or ".." in link.parts:
                    raise RedistError(f"{archive.name}: {member.name} links to {member.linkname!r}, outside its "
                                      "folder.")
                target.unlink(missing_ok=True)
                target.symlink_to(member.linkname)
            elif member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                with source, target.open("wb") as dest:
                    shutil.copyfileobj(source, dest)
                target.chmod(0o755 if member.mode & 0o111 else 0o644)
            else:
                continue
            count += 1
    return count


def merge(archive: Path, out: Path) -> int:
    """The archive's files, without its top folder (``<component>-<platform>-<version>-archive/``), into ``out``:
    a ``.zip`` (Windows) or a ``.tar.xz`` (Linux)."""
    if archive.name.endswith((".tar.xz", ".tar.gz", ".tar")):
        return _merge_tar(archive, out)
    count = 0
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            inner = _inner(info.filename, archive)
            if inner is None or info.is_dir():
                continue
            target = out.joinpath(*inner.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(info) as source, target.open("wb") as dest:
                shutil.copyfileobj(source, dest)
            count += 1
    return count


def install(cuda: str, out: Path, *, base_url: str = BASE_URL, platform: str = PLATFORM) -> list[Component]:
    """Fetch the index and the components, check each sha256, merge them into ``out``."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    with tempfile.TemporaryDirectory(prefix="cuda-redist-") as scratch:
        index_path = Path(scratch) / "index.json"
        _download(f"{base}redistrib_{cuda}.json", index_path)
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise RedistError(f"redistrib_{cuda}.json is not JSON: {exc}") from exc
        if not isinstance(index, dict):
            raise RedistError(f"redistrib_{cuda}.json is not a JSON object.")
        components = plan(index, platform)
        out.mkdir(parents=True, exist_ok=True)
        for component in components:
            archive = Path(scratch) / PurePosixPath(component.path).name
            got = _download(base + component.path, archive)
            if got != component.sha256:
                raise RedistError(f"{archive.name}: sha256 {got}, the redist index says {component.sha256}; "
                                  "nothing of it was used.")
            files = merge(archive, out)
            archive.unlink()
            print(f"  {component.name} {component.version}: {files} files", flush=True)
    nvcc = out / "bin" / ("nvcc.exe" if platform.startswith("windows") else "nvcc")
    if not nvcc.is_file():
        raise RedistError(f"{out} has no bin/{nvcc.name} after the merge.")
    return components


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", required=True, help="the full CUDA release, e.g. 13.0.0 or 12.8.1")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-url", default=BASE_URL)
    parser.add_argument("--platform", default=PLATFORM)
    parser.add_argument("--github-env", type=Path, help="append CUDA_PATH=OUT to this file ($GITHUB_ENV)")
    parser.add_argument("--github-path", type=Path, help="append OUT/bin to this file ($GITHUB_PATH)")
    args = parser.parse_args(argv)
    try:
        install(args.cuda, args.out, base_url=args.base_url, platform=args.platform)
    except (RedistError, OSError) as exc:
        print(f"cuda_redist: {exc}", file=sys.stderr)
        return 1
    root = args.out.resolve()
    if args.github_env is not None:
        with args.github_env.open("a", encoding="utf-8") as handle:
            handle.write(f"CUDA_PATH={root}\n")
    if args.github_path is not None:
        with args.github_path.open("a", encoding="utf-8") as handle:
            handle.write(f"{root / 'bin'}\n")
    print(f"CUDA {args.cuda} toolkit for {args.platform} in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
