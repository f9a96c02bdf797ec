"""Markdown for the transcript: HTML that Qt's rich text understands, code highlighted by pygments.

Pure Python (no Qt), so the chat view can re-render only what changed while a reply streams:

- ``split_thinking`` separates Qwen's ``<think>…</think>`` from the answer.
- ``BlockSplitter`` finds where complete markdown blocks end in a growing text (a blank line outside a
  code fence, a heading line, a closed fence), so finished blocks are rendered once and only the tail is
  rendered again per update.
- ``MarkdownRenderer.render`` turns a piece of markdown into HTML; each fenced code block gets a number
  and a ``copy-code:N`` link; drafted characters (``mark_drafts``) come out tinted.

A message never makes the window load anything: raw HTML is escaped (shown as text), and an image
comes out as a link with its alt text (``[image: alt]``), never as an ``<img>`` that Qt would read from
disk (``![x](/dev/zero)``) or ask for elsewhere.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from app.gui.shell.palette import LIGHT, Palette

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
DRAFT_ON = "\ue000"  # private-use marks around drafted characters, turned into tint spans in the HTML
DRAFT_OFF = "\ue001"
_MARKS = re.compile(f"[{DRAFT_ON}{DRAFT_OFF}]")
_WORDS = re.compile(r"[^\W\d_]\w*(?: +\w+)*")  # tintable runs: never markdown syntax, never a list number
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r" {0,3}#{1,6}(?: |$)")


def split_thinking(text: str) -> tuple[str | None, str, bool]:
    """``(thinking, answer, still_thinking)`` of a reply's text.

    A reply that starts with ``<think>`` thinks until ``</think>``; a ``</think>`` without the opening tag
    (templates that put ``<think>`` into the prompt) ends thinking too. ``thinking`` is None when there is
    none. A tag cut in half at the end of a streaming text is held back."""
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        body = stripped[len(THINK_OPEN):]
        if THINK_CLOSE in body:
            thought, answer = body.split(THINK_CLOSE, 1)
            return thought.strip(), answer.lstrip(), False
        return _hold_back(body, THINK_CLOSE).strip(), "", True
    if THINK_CLOSE in text:
        thought, answer = text.split(THINK_CLOSE, 1)
        return thought.strip(), answer.lstrip(), False
    if THINK_OPEN.startswith(stripped) and stripped:
        return None, "", False  # "<thi…": wait for the rest of the tag
    return None, text, False


def _hold_back(text: str, tag: str) -> str:
    """``text`` without a trailing, unfinished start of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return text[:-n]
    return text


class BlockSplitter:
    """Finds the end of the last complete markdown block in a text that only grows.

    ``feed(text)`` scans only the lines added since the last call and returns the offset up to which the
    text is made of complete blocks (everything after it may still change how it renders)."""

    def __init__(self) -> None:
        self._scanned = 0
        self._fence: str | None = None
        self.boundary = 0

    @property
    def in_fence(self) -> bool:
        return self._fence is not None

    def feed(self, text: str) -> int:
        while True:
            end = text.find("\n", self._scanned)
            if end < 0:
                return self.boundary
            start, self._scanned = self._scanned, end + 1
            line = _MARKS.sub("", text[start:end])
            if self._fence is not None:
                closing = line.strip()
                if closing.startswith(self._fence) and set(closing) == {self._fence[0]}:
                    self._fence = None
                    self.boundary = self._scanned
                continue
            opening = _FENCE.match(line)
            if opening:
                self._fence = opening.group(1)
                self.boundary = start
            elif not line.strip() or _HEADING.match(line):
                self.boundary = self._scanned


