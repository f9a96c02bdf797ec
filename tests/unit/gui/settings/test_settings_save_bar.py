"""Settings' Save at 700 px and the unsaved-edit marker (issue 36 item 9): Save and Cancel sit in a bar below the
scrolling fields, inside the window at 1024x700 without scrolling; "Unsaved changes" shows, and Save is enabled,
only while a field differs from what was saved; Cancel puts the saved values back."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.settings import app_settings
from app.settings.app_settings import Settings


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


def _shown_in_window(win: MainWindow, widget: QWidget) -> bool:
    central = win.centralWidget()
    assert central is not None
    place = QRect(widget.mapTo(central, widget.rect().topLeft()), widget.size())
    return widget.isVisible() and central.rect().contains(place)


def test_save_is_reachable_at_700px_and_only_enabled_for_an_unsaved_edit(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
    qtbot.addWidget(win)
    win.resize(1024, 700)
    win.show()
    qtbot.waitExposed(win)
    try:
        win.show_page("Settings")
        QApplication.processEvents()
        page = win.settings_page
        assert page.scroll_area.verticalScrollBar().maximum() > 0  # the fields scroll at 700 px ...
        assert page.scroll_area.verticalScrollBar().value() == 0
        assert _shown_in_window(win, page.save_button) and _shown_in_window(win, page.cancel_button)  # ... Save not
        assert not page.save_button.isEnabled() and page.dirty_label.isHidden()

        depth = page.draft_depth.value()
        page.draft_depth.setValue(depth + 1 if depth < page.draft_depth.maximum() else depth - 1)
        assert page.save_button.isEnabled() and page.dirty_label.isVisible()
        assert page.dirty_label.text() == "Unsaved changes"
        page.draft_depth.setValue(depth)  # typed back: nothing to save
        assert not page.save_button.isEnabled() and page.dirty_label.isHidden()

        page.models_dir.setText(str(tmp_path / "elsewhere"))
        assert page.dirty_label.isVisible()
        page.cancel_button.click()
        assert page.models_dir.text() != str(tmp_path / "elsewhere") and page.dirty_label.isHidden()

        page.threads.setValue(3)
        page.save_button.click()
        assert app_settings.load().threads == 3
        assert not page.save_button.isEnabled() and page.dirty_label.isHidden() and "Saved to" in page.note.text()

        page.machines.rpc_workers.setText("not a host")  # cannot be saved as typed: still a change to show
        assert page.save_button.isEnabled() and page.dirty_label.isVisible()
    finally:
        win.close()
        store.close()
