"""Empty lists say so (first-hour issue): the chat list with no chats (and a search that matches none), the own
model files table with none added, and the remote servers list with none saved show a short line instead of an
empty white box; the line goes once something is listed.

Real widgets offscreen on their own history, config and data folders.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.sidebar import NO_CHATS, NO_MATCH, Sidebar
from app.gui.models.local_models_panel import NO_OWN_FILES, LocalModelsPanel
from app.gui.settings.machines import MachinesGroup
from app.machines import remote_servers
from app.models import local_models
from app.models.local_models import LocalModel, ModelFacts
from app.settings.app_settings import Settings

FACTS = ModelFacts(architecture="qwen35", kind="target", quantization="F16", size_bytes=4096, vocab_size=None,
                   n_embd=None, mtp_head=False, sidecar=None, usable=True, reason="usable")


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


def test_the_chat_list_says_when_there_are_no_chats_or_no_match(qtbot: QtBot, store: HistoryStore) -> None:
    sidebar = Sidebar(store)
    qtbot.addWidget(sidebar)
    sidebar.show()
    qtbot.waitExposed(sidebar)
    assert sidebar.empty.isVisible() and sidebar.empty.text() == NO_CHATS
    assert sidebar.empty.geometry().intersects(sidebar.list.viewport().rect())
    first = store.create_conversation("first chat")
    sidebar.refresh()
    assert sidebar.conversation_ids() == [first] and not sidebar.empty.isVisible()
    sidebar.search.setText("nothing like it")
    assert sidebar.conversation_ids() == [] and sidebar.empty.isVisible() and sidebar.empty.text() == NO_MATCH
    sidebar.search.clear()
    assert not sidebar.empty.isVisible()


def test_the_own_files_table_says_how_to_add_one(qtbot: QtBot, tmp_path: Path) -> None:
    panel = LocalModelsPanel(history_path=tmp_path / "history.json")
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.added_table.rowCount() == 0
    assert panel.added_empty.isVisible() and panel.added_empty.text() == NO_OWN_FILES
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF" + bytes(4092))
    local_models._save([LocalModel(path=mine, added="2025-01-01", facts=FACTS)])
    panel.refresh()
    assert panel.added_table.rowCount() == 1 and not panel.added_empty.isVisible()


def test_the_remote_servers_list_says_none_yet(qtbot: QtBot) -> None:
    group = MachinesGroup(Settings())
    qtbot.addWidget(group)
    group.show()
    qtbot.waitExposed(group)
    assert group.remote_names() == []
    shown = [group.remotes.item(row).text() for row in range(group.remotes.count())]
    assert shown and shown[0].startswith("none yet")
    remote_servers._save([remote_servers.RemoteServer("lab", "http://127.0.0.1:8080")])
    group.refresh_remotes()
    assert [group.remotes.item(row).text() for row in range(group.remotes.count())] == \
        ["lab  http://127.0.0.1:8080"]
