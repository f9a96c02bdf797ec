"""One size helper and one model-family wording on the Models page, the model picker and the CLI (first-hour
issue, item 5): "Qwen3.5-family" beside "Qwen3.8" everywhere else read as two products, and sizes came out as
16.5 GB on one page and 15.4 GiB on the next."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import re
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.core import bounded_http
from app.core.units import format_bytes
from app.gui.models import local_models_panel, models_page
from app.models.local_models import ModelFacts
from app.release import fetcher

ROOT = Path(__file__).resolve().parents[4]
SIZE_FILES = ("app/gui/models/models_page.py", "app/gui/models/model_selector.py",
              "app/gui/models/local_models_panel.py", "app/gui/models/local_choices.py", "app/cli/models.py",
              "app/models/local_models.py", "app/backend/prebuilt.py", "app/cli/backend.py")


def _facts(size: int) -> ModelFacts:
    return ModelFacts(architecture="qwen35", kind="target", quantization="Q4_K_M", size_bytes=size,
                      vocab_size=None, n_embd=None, mtp_head=True, sidecar="embedded", usable=True, reason="")


def test_every_size_is_written_by_format_bytes() -> None:
    """The page, the bounded reader and the fetcher call the one helper; none keeps a wrapper of its own."""
    assert not any(hasattr(module, name) for module, name in
                   ((models_page, "human_bytes"), (bounded_http, "human"), (fetcher, "_human")))
    assert all(module.format_bytes is format_bytes for module in (models_page, bounded_http, fetcher))
    assert format_bytes(16_500_000_000) == "15.4 GiB"
    assert format_bytes(8 << 20) == "8 MiB"  # an exact cap stays whole
    assert local_models_panel.facts_text(_facts(16_400_000_000)) == "qwen35 · Q4_K_M · 15.3 GiB · MTP head"


def test_no_decimal_size_arithmetic_is_left() -> None:
    """No inline ``/ 1e9`` ... ``GB`` or ``/ 1e6`` ... ``MB`` in the files that print sizes."""
    for name in SIZE_FILES:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert not re.search(r"/ 1e[69]", text), name


def test_the_family_is_named_as_qwen38_everywhere(qtbot: QtBot, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    panel = local_models_panel.LocalModelsPanel(history_path=tmp_path / "history.json")
    qtbot.addWidget(panel)
    assert panel.status.text().startswith("Add a Qwen3.8 (qwen35 architecture) GGUF")
    owned = [*(ROOT / "app/gui/models").glob("*.py"), ROOT / "app/models/local_models.py", ROOT / "app/cli/models.py"]
    for path in owned:
        assert "Qwen3.5-family" not in path.read_text(encoding="utf-8"), path
