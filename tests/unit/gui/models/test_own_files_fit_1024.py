"""The model-files table at 1024x700 (issue 36 item 9): every row's buttons show whole, Remove included (it was off
the table's edge and "Make FastMTP si…" was cut), and two files both named ``target.gguf`` show their folders, in
the table and in the chat's model selector."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QPushButton
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.gui.models.local_models_panel import A_ACTIONS, A_FILE, distinct_names
from app.models import local_models
from app.models.local_models import LocalModel, ModelFacts
from app.settings.app_settings import Settings

FACTS = ModelFacts(architecture="qwen35", kind="target", quantization="Q4_K_M", size_bytes=16 << 30, vocab_size=None,
                   n_embd=None, mtp_head=True, sidecar="embedded", usable=True, reason="usable")


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


def _register(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / "lmstudio" / "models" / "target.gguf", tmp_path / "Downloads" / "target.gguf",
             tmp_path / "hf" / "Qwen3.8-27B-Instruct-Q4_K_M-with-a-long-name.gguf"]
    models = []
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF" + bytes(4092))
        sidecar = path.with_name(path.stem + "-FastMTP-32K-made-from-my-own-chats.gguf")
        sidecar.write_bytes(b"GGUF")
        models.append(LocalModel(path=path, added="2025-01-01", facts=FACTS, sidecar_d2t=sidecar))
    local_models._save(models)
    return paths


def test_distinct_names_show_only_as_much_folder_as_tells_them_apart() -> None:
    a, b, c = Path("/x/one/models/target.gguf"), Path("/y/two/models/target.gguf"), Path("/x/own.gguf")
    assert distinct_names([a, b, c]) == {a: "target.gguf (in one/models/)", b: "target.gguf (in two/models/)",
                                         c: "own.gguf"}
    d = Path("/z/Downloads/target.gguf")
    assert distinct_names([a, d])[d] == "target.gguf (in Downloads/)"


def test_at_1024x700_the_buttons_show_whole_and_same_names_show_their_folder(qtbot: QtBot, tmp_path: Path) -> None:
    paths = _register(tmp_path)
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
    qtbot.addWidget(win)
    win.resize(1024, 700)
    win.show()
    qtbot.waitExposed(win)
    try:
        win.show_page("Models")
        panel = win.models_page.local
        panel.refresh()
        QApplication.processEvents()
        table = panel.added_table
        shown = {table.item(row, A_FILE).text() for row in range(table.rowCount())}
        assert {"target.gguf (in models/)", "target.gguf (in Downloads/)"} <= shown
        viewport = table.viewport()
        for row in range(table.rowCount()):
            holder = table.cellWidget(row, A_ACTIONS)
            buttons = {b.text(): b for b in holder.findChildren(QPushButton)}
            assert set(buttons) == {"Check with the hub", "Make sidecar…", "Remove"}
            assert "Make FastMTP sidecar" in buttons["Make sidecar…"].toolTip()
            for button in buttons.values():
                place = QRect(button.mapTo(viewport, button.rect().topLeft()), button.size())
                assert viewport.rect().contains(place), (button.text(), place, viewport.rect())
                assert button.width() >= button.sizeHint().width(), button.text()  # the label is not cut
        assert table.horizontalScrollBar().maximum() == 0  # nothing hides past the right edge

        labels = [win.model_selector.model_box.itemText(i) for i in range(win.model_selector.model_box.count())]
        assert any(text.startswith("target.gguf (in models/)") for text in labels), labels
        assert any(text.startswith("target.gguf (in Downloads/)") for text in labels), labels
        assert paths
    finally:
        win.close()
        store.close()
