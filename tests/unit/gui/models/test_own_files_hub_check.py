""""Check with the hub" greyed with no reason (first-hour issue, item 6): a disabled button now says why, in words
a person can act on, and an enabled one says what it will do. The panel reads a real registry file."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from app.gui.models import local_models_panel
from app.gui.models.local_models_panel import A_ACTIONS, HUB_UNKNOWN_REPO, LocalModelsPanel
from app.models import local_models
from app.models.local_models import LocalModel, ModelFacts
from app.release.hub_hash import HubOrigin, origin_from_path

FACTS = ModelFacts(architecture="qwen35", kind="target", quantization="F16", size_bytes=4096, vocab_size=None,
                   n_embd=None, mtp_head=True, sidecar="embedded", usable=True, reason="usable")


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


def _register(*paths: Path) -> None:
    """Write the registry as ``models add`` would leave it (facts stored; the file itself only stat'ed)."""
    models = []
    for path in paths:
        if not path.name.startswith("gone"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"GGUF" + bytes(4092))
        models.append(LocalModel(path=path, added="2025-01-01", facts=FACTS, origin=origin_from_path(path)))
    local_models._save(models)


def _check_button(panel: LocalModelsPanel, row: int) -> QPushButton:
    holder = panel.added_table.cellWidget(row, A_ACTIONS)
    buttons = [b for b in holder.findChildren(QPushButton) if b.text() == "Check with the hub"]
    assert len(buttons) == 1
    return buttons[0]


def test_a_greyed_check_says_why_and_an_enabled_one_says_what(qtbot: QtBot, tmp_path: Path) -> None:
    plain = tmp_path / "Downloads" / "mine.gguf"
    cached = tmp_path / "hf" / "models--someone--Qwen3.8-GGUF" / "snapshots" / "abc" / "q.gguf"
    gone = tmp_path / "gone.gguf"
    _register(plain, cached, gone)
    panel = LocalModelsPanel(history_path=tmp_path / "history.json")
    qtbot.addWidget(panel)
    rows = {m.path: i for i, m in enumerate(panel.models)}

    unknown = _check_button(panel, rows[plain])
    assert not unknown.isEnabled()
    assert unknown.toolTip() == HUB_UNKNOWN_REPO
    assert "repository" in unknown.toolTip() and "Hugging Face cache" in unknown.toolTip()
    assert "`" not in unknown.toolTip() and "--repo" not in unknown.toolTip()  # no command-line words

    missing = _check_button(panel, rows[gone])
    assert not missing.isEnabled() and "missing" in missing.toolTip() and str(gone) in missing.toolTip()

    known = _check_button(panel, rows[cached])
    assert known.isEnabled() and "someone/Qwen3.8-GGUF" in known.toolTip()
    assert local_models_panel.hub_check_unavailable(panel.models[rows[cached]]) is None
    assert isinstance(panel.models[rows[cached]].origin, HubOrigin)
