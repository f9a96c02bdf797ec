"""Issue 37 item 2: local-models.json of the right JSON but the wrong shape never breaks the window or `models`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.models import local_models

FACTS = {"architecture": "qwen35", "kind": "target", "quantization": "Q4_K_M", "size_bytes": 10, "vocab_size": 5,
         "n_embd": 8, "mtp_head": True, "sidecar": "embedded", "usable": True, "reason": "Usable."}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "config").mkdir()


def write(body: object) -> None:
    local_models.registry_path().write_text(json.dumps(body))


@pytest.mark.parametrize("body", [
    {"models": ["x"]}, {"models": [{"path": "/m.gguf", "facts": []}]}, {"models": "x"}, {"models": {"a": 1}},
    {"models": [{"path": "/m.gguf", "facts": {**FACTS, "usable": "yes"}}]},
    {"models": [{"path": "/m.gguf", "facts": {**FACTS, "size_bytes": True}}]},
    {"models": [{"path": 7, "facts": FACTS}]}, {"models": [None, 1, [], {"path": "/m.gguf"}]}, ["x"]])
def test_a_damaged_entry_is_skipped_never_a_crash(body: object, capsys: pytest.CaptureFixture[str]) -> None:
    write(body)
    assert local_models.load_registry() == []
    assert main(["models", "--json"]) == 0  # `models` lists what it can, the damaged entry left out
    assert "Traceback" not in capsys.readouterr().err


def test_the_good_entries_beside_a_damaged_one_are_kept(tmp_path: Path) -> None:
    write({"models": ["x", {"path": str(tmp_path / "m.gguf"), "facts": []},
                      {"path": str(tmp_path / "m.gguf"), "facts": FACTS}]})
    models = local_models.load_registry()
    assert [m.path for m in models] == [tmp_path / "m.gguf"] and models[0].facts.usable
