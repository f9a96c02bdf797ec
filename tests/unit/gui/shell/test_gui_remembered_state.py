"""The window starts where the user left it (issue 13, "Remembered state"): the last open chat, the window's
geometry, the sidebar splitter and the drafting mode (the HUD's corner and fold: test_gui_hud_placement.py).
Real windows on a real SQLite history; the state file lives in the test's config folder."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui import main as gui_main
from app.gui.main import MainWindow
from app.gui.shell import window_state
from app.gui.shell.window_state import WindowState

WAIT_MS = 5_000


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "config"
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(folder))
    return folder


def _chat(store: HistoryStore, title: str) -> int:
    conversation = store.create_conversation(title)
    store.add_message(conversation, "user", f"{title}: a question")
    store.add_message(conversation, "assistant", f"{title}: the answer", {"generated": 3, "decode_tps": 9.0})
    return conversation


def test_chat_geometry_splitter_and_drafting_mode_come_back_after_a_restart(qtbot: QtBot, tmp_path: Path,
                                                                             config: Path) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    first, second = _chat(store, "first chat"), _chat(store, "second chat")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    win.resize(1100, 640)
    win.show()
    qtbot.waitExposed(win)
    row = win.chat_page.sidebar.conversation_ids().index(first)
    win.chat_page.sidebar.list.setCurrentRow(row)  # the user opens the older chat
    assert win.chat_page.conversation_id == first
    mode_box = win.model_selector.mode_box
    mode_box.setCurrentIndex(mode_box.findData("embedded"))  # no model yet: nothing loads
    splitter = win.chat_page.chat_splitter
    splitter.setSizes([200, sum(splitter.sizes()) - 200])  # narrower than the default
    qtbot.waitUntil(lambda: win.chat_page.sidebar.width() == 200, timeout=WAIT_MS)
    win.chat_page.chat_splitter.splitterMoved.emit(200, 1)  # what dragging the handle emits
    assert window_state.load().conversation == first  # saved as it changes: a killed app keeps it
    size, sidebar = win.size(), win.chat_page.sidebar.width()
    win.close()
    store.close()

    again_store = HistoryStore(path)
    again = MainWindow(history=again_store)
    qtbot.addWidget(again)
    try:
        # until restored
        assert again.chat_page.conversation_id is None and again.model_selector.mode_box.currentData() == "auto"
        saved = window_state.load()
        again.restore_state()
        again.show()
        qtbot.waitExposed(again)
        # the offscreen screen is 800 px wide, so Qt fits a restored window into it: the height is kept
        assert again.height() == size.height() != 700  # 700: a new window's height
        again.resize(size)  # as on a screen the window fits: then the sidebar is as wide as the user left it
        again.restore_state(replace(saved, geometry=""))
        qtbot.waitUntil(lambda: again.chat_page.sidebar.width() == sidebar == 200, timeout=WAIT_MS)
        assert again.model_selector.mode_box.currentData() == "embedded"
        assert again.chat_page.conversation_id == first and again.chat_page.sidebar.current_id == first
        assert [e.text for e in again.chat_page.chat.entries] == ["first chat: a question", "first chat: the answer"]
        qtbot.mouseClick(again.chat_page.sidebar.new_button, Qt.MouseButton.LeftButton)  # a new chat is remembered too
        assert window_state.load().conversation == 0
        assert second in again.chat_page.sidebar.conversation_ids()
    finally:
        again.close()
        again_store.close()


def test_a_chat_of_another_history_file_or_a_deleted_one_is_not_opened(qtbot: QtBot, tmp_path: Path,
                                                                        config: Path) -> None:
    store = HistoryStore(tmp_path / "one.sqlite3")
    chat = _chat(store, "kept")
    window_state.save(WindowState(history=str((tmp_path / "other.sqlite3").resolve()), conversation=chat))
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    try:
        win.restore_state()
        # ids of another file are other chats
        assert win.chat_page.conversation_id is None and win.chat_page.chat.entries == []
        win.showMaximized()
        win.close()  # saves the state: maximized
        again = MainWindow(history=store)
        qtbot.addWidget(again)
        again.restore_state()
        again.show()
        assert again.isMaximized()  # the geometry's window state comes back too
        window_state.save(WindowState(history=str(store.path.resolve()), conversation=chat + 99))
        win.restore_state()
        assert win.chat_page.conversation_id is None  # deleted since: a new chat
    finally:
        win.close()
        store.close()


def test_a_damaged_state_file_gives_the_defaults(qtbot: QtBot, tmp_path: Path, config: Path) -> None:
    config.mkdir(parents=True, exist_ok=True)
    (config / window_state.FILE_NAME).write_text('{"hud_corner": 7, "hud_collapsed": "yes", "geometry": "@@"')
    assert window_state.load() == WindowState()
    (config / window_state.FILE_NAME).write_text('{"hud_corner": "middle", "conversation": true, "geometry": "@@"}')
    state = window_state.load()
    assert state.conversation == 0 and state.hud_corner == "middle"
    store = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=store)
    qtbot.addWidget(win)
    try:
        win.restore_state(state)  # an unknown corner is the default one; bad geometry bytes change nothing
        assert win.chat_page.chat.hud_corner == "top-right"
    finally:
        win.close()
        store.close()


def test_run_restores_the_state_before_the_window_shows(monkeypatch: pytest.MonkeyPatch, qapp: QApplication) -> None:
    calls: list[str] = []

    class Recorder:
        settings: Any = None

        def __getattr__(self, name: str) -> Any:
            return lambda *_args: calls.append(name)

    monkeypatch.setattr(gui_main, "MainWindow", Recorder)
    monkeypatch.setattr(QApplication, "exec", lambda _self: 0)
    assert gui_main.run([]) == 0
    assert calls == ["apply_settings", "restore_state", "show", "start"]
