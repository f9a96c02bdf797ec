"""``bench prompt``: ours and llama-server read the same prompts side by side, and the report says how they compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.prompt import OURS_N_BATCH

pytestmark = pytest.mark.usefixtures("patched_backend")  # llama-server is built in the patched backend's tree


def test_the_benchmark_times_both_engines_on_every_prompt_length_and_records_the_table(tmp_path: Path) -> None:
    out, record = tmp_path / "prompt.json", tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, "-m", "app", "bench", "prompt", "--size", "tiny", "--lengths", "24,80",
                           "--runs", "2", "--batches", "16", "--threads", "1", "--json", "--out", str(out),
                           "--record", str(record)], capture_output=True, text=True, check=False, timeout=900)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert result["prompt_lengths"] == [24, 80] and result["runs"] == 2 and result["threads"] == 1
    labels = {row["variant"] for row in result["rows"]}
    assert labels == {f"ours off, n_batch {OURS_N_BATCH}", f"ours d2t sidecar, n_batch {OURS_N_BATCH}",
                      "ours off, n_batch 16", "llama-server off, -b 2048 -ub 512",
                      "llama-server d2t sidecar, -b 2048 -ub 512"}
    assert len(result["rows"]) == 2 * len(labels)
    for row in result["rows"]:
        assert len(row["prompt_tps_runs"]) == 2 and row["prompt_tps_median"] > 0 and row["median_ms"] > 0
        if row["engine"] == "ours":
            assert row["vs_upstream"] > 0 and len(row["vs_upstream_runs"]) == 2
            assert row["target_native_ms"] > 0 and row["host_ms"] is not None
            assert (row["draft_native_ms"] is not None) == (row["draft"] == "d2t")
        else:
            assert row["vs_upstream"] is None and row["target_native_ms"] is None
        assert (row["draft_cost"] is not None) == (row["draft"] == "d2t")
    assert set(result["best_n_batch"].values()) <= {OURS_N_BATCH, 16}
    assert set(result["target_met"]) == {"24", "80"}
    text = record.read_text()
    assert "## Prompt processing against llama-server (tiny demo model)" in text
    assert "python -m app bench prompt --size tiny" in text and "| 80 | ours off, n_batch 16 |" in text
