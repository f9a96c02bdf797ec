"""``bench mode-switch``: the window's engine switches drafting modes without reading the target again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("patched_backend")


def test_the_benchmark_switches_round_every_mode_and_reads_the_target_once() -> None:
    done = subprocess.run([sys.executable, "-m", "app", "bench", "mode-switch", "--size", "tiny", "--rounds", "2",
                           "--json"], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    switches = {s["into"]: s for s in result["switches"]}
    assert list(switches) == ["embedded", "sidecar", "off"]
    assert all(s["samples"] == 2 and s["median_s"] > 0 for s in switches.values())
    # the first load took the target with its embedded head: switching to the head reads nothing, the d2t sidecar
    # is read once, and going back to drafting off reads nothing
    assert switches["embedded"]["models_loaded"] == [0, 0]
    assert switches["sidecar"]["models_loaded"] == [1, 0]
    assert switches["off"]["models_loaded"] == [0, 0]
    assert result["first_load_s"] > 0
