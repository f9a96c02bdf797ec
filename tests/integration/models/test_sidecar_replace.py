"""The sidecar maker never makes things worse (issue 29 item 4): a model that already drafts with a d2t sidecar
keeps it unless the new one measures clearly better along the same text, on a check large enough to mean something
(issue 36 item 7: never on a tie, never on 48 tokens); one that measured worse is kept
beside it (the user may still choose it), and the reason is given. The decision on measured numbers, and the
real ``sidecar make`` on the demo model, which measures the current sidecar beside the new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.backend.registry import BackendManifest
from app.cli import main
from app.gguftools.demo_model import DemoModel
from app.models import local_models
from app.models.sidecar_job import SidecarCheck, clearly_better, replaces_current
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("replace-demo"))


def test_a_worse_sidecar_does_not_replace_the_current_one() -> None:
    current, new = Path("/m/Mine-FastMTP-32K.gguf"), Path("/m/Mine-FastMTP-16K.gguf")
    worse = SidecarCheck(positions=256, sidecar_acceptance=0.312, embedded_acceptance=0.917,
                         current_acceptance=0.917, new_only=3, current_only=158)
    replaced, why = replaces_current(worse, current, new)
    assert not replaced and "Mine-FastMTP-32K.gguf stays" in why and "91.7%" in why and "31.2%" in why
    assert "measured worse" in why and "256 tokens" in why

    better = SidecarCheck(positions=256, sidecar_acceptance=0.95, embedded_acceptance=0.9, current_acceptance=0.9,
                          new_only=15, current_only=2)
    replaced, why = replaces_current(better, current, new)
    assert replaced and "replaces Mine-FastMTP-32K.gguf" in why and "95.0%" in why and "90.0%" in why
    assert "256 tokens" in why and "alone right at 15" in why
    assert not replaces_current(None, current, new)[0]  # not measured (--no-check): kept beside it
    assert not replaces_current(SidecarCheck(256, 0.9, 0.9, None), current, new)[0]
    assert replaces_current(worse, None, new)[0]  # no sidecar until now: the new one is the d2t mode


def test_a_tie_or_a_small_check_never_replaces_the_current_sidecar() -> None:
    """Issue 36 item 7: a tie on a 48-token check replaced the shipped sidecar with one built from 113 tokens."""
    current, new = Path("/m/Shipped-FastMTP-32K.gguf"), Path("/m/Tiny-FastMTP-32K.gguf")
    tie = SidecarCheck(256, 0.5, 0.9, 0.5, new_only=10, current_only=10)
    replaced, why = replaces_current(tie, current, new)
    assert not replaced and "did not measure clearly better" in why and why.count("50.0%") == 2
    small = SidecarCheck(48, 0.6, 0.9, 0.4, new_only=12, current_only=2)  # much better, but on 48 tokens only
    replaced, why = replaces_current(small, current, new)
    assert not replaced and "only 48 tokens, too few to decide" in why and "60.0%" in why and "40.0%" in why
    noisy = SidecarCheck(256, 0.53, 0.9, 0.51, new_only=12, current_only=7)  # +2 points, within chance
    assert not clearly_better(noisy) and not replaces_current(noisy, current, new)[0]
    tiny_gain = SidecarCheck(256, 0.505, 0.9, 0.5, new_only=2, current_only=0)  # beyond chance, below a point
    assert not clearly_better(tiny_gain)
    assert clearly_better(SidecarCheck(256, 0.56, 0.9, 0.5, new_only=18, current_only=3))
    assert clearly_better(SidecarCheck(256, 0.56, 0.9, 0.5))  # older records without the paired counts: the margin


def test_sidecar_make_measures_the_current_sidecar_and_keeps_the_better_one(
        patched_backend: BackendManifest, demo: DemoModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_models.add(demo.target, sidecars=[demo.sidecar_d2t])
    assert local_models.find(demo.target) is not None
    junk = tmp_path / "junk.txt"
    junk.write_text("zzqx 7741 ##@@ qqq " * 400)  # a corpus unlike anything the model writes
    out = tmp_path / "junk-FastMTP-16K.gguf"
    try:
        assert main(["sidecar", "make", "--target", str(demo.target), "--out", str(out), "--vocab", "16384",
                     "--corpus", str(junk), "--json"]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        check = result["check"]
        assert check["current_acceptance"] is not None and 0.0 <= check["current_acceptance"] <= 1.0
        assert check["sidecar_acceptance"] < check["current_acceptance"]  # the junk corpus's sidecar is worse
        model = local_models.find(demo.target)
        assert model is not None and model.sidecar_d2t == demo.sidecar_d2t.absolute()  # the good one stays
        assert not result["attached"] and out.is_file()  # the new one is kept beside it
        assert f"{check['current_acceptance']:.1%}" in result["attach_note"] and "stays" in result["attach_note"]

        forced = tmp_path / "forced-FastMTP-16K.gguf"  # the user chose it explicitly
        assert main(["sidecar", "make", "--target", str(demo.target), "--out", str(forced), "--vocab", "16384",
                     "--corpus", str(junk), "--attach", "--json"]) == 0
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert result["attached"] and "--attach" in result["attach_note"]
        model = local_models.find(demo.target)
        assert model is not None and model.sidecar_d2t == forced.absolute()
    finally:
        local_models.remove(demo.target)
