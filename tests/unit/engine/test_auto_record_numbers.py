"""An Auto record whose ``tps`` is a 400-digit number (``float()`` of it overflows) is a damaged record, not an
OverflowError (issue 37 item 8): ``depth-memory list`` works and lists it as damaged, recalling it is a cold start.
The real CLI in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.engine.auto_mode import SUFFIX, VERSION, AutoDrafting

REPO_ROOT = Path(__file__).resolve().parents[3]
HUGE = "9" * 400


def _record(tps: str) -> str:
    sample = {"mode": "off", "depth": "", "sampling": "greedy", "model": "m", "threads": None, "tps": "TPS",
              "order": 1, "warm": True, "load": None, "tokens": 64}
    state = {"version": VERSION, "candidates": ["off", "sidecar"], "winner": None, "decided_at": None,
             "samples": [sample], "verdicts": {}}
    record = {"key": {"target": "/m/target.gguf", "d2t": None, "backend": "b", "threads": 0, "gpu_layers": 0},
              "saved_at": "2026-01-01T00:00:00+00:00", "state": state}
    return json.dumps(record).replace('"TPS"', tps)


def test_a_400_digit_tps_in_an_auto_record_is_damaged_and_list_works(tmp_path: Path) -> None:
    env = {**os.environ, "FASTMTP_DATA_DIR": str(tmp_path / "data"), "FASTMTP_CONFIG_DIR": str(tmp_path / "config"),
           "FASTMTP_CACHE_DIR": str(tmp_path / "cache")}
    listed = subprocess.run([sys.executable, "-c", "from app.core.paths import depth_memory_dir; "
                             "print(depth_memory_dir())"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    folder = Path(listed.stdout.strip())
    folder.mkdir(parents=True)
    (folder / f"good{SUFFIX}").write_text(_record("41.5"))
    (folder / f"huge{SUFFIX}").write_text(_record(HUGE))
    done = subprocess.run([sys.executable, "-m", "app", "depth-memory", "list", "--json"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    auto = {Path(e["file"]).name: e for e in json.loads(done.stdout)["auto"]}
    assert auto[f"huge{SUFFIX}"]["damaged"] is True
    assert auto[f"good{SUFFIX}"]["damaged"] is False


def test_recalling_it_is_a_cold_start(tmp_path: Path) -> None:
    state = json.loads(_record(HUGE))["state"]
    assert AutoDrafting.from_dict(state, ("off", "sidecar")) is None
    assert AutoDrafting.from_dict(json.loads(_record("41.5"))["state"], ("off", "sidecar")) is not None
