"""The Backend page names a CUDA backend's architectures as the feed does: compiled code as sm_XY, PTX as
compute_XY (PTX), not "sm_90-virtual"."""

from __future__ import annotations

from app.backend.registry import BackendManifest
from app.gui.backend.installed_box import manifest_text


def _cuda_manifest(archs: list[str]) -> BackendManifest:
    return BackendManifest(id="cuda-x", llama_cpp_python_version="0.3.35", llama_cpp_commit="4df29be",
                           sdist_sha256="0" * 64, patch_name=None, patch_sha256=None, flavor="cuda", cmake_args=[],
                           cuda_version="13.0", cuda_archs=archs, compiler="gcc", built_at="2026-12-03T10:00:00+00:00",
                           build_seconds=1.0)


def test_ptx_and_compiled_architectures_read_as_the_feed_names_them() -> None:
    text = manifest_text(_cuda_manifest(["75-virtual", "86", "90-virtual", "120a"]), "built here")
    assert "CUDA 13.0 for compute_75 (PTX), sm_86, compute_90 (PTX), sm_120a" in text
    assert "virtual" not in text
