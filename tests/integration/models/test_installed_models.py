"""The installed-models listing (``app.models.installed``) and ``python -m app models`` on real signed releases
of the tiny demo model, installed as ``fetch`` installs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engine.modes import sidecar_kind
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.models.installed import list_installed
from app.release import trust
from app.release.publish import KeyPair, keygen
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.demo_release import CATALOG, FULL_SIDECAR, MODEL, SIDECAR, install_release
from tests.helpers.module_folders import ModuleFolders

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def config_dir(module_tmp: ModuleFolders) -> Iterator[Path]:
    """A config folder of this module's own: the keys it trusts and the versions it verified stay here."""
    folder = module_tmp.mktemp("installed-config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FASTMTP_CONFIG_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("installed-demo"))


@pytest.fixture(scope="module")
def key(module_tmp: ModuleFolders) -> KeyPair:
    return keygen(module_tmp.mktemp("installed-keys"))


@pytest.fixture(scope="module")
def models(module_tmp: ModuleFolders, config_dir: Path, demo: DemoModel, key: KeyPair) -> Path:
    """A models folder holding the demo model as release version 1 (target, d2t and full sidecars) and the
    built-in demo model's own folder (no manifest: not a release)."""
    root = module_tmp.mktemp("installed-models")
    install_release(root.parent / (root.name + "-work"), key, root,
                    {MODEL: demo.target, SIDECAR: demo.sidecar_d2t, FULL_SIDECAR: demo.sidecar_full})
    ensure_demo_model(root / "demo")
    return root


def test_an_installed_release_is_listed_with_its_target_sidecars_and_checks(models: Path, demo: DemoModel,
                                                                            key: KeyPair) -> None:
    listed = list_installed(models)
    assert len(listed) == 1
    model = listed[0]
    folder = models / CATALOG.repo.replace("/", "--")
    assert model.folder == folder and model.repo == CATALOG.repo and model.version == "1"
    assert model.quant == "Q4_K_P"
    assert model.target == folder / MODEL
    assert model.sidecar_d2t == folder / SIDECAR and model.sidecar_full == folder / FULL_SIDECAR
    assert model.size_bytes == demo.target.stat().st_size
    assert model.total_bytes == sum(p.stat().st_size for p in (demo.target, demo.sidecar_d2t, demo.sidecar_full))
    assert model.verified and model.problem == ""
    assert model.fingerprint.replace(":", "") != "" and model.key == str(folder / MODEL)


def test_sidecar_kinds_follow_the_release_names() -> None:
    assert sidecar_kind(SIDECAR) == "d2t"  # ...-FastMTP-32K.gguf, the release's sidecar
    assert sidecar_kind(FULL_SIDECAR) == "full"
    assert sidecar_kind("sidecar-d2t.gguf") == "d2t" and sidecar_kind("sidecar-full.gguf") == "full"


def test_models_command_prints_the_listing_as_json(models: Path, config_dir: Path) -> None:
    env = dict(os.environ, FASTMTP_CONFIG_DIR=str(config_dir))
    proc = subprocess.run([sys.executable, "-m", "app", "models", "--dir", str(models), "--json"], cwd=REPO_ROOT,
                          env=env, text=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [m.to_dict() for m in list_installed(models)]
    human = subprocess.run([sys.executable, "-m", "app", "models", "--dir", str(models)], cwd=REPO_ROOT, env=env,
                           text=True, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert human.returncode == 0 and "Q4_K_P" in human.stdout and "verified" in human.stdout
    assert f"d2t {SIDECAR}" in human.stdout


def test_a_file_changed_after_install_is_listed_as_not_verified(tmp_path: Path, config_dir: Path,
                                                               key: KeyPair) -> None:
    sources = {MODEL: tmp_path / "model", SIDECAR: tmp_path / "sidecar"}
    for path in sources.values():
        path.write_bytes(os.urandom(4096))
    installed = install_release(tmp_path / "work", key, tmp_path / "models", sources, repo="tests/changed-after")
    target = installed.folder / MODEL
    target.unlink()
    target.write_bytes(b"cut short")
    [model] = list_installed(tmp_path / "models")
    assert not model.verified and model.sidecar_full is None
    assert f"{MODEL} is 9 bytes, the signed manifest says 4096" in model.problem
    assert "python -m app verify" in model.problem


def test_a_release_whose_key_is_no_longer_trusted_is_listed_as_not_verified(tmp_path: Path, config_dir: Path) -> None:
    other = keygen(tmp_path / "keys")
    sources = {MODEL: tmp_path / "model", SIDECAR: tmp_path / "sidecar"}
    for path in sources.values():
        path.write_bytes(os.urandom(4096))
    installed = install_release(tmp_path / "work", other, tmp_path / "models", sources, repo="tests/untrusted")
    [model] = list_installed(tmp_path / "models")
    assert model.verified
    trust.remove_key(installed.fingerprint)
    [model] = list_installed(tmp_path / "models")
    assert not model.verified and "trust" in model.problem.lower()


def test_an_empty_or_missing_models_folder_lists_nothing(tmp_path: Path) -> None:
    assert list_installed(tmp_path) == []
    assert list_installed(tmp_path / "missing") == []
