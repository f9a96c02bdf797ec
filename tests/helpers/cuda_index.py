"""What the CUDA toolkit tests share: a real PEP 503 index on 127.0.0.1, a fake ``nvidia-smi``, pip kept to them.

The wheels come from the cache that `make test` fills (``backend cuda-toolkit fetch --cuda 13.0``), so
nothing is downloaded from the internet. The fake ``nvidia-smi`` is a real executable script: put its
folder first on PATH and the core reads the driver's CUDA version (and, if given, GPUs) from it.

    index = LocalIndex(tmp_path / "index", sorted(require_cached_wheelhouse().glob("*.whl")))
    fake_nvidia_smi(tmp_path / "bin", cuda="13.0", gpus=["NVIDIA H200, 9.0, 143771"])
"""

from __future__ import annotations

import os
import re
import threading
import zipfile
from collections.abc import Sequence
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.backend import cuda_wheels

PIN = "13.0"  # the CUDA version of the GPU machine we test on (driver 580)
FETCH_COMMAND = f".venv/bin/python -m app backend cuda-toolkit fetch --cuda {PIN}"


def nvidia_smi_header(cuda: str = PIN) -> str:
    """The first lines of plain ``nvidia-smi`` output, with the driver's CUDA version in the header."""
    return f"""\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: {cuda:<9}|
|-----------------------------------------+------------------------+----------------------+
"""


NVIDIA_SMI_HEADER = nvidia_smi_header(PIN)


def fake_nvidia_smi(folder: Path, cuda: str = PIN, gpus: Sequence[str] = ()) -> Path:
    """An executable ``nvidia-smi`` in ``folder``: the header for a plain call, ``gpus`` lines for --query-gpu.

    Each GPU line is what ``--query-gpu=name,compute_cap,memory.total --format=csv,noheader,nounits``
    prints, e.g. ``"NVIDIA H200, 9.0, 143771"``. Put ``folder`` first on PATH to use it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    query = "".join(f"{line}\n" for line in gpus)
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=*) exec /bin/cat <<'EOF'\n{query}EOF\n  ;;\n"
                   f"esac\nexec /bin/cat <<'EOF'\n{nvidia_smi_header(cuda)}EOF\n")
    smi.chmod(0o755)
    return smi


def tiny_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A small but valid wheel (pip reads its metadata), standing in for one the index must not hand out."""
    dist = name.replace("-", "_")
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class LocalIndex:
    """A PEP 503 "simple" index on 127.0.0.1: /simple/<project>/ links to /files/<wheel>."""

    def __init__(self, root: Path, wheels: list[Path]) -> None:
        (root / "files").mkdir(parents=True)
        projects: dict[str, list[str]] = {}
        for wheel in wheels:
            (root / "files" / wheel.name).symlink_to(wheel)
            project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
            projects.setdefault(project, []).append(wheel.name)
        (root / "simple").mkdir()
        (root / "simple" / "index.html").write_text(
            "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects)))
        for project, names in projects.items():
            (root / "simple" / project).mkdir()
            (root / "simple" / project / "index.html").write_text(
                "".join(f'<a href="../../files/{n}">{n}</a>\n' for n in sorted(names)))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def require_cached_wheelhouse() -> Path:
    """The CUDA 13.0 wheels `make test` fetched into the app cache (read before a test moves the cache)."""
    house = cuda_wheels.wheelhouse_dir(PIN)
    missing = cuda_wheels.missing_wheels(PIN, house)
    if missing:
        pytest.fail(f"The CUDA {PIN} wheels are not in {house} (missing: {', '.join(r.name for r in missing)}). "
                    f"Run `{FETCH_COMMAND}` first (`make test` does it before pytest).")
    return house


def isolate_pip(mp: pytest.MonkeyPatch) -> None:
    """pip sees only what the test gives it: no config files, no find-links, no version check, no cache."""
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        mp.delenv(key)
    mp.setenv("PIP_CONFIG_FILE", os.devnull)
    mp.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    mp.setenv("PIP_NO_INPUT", "1")
    mp.setenv("PIP_RETRIES", "1")
