"""The chat list shows when each chat last changed (issue 36 item 9): today the time, this past week the weekday,
earlier the date; the title stays the item's text (renaming edits the title alone)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from datetime import datetime
from pathlib import Path

from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.sidebar import Sidebar, chat_date

NOW = datetime(2026, 12, 3, 15, 30).timestamp()  # a Thursday


def test_today_this_week_and_older() -> None:
    assert chat_date(datetime(2026, 12, 3, 9, 5).timestamp(), NOW) == "09:05"
    assert chat_date(datetime(2026, 12, 1, 23, 0).timestamp(), NOW) == "Tue"
    assert chat_date(datetime(2026, 11, 27, 10, 0).timestamp(), NOW) == "Fri"  # six days ago: still this week
    assert chat_date(datetime(2026, 11, 26, 10, 0).timestamp(), NOW) == "26 Nov"  # a week ago: the date
    assert chat_date(datetime(2025, 12, 2, 10, 0).timestamp(), NOW) == "2 Dec 2025"


def test_the_list_shows_each_chat_s_date_beside_its_title(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        times = {"Old": datetime(2026, 10, 2, 8, 0), "Monday": datetime(2026, 11, 30, 12, 0),
                 "Today": datetime(2026, 12, 3, 14, 7)}
        for title, when in times.items():
            cid = store.create_conversation(title)
            store._run("UPDATE conversations SET updated = ? WHERE id = ?", (when.timestamp(), cid))
        sidebar = Sidebar(store)
        qtbot.addWidget(sidebar)
        sidebar.now = lambda: NOW
        sidebar.refresh()
        titles = [sidebar.list.item(i).text() for i in range(sidebar.list.count())]
        assert titles == ["Today", "Monday", "Old"]  # the title alone is the text: a rename edits just that
        assert sidebar.dates() == ["14:07", "Mon", "2 Oct"]
        assert "Last message: Monday 30 November 2026, 12:00" in sidebar.list.item(1).toolTip()
        sidebar.resize(220, 300)
        sidebar.show()
        QApplication.processEvents()
        assert not sidebar.grab().isNull()  # the delegate paints (a broken paint raises here)
    finally:
        store.close()
