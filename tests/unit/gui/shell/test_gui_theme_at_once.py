"""Picking a theme on the Settings page takes effect at once and is saved at once, as in most desktop apps (the
first-hour issue: it waited for Save, and leaving the page lost it). Only the theme is saved: other fields
being edited wait for Save as before.

A real window offscreen on a real history file and the test session's own settings file.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from collections.abc import Iterator

import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.shell import theme
from app.gui.shell.palette import DARK, LIGHT
from app.settings import app_settings
from app.settings.app_settings import Settings
from tests.helpers.gui_windows import open_window


def _window_lightness() -> int:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    return app.palette().color(QPalette.ColorRole.Window).lightness()


@pytest.fixture
def light() -> Iterator[None]:
    """Light before and after: the theme is the whole application's."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    theme.apply(app, "light")
    yield
    theme.apply(app, "light")


def test_picking_a_theme_applies_and_saves_it_at_once(qtbot: QtBot, store: HistoryStore, light: None) -> None:
    app_settings.save(Settings(theme="light", context_size=4096))
    with open_window(qtbot, store, settings=app_settings.load()) as win:
        page = win.settings_page
        assert _window_lightness() > 128 and win.chat_page.chat.colors is LIGHT
        page.context_size.setValue(8192)  # being edited: not saved until Save
        page.theme.setCurrentText("dark")  # no Save clicked
        assert _window_lightness() < 128  # the whole app is dark now
        assert win.chat_page.chat.colors is DARK
        saved = app_settings.load()
        assert saved.theme == "dark"  # a restart keeps it
        assert saved.context_size == 4096  # only the theme was saved
        assert "Theme saved" in page.note.text()
        page.show_settings(saved)  # leaving and coming back shows what is saved: dark stays
        assert page.theme.currentText() == "dark" and _window_lightness() < 128
        page.theme.setCurrentText("light")
        assert _window_lightness() > 128 and app_settings.load().theme == "light"
