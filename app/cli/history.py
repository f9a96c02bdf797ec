"""CLI for the chat history: ``history list|show|export|import|rename|pin|unpin|delete``.

Everything the window's sidebar does to a chat (rename, pin, unpin, delete) can be done from here too."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, emit, group
from app.core.words import plural

SQLITE_INT_MAX = 2**63 - 1


def chat_id(text: str) -> int:
    """A conversation id as SQLite stores it: a whole number from 1 to 2**63-1 (a larger one would overflow SQLite's
    integer binding), else words (exit 2)."""
    stripped = text.strip()
    value = int(stripped) if stripped.isascii() and stripped.isdigit() and len(stripped) <= 19 else 0
    if not 1 <= value <= SQLITE_INT_MAX:
        raise argparse.ArgumentTypeError(f"a conversation id is a whole number from 1 to {SQLITE_INT_MAX} "
                                          f"(`history list` shows them), not {text[:40]!r}")
    return value


def _store() -> Any:
    """The history for a command. A damaged file is reported (exit 1), never replaced: the window does that."""
    from app.chats.history import HistoryStore

    return HistoryStore(check=True)


def _warn(store: Any) -> None:
    """Rows read with defaults because their saved JSON was damaged, said once each on stderr."""
    for warning in store.warnings:
        print(f"warning: {warning}", file=sys.stderr)


def _when(timestamp: float) -> str:
    try:
        return f"{datetime.fromtimestamp(timestamp):%Y-%m-%d %H:%M}"
    except (OverflowError, OSError, ValueError):
        return "????-??-?? ??:??"


def cmd_list(args: argparse.Namespace) -> int:
    store = _store()
    convs = store.conversations(args.search or "")
    emit(args, [c.__dict__ for c in convs],
         lambda: "\n".join(f"{c.id:5}  {_when(c.updated)}  {'[pinned] ' if c.pinned else ''}"
                           f"{' '.join(c.title.split())}" for c in convs) if convs else None)
    _warn(store)
    return 0


def _with_versions(store: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Each reply of ``show --json`` with its versions (regenerate keeps the earlier ones), kept small: the id,
    whether it is the one shown, its length; ``show`` of that id's text is a history row away."""
    for conversation in data["conversations"]:
        for message in conversation["messages"]:
            if message["role"] == "assistant":
                message["versions"] = [{"id": v.id, "shown": v.id == message["id"], "chars": len(v.content)}
                                       for v in store.versions(message["id"])]
    return data


def cmd_show(args: argparse.Namespace) -> int:
    store = _store()
    emit(args, _with_versions(store, store.export_json([args.id])), lambda: store.export_markdown(args.id))
    _warn(store)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = _store()
    ids = args.ids or None
    if args.format == "md":
        text = "\n\n---\n\n".join(store.export_markdown(i) for i in (ids or [c.id for c in store.conversations()]))
    else:
        text = json.dumps(store.export_json(ids), indent=2)
    if args.out:
        from app.core.errors import FastMTPError

        try:
            args.out.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise FastMTPError(f"{args.out} cannot be written ({exc.strerror or type(exc).__name__}).",
                               "Pick another --out path.") from None
        print(f"wrote {args.out}")
    else:
        print(text)
    _warn(store)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.chats.history import read_export

    data = read_export(Path(args.file))
    ids = _store().import_json(data)
    emit(args, {"imported": ids}, f"imported {plural(len(ids), 'conversation')}")
    return 0


def cmd_rename(args: argparse.Namespace) -> int:
    from app.core.errors import FastMTPError

    title = " ".join(args.title.split())
    if not title:
        raise FastMTPError("A chat's title cannot be empty.", "Give the new title in quotes: "
                           "`python -m app history rename ID \"New title\"`.")
    store = _store()
    store.rename(args.id, title)
    emit(args, {"renamed": args.id, "title": title}, f"renamed conversation {args.id} to {title!r}")
    return 0


def _pin(args: argparse.Namespace, pinned: bool) -> int:
    store = _store()
    store.set_pinned(args.id, pinned)
    word = "pinned" if pinned else "unpinned"
    emit(args, {word: args.id}, f"{word} conversation {args.id}")
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    return _pin(args, True)


def cmd_unpin(args: argparse.Namespace) -> int:
    return _pin(args, False)


def cmd_delete(args: argparse.Namespace) -> int:
    store = _store()
    store.get(args.id)
    store.delete(args.id)
    emit(args, {"deleted": args.id}, f"deleted conversation {args.id}")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``history list|show|export|import|rename|pin|unpin|delete``."""
    hsub = group(sub, "history", "the saved chats")
    ls = command(hsub, "list", cmd_list, "list conversations, newest first")
    ls.add_argument("--search", help="only those whose title or messages contain this")
    sh = command(hsub, "show", cmd_show, "print one conversation")
    sh.add_argument("id", type=chat_id)
    ex = command(hsub, "export", cmd_export, "export conversations to Markdown or JSON")
    ex.add_argument("ids", type=chat_id, nargs="*", help="conversation ids (default: all)")
    ex.add_argument("--format", choices=["md", "json"], default="json")
    ex.add_argument("--out", type=Path)
    im = command(hsub, "import", cmd_import, "import a JSON export (as new conversations)")
    im.add_argument("file", type=Path)
    rn = command(hsub, "rename", cmd_rename, "give a conversation a new title")
    rn.add_argument("id", type=chat_id)
    rn.add_argument("title")
    pn = command(hsub, "pin", cmd_pin, "keep a conversation at the top of the list")
    pn.add_argument("id", type=chat_id)
    up = command(hsub, "unpin", cmd_unpin, "let a pinned conversation take its place by date again")
    up.add_argument("id", type=chat_id)
    de = command(hsub, "delete", cmd_delete, "delete a conversation")
    de.add_argument("id", type=chat_id)