class DraftSpans:
    """The character ranges of a streamed text that came from accepted drafts, kept sorted."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        if self._ends and self._ends[-1] == start:
            self._ends[-1] = end  # consecutive drafted pieces make one range
        else:
            self._starts.append(start)
            self._ends.append(end)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def within(self, start: int, end: int) -> list[tuple[int, int]]:
        """The ranges that overlap ``[start, end)``, clipped to it and relative to ``start``."""
        out: list[tuple[int, int]] = []
        i = bisect.bisect_right(self._ends, start)
        while i < len(self._starts) and self._starts[i] < end:
            out.append((max(self._starts[i], start) - start, min(self._ends[i], end) - start))
            i += 1
        return out


def mark_drafts(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with drafted word runs wrapped in ``DRAFT_ON`` / ``DRAFT_OFF``.

    Only letters, digits and the spaces between words are marked, never markdown punctuation, so the
    marks cannot change how the text parses; a list number at a line's start is never marked."""
    if not spans:
        return text
    drafted = bytearray(len(text))
    for a, b in spans:
        drafted[a:b] = b"\x01" * (b - a)
    out: list[str] = []
    last = 0
    for match in _WORDS.finditer(text):
        out.append(text[last:match.start()])
        on = False
        for i in range(match.start(), match.end()):
            if drafted[i] and not on:
                out.append(DRAFT_ON)
                on = True
            elif not drafted[i] and on:
                out.append(DRAFT_OFF)
                on = False
            out.append(text[i])
        if on:
            out.append(DRAFT_OFF)
        last = match.end()
    out.append(text[last:])
    return "".join(out)


class MarkdownRenderer:
    """Markdown to Qt rich-text HTML with highlighted, copyable code blocks.

    ``register_code(code) -> int`` gives each fenced code block its number for the ``copy-code:N`` link."""

    def __init__(self, palette: Palette = LIGHT) -> None:
        self.palette = palette
        self._md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
        self._formatter = HtmlFormatter(noclasses=True, nowrap=True, style=palette.pygments_style)

        def fence(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, env: Any) -> str:
            return self._fence(tokens[idx], env)

        def image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
            token = tokens[idx]
            alt = _MARKS.sub("", renderer.renderInlineAsText(token.children or [], options, env)).strip()
            src = str(token.attrs.get("src", ""))
            label = html.escape(f"[image: {alt}]" if alt else "[image]")
            in_link = sum((t.type == "link_open") - (t.type == "link_close") for t in tokens[:idx]) > 0
            return label if in_link or not src else f'<a href="{html.escape(src)}">{label}</a>'

        self._md.add_render_rule("fence", fence)
        self._md.add_render_rule("code_block", fence)
        self._md.add_render_rule("image", image)

    def render(self, source: str, register_code: Callable[[str], int]) -> str:
        tokens = self._md.parse(source)
        for token in tokens:
            _strip_marks(token)
        out: str = self._md.renderer.render(tokens, self._md.options, {"register_code": register_code})
        tint = f'<span style="background-color:{self.palette.draft_tint}">'
        out = out.replace("%EE%80%80", "").replace("%EE%80%81", "")  # marks a link target escaped
        return out.replace(DRAFT_ON, tint).replace(DRAFT_OFF, "</span>")

    def plain(self, text: str) -> str:
        """Text shown as it is (a user's message), escaped, line breaks kept."""
        return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"

    def _fence(self, token: Token, env: Any) -> str:
        code = token.content
        language = token.info.strip().split(" ")[0] if token.info else ""
        number = env["register_code"](code)
        body = highlight(code, _lexer(language), self._formatter).rstrip("\n")
        p = self.palette
        label = html.escape(language) if language else "code"
        return (f'<table width="100%" cellspacing="0" cellpadding="8" style="background-color:{p.code_background};'
                f' border: 1px solid {p.code_border}; margin-top: 4px; margin-bottom: 4px;"><tr><td>'
                f'<p style="color:{p.muted}; font-size: small;">{label} &nbsp; '
                f'<a href="copy-code:{number}">Copy</a></p>'
                f'<pre style="font-family: monospace;">{body}</pre></td></tr></table>\n')


def _strip_marks(token: Token) -> None:
    """Draft marks stay in text only: not in code blocks, link targets or a fence's language."""
    if token.type in ("fence", "code_block"):
        token.content = _MARKS.sub("", token.content)
        token.info = _MARKS.sub("", token.info)
    if token.attrs:
        token.attrs = {k: _MARKS.sub("", v) if isinstance(v, str) else v for k, v in token.attrs.items()}
    for child in token.children or ():
        _strip_marks(child)


def _lexer(language: str) -> Any:
    if language:
        try:
            return get_lexer_by_name(language)
        except ClassNotFound:
            pass
    return TextLexer()
