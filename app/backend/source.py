"""The pinned llama-cpp-python sdist: fetch it (hash-checked) and unpack it into the cache.

Order of sources: an explicit file (argument or ``FASTMTP_SDIST``), the copy already in the cache,
a local wheelhouse folder (argument or ``FASTMTP_WHEELHOUSE``), and last ``pip download`` from the
configured package index. Every candidate must match the pinned sha256.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core import folder_lock, paths
from app.core.errors import BackendError
from app.core.hashing import sha256_file

LogFn = Callable[[str], None]


@dataclass(frozen=True)
class PinnedSource:
    """One llama-cpp-python release we know: its sdist hash and the llama.cpp commit it vendors."""

    version: str
    sha256: str
    llama_cpp_commit: str

    @property
    def filename(self) -> str:
        return f"llama_cpp_python-{self.version}.tar.gz"

    @property
    def requirement(self) -> str:
        return f"llama-cpp-python=={self.version}"


PINNED: dict[str, PinnedSource] = {
    "0.3.35": PinnedSource(
        "0.3.35", "1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12", "4df29be"
    ),
    # the patch also applies here (line offsets only); checked, not built by default
    "0.3.36": PinnedSource(
        "0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e", "0c1e57098"
    ),
}
DEFAULT_VERSION = "0.3.35"


def pinned(version: str = DEFAULT_VERSION) -> PinnedSource:
    try:
        return PINNED[version]
    except KeyError:
        known = ", ".join(sorted(PINNED))
        raise BackendError(
            f"llama-cpp-python {version} is not a version this app knows how to patch.",
            f"Use one of: {known}.",
        ) from None


def _sources_dir() -> Path:
    path = paths.cache_dir() / "sources"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _check_hash(pin: PinnedSource, candidate: Path) -> None:
    actual = sha256_file(candidate)
    if actual != pin.sha256:
        raise BackendError(
            f"{candidate} is not the pinned llama-cpp-python {pin.version} source "
            f"(sha256 {actual}, expected {pin.sha256}).",
            "Delete that file, or point FASTMTP_SDIST at the genuine sdist from PyPI.",
        )


def fetch_sdist(
    pin: PinnedSource,
    sdist_file: Path | None = None,
    wheelhouse: Path | None = None,
    log: LogFn = lambda _line: None,
) -> Path:
    """Return a hash-checked copy of the pinned sdist inside the cache."""
    cached = _sources_dir() / pin.filename
    explicit = sdist_file or (Path(os.environ["FASTMTP_SDIST"]) if os.environ.get("FASTMTP_SDIST") else None)
    if explicit is not None:
        if not explicit.is_file():
            raise BackendError(f"The backend source file {explicit} does not exist.")
        _check_hash(pin, explicit)
        if explicit.resolve() != cached.resolve():
            _copy_into_place(explicit, cached)
        return cached
    if cached.is_file():
        try:
            _check_hash(pin, cached)
            return cached
        except BackendError:
            log(f"cached {cached.name} failed its hash check; fetching it again")
            cached.unlink()
    house = wheelhouse or (Path(os.environ["FASTMTP_WHEELHOUSE"]) if os.environ.get("FASTMTP_WHEELHOUSE") else None)
    if house is not None and (house / pin.filename).is_file():
        _check_hash(pin, house / pin.filename)
        _copy_into_place(house / pin.filename, cached)
        return cached
    _pip_download(pin, cached, log)
    return cached


def _copy_into_place(src: Path, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".partial")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _pip_download(pin: PinnedSource, dest: Path, log: LogFn) -> None:
    log(f"downloading {pin.requirement} source with pip")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--progress-bar", "off", "-d", tmp, pin.requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        got = Path(tmp) / pin.filename
        if not got.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise BackendError(
                f"Could not download {pin.requirement} from the package index.\n{tail}",
                "Check the network, or download the file elsewhere and pass --sdist FILE "
                "(or set FASTMTP_SDIST / FASTMTP_WHEELHOUSE).",
            )
        _check_hash(pin, got)
        os.replace(got, dest)


def unpack(pin: PinnedSource, sdist: Path, dest: Path, log: LogFn = lambda _line: None) -> Path:
    """Unpack the sdist to ``dest`` (once; an existing complete tree is reused untouched).

    Reuse keeps file times stable, so ninja rebuilds nothing when the inputs are the same. Under ``dest``'s folder
    lock: two first builds at once (two windows, a test run's two workers) found each other's half-unpacked tree and
    one failed with "Directory not empty"; now the second waits and takes the first's tree.
    """
    marker = dest / ".fastmtp-unpacked"
    if marker.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock.locked(dest, log):
        if marker.is_file():  # unpacked by the process this one waited for
            return dest
        if dest.exists():
            shutil.rmtree(dest)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            try:
                with tarfile.open(sdist) as archive:
                    archive.extractall(tmp, filter="data")
            except (tarfile.TarError, OSError) as exc:
                raise BackendError(f"Could not unpack {sdist}: {exc}", "Delete it and build again.") from exc
            root = Path(tmp) / f"llama_cpp_python-{pin.version}"
            # the vendored tree's .git is a submodule pointer; it confuses git apply
            (root / "vendor" / "llama.cpp" / ".git").unlink(missing_ok=True)
            os.replace(root, dest)
        marker.write_text(pin.sha256 + "\n")
    return dest


def pristine_tree(pin: PinnedSource | None = None, log: LogFn = lambda _line: None) -> Path:
    """The unpacked, unpatched source of ``pin`` in the cache (fetched on first use)."""
    pin = pin or pinned()
    sdist = fetch_sdist(pin, log=log)
    return unpack(pin, sdist, paths.cache_dir() / "src" / f"{pin.version}-pristine", log)

