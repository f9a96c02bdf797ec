"""``python -m app history show ID --json`` lists each reply's versions (regenerate keeps the earlier ones), kept
small: id, whether it is the one shown, its length. A history built directly, no engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from app.chats.history import HistoryStore


def _show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "history", "show", *args], capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=120)


def test_history_show_json_lists_each_replys_versions() -> None:
    store = HistoryStore()  # the test session's own data folder, which the command uses too
    chat = store.create_conversation("colours")
    store.add_message(chat, "user", "Name a colour.")
    first = store.add_message(chat, "assistant", "Red.")
    second = store.add_version(first)
    store.update_message(second, "Light blue.", complete=True)
    store.show_version(first)  # the user went back to the first
    store.add_message(chat, "user", "Another?")
    single = store.add_message(chat, "assistant", "Green.")
    store.close()

    shown = _show(str(chat), "--json")
    assert shown.returncode == 0, shown.stderr
    [conversation] = json.loads(shown.stdout)["conversations"]
    messages = conversation["messages"]
    assert [m["content"] for m in messages] == ["Name a colour.", "Red.", "Another?", "Green."]
    assert messages[1]["versions"] == [{"id": first, "shown": True, "chars": 4},
                                       {"id": second, "shown": False, "chars": 11}]
    assert messages[3]["versions"] == [{"id": single, "shown": True, "chars": 6}]
    assert "versions" not in messages[0]  # the user's messages have none
    plain = _show(str(chat))  # for people: the conversation as shown, unchanged
    assert plain.returncode == 0 and "Red." in plain.stdout and "Light blue." not in plain.stdout
