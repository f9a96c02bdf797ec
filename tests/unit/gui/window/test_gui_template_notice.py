"""Issue 37 item 5: the window says once, in its status line, that the model's chat template was set aside for
ChatML (the engine's ``state_notices``, or a remote server's template rendered in the window's process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.engine.chat_template import Message, render, take_notices
from tests.helpers.gui_windows import open_window


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "DATA"):
        monkeypatch.setenv(f"FASTMTP_{name}_DIR", str(tmp_path / name.lower()))
        (tmp_path / name.lower()).mkdir()


def test_a_set_aside_template_is_said_in_the_status_line(qtbot: QtBot, tmp_path: Path) -> None:
    take_notices()
    with open_window(qtbot, HistoryStore(tmp_path / "history.sqlite3")) as win:
        said: list[str] = []
        win.chat_page.notice.connect(said.append)
        engine = "The model's chat template could not be used (it ran for more than 5 s); its prompts are ..."
        win.chat_page.stream.on_done({"kind": "done", "text": "", "stop_reason": "eos", "stats": {},
                             "state_notices": [engine]})
        assert said == [engine] and win.status.text() == engine
        render("{{ 'x' * 4000000000 }}{# window #}", [Message("user", "hi")])  # a remote server's, rendered here
        win.chat_page.stream.on_done({"kind": "done", "text": "", "stop_reason": "eos", "stats": {}})
        assert len(said) == 2 and said[1].startswith("The model's chat template could not be used (it builds")
        win.chat_page.stream.on_done({"kind": "done", "text": "", "stop_reason": "eos", "stats": {}})
        assert len(said) == 2  # once
