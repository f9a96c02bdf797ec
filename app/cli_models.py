"""CLI commands for model files: ``gguf inspect``, ``sidecar build``, ``demo-model``."""

from __future__ import annotations

from typing import Any


def add_commands(sub: Any, command: Any) -> None:
    """Register the model-file commands on the top-level subparsers."""
