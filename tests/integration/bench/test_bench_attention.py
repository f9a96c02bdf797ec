"""``bench attention``: both kernels at each context length, drafting off and with the d2t sidecar, each reply
run with the kernel its row names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_every_mode_runs_each_kernel_at_each_context(tmp_path: Path) -> None:
    record = tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, "-m", "app", "bench", "attention", "--size", "tiny", "--contexts", "64,400",
                           "--tokens", "16", "--runs", "2", "--threads", "1", "--json", "--record", str(record)],
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    cells = {(c["mode"], c["context"], c["kernel"]): c for c in result["cells"]}
    assert sorted(cells) == sorted((mode, context, kernel) for mode in ("off", "d2t k=3") for context in (64, 400)
                                   for kernel in ("flash", "plain"))
    for (_mode, _context, kernel), cell in cells.items():
        assert cell["samples"] == 2 and cell["median_tps"] > 0 and cell["median_prompt_tps"] > 0, cell
        assert cell["flash_attn_ran"] == [kernel == "flash"], cell  # the kernel named is the one that ran
    table = record.read_text()
    assert "| d2t k=3 | 400 |" in table and "plain / flash" in table


def test_a_context_list_out_of_range_is_refused_in_words() -> None:
    done = subprocess.run([sys.executable, "-m", "app", "bench", "attention", "--contexts", "150,-3"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2 and "--contexts" in done.stderr and "Traceback" not in done.stderr
