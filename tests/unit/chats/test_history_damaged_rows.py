"""Issue 37 item 2: a history row whose ``version_of`` is not a message id (an imported or hand-edited database) is
read as a reply with one version, said once, never a lockout: opening, regenerate and the arrows all work."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.chats.history import HistoryStore


@pytest.mark.parametrize("bad", ["abc", 1.5, b"\x00", "9" * 400])
def test_a_bad_version_of_is_one_version_and_regenerate_still_works(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "history.sqlite3"
    store = HistoryStore(path)
    chat = store.create_conversation("colours")
    store.add_message(chat, "user", "Name a colour.")
    reply = store.add_message(chat, "assistant", "Red.")
    other = store.add_message(chat, "assistant", "Blue.")
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE messages SET version_of = ? WHERE id IN (?, ?)", (bad, reply, other))
    db.commit()
    db.close()

    store = HistoryStore(path, check=True)
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Red.", "Blue."]
    assert store.version_ids(chat) == {}  # the arrows: no group drawn from a damaged row
    assert any("version group" in w for w in store.warnings)
    assert [m.content for m in store.versions(reply)] == ["Red."]
    store.show_version(reply)  # the ‹ › arrows on it
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Red.", "Blue."]
    new = store.add_version(reply)  # regenerate: the damaged row is repaired into a real group
    store.update_message(new, "Green.", complete=True)
    assert [m.content for m in store.versions(reply)] == ["Red.", "Green."]
    assert store.version_ids(chat)[reply] == (reply, new)
    assert [m.content for m in store.messages(chat)] == ["Name a colour.", "Blue.", "Green."]  # in id order
    store.close()
