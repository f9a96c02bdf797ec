"""The one-shot GPU check and the backend archive it carries, rehearsed on the CPU backend.

The real thing runs on a lent GPU machine for minutes; everything but the GPU is proved here: the
archive round trip (backend and llama-server installed elsewhere and working), the check's steps end
to end on the tiny demo model, its budget, and its file limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend import archive
from app.backend.builder import BuildOptions
from app.backend.registry import BackendManifest
from app.bench import gpu_check
from app.core.errors import BackendError
from app.machines.upstream_server import UpstreamServer, build_server
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders


def _isolated_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key, sub in (("FASTMTP_DATA_DIR", "data"), ("FASTMTP_CONFIG_DIR", "config")):
        env[key] = str(root / sub)
    env.pop("FASTMTP_BACKEND_DIR", None)
    return env


@pytest.fixture(scope="module")
def packed(patched_backend: BackendManifest, module_tmp: ModuleFolders) -> Path:
    server = build_server(BuildOptions(flavor="cpu"))
    return archive.pack(patched_backend.id, module_tmp.mktemp("carry") / "backend.tar.xz", server)


def test_a_packed_backend_installs_elsewhere_with_its_server(packed: Path, patched_backend: BackendManifest,
                                                            tmp_path: Path, default_demo: DemoCopies) -> None:
    env = _isolated_env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "app", "backend", "unpack", str(packed), "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    assert got["backend"] == patched_backend.id and got["active"] is True
    folder = Path(got["folder"])
    assert folder.is_relative_to(tmp_path / "data")
    # the installed copy self-tests (offline: the vocab is the app's own) and is the active one
    status = subprocess.run([sys.executable, "-m", "app", "backend", "selftest", "--json"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert json.loads(status.stdout)["ok"] is True, status.stdout + status.stderr
    # the carried llama-server starts from its new home, finding its libraries beside it
    server_binary = Path(got["server"])
    assert server_binary.parent == folder / archive.SERVER_DIR
    demo = default_demo.copy_to(tmp_path / "demo")
    with UpstreamServer(server_binary, demo.target) as server:
        assert server.complete([1, 2, 3], 4).tokens


def test_a_damaged_archive_is_named_and_installs_nothing(packed: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.tar.xz"
    broken.write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
    env = _isolated_env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "app", "backend", "unpack", str(broken), "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    error = json.loads(done.stdout)
    assert "Could not unpack the backend archive" in error["message"] and "broken.tar.xz" in error["message"]
    assert "damaged or incomplete" in error["advice"]
    backends = tmp_path / "data" / "backends"
    assert not [p for p in backends.iterdir() if p.is_dir()] if backends.exists() else True


def test_an_archive_of_something_else_is_refused(tmp_path: Path) -> None:
    import tarfile

    other = tmp_path / "other.tar.xz"
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "readme.txt").write_text("not a backend")
    with tarfile.open(other, "w:xz") as tar:
        tar.add(tmp_path / "stuff", arcname="stuff")
    with pytest.raises(BackendError, match="not a backend archive"):
        archive.unpack(other)


def test_gpu_check_runs_end_to_end_on_the_cpu(patched_backend: BackendManifest, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "app", "gpu-check", "--out", str(out), "--work", str(tmp_path / "w"),
                           "--size", "tiny", "--acceptance", "0.8", "--gpu-layers", "0", "--runs", "1",
                           "--tokens", "24", "--budget", "540", "--json"],
                          capture_output=True, text=True, timeout=700)
    result = json.loads(done.stdout)
    steps = {s["name"]: s for s in result["steps"]}
    assert done.returncode == 0 and result["ok"], json.dumps(result["steps"], indent=1) + done.stderr[-3000:]
    assert {"selftest", "demo model", "lossless", "ops", "draft head", "sampler", "spec"} <= set(steps)
    files = {Path(f).name for f in result["files"]}
    assert len(files) <= gpu_check.MAX_FILES
    assert {"summary.md", "env.json", "selftest.json", "lossless.json", "ops.json", "draft-head.json",
            "sampler.json", "spec.json", "log.txt"} == files
    sampler = json.loads((out / "sampler.json").read_text())
    assert {d["where"] for d in sampler["decode"]} == {"on the host", "inside the graph (backend sampling)"}
    assert all(d["median_tps"] > 0 for d in sampler["decode"])
    lossless = json.loads((out / "lossless.json").read_text())
    assert lossless["ok"] is True and lossless["rejections"] > 0  # identical output, with real rejections
    spec = json.loads((out / "spec.json").read_text())
    variants = {r["variant"] for r in spec["rows"]}
    assert {"off", "embedded k=1", "d2t sidecar k=4", "llama-server d2t sidecar k=3"} <= variants
    assert any("adaptive" in v for v in variants)
    summary = (out / "summary.md").read_text()
    assert "Against the article" in summary and "3.02x" in summary


def test_gpu_check_keeps_to_its_budget_and_still_reports(patched_backend: BackendManifest, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "app", "gpu-check", "--out", str(out), "--work", str(tmp_path / "w"),
                           "--size", "tiny", "--gpu-layers", "0", "--budget", "25", "--json"],
                          capture_output=True, text=True, timeout=120)
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["ok"] is False
    skipped = [s for s in result["steps"] if s["note"].startswith("skipped")]
    assert skipped, result["steps"]
    assert (out / "summary.md").is_file() and "skipped" in (out / "summary.md").read_text()


def test_gpu_check_asks_a_gpu_run_for_a_gpu(patched_backend: BackendManifest, tmp_path: Path) -> None:
    """On a CPU backend, --gpu-layers -1 must not pass as a GPU result: the self-test step says why."""
    check = gpu_check.CheckRun(gpu_check.CheckOptions(out=tmp_path / "o", work=tmp_path / "w", size="tiny",
                                                      gpu_layers=-1, budget_s=120))
    step = gpu_check.require_offload(check.step("selftest", ["backend", "selftest", "--json"], 1.0), -1)
    assert step.result["ok"] is True and step.result["gpu_offload"] is False
    assert step.ok is False and "cannot offload" in step.note
