"""``bench threads``: one-token passes pinned to one thread, to all of them, and measured, side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_every_mode_runs_pinned_to_one_thread_to_all_and_measured(tmp_path: Path) -> None:
    record = tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, "-m", "app", "bench", "threads", "--size", "tiny", "--tokens", "24",
                           "--runs", "2", "--threads", "2", "--json", "--record", str(record)],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["threads"] == 2 and result["runs"] == 2 and result["prompts"] >= 4
    by_variant = {(r["mode"], r["pinned"]): r for r in result["results"]}
    assert list(by_variant) == [("off", 1), ("off", 2), ("off", None), ("sidecar", 1), ("sidecar", 2),
                                ("sidecar", None)]
    for (mode, pinned), row in by_variant.items():
        assert len(row["tps_runs"]) == 2 and all(tps > 0 for tps in row["tps_runs"]), row
        assert row["vs_all_threads"] == pytest.approx(row["tps_median"] / by_variant[(mode, 2)]["tps_median"],
                                                      rel=1e-3)
        assert len(row["chosen"]) == 2
        target_counts = {target for target, _draft in row["chosen"]}
        if pinned is not None:
            assert target_counts == {pinned}, row  # held from the first pass
        elif mode == "off":
            assert target_counts <= {1, 2}, row  # 24 one-token passes a prompt settle plain decoding's count
        else:
            assert target_counts <= {1, 2, None}, row  # drafting: the target's passes are mostly batches
    table = record.read_text()
    assert "| plain decoding, 1 thread |" in table and "| d2t sidecar, 2 threads (all) |" in table
    assert "| d2t sidecar, measured |" in table
