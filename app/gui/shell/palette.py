"""The two themes' colours for text the window draws itself (the transcript's HTML, the rail, the chat list)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Palette:
    """Colours of one theme."""

    text: str
    muted: str
    code_background: str
    code_border: str
    draft_tint: str
    user_background: str
    pygments_style: str


LIGHT = Palette("#111827", "#6b7280", "#f6f8fa", "#d0d7de", "#cdeedd", "#eef2fb", "friendly")
DARK = Palette("#e5e7eb", "#9ca3af", "#1e232b", "#3a4250", "#1f5138", "#1e2a44", "monokai")
