"""The chat's context widgets and settings (issue 34), Qt offscreen and no engine: the meter's words and warning,
Continue shown only under a cut reply, the trim note, the Settings page's default overflow policy reaching new
chats, the chat settings dialog's reply cap ("Until the model stops"), thinking budget and policy, and a chat saved
with the old 1,024-token cap reading as no cap."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from dataclasses import replace
from pathlib import Path

from pytestqt.qtbot import QtBot

from app.chats.history import HistoryStore
from app.gui.chat.chat_settings_dialog import ChatSettingsDialog
from app.gui.chat.context_strip import ContextMeter, CutNotice, TrimNote, reading_label
from app.gui.main import MainWindow
from app.gui.settings.settings_page import SettingsPage
from app.settings import app_settings
from app.settings.app_settings import Settings
from app.settings.chat_settings import ChatSettings


def test_the_meter_reads_tokens_of_the_context_and_warns_near_the_end(qtbot: QtBot) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    assert meter.text() == ""  # no context size: a remote server does not say
    meter.show_stats({"context_used": 3120, "context_size": 32768})
    assert meter.text() == "3.1k / 32k tokens" and not meter.warning
    meter.show_stats({"context_used": 29_800, "context_size": 32768})
    assert meter.text() == "30k / 32k tokens" and meter.warning and "#b45309" in meter.styleSheet()
    meter.show_stats({"context_used": 0, "context_size": 512})
    assert meter.text() == "0 / 512 tokens" and not meter.warning and meter.styleSheet() == ""


def test_continue_is_offered_only_under_a_cut_reply(qtbot: QtBot) -> None:
    notice = CutNotice()
    qtbot.addWidget(notice)
    notice.show_for("length", 1024)
    assert not notice.isHidden() and "reply cap (1,024 tokens" in notice.text.text()
    notice.show_for("context_full", 0)
    assert not notice.isHidden() and "full context" in notice.text.text()
    for finished in ("eos", "stop", "cancelled", None):
        notice.show_for(finished, 1024)
        assert notice.isHidden()


def test_the_trim_note_says_how_many_turns_were_left_out_and_what_was_read_again(qtbot: QtBot) -> None:
    note = TrimNote()
    qtbot.addWidget(note)
    note.show_for({"trimmed_turns": 0})
    assert note.isHidden()
    note.show_for({"trimmed_turns": 3, "prompt_tokens": 3120, "reused_tokens": 0})
    assert not note.isHidden() and "3 oldest turns" in note.text.text() and "3,120 tokens again" in note.text.text()
    note.show_for({"trimmed_turns": 1, "prompt_tokens": 20, "reused_tokens": 900})  # the same start kept
    assert "The oldest turn of this chat is no longer" in note.text.text() and "again" not in note.text.text()
    assert reading_label(3120, True) == "Re-reading 3,120 tokens"
    assert reading_label(5000, False) == "Reading your message (5,000 tokens)"


def test_the_chat_settings_dialog_round_trips_the_cap_the_budget_and_the_policy(qtbot: QtBot) -> None:
    chat = ChatSettings()
    assert chat.max_tokens == 0 and chat.overflow == "trim" and chat.thinking_budget == 0  # the defaults
    dialog = ChatSettingsDialog(chat)
    qtbot.addWidget(dialog)
    assert dialog.max_tokens.text() == "Until the model stops" and dialog.thinking_budget.text() == "No budget"
    assert dialog.result_settings() == chat
    dialog.max_tokens.setValue(2048)
    dialog.thinking_budget.setValue(512)
    dialog.overflow.setCurrentIndex(dialog.overflow.findData("stop"))
    changed = dialog.result_settings()
    assert (changed.max_tokens, changed.thinking_budget, changed.overflow) == (2048, 512, "stop")
    options = changed.options()
    assert (options.max_tokens, options.thinking_budget, options.overflow) == (2048, 512, "stop")


def test_saved_chats_read_the_old_cap_as_none_and_refuse_bad_values() -> None:
    old = ChatSettings.from_conversation("Hi", {"max_tokens": 1024, "temperature": 0.7})
    assert old.max_tokens == 0  # the cap every chat had before: not a choice
    chosen = ChatSettings.from_conversation("Hi", {"max_tokens": 1024, "overflow": "stop"})
    assert chosen.max_tokens == 1024 and chosen.overflow == "stop"  # saved after issue 34: the user's own
    bad = ChatSettings.from_conversation("Hi", {"max_tokens": -5, "overflow": "sideways",
                                                "thinking_budget": 10**400})
    assert (bad.max_tokens, bad.overflow, bad.thinking_budget) == (0, "trim", 0)
    assert ChatSettings.from_conversation("Hi", replace(ChatSettings(), thinking_budget=300).to_dict()) \
        .thinking_budget == 300


def test_the_settings_default_policy_is_saved_and_new_chats_take_it(qtbot: QtBot, tmp_path: Path) -> None:
    page = SettingsPage(Settings())
    qtbot.addWidget(page)
    assert page.overflow.currentData() == "trim" and page.current().overflow_policy == "trim"
    page.overflow.setCurrentIndex(page.overflow.findData("stop"))
    assert page.current().overflow_policy == "stop"
    path = tmp_path / "settings.json"
    app_settings.save(page.current(), path)
    assert app_settings.load(path).overflow_policy == "stop"
    path.write_text('{"overflow_policy": "sideways"}', encoding="utf-8")
    assert app_settings.load(path).overflow_policy == "trim"

    history = HistoryStore(tmp_path / "history.sqlite3")
    win = MainWindow(history=history, settings=Settings(overflow_policy="stop"))
    qtbot.addWidget(win)
    try:
        assert win.chat_page.chat_settings.overflow == "stop"
        win.chat_page.set_chat_settings(replace(win.chat_page.chat_settings, overflow="trim"))  # this chat's own
        win.apply_settings(Settings(overflow_policy="stop"))
        win.chat_page.new_chat()
        assert win.chat_page.chat_settings.overflow == "stop"  # a new chat starts from the default again
    finally:
        win.close()
        history.close()
