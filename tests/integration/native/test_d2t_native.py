"""The patch at work: real patched and unpatched CPU builds loading real demo GGUFs written by our writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from app.core.errors import SidecarError
from app.gguftools.builtin_demo import d2t_ids, ensure_demo_model, table_agreement, table_prompt
from app.gguftools.demo_model import DemoModel
from app.native import draft_probe
from app.native.handles import Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("demo90"), size="tiny", acceptance=0.9, seed=1)


@pytest.fixture(scope="module")
def demo60(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("demo60"), size="tiny", acceptance=0.6, seed=2)


def _run_app(*args: str, backend: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if backend is not None:
        env["FASTMTP_BACKEND_DIR"] = str(backend)
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=600)


def _table_sequence(demo: DemoModel, target: Model, n_new: int) -> tuple[list[int], list[int]]:
    prompt = table_prompt(demo)
    return prompt, draft_probe.greedy(target, prompt, n_new)


def test_d2t_draft_logits_are_the_full_heads_at_d2t_ids_and_minus_inf_elsewhere(demo: DemoModel) -> None:
    with Model(demo.target) as target:
        prompt, generated = _table_sequence(demo, target, 40)
        full = draft_probe.probe(target, prompt + generated, demo.sidecar_full)
        d2t = draft_probe.probe(target, prompt + generated, demo.sidecar_d2t)
    ids = d2t_ids(demo.sidecar_d2t)
    assert len(ids) == 32768
    np.testing.assert_allclose(d2t.draft_logits[:, ids], full.draft_logits[:, ids], rtol=1e-5, atol=1e-4)
    outside = np.ones(d2t.draft_logits.shape[1], dtype=bool)
    outside[ids] = False
    assert np.isneginf(d2t.draft_logits[:, outside]).all()
    assert np.isfinite(d2t.draft_logits[:, ids]).all()
    # every table word is in the draft vocabulary, so the argmax never changes
    assert d2t.draft_next == full.draft_next


def test_demo_greedy_follows_its_table(demo: DemoModel) -> None:
    with Model(demo.target) as target:
        prompt, generated = _table_sequence(demo, target, 300)
    assert table_agreement(demo, prompt[-1], generated) >= 0.99


@pytest.mark.parametrize("which", ["demo", "demo60"])
def test_measured_depth1_acceptance_matches_the_requested_dial(which: str, request: pytest.FixtureRequest) -> None:
    model: DemoModel = request.getfixturevalue(which)
    requested = 0.9 if which == "demo" else 0.6
    with Model(model.target, load_mtp=True) as target:
        prompt, generated = _table_sequence(model, target, 500)
        sequence = prompt + generated
        embedded = draft_probe.probe(target, sequence).acceptance(len(prompt))
        sidecar = draft_probe.probe(target, sequence, model.sidecar_d2t).acceptance(len(prompt))
    assert abs(sidecar - requested) <= 0.05, sidecar
    assert abs(embedded - requested) <= 0.05, embedded


def test_unpatched_backend_meeting_a_d2t_sidecar_is_explained(demo: DemoModel, unpatched_dir: Path) -> None:
    proc = _run_app("sidecar", "check", "--target", str(demo.target), "--draft", str(demo.sidecar_d2t), "--json",
                    backend=unpatched_dir)
    assert proc.returncode == 1, proc.stderr  # a clean, explained failure: the process did not crash
    error = json.loads(proc.stdout)
    assert error["error"] == "UnpatchedBackendError"
    assert "not patched for d2t" in error["message"]
    assert "expected 64, 248320, got 64, 32768" in error["message"]
    assert "backend build" in error["advice"]
    plain = _run_app("sidecar", "check", "--target", str(demo.target), "--draft", str(demo.sidecar_d2t),
                     backend=unpatched_dir)
    assert "The sidecar is fine; the backend lacks the d2t patch" in plain.stderr


def test_unpatched_backend_still_loads_the_full_sidecar(demo: DemoModel, unpatched_dir: Path) -> None:
    proc = _run_app("sidecar", "check", "--target", str(demo.target), "--draft", str(demo.sidecar_full), "--json",
                    "--demo-table", "--tokens", "200", backend=unpatched_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert abs(json.loads(proc.stdout)["acceptance_depth1"] - 0.9) <= 0.05


def test_patched_backend_loads_d2t_through_the_cli(demo: DemoModel) -> None:
    proc = _run_app("sidecar", "check", "--target", str(demo.target), "--draft", str(demo.sidecar_d2t), "--json",
                    "--demo-table", "--tokens", "200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["sidecar"]["kind"] == "mtp_sidecar_d2t"
    assert abs(result["acceptance_depth1"] - 0.9) <= 0.05


def _copy_without(src: Path, dest: Path, drop: str) -> None:
    """A copy of a GGUF minus one tensor, written with the gguf library."""
    reader = GGUFReader(src)
    writer = GGUFWriter(dest, arch="qwen35")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        writer.add_key_value(field.name, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for tensor in reader.tensors:
        if tensor.name != drop:
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_shape=list(reversed(tensor.shape.tolist())),
                              raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_d2t_sidecar_without_output_weight_fails_with_a_clear_message(demo: DemoModel, tmp_path: Path) -> None:
    broken = tmp_path / "d2t-no-output.gguf"
    _copy_without(demo.sidecar_d2t, broken, "output.weight")
    with Model(demo.target) as target, pytest.raises(SidecarError) as caught:
        draft_probe.probe(target, table_prompt(demo), broken)
    # refused before llama.cpp sees it; the patched loader's own message: test_d2t_checks.py
    assert "has a d2t map but no 2-D LM head (output.weight)" in caught.value.message


def test_the_classic_shape_error_line_is_recognised_in_both_spacings() -> None:
    from app.core.errors import UnpatchedBackendError
    from app.native.handles import explain_load_failure

    for line in ("llama_model_load: error loading model: check_tensor_dims: tensor 'output.weight' has wrong shape; "
                 "expected     64, 248320, got     64,  32768,      1,      1",
                 "check_tensor_dims: tensor 'output.weight' has wrong shape; expected 5120, 248320, got 5120, 32768"):
        error = explain_load_failure(Path("Qwen3.8-27B-FastMTP-32K.gguf"), [line])
        assert isinstance(error, UnpatchedBackendError)
        assert "not patched for d2t" in error.message
    other = explain_load_failure(Path("x.gguf"), ["check_tensor_dims: tensor 'blk.0.attn_q.weight' has wrong shape; "
                                                  "expected 64, 128, got 64, 96, 1, 1"])
    assert not isinstance(other, UnpatchedBackendError)


def test_sidecar_build_from_a_corpus_uses_the_targets_tokenizer_and_merges_counts(demo: DemoModel,
                                                                                   tmp_path: Path) -> None:
    corpus = tmp_path / "chats.txt"
    corpus.write_text("Speculative decoding drafts tokens; the target verifies them. " * 20
                      + "Zyzzyva quixotic xylophone!\n", encoding="utf-8")
    counts = tmp_path / "counts.json"
    out = tmp_path / "mine-d2t.gguf"
    proc = _run_app("sidecar", "build", "--target", str(demo.target), "--out", str(out), "--vocab", "4096",
                    "--corpus", str(corpus), "--save-counts", str(counts), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["n_draft"] == 4096
    with Model(demo.target, vocab_only=True) as target:
        corpus_ids = set(target.tokenize(corpus.read_text(), parse_special=False))
    ids = set(d2t_ids(out).tolist())
    assert corpus_ids <= ids  # every token the user actually wrote is in the draft vocabulary
    saved = json.loads(counts.read_text())
    merged = tmp_path / "merged.json"
    proc = _run_app("sidecar", "build", "--target", str(demo.target), "--out", str(tmp_path / "again.gguf"),
                    "--vocab", "4096", "--counts", str(counts), "--counts", str(counts), "--save-counts", str(merged))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(merged.read_text()) != saved
    assert set(d2t_ids(tmp_path / "again.gguf").tolist()) == ids  # same ranking, so the same vocabulary


def test_output_rows_read_as_one_block_match_llamas_per_row_accessors(demo: DemoModel) -> None:
    """The hot path views a pass's logits and nextn rows as one block; llama.cpp's ``_ith`` calls agree."""
    from llama_cpp import llama_cpp_ext

    from app.native.handles import Context

    with Model(demo.target) as target:
        prompt = table_prompt(demo)[:12]
        with Context(target, n_ctx=64, n_batch=32, nextn_outputs=True) as ctx:
            ctx.decode(prompt, 0, logits="all")
            rows = ctx.nextn_rows(len(prompt))
            for i in range(len(prompt)):
                pointer = target.lib.llama_get_logits_ith(ctx.ptr, i)
                np.testing.assert_array_equal(ctx.logits_view(i), np.ctypeslib.as_array(pointer, (target.n_vocab,)))
                pointer = llama_cpp_ext.llama_get_embeddings_nextn_ith(ctx.ptr, i)
                np.testing.assert_array_equal(rows[i], np.ctypeslib.as_array(pointer, (target.n_embd,)))
                np.testing.assert_array_equal(ctx.nextn_hidden(i), rows[i])
            assert ctx.truncate(0)
            ctx.decode(prompt[:3], 0, logits="last")
            np.testing.assert_array_equal(ctx.logits_view(-1), ctx.logits_view(2))
            with pytest.raises(ValueError, match="no logits row 0"):
                ctx.logits_view(0)  # only the last position has logits after a "last" pass
            with pytest.raises(ValueError, match="no logits row 3"):
                ctx.logits_view(3)
