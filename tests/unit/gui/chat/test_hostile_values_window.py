"""Issue 37 item 2: the window starts, real widgets offscreen, with every state file and history row of the right
type but the wrong size that once kept it from starting; the bad values are set aside or clamped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.backend import build_estimate
from app.chats.history import HistoryStore
from app.gui.chat.chat_settings_dialog import ChatSettingsDialog
from app.models import local_models
from app.settings import app_settings
from app.settings.chat_settings import ChatSettings
from tests.helpers.gui_windows import open_window


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "DATA"):
        monkeypatch.setenv(f"FASTMTP_{name}_DIR", str(tmp_path / name.lower()))
        (tmp_path / name.lower()).mkdir()


def test_the_window_starts_over_hostile_state_files_and_rows(qtbot: QtBot, tmp_path: Path) -> None:
    app_settings.settings_path().write_text(json.dumps({"gpu_layers": 10**10, "threads": 3 * 10**9,
                                                        "p_min": 10**400}))
    local_models.registry_path().write_text(json.dumps({"models": ["x", {"path": "/m.gguf", "facts": []}]}))
    (tmp_path / "data" / build_estimate.HISTORY_FILE).write_text('[{"flavor": "cpu", "cached": false, '
                                                                  '"seconds": NaN}]')
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    chat = store.create_conversation("imported", "", {"temperature": 10**401, "top_k": 10**30, "seed": -1})
    store.add_message(chat, "user", "hi")
    reply = store.add_message(chat, "assistant", "hello")
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE messages SET version_of = 'abc' WHERE id = ?", (reply,))
    db.commit()
    db.close()

    with open_window(qtbot, HistoryStore(path)) as win:
        assert win.settings.gpu_layers == app_settings.GPU_LAYERS_MAX
        assert win.settings.threads == app_settings.THREADS_MAX
        assert win.settings_page.gpu_layers.value() == app_settings.GPU_LAYERS_MAX
        assert win.settings_page.threads.value() == app_settings.THREADS_MAX
        win.chat_page.open_conversation(chat)
        settings = ChatSettings.from_conversation("", {"temperature": 10**401, "top_k": 10**30})
        assert settings.temperature == ChatSettings().temperature and settings.top_k == ChatSettings().top_k
        dialog = ChatSettingsDialog(settings)
        qtbot.addWidget(dialog)
        assert dialog.result_settings().temperature == settings.temperature
