"""Our FastMTP patch (d2t and the graph pool) against the pinned vendored llama.cpp trees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.backend import patching, source
from app.core.errors import PatchError

D2T_FILES = ["src/llama-model.cpp", "src/models/qwen35.cpp", "src/models/delta-net-base.cpp"]
# the graph pool (llama.cpp 4df29be's graph reuse), and a graph's metadata buffer not zero-filled for it
POOL_FILES = ["src/llama-context.h", "src/llama-context.cpp", "src/llama-graph.h", "src/llama-graph.cpp"]
PATCHED_FILES = D2T_FILES + POOL_FILES


def _copy_models_dir(version: str, dest: Path, files: list[str] = PATCHED_FILES) -> Path:
    """A scratch copy of just the files the patch touches, from the pristine vendored tree."""
    tree = source.pristine_tree(source.pinned(version)) / "vendor" / "llama.cpp"
    (dest / "src" / "models").mkdir(parents=True)
    for name in files:
        shutil.copy2(tree / name, dest / name)
    return dest


def test_patch_applies_to_the_pinned_0_3_35_tree(tmp_path: Path) -> None:
    tree = _copy_models_dir("0.3.35", tmp_path)
    patch = patching.default_patch()
    assert not patching.is_applied(tree, patch)
    patching.apply(tree, patch)
    text = (tree / "src" / "models" / "qwen35.cpp").read_text()
    assert "result_output_d2t" in text
    assert "ggml_set_rows" in text and "ggml_fill" in text and "-INFINITY" in text
    assert "d2t draft-vocab trim requires output.weight" in text
    # the loader refuses a d2t it cannot scatter with (out-of-vocabulary or repeated ids, not 1-D I64)
    loader = (tree / "src" / "llama-model.cpp").read_text()
    assert "FastMTP d2t" in loader and "outside the vocabulary" in loader and "a repeated id" in loader
    assert "ggml_backend_tensor_get(d2t" in loader
    # the recurrent layers' conv state: only the rollback slots this batch can fill, as the SSM state's
    recurrent = (tree / "src" / "models" / "delta-net-base.cpp").read_text()
    assert "K - std::min<int64_t>(n_seq_tokens, K) + 1" in recurrent
    # small batches' graphs kept, each with its own scheduler; a reserve or a memory update drops them
    context = (tree / "src" / "llama-context.cpp").read_text()
    assert "graph_pool_select(gparams)" in context and "LLAMA_GRAPH_POOL" in context
    assert context.count("graph_pool_forget();") == 2
    # the kept graphs' schedulers made with the context, sized for the largest small batch, their buffers touched
    assert "graph_pool_prepare(mctx.get());" in context and "ggml_backend_buffer_clear(buf, 0)" in context
    assert "output_reserve(n_outputs);\n}" in context
    assert "buf_compute_meta.reset(new uint8_t[meta_size])" in (tree / "src" / "llama-graph.cpp").read_text()
    assert patching.is_applied(tree, patch)
    patching.apply(tree, patch)  # idempotent
    assert text == (tree / "src" / "models" / "qwen35.cpp").read_text()


def _sections(text: str, files: list[str]) -> str:
    """The part of a patch that changes ``files``."""
    sections = ["--- a/" + part for part in text.split("--- a/")[1:]]
    return "".join(part for part in sections if part.splitlines()[0][6:] in files)


def test_patch_stays_small_and_touches_only_qwen35_the_loader_the_recurrent_state_and_graph_reuse() -> None:
    text = patching.default_patch().path.read_text()
    touched = [line[6:] for line in text.splitlines() if line.startswith("+++ b/")]
    assert touched == PATCHED_FILES
    assert len(_sections(text, D2T_FILES).splitlines()) <= 105
    assert len(text.splitlines()) <= 380


def test_the_d2t_part_also_applies_to_0_3_36_and_the_graph_pool_is_refused_there(tmp_path: Path) -> None:
    # 0.3.36 vendors llama.cpp 0c1e57098: the d2t part applies there with line offsets only; its graph reuse was
    # redone upstream (a kept graph per kind of pass), so the pool is ported to it, not applied
    text = patching.default_patch().path.read_text()
    d2t = tmp_path / "d2t.patch"
    d2t.write_text(_sections(text, D2T_FILES))
    patching.check(_copy_models_dir("0.3.36", tmp_path / "d2t"), patching.Patch(d2t))
    with pytest.raises(PatchError, match="does not apply"):
        patching.check(_copy_models_dir("0.3.36", tmp_path / "whole"), patching.default_patch())


def test_patch_on_a_foreign_tree_is_refused_with_reason(tmp_path: Path) -> None:
    tree = _copy_models_dir("0.3.35", tmp_path)
    target = tree / "src" / "models" / "qwen35.cpp"
    target.write_text(target.read_text().replace("output = create_tensor", "output_changed = create_tensor"))
    with pytest.raises(PatchError) as caught:
        patching.apply(tree, patching.default_patch())
    assert "does not apply" in caught.value.message
    assert "0.3.35" in caught.value.advice
    assert "result_output_d2t" not in target.read_text()


def test_sdist_with_wrong_hash_is_rejected(tmp_path: Path) -> None:
    from app.core.errors import BackendError

    fake = tmp_path / "llama_cpp_python-0.3.35.tar.gz"
    fake.write_bytes(b"not the real source")
    with pytest.raises(BackendError) as caught:
        source.fetch_sdist(source.pinned("0.3.35"), sdist_file=fake)
    assert "not the pinned llama-cpp-python 0.3.35 source" in caught.value.message
    assert source.pinned().sha256 in caught.value.message
