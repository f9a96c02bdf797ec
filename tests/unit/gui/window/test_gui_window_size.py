"""The window fits a 1366x768 laptop screen with a title bar (issue 29 item 5): its minimum size is at most
1000x640 (it was 1023x723, forced by the Settings page, which did not scroll, and the chat's top bar), and at
960x600 every page still shows its controls, the tall ones in a scroll area that reaches them."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.main import MainWindow
from app.settings.app_settings import Settings


def _inside_window(win: MainWindow, widget: QWidget) -> bool:
    """Shown, and wholly inside the window's central area (not cut off by its edge)."""
    central = win.centralWidget()
    assert central is not None
    place = QRect(widget.mapTo(central, widget.rect().topLeft()), widget.size())
    return widget.isVisible() and central.rect().contains(place)


def _reachable(win: MainWindow, page: QWidget, widget: QWidget) -> bool:
    """Scrolled to in its page's scroll area, ``widget`` shows wholly inside the viewport and the window."""
    scroll = page if isinstance(page, QScrollArea) else page.findChild(QScrollArea)
    assert scroll is not None, f"{type(page).__name__} does not scroll"
    scroll.ensureWidgetVisible(widget, 0, 0)
    QApplication.processEvents()
    viewport = scroll.viewport()
    place = QRect(widget.mapTo(viewport, widget.rect().topLeft()), widget.size())
    return viewport.rect().contains(place) and _inside_window(win, widget)


def test_the_window_fits_a_laptop_and_every_page_reaches_its_controls(qtbot: QtBot, tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store, settings=Settings(first_run_done=True))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    try:
        hint = win.minimumSizeHint()
        assert hint.width() <= 1000 and hint.height() <= 640, hint
        win.resize(960, 600)
        qtbot.waitUntil(lambda: win.width() == 960 and win.height() == 600)

        win.show_page("Chat")
        QApplication.processEvents()
        chat = win.chat_page
        for widget in (win.model_selector.model_box, win.model_selector.mode_box, chat.thinking_box,
                       chat.chat_settings_button, chat.sidebar, chat.chat.input, chat.chat.send_button):
            assert _inside_window(win, widget), widget

        win.show_page("Settings")
        QApplication.processEvents()
        settings = win.settings_page
        assert settings.scroll_area.verticalScrollBar().maximum() > 0  # taller than 600: it scrolls
        for widget in (settings.models_dir, settings.draft_depth, settings.theme, settings.check_now_button):
            assert _reachable(win, settings, widget), widget
        assert _inside_window(win, settings.save_button)  # in the bar below the scrolling fields: always shown

        models, backend, bench = win.models_page, win.backend_page, win.bench_page
        for name, page, widgets in (
                ("Models", models, (models.local.add_button, models.local.scan_button, models.save_token_button)),
                ("Backend", backend, (backend.build_cpu_button, backend.install_button)),
                ("Benchmark", bench, (bench.run_button,))):
            win.show_page(name)
            QApplication.processEvents()
            for widget in widgets:
                assert _reachable(win, page, widget), (name, widget.text())
    finally:
        win.close()
        store.close()
