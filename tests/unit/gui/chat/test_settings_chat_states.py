"""The Settings page's saved chat states: the cap in the settings, the size readout, and "Clear saved chat states"
(the same as ``state-cache clear``; the page reads the folder through the Qt-free state cache, never the engine)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.core import paths
from app.engine.state_cache import StateCache, file_name
from app.gui.settings.settings_page import SettingsPage
from app.settings.app_settings import Settings
from tests.unit.engine.test_state_cache import TOKENS, _key, _snapshot


def test_the_page_shows_the_cap_and_the_size_and_clears_the_states(qtbot: QtBot, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CACHE_DIR", str(tmp_path))
    folder = paths.chat_states_dir()
    for chat in ("a", "b"):
        assert StateCache(folder, 10 * 1024 * 1024).save(chat, _key(), _snapshot(TOKENS, size=600_000)) is None
    page = SettingsPage(Settings(state_cache_mb=512))
    qtbot.addWidget(page)
    assert page.state_cache_mb.value() == 512
    assert page.chat_states_label.text().startswith("2 saved, 1.7 MiB")
    page.state_cache_mb.setValue(0)
    assert page.current().state_cache_mb == 0  # memory only, saved with the page
    page.clear_states_button.click()
    assert page.chat_states_label.text() == "none saved"
    assert "Cleared 2 saved chat state(s)" in page.note.text()
    assert not (folder / file_name("a")).exists()
    page.clear_states_button.click()
    assert page.note.text() == "There were no saved chat states to clear."
