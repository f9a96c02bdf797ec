"""CLI for what adaptive depth and Auto drafting remember between loads: ``depth-memory list|forget``.

Auto drafting's records (which drafting mode won for a model on this backend and machine, or how far its measuring
is) live in the same folder and are listed and forgotten with adaptive depth's. A stale record (too old, made under
another load or by another backend build) is listed with why; the next load measures again. The Settings page's "Forget
learned depths" forgets adaptive depth's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.common import Subparsers, command, emit, group


def cmd_list(args: argparse.Namespace) -> int:
    from app.core.paths import depth_memory_dir
    from app.engine.auto_mode import AutoMemory
    from app.engine.depth_memory import DepthMemory

    entries = DepthMemory(depth_memory_dir()).entries()
    auto = AutoMemory(depth_memory_dir()).entries()

    def text() -> str:
        lines = [_auto_line(entry) for entry in auto]
        if not entries:
            return "\n".join([*lines, "Adaptive depth remembers nothing yet: it learns while a model with adaptive "
                                      "depth replies."])
        for entry in entries:
            if entry["damaged"]:
                lines.append(f"{entry['file']}: damaged (the next load of its model starts cold and rewrites it)")
                continue
            files = Path(str(entry["target"])).name + (f" + {Path(str(entry['draft'])).name}" if entry["draft"] else "")
            lines.append(f"{files}: depth {entry['depth']} ({entry['mode']}, backend {entry['backend']}, "
                         f"{entry['threads']} threads, {entry['gpu_layers']} GPU layers; saved {entry['saved_at']})"
                         + _stale(entry))
        return "\n".join(lines)

    emit(args, {"folder": str(depth_memory_dir()), "entries": entries, "auto": auto}, text)
    return 0


def _auto_line(entry: dict[str, Any]) -> str:
    if entry["damaged"]:
        return f"{entry['file']}: damaged Auto record (the next load of its model in Auto measures again)"
    files = Path(str(entry["target"])).name + (f" + {Path(str(entry['d2t'])).name}" if entry["d2t"] else "")
    return (f"{files}: {entry['status']} (backend {entry['backend']}, {entry['threads'] or 'default'} threads, "
            f"{entry['gpu_layers']} GPU layers; saved {entry['saved_at']})" + _stale(entry))


def _stale(entry: dict[str, Any]) -> str:
    """A record that will not be used as it is: why, and that the next load measures again."""
    return f"; stale: {entry['stale']}, measured again at the next load" if entry.get("stale") else ""


def cmd_forget(args: argparse.Namespace) -> int:
    from app.core.paths import depth_memory_dir
    from app.engine.auto_mode import AutoMemory
    from app.engine.depth_memory import DepthMemory

    forgotten = DepthMemory(depth_memory_dir()).forget()
    auto = AutoMemory(depth_memory_dir()).forget()
    emit(args, {"forgotten": forgotten, "auto_forgotten": auto},
         f"Forgot {forgotten} record(s): the next load of each model starts adaptive depth cold. Forgot {auto} Auto "
         "drafting record(s): Auto measures each model's modes again.")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``depth-memory list|forget``."""
    dsub = group(sub, "depth-memory", "what adaptive depth learned and Auto drafting measured per model, kept "
                 "between loads")
    command(dsub, "list", cmd_list, "what is remembered: the model files, the settings, the depth settled on, and "
            "Auto drafting's winner (or how far it measured)")
    command(dsub, "forget", cmd_forget, "forget everything learned (each model's next load starts cold, Auto "
            "measures again)")
