"""What the transcript shows, in one object: the messages, their code blocks, the markdown renderer, the palette
and whether accepted drafts are tinted.

``ChatView`` owns it and is the only one that changes it (the chat page asks the view, e.g. ``replace_entry``);
the painter (stream_render.py) is handed it and reads it at each call, so a theme change or the tint toggle reaches
the next drawing, and numbers the code blocks it draws for their ``copy-code`` links. Qt-free: the widget and the
drawing depend on it, it depends on neither (this is what keeps chat_view.py and stream_render.py out of a circle).
"""

from __future__ import annotations

from app.gui.chat.markdown import MarkdownRenderer
from app.gui.chat.messages import ChatEntry
from app.gui.shell.palette import LIGHT, Palette


class TranscriptState:
    """The conversation as drawn: ``entries`` (one ``ChatEntry`` a message), ``code_blocks`` (the drawn code
    blocks' text, by their ``copy-code`` number), ``palette`` and its ``renderer``, and ``tint`` (the "Colour
    accepted drafts" toggle)."""

    def __init__(self, palette: Palette = LIGHT, tint: bool = True) -> None:
        self.entries: list[ChatEntry] = []
        self.code_blocks: list[str] = []
        self.palette = palette
        self.renderer = MarkdownRenderer(palette)
        self.tint = tint

    def set_palette(self, palette: Palette) -> None:
        """Colours for the light or the dark theme, and a renderer that uses them."""
        self.palette = palette
        self.renderer = MarkdownRenderer(palette)

    def render(self, markdown: str) -> str:
        """Markdown as HTML, its code blocks numbered for their ``copy-code`` links."""
        return self.renderer.render(markdown, self.register_code)

    def register_code(self, code: str) -> int:
        """Keep a drawn code block's text; its number is what its ``copy-code`` link carries."""
        self.code_blocks.append(code)
        return len(self.code_blocks) - 1

    def forget_code(self) -> None:
        """Before the whole conversation is drawn again: the numbers start over."""
        self.code_blocks = []

    def replace(self, index: int, entry: ChatEntry) -> None:
        """The ``index``-th message becomes ``entry`` (a reply or a user message switched to another version)."""
        self.entries[index] = entry

    def truncate(self, count: int) -> None:
        """Keep only the first ``count`` messages."""
        self.entries = self.entries[:count]
