"""CLI for what adaptive depth remembers between loads: ``depth-memory list|forget``.

The Settings page's "Forget learned depths" does what ``forget`` does."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.common import Subparsers, command, emit, group


def cmd_list(args: argparse.Namespace) -> int:
    from app.engine.depth_memory import DepthMemory
    from app.paths import depth_memory_dir

    entries = DepthMemory(depth_memory_dir()).entries()

    def text() -> str:
        if not entries:
            return "Adaptive depth remembers nothing yet: it learns while a model with adaptive depth replies."
        lines = []
        for entry in entries:
            if entry["damaged"]:
                lines.append(f"{entry['file']}: damaged (the next load of its model starts cold and rewrites it)")
                continue
            files = Path(str(entry["target"])).name + (f" + {Path(str(entry['draft'])).name}" if entry["draft"] else "")
            lines.append(f"{files}: depth {entry['depth']} ({entry['mode']}, backend {entry['backend']}, "
                         f"{entry['threads']} threads, {entry['gpu_layers']} GPU layers; saved {entry['saved_at']})")
        return "\n".join(lines)

    emit(args, {"folder": str(depth_memory_dir()), "entries": entries}, text)
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    from app.engine.depth_memory import DepthMemory
    from app.paths import depth_memory_dir

    forgotten = DepthMemory(depth_memory_dir()).forget()
    emit(args, {"forgotten": forgotten},
         f"Forgot {forgotten} record(s): the next load of each model starts adaptive depth cold.")
    return 0


def add_commands(sub: Subparsers) -> None:
    """``depth-memory list|forget``."""
    dsub = group(sub, "depth-memory", "what adaptive depth learned per model, kept between loads")
    command(dsub, "list", cmd_list, "what is remembered: the model files, the settings, the depth settled on")
    command(dsub, "forget", cmd_forget, "forget everything learned (each model's next load starts cold)")
