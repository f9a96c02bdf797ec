"""Your own model files against the real core: the registry, the scan of the usual places (HOME and the HF cache
pointed at tmp_path), and the three verification states through ``verify`` and ``models --json``, the hub-hash
case against a real HTTP server on 127.0.0.1 that answers the hub's tree API (and a mismatch refused)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli import main
from app.gguftools.demo_model import DemoModel
from app.gguftools.writer import kv_u32, plan_array, write_gguf
from app.models import local_models
from app.release.hub_hash import HubOrigin, origin_from_path
from app.release.publish import KeyPair, keygen
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.demo_release import MODEL, SIDECAR, install_release
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer

REPO = "someone/Qwen3.8-27B-MTP-GGUF"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("local-demo"))


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test its own registry, HOME (LM Studio, Downloads) and Hugging Face cache."""
    config = tmp_path / "config"
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    # the configured models folder is scanned too: its own, not the session's (other tests install models there)
    from app.settings import app_settings

    app_settings.save(app_settings.Settings(models_dir=str(tmp_path / "models")))
    yield config


def _link(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.link(source, target)
    return target


def _hf_cache_file(demo: DemoModel, cache: Path, name: str = "model-Q4_K_M.gguf") -> Path:
    """The HF cache's layout: the bytes under blobs/<sha256>, the snapshot a symlink to them."""
    sha = hashlib.sha256(demo.target.read_bytes()).hexdigest()
    repo_dir = cache / f"models--{REPO.replace('/', '--')}"
    blob = _link(demo.target, repo_dir / "blobs" / sha)
    snapshot = repo_dir / "snapshots" / REVISION / name
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def _tree(name: str, sha256: str, size: int) -> bytes:
    return json.dumps([{"type": "file", "oid": "a" * 40, "size": 134, "path": name,
                        "lfs": {"oid": sha256, "size": size, "pointerSize": 134}},
                       {"type": "file", "oid": "b" * 40, "size": 12, "path": "README.md"}]).encode()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _write_llama_file(path: Path) -> Path:
    """A small, complete GGUF of another architecture (llama), written by our writer."""
    return write_gguf(path, "llama", [kv_u32("llama.block_count", 1)],
                      [plan_array("blk.0.attn_norm.weight", np.ones(8, dtype=np.float32))])


def test_scan_finds_a_planted_file_in_lm_studio_and_says_why_each_can_or_cannot_be_used(
        demo: DemoModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    planted = _link(demo.target, home / ".lmstudio" / "models" / "someone" / "Qwen3.8-GGUF" / "Qwen3.8-Q4_K_M.gguf")
    _link(demo.sidecar_d2t, home / "Downloads" / "Qwen3.8-FastMTP-32K.gguf")
    _write_llama_file(home / "Downloads" / "llama-7b-Q4_0.gguf")
    (home / "Downloads" / "half.gguf.part").write_bytes(b"GGUF")
    (home / "Downloads" / "broken.gguf").write_bytes(b"GGUF\x03\x00")
    cached = _hf_cache_file(demo, tmp_path / "hf-hub")

    code, found = _cli(capsys, "models", "scan")
    assert code == 0
    by_name = {Path(item["path"]).name: item for item in found}
    assert set(by_name) == {planted.name, "Qwen3.8-FastMTP-32K.gguf", "llama-7b-Q4_0.gguf", "broken.gguf",
                            cached.name}
    lm = by_name[planted.name]
    assert lm["where"] == "LM Studio" and lm["usable"] and lm["facts"]["mtp_head"]
    assert lm["facts"]["architecture"] == "qwen35" and lm["facts"]["quantization"] == "Q4_K_M"
    assert lm["facts"]["sidecar"] == "embedded" and lm["facts"]["size_bytes"] == demo.target.stat().st_size
    assert lm["origin"] == {"repo": "someone/Qwen3.8-GGUF", "revision": "main", "path_in_repo": planted.name}
    assert lm["verification"]["state"] == "unverified"
    side = by_name["Qwen3.8-FastMTP-32K.gguf"]
    assert not side["usable"] and side["facts"]["sidecar"] == "d2t" and "sidecar" in side["reason"]
    llama = by_name["llama-7b-Q4_0.gguf"]
    assert not llama["usable"] and "'llama' model" in llama["reason"]
    assert not by_name["broken.gguf"]["usable"] and by_name["broken.gguf"]["facts"] is None
    hf = by_name[cached.name]
    assert hf["where"] == "Hugging Face cache"
    assert hf["origin"] == {"repo": REPO, "revision": REVISION, "path_in_repo": cached.name}
    assert hf["blob_sha256"] == hashlib.sha256(demo.target.read_bytes()).hexdigest()


def test_add_in_place_attaches_the_sidecar_beside_it_and_remove_forgets_it(
        demo: DemoModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = _link(demo.target, tmp_path / "mine" / "Qwen3.8-Q4_K_M.gguf")
    side = _link(demo.sidecar_d2t, tmp_path / "mine" / "Qwen3.8-FastMTP-32K.gguf")
    code, added = _cli(capsys, "models", "add", str(target))
    assert code == 0 and added["path"] == str(target) and added["copied_from"] == ""
    assert added["sidecar_d2t"] == str(side) and added["offered"]
    code, listed = _cli(capsys, "models")
    assert [m["path"] for m in listed if m["source"] == "local"] == [str(target)]
    code, _ = _cli(capsys, "models", "remove", str(target))
    assert code == 0 and local_models.load_registry() == [] and target.is_file()


def test_add_with_copy_copies_into_the_models_folder(demo: DemoModel, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from app.settings import app_settings

    models_dir = tmp_path / "models"
    app_settings.save(app_settings.Settings(models_dir=str(models_dir)))
    model = local_models.add(demo.target, copy=True)
    assert model.path == models_dir / "local" / demo.target.name
    assert model.path.read_bytes()[:4096] == demo.target.read_bytes()[:4096]
    assert model.copied_from == str(demo.target)
    assert not list((models_dir / "local").glob("*.partial"))


def test_a_sidecar_or_another_architecture_is_refused_in_words(demo: DemoModel, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, error = _cli(capsys, "models", "add", str(demo.sidecar_d2t))
    assert code == 1 and "sidecar" in error["message"]
    llama = _write_llama_file(tmp_path / "llama.gguf")
    code, error = _cli(capsys, "models", "add", str(llama))
    assert code == 1 and "qwen35" in error["message"]


def test_hub_hash_matches_is_its_own_state_in_verify_and_models(demo: DemoModel, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cached = _hf_cache_file(demo, tmp_path / "hf-hub")
    size = cached.stat().st_size
    sha = hashlib.sha256(cached.read_bytes()).hexdigest()
    assert origin_from_path(cached) == HubOrigin(REPO, REVISION, cached.name)
    with ReleaseServer({f"api/models/{REPO}/tree/{REVISION}": _tree(cached.name, sha, size)}) as hub:
        local_models.add(cached)
        code, check = _cli(capsys, "verify", str(cached), "--endpoint", f"http://127.0.0.1:{hub.port}")
    assert code == 0
    assert check["state"] == "hub-hash-matches" and check["label"] == "hub hash matches"
    assert check["expected_sha256"] == check["actual_sha256"] == sha
    assert "not who made it" in check["explanation"] and "signed" not in check["label"]
    code, listed = _cli(capsys, "models")
    [mine] = [m for m in listed if m["source"] == "local"]
    assert mine["verification"]["state"] == "hub-hash-matches" and mine["offered"]


def test_a_hub_hash_mismatch_is_refused_and_not_offered(demo: DemoModel, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cached = _hf_cache_file(demo, tmp_path / "hf-hub")
    wrong = hashlib.sha256(b"another file of the same size").hexdigest()
    listing = {f"api/models/{REPO}/tree/{REVISION}": _tree(cached.name, wrong, cached.stat().st_size)}
    with ReleaseServer(listing) as hub:
        local_models.add(cached)
        code, check = _cli(capsys, "verify", str(cached), "--endpoint", f"http://127.0.0.1:{hub.port}")
    assert code == 4 and check["state"] == "hub-hash-mismatch"
    [model] = local_models.load_registry()
    assert model.state == "hub-hash-mismatch" and not model.offered and "not the hub's file" in model.problem


def test_the_hub_not_listing_the_file_is_an_error_not_a_state(demo: DemoModel, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cached = _hf_cache_file(demo, tmp_path / "hf-hub")
    with ReleaseServer({f"api/models/{REPO}/tree/{REVISION}": _tree("other.gguf", "c" * 64, 5)}) as hub:
        code, error = _cli(capsys, "verify", str(cached), "--endpoint", f"http://127.0.0.1:{hub.port}")
    assert code == 4 and "does not list" in error["message"]


def test_a_changed_file_is_unverified_again(demo: DemoModel, tmp_path: Path) -> None:
    from app.release.hub_hash import verify_against_hub

    mine = tmp_path / "mine" / "model.gguf"
    mine.parent.mkdir()
    mine.write_bytes(demo.target.read_bytes())
    sha = hashlib.sha256(mine.read_bytes()).hexdigest()
    origin = HubOrigin(REPO, "main", "model.gguf")
    with ReleaseServer({f"api/models/{REPO}/tree/main": _tree("model.gguf", sha, mine.stat().st_size)}) as hub:
        local_models.add(mine, origin=origin)
        local_models.record_check(mine, verify_against_hub(mine, origin, f"http://127.0.0.1:{hub.port}"))
    assert local_models.load_registry()[0].state == "hub-hash-matches"
    with mine.open("r+b") as handle:  # same size, one byte changed in the last tensor
        handle.seek(-1, os.SEEK_END)
        handle.write(b"\x01")
    assert local_models.load_registry()[0].state == "unverified"


def test_publisher_signed_and_unverified_files(demo: DemoModel, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    key: KeyPair = keygen(tmp_path / "keys")
    installed = install_release(tmp_path / "work", key, tmp_path / "models",
                                {MODEL: demo.target, SIDECAR: demo.sidecar_d2t})
    signed = installed.folder / MODEL
    local_models.add(signed)
    code, check = _cli(capsys, "verify", str(signed), "--trust-fingerprint", key.fingerprint)
    assert code == 0 and check["state"] == "publisher-signed"
    code, release = _cli(capsys, "verify", str(installed.folder))
    assert code == 0 and release["verification"]["state"] == "publisher-signed"

    loose = _link(demo.target, tmp_path / "loose" / "model.gguf")
    local_models.add(loose)
    code, check = _cli(capsys, "verify", str(loose))
    assert code == 4 and check["state"] == "unverified" and check["label"] == "unverified local file"
    code, listed = _cli(capsys, "models")
    states = {m["path"]: m["verification"]["state"] for m in listed if m["source"] == "local"}
    assert states == {str(signed): "publisher-signed", str(loose): "unverified"}


def test_copy_never_takes_a_different_file_of_the_same_name_and_size(demo: DemoModel, tmp_path: Path) -> None:
    """The models folder already holds another file with the copy's name and size: the registered file must have
    the source's content (size and sha256), and the other file stays as it was."""
    local = tmp_path / "models" / "local"
    local.mkdir(parents=True)
    other = local / demo.target.name
    size = demo.target.stat().st_size
    with other.open("wb") as handle:  # same size, other bytes (sparse: no 272 MB written)
        handle.write(b"NOT the model")
        handle.truncate(size)
    other_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    source_sha = hashlib.sha256(demo.target.read_bytes()).hexdigest()

    model = local_models.add(demo.target, copy=True)
    assert model.path != other and model.path.parent == local
    assert model.path.stat().st_size == size
    assert hashlib.sha256(model.path.read_bytes()).hexdigest() == source_sha
    assert hashlib.sha256(other.read_bytes()).hexdigest() == other_sha  # nothing of the other file was lost
    assert [m.path for m in local_models.load_registry()] == [model.path]
    # the same file added again is recognised by its content: no third copy
    again = local_models.add(demo.target, copy=True)
    assert again.path == model.path
    assert sorted(p.name for p in local.iterdir()) == sorted([other.name, model.path.name])


def test_remove_deletes_only_a_copy_inside_the_models_folder(demo: DemoModel, tmp_path: Path) -> None:
    """``models remove --delete-copy`` trusts the registry file only as far as the models folder: an entry whose
    path was changed to point elsewhere is refused, and nothing is deleted."""
    model = local_models.add(demo.target, copy=True)
    precious = tmp_path / "precious.gguf"
    precious.write_bytes(b"mine")
    registry = local_models.registry_path()
    data = json.loads(registry.read_text())
    text = json.dumps(data).replace(json.dumps(str(model.path))[1:-1], json.dumps(str(precious))[1:-1])
    registry.write_text(text)
    with pytest.raises(local_models.LocalModelError, match="outside"):
        local_models.remove(precious, delete_copy=True)
    assert precious.read_bytes() == b"mine"
    assert model.path.is_file()
