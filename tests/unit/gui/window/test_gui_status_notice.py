"""Status bar notices go away (first-hour issue): "Chat deleted", "Exported …", "Nothing to export …" are events,
shown for a while and then the lasting state ("Ready", …) is back; they stayed in the status bar for good.

A real window offscreen on a real history file.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.shell import status_label
from tests.helpers.gui_windows import open_window

WAIT_MS = 5_000


def test_a_deleted_chat_notice_times_out_and_the_state_comes_back(qtbot: QtBot, store: HistoryStore,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    doomed = store.create_conversation("delete me")
    store.add_message(doomed, "user", "hello")
    with open_window(qtbot, store) as win:
        win.chat_page.sidebar.refresh()
        win.status.setText("Ready")  # the lasting state
        assert win.chat_page.sidebar.delete(doomed, confirm=False)
        assert win.status.text() == "Chat deleted"
        timer = win.status.notice_timer
        assert timer.isActive() and timer.isSingleShot() and timer.interval() == status_label.NOTICE_MS > 0
        monkeypatch.setattr(status_label, "NOTICE_MS", 200)  # a short notice: the test waits for it to end
        win.chat_page.transfer.export_dialog("md", current=True)  # no chat open: nothing to export
        assert win.status.text().startswith("Nothing to export")
        qtbot.waitUntil(lambda: win.status.text() == "Ready", timeout=WAIT_MS)


def test_a_new_state_replaces_a_notice_at_once(qtbot: QtBot, store: HistoryStore, tmp_path: Path) -> None:
    kept = store.create_conversation("keep me")
    store.add_message(kept, "user", "hello")
    with open_window(qtbot, store) as win:
        win.chat_page.open_conversation(kept)
        assert win.chat_page.transfer.export_chats(tmp_path / "one.md", "md") == 1
        assert win.status.text() == "Exported 1 chat to one.md" and win.status.notice_timer.isActive()
        win.status.setText("Generating…")
        assert win.status.text() == "Generating…" and not win.status.notice_timer.isActive()
