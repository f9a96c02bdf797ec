"""The demo model files: a loadable-shaped qwen35 target and sidecars whose weights encode the word table.

Pure-file tests: the greedy and draft predictions are recomputed in numpy from the written tensors.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from app.gguftools.demo_model import (
    DEMO_SHAPES,
    TABLE_WORDS,
    DemoModel,
    demo_shape,
    demo_target_plans,
    encode_rows,
    make_table,
    read_demo_table,
    write_demo_model,
)
from app.gguftools.inspect import inspect_gguf
from app.gguftools.qwen35 import QWEN35_27B, check_plans
from app.gguftools.reader import field_value, open_gguf, tensors_by_name
from app.gguftools.tokenizer import NEWLINE, load_tokenizer
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, qwen_vocab_path: Path) -> DemoModel:
    return write_demo_model(module_tmp.mktemp("demo"), qwen_vocab_path, "tiny", acceptance=0.9, seed=3)


@pytest.fixture(scope="module")
def readers(demo: DemoModel) -> dict[str, GGUFReader]:
    return {"target": open_gguf(demo.target), "full": open_gguf(demo.sidecar_full), "d2t": open_gguf(demo.sidecar_d2t)}


def matrix(reader: GGUFReader, name: str) -> np.ndarray:
    return np.asarray(tensors_by_name(reader)[name].data, dtype=np.float32)


def rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def test_files_are_a_target_and_its_two_sidecars(demo: DemoModel, readers: dict[str, GGUFReader]) -> None:
    reports = {key: inspect_gguf(r.data.filename) for key, r in readers.items()}
    assert [reports[k].kind for k in ("target", "full", "d2t")] == ["target", "mtp_sidecar_full", "mtp_sidecar_d2t"]
    for report in reports.values():
        assert (report.architecture, report.vocab_size, report.n_embd) == ("qwen35", 248320, 64)
        assert (report.block_count, report.trunk_layers, report.nextn_layers) == (5, 4, 1)
    assert reports["d2t"].output_shape == [64, 32768] and reports["d2t"].d2t_unique
    assert all(p.name.endswith(".gguf") for p in demo.target.parent.iterdir())  # no .partial left


def test_tokenizer_is_qwen_padded_with_unused_tokens(readers: dict[str, GGUFReader], qwen_vocab_path: Path) -> None:
    reader = readers["target"]
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    types = field_value(reader, "tokenizer.ggml.token_type")
    assert len(tokens) == 248320 and len(set(tokens)) == 248320
    assert tokens[:151936] == list(load_tokenizer(qwen_vocab_path).tokens)
    assert tokens[151936] == "<|pad_151936|>" and set(types[151936:]) == {5}
    assert field_value(reader, "tokenizer.ggml.pre") == "qwen35"
    assert field_value(reader, "tokenizer.ggml.eos_token_id") == 151643
    assert field_value(reader, "tokenizer.ggml.add_bos_token") is False
    assert "<|im_start|>" in field_value(reader, "tokenizer.chat_template")


def test_table_is_stored_in_every_file_and_made_of_words(demo: DemoModel, readers: dict[str, GGUFReader]) -> None:
    table = demo.table
    assert table is not None
    assert all(read_demo_table(r) == table for r in readers.values())
    tokens = field_value(readers["target"], "tokenizer.ggml.tokens")
    assert len(table.cycle) == len(set(table.cycle)) == 2000
    assert all(re.fullmatch(r"\u0120[A-Za-z]{3,}", tokens[t]) for t in table.cycle)
    assert len(table.wrong) == 200 and table.acceptance == pytest.approx(0.9)
    assert all(w != seen and seen in table.cycle for w, seen in table.wrong.items())
    assert table.successor(table.cycle[-1]) == table.cycle[0]
    assert table.successor(tokens.index(NEWLINE)) == table.successor(table.entry)


def test_greedy_target_follows_the_table(demo: DemoModel, readers: dict[str, GGUFReader]) -> None:
    """Zero trunk: logits = output @ rmsnorm(embedding); the argmax must be the table's successor."""
    assert demo.table is not None
    reader = readers["target"]
    embd, head = matrix(reader, "token_embd.weight"), matrix(reader, "output.weight")
    specials = [151643, 151644, 151645, 198, 77091, 8948, 872]  # eos, im_start, im_end, \n, assistant, system, user
    probe = [*demo.table.cycle, *specials]
    rows = np.flatnonzero(np.any(head != 0, axis=1))  # every other row scores exactly 0
    assert rows.size == len(demo.table.cycle)
    logits = np.concatenate([rms_norm(embd[probe]) @ head[rows].T, np.zeros((len(probe), 1))], axis=1)
    predicted = np.append(rows, -1)[logits.argmax(axis=1)]
    assert predicted.tolist() == [demo.table.successor(t) for t in probe]
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.min(top2[:, 1] - top2[:, 0]) > 2.0  # clear margins: batched and single-token runs agree


