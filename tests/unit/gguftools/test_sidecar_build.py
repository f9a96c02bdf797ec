"""Building FastMTP sidecars from quantized qwen35 targets, and refusing bad input cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, LlamaFileType
from gguf import quants as gq

from app.core.errors import GGUFError, SidecarError
from app.gguftools.counts import TokenCounts
from app.gguftools.inspect import inspect_gguf
from app.gguftools.qwen35 import Qwen35Shape, constant, hparams_kv, neutral_plans, write_qwen35
from app.gguftools.reader import open_gguf, tensors_by_name
from app.gguftools.sidecar import build_sidecar, check_pair
from app.gguftools.tokenizer import NEWLINE, Tokenizer, TokenType
from app.gguftools.writer import TensorPlan, kv_u32, write_gguf
from tests.helpers.module_folders import ModuleFolders

Q8_0 = GGMLQuantizationType.Q8_0
Q4_K = GGMLQuantizationType.Q4_K
N_VOCAB = 1024
# Row lengths of every matrix are multiples of 256, so any tensor may be Q4_K.
SHAPE = Qwen35Shape(
    n_embd=256, n_ff=256, n_head=2, n_head_kv=1, head_dim=128, n_trunk=4,
    ssm_state=32, ssm_groups=2, ssm_dt_rank=8, n_vocab=N_VOCAB, context_length=1024,
)  # fmt: skip
CONTROL = (1000, 1001, 1002)  # <|endoftext|> (eos), <|im_start|>, <|im_end|>


def small_tokenizer(n_vocab: int = N_VOCAB) -> Tokenizer:
    tokens = [f"tok{i}" for i in range(n_vocab)]
    types = [int(TokenType.NORMAL)] * n_vocab
    tokens[10] = NEWLINE
    for i, text in zip(CONTROL, ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), strict=True):
        tokens[i], types[i] = text, int(TokenType.CONTROL)
    tokens[1003], tokens[1004] = "<think>", "</think>"
    return Tokenizer(
        model="gpt2", pre="qwen35", tokens=tuple(tokens), token_types=tuple(types), merges=("t o", "to k"),
        eos_id=CONTROL[0], pad_id=CONTROL[0], bos_id=CONTROL[0], add_bos=False, chat_template="{{ x }}",
    )  # fmt: skip


def random_q4_k(rows: int, n_per_row: int, rng: np.random.Generator) -> np.ndarray:
    """Raw Q4_K bytes (rows, bytes per row): random quants and scales with finite f16 d/dmin."""
    n_blocks = rows * n_per_row // 256
    blocks = rng.integers(0, 256, size=(n_blocks, 144), dtype=np.uint8)
    scale = rng.uniform(0.001, 0.01, size=(n_blocks, 2)).astype(np.float16)
    blocks[:, :4] = scale.view(np.uint8)
    return blocks.reshape(rows, n_per_row // 256 * 144)


def quantized(name: str, values: np.ndarray, qtype: GGMLQuantizationType) -> TensorPlan:
    data = gq.quantize(values, qtype)
    return TensorPlan(name, qtype, (values.shape[1], values.shape[0]), constant(data))


def write_target(
    path: Path,
    *,
    head: GGMLQuantizationType = Q8_0,
    embd: GGMLQuantizationType = Q4_K,
    tied: bool = False,
    shape: Qwen35Shape = SHAPE,
    seed: int = 0,
) -> Path:
    """A qwen35 target with Q8_0 trunk matrices and random quantized embedding and LM head."""
    rng = np.random.default_rng(seed)
    E, V = shape.n_embd, shape.n_vocab

    def matrix(name: str, qtype: GGMLQuantizationType) -> TensorPlan:
        if qtype == Q4_K:
            return TensorPlan(name, Q4_K, (E, V), constant(random_q4_k(V, E, rng)))
        return quantized(name, rng.standard_normal((V, E)).astype(np.float32), qtype)

    overrides = {"token_embd.weight": matrix("token_embd.weight", embd)}
    plans = neutral_plans(shape, Q8_0, overrides=overrides)
    if tied:
        plans = [p for p in plans if p.name != "output.weight"]
    else:
        plans = [matrix(p.name, head) if p.name == "output.weight" else p for p in plans]
    tok = small_tokenizer(V)
    return write_qwen35(path, shape, tok.to_kv(), plans, file_type=LlamaFileType.MOSTLY_Q8_0)


def dequantized(path: Path, name: str) -> np.ndarray:
    t = tensors_by_name(open_gguf(path))[name]
    return gq.dequantize(np.asarray(t.data), t.tensor_type)


def assert_nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not out.with_name(out.name + ".partial").exists()
    assert list(out.parent.glob("*.partial")) == []


@pytest.fixture(scope="module")
def target(module_tmp: ModuleFolders) -> Path:
    return write_target(module_tmp.mktemp("target") / "target.gguf")


@pytest.mark.parametrize("head", [Q8_0, Q4_K], ids=["Q8_0", "Q4_K"])
def test_d2t_rows_equal_target_rows_at_d2t_ids(tmp_path: Path, head: GGMLQuantizationType) -> None:
    src = write_target(tmp_path / "target.gguf", head=head, embd=Q8_0 if head == Q4_K else Q4_K)
    counts = TokenCounts.from_token_ids([5, 5, 5, 700, 700, 42, 999, 3])
    report = build_sidecar(src, tmp_path / "d2t.gguf", vocab_size=64, counts=counts)

    reader = open_gguf(report.path)
    d2t = np.asarray(tensors_by_name(reader)["d2t"].data)
    assert d2t.dtype == np.int64 and d2t.size == 64 == report.n_draft
    assert np.all(np.diff(d2t) > 0) and d2t.min() >= 0 and d2t.max() < N_VOCAB
    assert {5, 700, 42, 999, 3, 10, *CONTROL, 1003, 1004} <= set(d2t.tolist())

    target_rows = dequantized(src, "output.weight")
    sidecar_rows = dequantized(Path(report.path), "output.weight")
    assert sidecar_rows.shape == (64, SHAPE.n_embd)
    np.testing.assert_array_equal(sidecar_rows, target_rows[d2t])
    assert report.head_type == head.name


def test_sidecar_copies_mtp_block_embedding_and_kv_byte_for_byte(target: Path, tmp_path: Path) -> None:
    report = build_sidecar(target, tmp_path / "d2t.gguf", vocab_size=100)
    src_reader, side_reader = open_gguf(target), open_gguf(report.path)
    src, side = tensors_by_name(src_reader), tensors_by_name(side_reader)
    mtp = [n for n in src if n.startswith(f"blk.{SHAPE.mtp_layer}.")]
    assert len(mtp) == 14 and not any(n.startswith("blk.0.") for n in side)
    for name in [*mtp, "token_embd.weight", "output_norm.weight"]:
        assert side[name].tensor_type == src[name].tensor_type
        np.testing.assert_array_equal(np.asarray(side[name].data), np.asarray(src[name].data))
    for key, field in src_reader.fields.items():
        if not key.startswith("GGUF."):
            assert side_reader.fields[key].contents() == field.contents(), key
    side_report = inspect_gguf(report.path)
    assert side_report.kind == "mtp_sidecar_d2t"
    assert side_report.block_count == SHAPE.block_count and side_report.vocab_size == N_VOCAB


def test_without_counts_the_lowest_ids_and_chat_tokens_are_drafted(target: Path, tmp_path: Path) -> None:
    report = build_sidecar(target, tmp_path / "d2t.gguf", vocab_size=20)
    d2t = np.asarray(tensors_by_name(open_gguf(report.path))["d2t"].data).tolist()
    assert d2t == sorted({*range(15), *CONTROL, 1003, 1004})  # 0-14 with newline (10) among them


def test_full_sidecar_keeps_the_whole_head_and_has_no_d2t(target: Path, tmp_path: Path) -> None:
    report = build_sidecar(target, tmp_path / "full.gguf", full=True)
    assert report.kind == "mtp_sidecar_full" and report.n_draft == N_VOCAB
    side = tensors_by_name(open_gguf(report.path))
    assert "d2t" not in side
    np.testing.assert_array_equal(
        np.asarray(side["output.weight"].data), np.asarray(tensors_by_name(open_gguf(target))["output.weight"].data)
    )
    assert inspect_gguf(report.path).kind == "mtp_sidecar_full"


def test_tied_target_trims_the_token_embedding_into_the_head(tmp_path: Path) -> None:
    src = write_target(tmp_path / "tied.gguf", tied=True)
    report = build_sidecar(src, tmp_path / "d2t.gguf", vocab_size=32)
    d2t = np.asarray(tensors_by_name(open_gguf(report.path))["d2t"].data)
    np.testing.assert_array_equal(
        dequantized(Path(report.path), "output.weight"), dequantized(src, "token_embd.weight")[d2t]
    )


def test_a_d2t_sidecar_can_be_built_from_a_full_sidecar(target: Path, tmp_path: Path) -> None:
    full = build_sidecar(target, tmp_path / "full.gguf", full=True)
    report = build_sidecar(full.path, tmp_path / "d2t.gguf", vocab_size=50)
    assert inspect_gguf(report.path).kind == "mtp_sidecar_d2t"
    with pytest.raises(SidecarError, match="already a trimmed"):
        build_sidecar(report.path, tmp_path / "again.gguf")
    assert_nothing_written(tmp_path / "again.gguf")


def test_non_qwen35_target_is_refused_naming_its_architecture(tmp_path: Path) -> None:
    embd = np.zeros((N_VOCAB, 8), np.float32)
    llama = write_gguf(
        tmp_path / "llama.gguf",
        "llama",
        [kv_u32("llama.block_count", 1), *small_tokenizer().to_kv()],
        [TensorPlan("token_embd.weight", GGMLQuantizationType.F32, (8, N_VOCAB), constant(embd))],
    )
    out = tmp_path / "side.gguf"
    with pytest.raises(SidecarError, match="'llama'") as err:
        build_sidecar(llama, out)
    assert err.value.advice
    assert_nothing_written(out)


def test_target_without_nextn_block_is_refused(tmp_path: Path) -> None:
    plans = [p for p in neutral_plans(SHAPE, Q8_0) if not p.name.startswith(f"blk.{SHAPE.mtp_layer}.")]
    kv = [
        kv_u32(k.key, SHAPE.n_trunk) if k.key == "qwen35.block_count" else k
        for k in hparams_kv(SHAPE, LlamaFileType.MOSTLY_Q8_0)
        if k.key != "qwen35.nextn_predict_layers"
    ]
    plain = write_gguf(tmp_path / "plain.gguf", "qwen35", [*kv, *small_tokenizer().to_kv()], plans)
    out = tmp_path / "side.gguf"
    with pytest.raises(SidecarError, match="no MTP"):
        build_sidecar(plain, out)
    assert_nothing_written(out)


def test_truncated_target_is_refused(target: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    data = target.read_bytes()
    out = tmp_path / "side.gguf"
    for size in (len(data) // 2, 200):
        cut.write_bytes(data[:size])
        with pytest.raises(GGUFError, match=r"incomplete|damaged"):
            build_sidecar(cut, out)
        assert_nothing_written(out)


def test_bad_draft_vocabularies_are_refused(target: Path, tmp_path: Path) -> None:
    out = tmp_path / "side.gguf"
    cases: list[tuple[dict[str, object], str]] = [
        ({"counts": TokenCounts({5: 3, N_VOCAB + 7: 1}), "vocab_size": 64}, f"token {N_VOCAB + 7}"),
        ({"draft_ids": [1, 2, 2, 3]}, "more than once"),
        ({"draft_ids": [1, 2, N_VOCAB]}, f"token {N_VOCAB}"),
        ({"draft_ids": [-1, 2]}, "token -1"),
        ({"vocab_size": N_VOCAB + 1}, "impossible"),
        ({"vocab_size": 0}, "impossible"),
        ({"vocab_size": 4}, "chat tokens"),
    ]
    for kwargs, message in cases:
        with pytest.raises(SidecarError, match=message):
            build_sidecar(target, out, **kwargs)  # type: ignore[arg-type]
        assert_nothing_written(out)


def test_explicit_draft_ids_are_used_with_the_chat_tokens(target: Path, tmp_path: Path) -> None:
    report = build_sidecar(target, tmp_path / "side.gguf", draft_ids=[900, 7, 300])
    d2t = np.asarray(tensors_by_name(open_gguf(report.path))["d2t"].data).tolist()
    assert d2t == sorted([7, 10, 300, 900, *CONTROL, 1003, 1004])


def test_sidecar_never_overwrites_its_target(target: Path) -> None:
    before = target.stat().st_mtime_ns
    with pytest.raises(SidecarError, match="overwrite"):
        build_sidecar(target, target)
    assert target.stat().st_mtime_ns == before


def test_counts_with_duplicate_or_bad_ids_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "counts.json"
    path.write_text('{"format": "fastmtp-token-counts", "version": 1, "counts": {"5": 1, "5": 2}}')
    with pytest.raises(SidecarError, match="twice"):
        TokenCounts.load(path)
    path.write_text('{"format": "fastmtp-token-counts", "version": 1, "counts": {"5": 1, "05": 2}}')
    with pytest.raises(SidecarError, match="twice"):
        TokenCounts.load(path)
    path.write_text('{"format": "fastmtp-token-counts", "version": 1, "counts": {"x": 1}}')
    with pytest.raises(SidecarError, match="not a number"):
        TokenCounts.load(path)
    path.write_text("not json")
    with pytest.raises(SidecarError, match="not a valid"):
        TokenCounts.load(path)
    with pytest.raises(SidecarError, match="invalid token id"):
        TokenCounts({-1: 4})


def test_counts_save_load_merge_and_count_texts(tmp_path: Path) -> None:
    a = TokenCounts.from_token_ids([1, 2, 2, 3, 3, 3])
    b = TokenCounts.from_texts(["a b", "b"], tokenize=lambda text: [ord(c) for c in text.split()[0]])
    assert b.as_dict() == {ord("a"): 1, ord("b"): 1}
    merged = a.merge(TokenCounts({2: 5, 9: 1}))
    assert merged.as_dict() == {1: 1, 2: 7, 3: 3, 9: 1} and merged.total == 12
    assert merged.ranked() == [2, 3, 1, 9]
    loaded = TokenCounts.load(merged.save(tmp_path / "counts.json"))
    assert loaded == merged
    assert json.loads((tmp_path / "counts.json").read_text())["format"] == "fastmtp-token-counts"


def test_check_pair_accepts_a_fitting_sidecar_and_names_what_differs(target: Path, tmp_path: Path) -> None:
    target_report = inspect_gguf(target)
    side = inspect_gguf(build_sidecar(target, tmp_path / "side.gguf", vocab_size=64).path)
    check_pair(target_report, side)

    wide = Qwen35Shape(**{**SHAPE.__dict__, "n_embd": 512, "rope_sections": (0, 0, 0, 0)})
    other = inspect_gguf(write_target(tmp_path / "wide.gguf", shape=wide))
    with pytest.raises(SidecarError, match="embedding width 256 vs 512"):
        check_pair(other, side)
    big = Qwen35Shape(**{**SHAPE.__dict__, "n_vocab": 1536, "rope_sections": (0, 0, 0, 0)})
    bigger = inspect_gguf(write_target(tmp_path / "big.gguf", shape=big))
    with pytest.raises(SidecarError, match="vocabulary 1024 vs 1536"):
        check_pair(bigger, side)
    with pytest.raises(SidecarError, match="not an MTP draft sidecar"):
        check_pair(target_report, target_report)


def test_a_failing_write_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "broken.gguf"
    short = TensorPlan("x", GGMLQuantizationType.F32, (4, 4), constant(np.zeros(3, np.float32)))
    with pytest.raises(GGUFError, match="expected 64"):
        write_gguf(out, "qwen35", [], [short])
    assert_nothing_written(out)
