"""Editing a message branches, as regenerate keeps versions (issue 36 item 9): the old message and everything that
followed it stay as its other version; switching versions shows each one's own continuation; new messages follow
the branch shown; a regenerated reply inside a branch stays in it. Real SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.chats.history import HistoryError, HistoryStore


def _shown(store: HistoryStore, chat: int) -> list[str]:
    return [m.content for m in store.messages(chat)]


def test_an_edit_keeps_the_old_message_and_what_followed_as_a_version(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        chat = store.create_conversation("ships")
        store.add_message(chat, "user", "Hello")
        store.add_message(chat, "assistant", "Hi")
        asked = store.add_message(chat, "user", "About lighthouses?")
        store.add_message(chat, "assistant", "Lighthouses guide ships.")
        store.add_message(chat, "user", "And their keepers?")
        store.add_message(chat, "assistant", "Keepers lit the lamps.")

        edited = store.edit_branch(asked, "About ships?")
        store.add_message(chat, "assistant", "Ships sail.")  # the new reply follows the edited version
        assert _shown(store, chat) == ["Hello", "Hi", "About ships?", "Ships sail."]
        assert [v.content for v in store.versions(edited)] == ["About lighthouses?", "About ships?"]
        groups = store.version_ids(chat)
        assert groups[edited] == groups[asked] == (asked, edited)

        store.show_version(asked)  # ‹: the old question, with everything that followed it
        assert _shown(store, chat) == ["Hello", "Hi", "About lighthouses?", "Lighthouses guide ships.",
                                       "And their keepers?", "Keepers lit the lamps."]
        store.add_message(chat, "user", "Thanks!")  # goes on in the branch shown
        store.show_version(edited)
        assert _shown(store, chat) == ["Hello", "Hi", "About ships?", "Ships sail."]
        store.show_version(asked)
        assert _shown(store, chat)[-1] == "Thanks!"
    finally:
        store.close()


def test_edits_nest_and_regenerate_stays_in_its_branch(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        chat = store.create_conversation("nest")
        first = store.add_message(chat, "user", "A")
        store.add_message(chat, "assistant", "a")
        second = store.add_message(chat, "user", "B")
        store.add_message(chat, "assistant", "b")
        a2 = store.edit_branch(first, "A2")
        reply = store.add_message(chat, "assistant", "a2")
        b2 = store.add_message(chat, "user", "B2")
        store.add_message(chat, "assistant", "b2")
        b3 = store.edit_branch(b2, "B3")  # an edit inside the branch of A2
        last = store.add_message(chat, "assistant", "b3")
        assert _shown(store, chat) == ["A2", "a2", "B3", "b3"]
        regenerated = store.add_version(last)  # a new version of the last reply, inside the branch of B3
        store.update_message(regenerated, "b3 again")
        assert _shown(store, chat) == ["A2", "a2", "B3", "b3 again"]
        store.show_version(first)
        assert _shown(store, chat) == ["A", "a", "B", "b"]
        store.show_version(a2)
        store.show_version(b2)
        assert _shown(store, chat) == ["A2", "a2", "B2", "b2"]
        store.show_version(b3)
        assert _shown(store, chat) == ["A2", "a2", "B3", "b3 again"]
        assert second not in (b2, b3)
        with pytest.raises(HistoryError):
            store.edit_branch(reply, "a reply is regenerated, not edited")
    finally:
        store.close()
