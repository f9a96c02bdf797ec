"""The Windows side of the patched backend, as far as Linux can check it (issue 35): the MinGW cross-build of the
d2t-patched llama.cpp (installers/windows_cross.py) runs its d2t check under Wine, and every draft row is finite at
exactly the sidecar's d2t ids and agrees with the Linux engine on the same tokens.

The build itself takes many minutes on a two-core machine and needs Debian packages CI may lack (mingw-w64, wine), so
this runs what ``make windows-cross-check`` built and is skipped, saying how to run it, when nothing is built or a tool
is missing. The comparison logic is also checked on a made-up run that breaks d2t, so a check that can never fail
would show here without Wine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.backend.registry import BackendManifest
from app.gguftools.builtin_demo import d2t_ids, table_prompt
from installers import windows_cross
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

ROOT = Path(__file__).resolve().parents[3]


def _why_not_here() -> str | None:
    missing = windows_cross.missing_tools()
    if missing:
        return f"the Windows cross-check needs {'; '.join(missing)}: run {windows_cross.HOW_TO_RUN}"
    if not windows_cross.is_built():
        return (f"the MinGW build is not in {windows_cross.bin_dir()} yet (many minutes on two cores): run "
                f"{windows_cross.HOW_TO_RUN} once, then this test reuses it")
    return None


def _run(d2t: np.ndarray, rows: np.ndarray) -> windows_cross.DraftRun:
    logits = rows.astype(np.float32)
    draft_next = [int(i) for i in np.argmax(logits, axis=1)]
    return windows_cross.DraftRun([0] * len(rows), draft_next, logits, {})


def test_compare_finds_a_draft_row_finite_outside_d2t() -> None:
    d2t = np.array([1, 3, 4], dtype=np.int64)
    good = np.full((2, 6), -np.inf)
    good[:, d2t] = [[0.5, 2.0, 1.0], [3.0, 0.1, 0.2]]
    assert windows_cross.compare(_run(d2t, good), _run(d2t, good), d2t) == []
    leaked = good.copy()
    leaked[1, 5] = 9.0  # a row finite outside d2t: the scatter wrote where it must not
    problems = windows_cross.compare(_run(d2t, leaked), _run(d2t, good), d2t)
    assert any("draft row 1" in p for p in problems)
    assert any("not d2t ids" in p for p in problems)
    assert any("drafted ids differ" in p for p in problems)
    shifted = good.copy()
    shifted[:, d2t] += 0.5  # same argmax, other logits: a wrong head or wrong inputs
    assert any("differ from Linux's" in p for p in windows_cross.compare(_run(d2t, shifted), _run(d2t, good), d2t))


def test_status_says_whether_it_can_run() -> None:
    done = subprocess.run([sys.executable, "-m", "installers.windows_cross", "status", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert state["missing"] == windows_cross.missing_tools()
    assert state["built"] == windows_cross.is_built()


NOT_HERE = _why_not_here()


@pytest.mark.skipif(NOT_HERE is not None, reason=NOT_HERE or "")
def test_d2t_drafts_under_wine_as_on_linux(patched_backend: BackendManifest) -> None:
    """The built DLLs and d2t_check.exe under Wine, compared with the active (patched) Linux backend."""
    env = dict(os.environ)
    env.pop("FASTMTP_BACKEND_DIR", None)
    done = subprocess.run([sys.executable, "-m", "installers.windows_cross", "check", "--no-build", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and result["ok"], json.dumps(result, indent=1) + done.stderr[-3000:]
    assert result["compared_with_linux"] and result["linux"]["backend"] == patched_backend.id
    assert result["wine"]["finite_per_row"] == [result["d2t_ids"]] * len(result["tokens"])
    assert result["wine"]["draft_next"] == result["linux"]["draft_next"]
    assert result["max_abs_diff_at_d2t_ids"] <= windows_cross.DIFF_TOLERANCE


@pytest.mark.skipif(NOT_HERE is not None, reason=NOT_HERE or "")
def test_the_wine_check_fails_on_a_sidecar_without_d2t(default_demo: DemoCopies, module_tmp: ModuleFolders,
                                                       tmp_path: Path) -> None:
    """The same Windows program on the full sidecar (no d2t: a full-vocabulary head) drafts finite logits
    everywhere, and the comparison says so: the check can fail on the real binary, not only on made-up rows."""
    demo = default_demo.copy_to(module_tmp.mktemp("demo"))
    tokens = table_prompt(demo, 6)
    full = windows_cross.run_under_wine(demo.target, demo.sidecar_full, tokens, tmp_path)
    assert full.info["finite_per_row"] == [full.info["n_vocab"]] * len(tokens)
    problems = windows_cross.compare(full, None, d2t_ids(demo.sidecar_d2t))
    assert sum("not at exactly the" in p for p in problems) == len(tokens)
