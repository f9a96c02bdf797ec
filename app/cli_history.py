"""CLI for the chat history: ``history list|show|export|import|delete``."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from app.cli import print_json


def _store() -> Any:
    from app.history import HistoryStore

    return HistoryStore()


def cmd_list(args: argparse.Namespace) -> int:
    store = _store()
    convs = store.conversations(args.search or "")
    if args.json:
        print_json([c.__dict__ for c in convs])
    for c in [] if args.json else convs:
        print(f"{c.id:5}  {datetime.fromtimestamp(c.updated):%Y-%m-%d %H:%M}  {c.title}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    store = _store()
    if args.json:
        print_json(store.export_json([args.id]))
    else:
        print(store.export_markdown(args.id))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store = _store()
    ids = args.ids or None
    if args.format == "md":
        text = "\n\n---\n\n".join(store.export_markdown(i) for i in (ids or [c.id for c in store.conversations()]))
    else:
        text = json.dumps(store.export_json(ids), indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from app.history import HistoryError

    try:
        data = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{args.file} is not readable JSON ({exc}).") from exc
    ids = _store().import_json(data)
    if args.json:
        print_json({"imported": ids})
    else:
        print(f"imported {len(ids)} conversation(s)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    store = _store()
    store.get(args.id)
    store.delete(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        print(f"deleted conversation {args.id}")
    return 0


def add_commands(sub: Any, command: Any) -> None:
    history = sub.add_parser("history", help="the saved chats")
    hsub = history.add_subparsers(dest="history_command", required=True)
    ls = command(hsub, "list", cmd_list, "list conversations, newest first")
    ls.add_argument("--search", help="only those whose title or messages contain this")
    sh = command(hsub, "show", cmd_show, "print one conversation")
    sh.add_argument("id", type=int)
    ex = command(hsub, "export", cmd_export, "export conversations to Markdown or JSON")
    ex.add_argument("ids", type=int, nargs="*", help="conversation ids (default: all)")
    ex.add_argument("--format", choices=["md", "json"], default="json")
    ex.add_argument("--out", type=Path)
    im = command(hsub, "import", cmd_import, "import a JSON export (as new conversations)")
    im.add_argument("file", type=Path)
    de = command(hsub, "delete", cmd_delete, "delete a conversation")
    de.add_argument("id", type=int)
