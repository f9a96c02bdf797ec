"""The sidecar maker never makes things worse (issue 29 item 4): a model that already drafts with a d2t sidecar
keeps it unless the new one measures at least as well along the same text; one that measured worse is kept
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
from app.models.sidecar_job import SidecarCheck, replaces_current
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("replace-demo"))


def test_a_worse_sidecar_does_not_replace_the_current_one() -> None:
    current, new = Path("/m/Mine-FastMTP-32K.gguf"), Path("/m/Mine-FastMTP-16K.gguf")
    worse = SidecarCheck(positions=48, sidecar_acceptance=0.312, embedded_acceptance=0.917, current_acceptance=0.917)
    replaced, why = replaces_current(worse, current, new)
    assert not replaced and "Mine-FastMTP-32K.gguf stays" in why and "91.7%" in why and "31.2%" in why

    better = SidecarCheck(positions=48, sidecar_acceptance=0.93, embedded_acceptance=0.9, current_acceptance=0.917)
    replaced, why = replaces_current(better, current, new)
    assert replaced and "replaces Mine-FastMTP-32K.gguf" in why
    assert replaces_current(SidecarCheck(48, 0.5, 0.9, 0.5), current, new)[0]  # as good: the newer one
    assert not replaces_current(None, current, new)[0]  # not measured (--no-check): kept beside it
    assert not replaces_current(SidecarCheck(48, 0.9, 0.9, None), current, new)[0]
    assert replaces_current(worse, None, new)[0]  # no sidecar until now: the new one is the d2t mode


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
