"""``bench ops`` (per-op profile, verify-pass ratio) and the verify / draft / host split of ``bench spec``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.ops import Profile, layer_kinds
from app.bench.spec import Row, Sample, SpecResult, Variant
from app.engine.breakeven import expected_tokens_per_pass as theoretical_tokens_per_round
from app.native.profile import NodeRecord


def _node(name: str, op: str, ms: float = 1.0, backend: str = "CPU") -> NodeRecord:
    return NodeRecord(name, op, backend, backend, ms / 1000.0)


def test_nodes_are_grouped_by_layer_kind_op_and_backend() -> None:
    records = [
        _node("model.input_embed", "GET_ROWS"),
        _node("attn_norm-0", "RMS_NORM"), _node("node_7", "MUL_MAT", 4), _node("conv_output_raw-0", "SSM_CONV"),
        _node("node_9", "GATED_DELTA_NET", 2), _node("l_out-0", "ADD"),
        _node("attn_norm-3", "RMS_NORM"), _node("Qcur_full-3", "MUL_MAT", 3, "CUDA0"),
        _node("Kcur-3 (view)", "VIEW", 0), _node("node_20", "FLASH_ATTN_EXT", 2, "CUDA0"),
        _node("result_norm", "RMS_NORM", 1, "CUDA0"), _node("result_output", "MUL_MAT", 5, "CUDA0"),
    ]
    assert layer_kinds(records) == ["input"] + ["recurrent"] * 5 + ["attention"] * 4 + ["output"] * 2
    mtp = [_node("mtp_eh_proj-4", "MUL_MAT"), _node("node_3", "ADD"), _node("h_nextn", "RMS_NORM"),
           _node("result_output_d2t", "SET_ROWS")]
    assert layer_kinds(mtp) == ["mtp", "mtp", "output", "output"]
    profile = Profile(records)
    assert profile.total_ms == pytest.approx(22.0)
    by_op = profile.by_op()
    assert next(iter(by_op)) == "MUL_MAT" and by_op["MUL_MAT"]["ms"] == pytest.approx(12.0)
    assert by_op["MUL_MAT"]["backends"] == {"CPU": 1, "CUDA0": 2}
    kinds = profile.by_layer_kind()
    assert kinds["recurrent"]["ms"] == pytest.approx(9.0) and kinds["recurrent"]["layers"] == 1
    assert kinds["attention"]["layers"] == 1 and kinds["output"]["ms"] == pytest.approx(6.0)
    # CPU, then CUDA0 from layer 3 on (the view computes nothing and does not count)
    assert profile.splits_seen() == 2
    assert profile.host_fallbacks() == {"GET_ROWS": 1, "RMS_NORM": 2, "MUL_MAT": 1, "SSM_CONV": 1,
                                        "GATED_DELTA_NET": 1, "ADD": 1}


def _sample(generated: int, passes: int, decode: float, verify: float, draft: float = 0.0, proposed: int = 0,
            tested: int = 0, accepted: int = 0) -> Sample:
    # one reply whose tokens after the first span ``decode`` seconds: ``generated / decode`` tok/s
    return Sample(generated=generated, decode_seconds=decode, passes=passes, tested=tested, proposed=proposed,
                  accepted=accepted, draft_native=draft, verify_native=verify, spans=[(generated + 1, decode)])


def test_bench_spec_rows_split_each_round_and_bound_it_from_the_split() -> None:
    off = Row(Variant("ours", "off"), "document", [_sample(100, 100, 1.2, 1.0)])
    d2t = Row(Variant("ours", "sidecar", "d2t", 3), "document",
              [_sample(128, 40, 1.0, 0.5, draft=0.24, proposed=120, tested=100, accepted=80)])
    result = SpecResult([off, d2t], 128, 1, "synthetic", "test")
    plain = result.summary(off)
    assert plain["verify_ms_per_pass"] == pytest.approx(10.0) and plain["draft_ms_per_step"] == 0.0
    assert plain["python_ms_per_round"] == pytest.approx(2.0) and plain["round_ms"] == pytest.approx(12.0)
    row = result.summary(d2t)
    assert row["verify_ms_per_pass"] == pytest.approx(12.5) and row["draft_ms_per_step"] == pytest.approx(2.0)
    assert row["draft_ms_per_round"] == pytest.approx(6.0) and row["python_ms_per_round"] == pytest.approx(6.5)
    assert row["verify_ms_per_pass"] + row["draft_ms_per_round"] + row["python_ms_per_round"] == \
        pytest.approx(row["round_ms"])
    bound = theoretical_tokens_per_round(0.8, 3) * 10.0 / (3 * 2.0 + 12.5)
    assert row["bound"] == pytest.approx(bound, abs=1e-3)
    assert row["efficiency"] == pytest.approx(row["vs_off"] / row["bound"], abs=2e-3)
    table = result.markdown()
    assert "verify ms/pass | draft ms/step | Python ms/round" in table
    assert "| off | 83.3 |" in table and "| 12.50 | 2.000 | 6.50 |" in table


@pytest.mark.usefixtures("patched_backend")
def test_bench_ops_profiles_the_passes_of_the_tiny_demo(tmp_path: Path) -> None:
    out = tmp_path / "ops.json"
    done = subprocess.run([sys.executable, "-m", "app", "bench", "ops", "--size", "tiny", "--runs", "3",
                           "--prompt-tokens", "64", "--bandwidth-gbs", "100", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert set(result["verify_ratio"]) == {"1", "2", "3", "4"}
    assert all(r > 0 for r in result["verify_ratio"].values())
    assert result["prompt_tps"] > 0
    assert result["bandwidth"]["pass_gbs"] > 0 and result["bandwidth"]["floor_ms"] > 0
    assert result["graph"]["target"]["splits"]["single"] >= 1 and result["graph"]["draft"]["nodes"]["single"] > 0
    passes = {p["label"]: p for p in result["passes"]}
    assert set(passes) == {"1 token", "2 tokens", "3 tokens", "4 tokens", "5 tokens", "prompt 64", "draft step"}
    for p in passes.values():
        assert p["ms"] > 0 and p["profiled_ms"] > 0 and p["splits_seen"] == 1
        assert p["by_backend"].keys() == {"CPU"} and p["host_fallbacks"] == {}
        assert all(group["ms"] > 0 for group in p["by_op"].values() if group["nodes"] > 3)
        assert sum(group["ms"] for group in p["by_op"].values()) == pytest.approx(p["profiled_ms"], rel=1e-3)
    one = passes["1 token"]
    # the kernel the engine runs on a CPU (engine.attention): the plain one's products and softmax, no flash attention
    assert result["flash_attn"] is False
    assert {"MUL_MAT", "GATED_DELTA_NET", "SOFT_MAX", "GET_ROWS"} <= set(one["by_op"])
    assert "FLASH_ATTN_EXT" not in one["by_op"]
    assert {"recurrent", "attention", "output"} <= set(one["by_layer_kind"])
    assert one["by_layer_kind"]["recurrent"]["layers"] == 3 and one["by_layer_kind"]["attention"]["layers"] == 1
    assert "mtp" in passes["draft step"]["by_layer_kind"]
    assert passes["4 tokens"]["ms"] / one["ms"] == pytest.approx(result["verify_ratio"]["3"], rel=0.01)
    # what each pass hands back to the host: a logits row and (a drafting target) a hidden row per token
    assert all(p["cpu_ms"] > 0 for p in passes.values())
    assert [passes["4 tokens"][key] for key in ("logits_rows", "hidden_rows")] == [4, 4]
    assert passes["4 tokens"]["host_bytes"] == 4 * one["host_bytes"]
    prompt = passes["prompt 64"]
    assert (prompt["logits_rows"], prompt["hidden_rows"]) == (1, 64)
    assert prompt["host_bytes"] > one["host_bytes"]
    assert (passes["draft step"]["logits_rows"], passes["draft step"]["hidden_rows"]) == (1, 1)
