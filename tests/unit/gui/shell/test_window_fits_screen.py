"""The window never restores a size larger than the screen it opens on (issue 36 item 9): a geometry remembered
on a larger screen is shrunk and moved into the screen's available area. Real windows offscreen."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow, _base64
from app.gui.shell.window_state import WindowState, fit_rect
from app.settings.app_settings import Settings


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))


def test_fit_rect_shrinks_and_moves_into_the_screen() -> None:
    screen = QRect(0, 0, 1366, 740)  # a laptop's area below a top bar
    assert fit_rect(QRect(10, 10, 800, 600), screen) == QRect(10, 10, 800, 600)  # fits: unchanged
    assert fit_rect(QRect(200, 100, 1920, 1080), screen) == QRect(0, 0, 1366, 740)
    assert fit_rect(QRect(1000, 500, 800, 600), screen) == QRect(566, 140, 800, 600)  # moved back on screen
    assert fit_rect(QRect(0, 0, 2000, 2000), screen, 10, 30) == QRect(0, 0, 1356, 710)  # the frame's share


def test_a_geometry_from_a_larger_screen_is_clamped(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        big = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
        qtbot.addWidget(big)
        big.setGeometry(0, 0, 2600, 1800)  # as on a 4K screen
        remembered = WindowState(geometry=_base64(big.saveGeometry()))
        big.close()

        win = MainWindow(history=store, settings=Settings(first_run_done=True), remembers=False)
        qtbot.addWidget(win)
        win.restore_state(remembered)
        win.show()
        QApplication.processEvents()
        screen = win.screen().availableGeometry()
        assert screen.width() < 2600 and screen.height() < 1800  # the test screen is the smaller one
        frame = win.frameGeometry()
        least = win.minimumSize().expandedTo(win.minimumSizeHint())  # no window is squeezed below its minimum
        extra_w, extra_h = frame.width() - win.width(), frame.height() - win.height()
        assert frame.width() <= max(screen.width(), least.width() + extra_w), (frame, screen)
        assert frame.height() <= max(screen.height(), least.height() + extra_h), (frame, screen)
        assert frame.height() <= screen.height()  # the test screen is taller than the window's minimum
        assert frame.x() >= screen.x() and frame.y() >= screen.y()
        win.close()
    finally:
        store.close()


def test_clamp_to_screen_shrinks_a_window_larger_than_its_screen(qtbot: QtBot) -> None:
    from PySide6.QtWidgets import QWidget

    from app.gui.shell.window_state import clamp_to_screen

    window = QWidget()
    qtbot.addWidget(window)
    window.setGeometry(300, 200, 3000, 2000)  # what restoreGeometry gave under Xvfb for a 1024x700 screen
    window.show()
    QApplication.processEvents()
    screen = window.screen().availableGeometry()
    assert not screen.contains(window.frameGeometry())  # the bug: larger than the screen
    assert clamp_to_screen(window)
    QApplication.processEvents()
    assert screen.contains(window.frameGeometry()), (window.frameGeometry(), screen)
    assert not clamp_to_screen(window)  # fits now: left alone