def test_draft_head_predicts_successors_at_the_chosen_acceptance(
    demo: DemoModel, readers: dict[str, GGUFReader]
) -> None:
    """MTP block with eh_proj [I | 0] and zero attention/FFN: draft = argmax over d2t of head @ rmsnorm(emb)."""
    table = demo.table
    assert table is not None
    reader = readers["d2t"]
    mtp = f"blk.{DEMO_SHAPES['tiny'].mtp_layer}.nextn."
    emb = matrix(reader, mtp + "embed_tokens.weight")
    eh_proj = matrix(reader, mtp + "eh_proj.weight")
    head = matrix(reader, "output.weight")
    d2t = np.asarray(tensors_by_name(reader)["d2t"].data)
    assert set(table.cycle) <= set(d2t.tolist())

    words = np.array(table.cycle)
    hidden = np.random.default_rng(0).standard_normal((words.size, 64)).astype(np.float32)  # ignored by [I | 0]
    cur = np.concatenate([rms_norm(emb[words]), rms_norm(hidden)], axis=1) @ eh_proj.T
    draft = d2t[(rms_norm(cur) @ head.T).argmax(axis=1)]
    assert draft.tolist() == [table.draft_successor(int(t)) for t in words]
    right = np.mean(draft == np.array([table.successor(int(t)) for t in words]))
    assert right == pytest.approx(0.9)


def test_full_acceptance_needs_no_separate_draft_embedding(qwen_vocab_path: Path) -> None:
    table = make_table(load_tokenizer(qwen_vocab_path).padded(248320), 2000, acceptance=1.0, seed=1)
    assert table.wrong == {} and table.acceptance == 1.0
    names = [p.name for p in demo_target_plans("tiny", table)]
    assert "blk.4.nextn.embed_tokens.weight" not in names and "blk.4.nextn.eh_proj.weight" in names


def test_27b_shape_is_the_real_models_with_q4_k_m_types(qwen_vocab_path: Path) -> None:
    shape = DEMO_SHAPES["27b"]
    assert shape == QWEN35_27B
    assert (shape.n_embd, shape.block_count, shape.n_vocab, shape.ssm_inner, shape.conv_dim) == (
        5120, 65, 248320, 6144, 10240,
    )  # fmt: skip
    assert [shape.is_recurrent(i) for i in range(8)] == [True, True, True, False] * 2
    assert not shape.is_recurrent(64) and shape.rope_sections == (11, 11, 10, 0)
    table = make_table(load_tokenizer(qwen_vocab_path).padded(248320), TABLE_WORDS["27b"], 0.92, seed=0)
    assert len(table.wrong) == 320
    plans = demo_target_plans("27b", table)  # lazy: only the table's few thousand rows are made now
    check_plans(shape, plans)
    assert 15e9 < sum(p.nbytes for p in plans) < 17.5e9  # the 15.4 GB of all-Q4_K, output Q6_K, embed_tokens
    types = {p.name: p.ggml_type.name for p in plans if len(p.shape) == 2 and "conv1d" not in p.name}
    assert types.pop("output.weight") == "Q6_K"
    assert set(types.values()) == {"Q4_K"} and "blk.64.nextn.embed_tokens.weight" in types


def test_27b_at_reduced_depth_changes_only_the_trunk(qwen_vocab_path: Path) -> None:
    table = make_table(load_tokenizer(qwen_vocab_path).padded(248320), TABLE_WORDS["27b"], 0.8, seed=0)
    shallow = demo_shape("27b", n_trunk=4)
    assert shallow == dataclasses.replace(QWEN35_27B, n_trunk=4) and demo_shape("27b") is QWEN35_27B
    plans = demo_target_plans("27b", table, n_trunk=4)
    check_plans(shallow, plans)
    kept = {p.name.replace("blk.4.", "blk.64."): (p.ggml_type, p.shape) for p in plans}  # the MTP block moves up
    full = {p.name: (p.ggml_type, p.shape) for p in demo_target_plans("27b", table)}
    assert kept == {name: spec for name, spec in full.items() if not re.match(r"blk\.([4-9]|[1-5]\d|6[0-3])\.", name)}


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.Q8_0])
def test_quantized_rows_are_valid_blocks_close_to_the_values(qtype: GGMLQuantizationType) -> None:
    """Checked against the gguf package's own dequantizer, at the embedding's and the LM head's magnitudes."""
    rng = np.random.default_rng(0)
    for scale in (1.0, 16.0 / 5120):  # an embedding row; an LM-head row (subnormal f16 block scales)
        rows = (rng.standard_normal((8, 5120)) * scale).astype(np.float32)
        rows[3] = 0.0
        encoded = encode_rows(rows, qtype)
        block_bytes = {"Q4_K": 144, "Q6_K": 210, "Q8_0": 8 * 34}[qtype.name]  # per 256 values
        assert encoded.dtype == np.uint8 and encoded.shape == (8, 5120 // 256 * block_bytes)
        back = dequantize(encoded, qtype)
        assert back.shape == rows.shape and np.all(back[3] == 0.0)
        rms = float(np.sqrt(np.mean((back - rows) ** 2))) / scale
        assert rms < {"Q4_K": 0.09, "Q6_K": 0.025, "Q8_0": 0.006}[qtype.name], rms
        cosine = np.sum(back * rows, axis=1) / (np.linalg.norm(back, axis=1) * np.linalg.norm(rows, axis=1) + 1e-30)
        assert np.all(np.delete(cosine, 3) > 0.99)
    identity = np.eye(5, 512, 2, dtype=np.float32)  # eh_proj's [I | 0]
    np.testing.assert_allclose(dequantize(encode_rows(identity, qtype), qtype), identity, atol=1e-3)
