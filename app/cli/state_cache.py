"""CLI for the chats' kept states (long chats reopen at once): ``state-cache list|clear``.

The engine keeps the evaluated state of each chat a person leaves, in the cache folder, under the ``state_cache_mb``
setting's cap (least recently used first out). ``list`` shows them; ``clear`` deletes them all (each chat is read
again on its next turn), as the Settings page's "Clear saved chat states" does."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, emit, group


def cmd_list(args: argparse.Namespace) -> int:
    from app.core.paths import chat_states_dir
    from app.core.units import format_bytes
    from app.engine.state_cache import entries
    from app.settings import app_settings

    folder = chat_states_dir()
    found = entries(folder)
    total = sum(int(entry["bytes"]) for entry in found)
    cap_mb = app_settings.load().state_cache_mb

    def text() -> str:
        cap = f"a cap of {format_bytes(cap_mb * 1024 * 1024)}" if cap_mb else "kept in memory only (the cap is 0)"
        lines = [f"{len(found)} saved chat state(s), {format_bytes(total)} in {folder} ({cap})."]
        lines += [_line(entry) for entry in found]
        return "\n".join(lines)

    emit(args, {"folder": str(folder), "bytes": total, "cap_bytes": cap_mb * 1024 * 1024, "entries": found}, text)
    return 0


def _line(entry: dict[str, Any]) -> str:
    from app.core.units import format_bytes

    size = format_bytes(int(entry["bytes"]))
    if entry["damaged"]:
        return f"{entry['file']}: damaged or set aside ({size}; never loaded, deleted by `clear` or the cap)"
    files = Path(str(entry["target"])).name + (f" + {Path(str(entry['draft'])).name}" if entry["draft"] else "")
    return (f"chat {entry['conversation']}: {entry['tokens']:,} tokens, {size} ({files}, {entry['mode']}, "
            f"context {entry['n_ctx']:,}; last used {entry['last_used']})")


def cmd_clear(args: argparse.Namespace) -> int:
    from app.core.paths import chat_states_dir
    from app.core.units import format_bytes
    from app.engine.state_cache import clear

    count, removed = clear(chat_states_dir())
    emit(args, {"cleared": count, "bytes": removed},
         f"Cleared {count} saved chat state(s) ({format_bytes(removed)}): each chat is read again on its next turn."
         if count else "There were no saved chat states to clear.")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``state-cache list|clear``."""
    ssub = group(sub, "state-cache", "the evaluated state each chat keeps when you leave it, so that it reopens at "
                 "once")
    command(ssub, "list", cmd_list, "the saved chat states: the chat, its tokens, size, model and last use")
    command(ssub, "clear", cmd_clear, "delete every saved chat state (each chat is read again on its next turn)")
