"""The chat's top bar fits a 1024-wide screen with the context meter at its widest (issue 36 item 9: with the meter
shown the window's minimum grew to 1038 px, wider than the screen it was checked on): the model box, which
elides its text, gives way first; every control of the bar stays whole inside the window."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.settings.app_settings import Settings


def _inside(win: MainWindow, widget: QWidget) -> bool:
    central = win.centralWidget()
    assert central is not None
    return widget.isVisible() and central.rect().contains(QRect(widget.mapTo(central, widget.rect().topLeft()),
                                                                widget.size()))


def test_the_top_bar_with_a_full_context_meter_fits_1024(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
    qtbot.addWidget(win)
    try:
        page = win.chat_page
        page.meter.show_stats({"context_used": 261_000, "context_size": 262_144})  # nearly full: bold, widest
        assert page.meter.warning and page.meter.text()
        win.resize(1024, 700)
        win.show()
        qtbot.waitExposed(win)
        QApplication.processEvents()
        assert win.minimumSizeHint().width() <= 1024, win.minimumSizeHint()
        assert win.width() == 1024
        selector = win.model_selector
        for widget in (selector.model_box, selector.mode_box, page.thinking_box, page.chat_settings_button,
                       page.meter, page.sidebar):
            assert _inside(win, widget), type(widget).__name__
        assert page.meter.width() >= page.meter.sizeHint().width()  # the meter's text is whole
        assert page.chat_settings_button.width() >= page.chat_settings_button.sizeHint().width()
    finally:
        win.close()
        store.close()
