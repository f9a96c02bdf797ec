"""inspect_gguf: what a GGUF file is, read back from files our writers produced; bad files are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, LlamaFileType

from app.core.errors import GGUFError
from app.gguftools.inspect import inspect_gguf
from app.gguftools.qwen35 import Qwen35Shape, constant, neutral_plans, write_qwen35
from app.gguftools.sidecar import build_sidecar
from app.gguftools.tokenizer import Tokenizer, TokenType
from app.gguftools.writer import TensorPlan, kv_u32, write_gguf
from tests.helpers.module_folders import ModuleFolders

F32 = GGMLQuantizationType.F32
SHAPE = Qwen35Shape(
    n_embd=64, n_ff=64, n_head=2, n_head_kv=1, head_dim=32, n_trunk=4,
    ssm_state=16, ssm_groups=2, ssm_dt_rank=4, n_vocab=500, context_length=512,
)  # fmt: skip


def tokenizer(n_vocab: int = 500) -> Tokenizer:
    types = [int(TokenType.NORMAL)] * (n_vocab - 1) + [int(TokenType.CONTROL)]
    return Tokenizer(
        model="gpt2", pre="qwen35", tokens=tuple(f"t{i}" for i in range(n_vocab)), token_types=tuple(types),
        merges=("t 1",), eos_id=n_vocab - 1, pad_id=None, bos_id=None, add_bos=False, chat_template="",
    )  # fmt: skip


@pytest.fixture(scope="module")
def files(module_tmp: ModuleFolders) -> dict[str, Path]:
    root = module_tmp.mktemp("inspect")
    head = np.random.default_rng(0).standard_normal((SHAPE.n_vocab, SHAPE.n_embd)).astype(np.float16)
    output = TensorPlan("output.weight", GGMLQuantizationType.F16, (64, 500), constant(head))
    plans = neutral_plans(SHAPE, overrides={"output.weight": output})
    target = write_qwen35(root / "target.gguf", SHAPE, tokenizer().to_kv(), plans, file_type=LlamaFileType.MOSTLY_F16)
    return {
        "target": target,
        "full": Path(build_sidecar(target, root / "full.gguf", full=True).path),
        "d2t": Path(build_sidecar(target, root / "d2t.gguf", vocab_size=100).path),
    }


def test_target_report(files: dict[str, Path]) -> None:
    report = inspect_gguf(files["target"])
    assert report.kind == "target" and report.architecture == "qwen35"
    assert (report.vocab_size, report.n_embd, report.block_count) == (500, 64, 5)
    assert (report.trunk_layers, report.nextn_layers) == (4, 1)
    assert report.output_shape == [64, 500]
    assert report.tensor_types == {"F16": 41, "F32": 29} and report.n_tensors == 70
    assert report.file_size == files["target"].stat().st_size
    assert report.d2t_length is None
    assert json.loads(json.dumps(report.to_dict()))["kind"] == "target"


def test_full_sidecar_report(files: dict[str, Path]) -> None:
    report = inspect_gguf(files["full"])
    assert report.kind == "mtp_sidecar_full" and report.is_sidecar
    assert (report.block_count, report.trunk_layers, report.nextn_layers) == (5, 4, 1)
    assert report.output_shape == [64, 500] and report.d2t_length is None
    assert report.n_tensors == 3 + 14


def test_d2t_sidecar_report(files: dict[str, Path]) -> None:
    report = inspect_gguf(files["d2t"])
    assert report.kind == "mtp_sidecar_d2t"
    assert report.output_shape == [64, 100]
    assert (report.d2t_length, report.d2t_min, report.d2t_max, report.d2t_unique) == (100, 0, 499, True)
    assert report.tensor_types["I64"] == 1 and report.vocab_size == 500


def test_other_architecture_is_reported_as_other(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "llama.gguf",
        "llama",
        [kv_u32("llama.block_count", 2), *tokenizer().to_kv()],
        [TensorPlan("token_embd.weight", F32, (4, 500), constant(np.zeros((500, 4), np.float32)))],
    )
    report = inspect_gguf(path)
    assert (report.kind, report.architecture, report.vocab_size, report.nextn_layers) == ("other", "llama", 500, 0)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="does not exist"):
        inspect_gguf(tmp_path / "nope.gguf")


@pytest.mark.parametrize("content", [b"", b"hello, not a model\n" * 10, b"GGU"], ids=["empty", "text", "short"])
def test_non_gguf_file_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFError, match="not a GGUF") as err:
        inspect_gguf(path)
    assert err.value.advice


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.01], ids=["half", "last-bytes", "header"])
def test_truncated_gguf_is_a_clear_error(files: dict[str, Path], tmp_path: Path, keep: float) -> None:
    data = files["target"].read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(GGUFError, match=r"incomplete|damaged") as err:
        inspect_gguf(path)
    assert "again" in err.value.advice
