"""Drawing the transcript: finished messages as HTML with their accepted drafts tinted, and the streaming reply
frame by frame.

Streaming is frame-paced: token events only queue (``FramePacer.queue``, a batch at a time from the engine
bridge), and a frame tick (at most one every ``RENDER_INTERVAL_MS``, about 30 a second, whatever the token
rate) feeds the queued pieces to the reply, draws them and updates the HUD once. Streaming cost stays flat with
the reply's length: finished markdown blocks are rendered once, and each frame renders only the unfinished
tail. Inside an open code fence new text is appended as it is; the block is highlighted once when its fence
closes. Links in the drawn messages carry the chat view's actions: ``copy-code:N``, ``copy:I``, ``edit:I``,
``regenerate:I``, ``think:I``, and ``older:I`` / ``newer:I`` (a regenerated reply's ‹ 2/3 › arrows).
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QFont,
    QFontMetrics,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QTextBrowser

from app.gui.chat.markdown import (
    THINK_CLOSE,
    THINK_OPEN,
    BlockSplitter,
    DraftSpans,
    _hold_back,
    mark_drafts,
    split_thinking,
)
from app.gui.chat.messages import ChatEntry
from app.gui.chat.transcript_state import TranscriptState
from app.gui.shell.palette import LIGHT, Palette

if TYPE_CHECKING:
    from app.gui.chat.hud import Hud

# a frame: streamed text is drawn at most this often, tokens in between queue: 20 frames a second read as smooth
# streaming, and each frame lays out and paints the reply's tail (issue 36 item 2: a slow model's tokens, ~40 ms
# apart, were a frame each at 33 ms, two at 50)
RENDER_INTERVAL_MS = 50
# the HUD's numbers change at most this often while a reply streams (its first frame at once, the newest at the
# end): the HUD floats over the transcript, so each change repaints the text under it too, and a figure that
# changes 30 times a second cannot be read anyway (issue 36 item 2: the GUI's CPU per token on 2 cores)
HUD_INTERVAL_MS = 200
FOLLOW_SLACK_PX = 6  # this close to the bottom counts as at the bottom: the view follows the reply
MAX_LINE_CHARS = 86  # about the longest line of ordinary text (prose runs ~5% over); wider windows centre it
_MEASURE_SAMPLE = "The quick brown fox jumps over the lazy dog, then drafts three tokens ahead. "


class Transcript(QTextBrowser):
    """The transcript's browser: it loads no resource at all, whatever a message names.

    Qt reads an ``<img>``'s file from disk (``/dev/zero`` until memory runs out) unless ``loadResource``
    answers first; an empty answer (never ``None``, after which QTextDocument opens the file itself) leaves
    nothing to read, locally or over the network. The renderer shows images as links anyway.

    ``resized`` tells the chat view to fit the text's measure to the new width (of the browser or its viewport)."""

    resized = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setOpenLinks(False)  # the chat view acts on its links
        self.document().setDocumentMargin(14)
        self.document().setUndoRedoEnabled(False)  # a growing undo stack would slow every edit

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        return QByteArray()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.resized.emit()

    def viewportEvent(self, event: QEvent) -> bool:
        """The viewport also narrows when the scroll bar appears (the browser keeps its size): measure again."""
        handled = super().viewportEvent(event)
        if event.type() == QEvent.Type.Resize:
            self.resized.emit()
        return handled


def readable_width(metrics: QFontMetrics, chars: int = MAX_LINE_CHARS) -> int:
    """The width of ``chars`` characters of ordinary English text (spaces included) in this font."""
    return round(metrics.horizontalAdvance(_MEASURE_SAMPLE) * chars / len(_MEASURE_SAMPLE))


def fit_column(transcript: QTextBrowser, measure: float, hud: QSize, corner: str, folded: bool) -> None:
    """Set the document's side margins (top and bottom its own): lines at most ``measure`` wide and centred, but
    never under the HUD (``hud`` its size, in ``corner``), which stands in the margin: scrolling never brings
    text under it, and a narrow window gets a narrower column beside the HUD rather than text hidden behind it.
    The HUD ``folded`` to its one-line pill is too wide for a side margin: the viewport gives up a strip as
    tall as the pill at its top or bottom for it instead, which no text scrolls into.

    The HUD's carrier sits 6 px in from the transcript's side, on the right also clear of the scroll bar's width
    (shown or not); the text keeps 4 px of air from it."""
    strip = hud.height() + 12 if folded else 0
    top = corner.startswith("top")
    transcript.setViewportMargins(0, strip if top else 0, 0, 0 if top else strip)
    hud_width, hud_left = (0 if folded else hud.width()), corner.endswith("left")
    base = transcript.document().documentMargin()  # a root frame's side margin replaces it: at least that much
    viewport = transcript.viewport().geometry()  # in the transcript's coordinates, like the HUD's carrier
    width = viewport.width()
    side = max(base, (width - measure) / 2)
    reach = hud_width + 6 + 4
    if hud_left:
        needed = reach - viewport.x()
    else:
        right_edge = transcript.width() - transcript.verticalScrollBar().sizeHint().width()
        needed = reach - (right_edge - viewport.x() - width)
    if needed <= side:
        left = right = side
    else:  # the column moves over, as wide as still fits
        other = max(base, width - measure - needed)
        left, right = (needed, other) if hud_left else (other, needed)
    set_root_margins(transcript.document(), (left, right, base, base))


def set_root_margins(document: QTextDocument, wanted: tuple[float, float, float, float]) -> None:
    """The document's (left, right, top, bottom) margins, set only when one changed by a pixel or more: every
    change lays the whole document out again."""
    root = document.rootFrame()
    fmt = root.frameFormat()
    if any(abs(now - new) >= 1 for now, new in zip((fmt.leftMargin(), fmt.rightMargin(), fmt.topMargin(),
                                                       fmt.bottomMargin()), wanted, strict=True)):
        fmt.setLeftMargin(wanted[0])
        fmt.setRightMargin(wanted[1])
        fmt.setTopMargin(wanted[2])
        fmt.setBottomMargin(wanted[3])
        root.setFrameFormat(fmt)


class Follower:
    """The transcript follows a streaming reply while the user is at its bottom (within ``FOLLOW_SLACK_PX``);
    once they scroll up it keeps their position and ``away(True)`` lets the view offer "Jump to latest ↓".
    ``to_latest``, or scrolling back down by hand, calls ``away(False)`` and following resumes."""

    def __init__(self, transcript: QTextBrowser, away: Callable[[bool], None]) -> None:
        self.transcript = transcript
        self.away = away
        self.following = True  # the user is at the bottom: new text keeps the view there
        self._moving = 0  # > 0 while the view itself edits the document or scrolls (not the user)
        bar = transcript.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.rangeChanged.connect(self._range_changed)

    def to_latest(self) -> None:
        """To the bottom, following again ("Jump to latest ↓", a sent message, a redraw)."""
        self.following = True
        self._to_bottom()
        self.away(False)

    @contextmanager
    def moved_by_the_view(self) -> Iterator[None]:
        """Scrolling inside this block is the view's own, not the user's."""
        self._moving += 1
        try:
            yield
        finally:
            self._moving -= 1

    @contextmanager
    def keeping_place(self) -> Iterator[None]:
        """Around the view's own document edits: one edit block, so the document is laid out once when it ends
        (a frame replaces the streamed tail: laid out between its removal and its new text, the document would
        shrink, drop the scroll bar, re-wrap everything at the wider width, and grow back), and afterwards at the
        bottom when following, else where the user left it."""
        bar = self.transcript.verticalScrollBar()
        value = bar.value()
        self._moving += 1
        edit = QTextCursor(self.transcript.document())
        edit.beginEditBlock()
        try:
            yield
        finally:
            edit.endEditBlock()
            bar.setValue(bar.maximum() if self.following else value)
            self._moving -= 1

    def _to_bottom(self) -> None:
        bar = self.transcript.verticalScrollBar()
        with self.moved_by_the_view():
            bar.setValue(bar.maximum())

    def _scrolled(self, value: int) -> None:
        """The scroll bar moved: by the user unless the view is moving it. Up stops following, down to
        the bottom resumes it."""
        if self._moving:
            return
        self.following = value >= self.transcript.verticalScrollBar().maximum() - FOLLOW_SLACK_PX
        self.away(not self.following)

    def _range_changed(self, _minimum: int, _maximum: int) -> None:
        """The document's height changed (new text, possibly laid out after the edit, or a resize): the
        view stays at the bottom while following, and the user's position is left alone otherwise."""
        if self.following and not self._moving:
            self._to_bottom()


class FramePacer:
    """Token events wait here for the next frame, at most one every ``RENDER_INTERVAL_MS``: drawing per token
    would cost more the faster the model is."""

    def __init__(self, parent: QObject, draw: Callable[[], None]) -> None:
        self.timer = QTimer(parent)  # the next frame, while a streamed reply has queued tokens
        self.timer.setSingleShot(True)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(draw)
        self.queued: list[tuple[str, str]] = []  # (piece, provenance) streamed since the last frame
        self.stats: dict[str, Any] | None = None  # the newest token's stats, for the HUD's next frame
        self.last_frame = 0.0  # time.monotonic() of the last frame drawn

    def queue(self, entry: ChatEntry, events: Iterable[dict[str, Any]]) -> None:
        """Streamed ``token`` events: their text joins ``entry`` at once (what is saved) and queues for the next
        frame, one frame after the last (at once if that was long ago)."""
        stats = None
        for event in events:
            piece = str(event.get("piece", ""))
            if not entry.pieces:
                piece = piece.lstrip()
            provenance = str(event.get("provenance", "target"))
            entry.pieces.append((piece, provenance))
            self.queued.append((piece, provenance))
            stats = event.get("stats") or stats
        if stats is not None:
            self.stats = stats
        if not self.timer.isActive():
            since = (time.monotonic() - self.last_frame) * 1000
            self.timer.start(max(0, round(RENDER_INTERVAL_MS - since)))

    def take(self) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
        """What this frame draws: the queued pieces and the newest stats, the queue emptied."""
        queued, self.queued = self.queued, []
        stats, self.stats = self.stats, None
        return queued, stats

    def drop(self) -> None:
        """Forget what is queued (the reply is drawn whole, or gone)."""
        self.timer.stop()
        self.queued = []
        self.stats = None


class Painter:
    """The transcript's document edits: whole messages as HTML, and the cursor work the streaming regions need.
    It reads the transcript's state (its messages, colours, markdown renderer and tint toggle) at each call, so a
    theme change reaches the next drawing; it writes only the state's code-block numbers."""

    def __init__(self, state: TranscriptState, browser: QTextBrowser, measure: Callable[[], None]) -> None:
        self.state = state
        self.browser = browser
        self.measure = measure  # fits the document's margins to the width and the HUD
        self.starts: dict[int, int] = {}  # entry index → where its drawing begins in the document (``cut``)

    def prepare(self) -> None:
        """Before the first text of an empty document: its style, and margins that keep the text clear of the
        HUD (the first message starts below it with the HUD at the top, the newest text ends above it with the
        HUD at the bottom)."""
        document = self.browser.document()
        if not document.isEmpty():
            return
        document.setDefaultStyleSheet(f"a {{ color: {self.colors.muted}; }} p {{ margin-top: 2px; }}")
        self.measure()

    def draw_all(self, streaming: ChatEntry | None, stream: ReplyStream | None) -> None:
        """The whole conversation again, ``stream`` (the reply still streaming) last."""
        self.browser.clear()
        self.state.forget_code()
        self.starts = {}
        for index, entry in enumerate(self.state.entries):
            if entry is not streaming:
                self.insert_entry(index)
        if stream is not None:
            self.prepare()
            stream.begin()

    def insert_entry(self, index: int, cursor: QTextCursor | None = None) -> None:
        """The conversation's ``index``-th message, finished, at ``cursor`` (the document's end by default)."""
        self.prepare()
        cursor = cursor or self.end_cursor()
        self.starts[index] = cursor.position()
        cursor.insertHtml(self.entry_html(self.state.entries[index], index))
        new_block(cursor)

    def cut(self, count: int) -> bool:
        """Remove the drawing of the messages from the ``count``-th on, leaving the rest as drawn (a full redraw
        would lose the reader's place); False when that cannot be done: where they begin is not known, or the
        new last message is a reply whose header must gain its "regenerate" link (``draw_all`` then)."""
        entries = self.state.entries
        if count not in self.starts or (count > 0 and entries[count - 1].role != "user"):
            return False
        self.clear_from(self.starts[count])
        self.starts = {index: at for index, at in self.starts.items() if index < count}
        return True

    @property
    def colors(self) -> Palette:
        return self.state.palette

    @property
    def tinting(self) -> bool:
        """Whether accepted drafts are tinted ("Colour accepted drafts")."""
        return self.state.tint

    def render(self, markdown: str) -> str:
        """Markdown as HTML, its code blocks numbered for their ``copy-code`` links."""
        return self.state.render(markdown)

    def entry_html(self, entry: ChatEntry, index: int) -> str:
        colors = self.colors
        parts = [self.header_html(entry, index)]
        if entry.role == "user":
            parts.append(f'<div style="background-color:{colors.user_background}">'
                         f'{self.state.renderer.plain(entry.text)}</div>')
        else:
            text = entry.text
            if self.tinting:
                spans = entry.draft_spans()
                text = mark_drafts(text, spans.within(0, len(text))) if spans else text
            thinking, answer, _ = split_thinking(text)
            if thinking is not None:
                words = len(thinking.split())
                arrow = "▾" if entry.thinking_open else "▸"
                parts.append(f'<p style="color:{colors.muted}"><a href="think:{index}">{arrow} Thinking '
                             f'({words} words)</a></p>')
                if entry.thinking_open:
                    parts.append(f'<div style="color:{colors.muted}">{self.render(thinking)}</div>')
            parts.append(self.render(answer))
        if entry.footer:
            parts.append(f'<p style="color:{colors.muted}; font-size: small;">{html.escape(entry.footer)}</p>')
        return "".join(parts)

    def header_html(self, entry: ChatEntry, index: int, streaming: bool = False) -> str:
        return f'<p style="margin-top: 10px">{self._header_line(entry, index, streaming)}</p>'

    def refresh_header(self, index: int) -> None:
        """Draw the ``index``-th message's header line again where it is (a reply that is no longer the last loses
        its "regenerate" link), moving the later messages' starts by the change in length."""
        start = self.starts.get(index)
        if start is None or index >= len(self.state.entries):
            return
        cursor = QTextCursor(self.browser.document())
        cursor.setPosition(start)
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        before = cursor.selectionEnd() - cursor.selectionStart()
        cursor.insertHtml(self._header_line(self.state.entries[index], index, False))
        shift = (cursor.position() - start) - before
        self.starts = {i: at + shift if i > index else at for i, at in self.starts.items()}

    def _header_line(self, entry: ChatEntry, index: int, streaming: bool) -> str:
        user = entry.role == "user"
        colour = "#1f3a8a" if user else "#065f46"
        if self.colors is not LIGHT:
            colour = "#93c5fd" if user else "#6ee7b7"
        links = []
        if not streaming and entry.versions > 1:  # ‹ 2/3 ›: the arrows at either end are plain text
            older = f'<a href="older:{index}">‹</a>' if entry.version > 1 else "‹"
            newer = f'<a href="newer:{index}">›</a>' if entry.version < entry.versions else "›"
            links.append(f"{older} {entry.version}/{entry.versions} {newer}")
        if not streaming:
            links.append(f'<a href="copy:{index}">copy</a>')
            if user:
                links.append(f'<a href="edit:{index}">edit</a>')
            elif index == len(self.state.entries) - 1:
                links.append(f'<a href="regenerate:{index}">regenerate</a>')
        actions = " &nbsp;".join(links)
        return (f'<b style="color:{colour}">{"You" if user else "Assistant"}</b>'
                f'&nbsp;&nbsp; <span style="font-size: small">{actions}</span>')

    def end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.browser.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def select_from(self, position: int) -> QTextCursor:
        cursor = QTextCursor(self.browser.document())
        cursor.setPosition(position)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        return cursor

    def clear_from(self, position: int) -> QTextCursor:
        """Remove everything from ``position`` (the start of a block) to the end; the cursor is left there, in a
        plain block, as ``new_block`` leaves it. (Removing text keeps its first block's format: a list item
        stays one, and the next insertion would differ from the same text inserted into a fresh block.)"""
        cursor = self.select_from(position)
        cursor.removeSelectedText()
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setBlockCharFormat(QTextCharFormat())
        cursor.setCharFormat(QTextCharFormat())
        return cursor

    def insert_html(self, cursor: QTextCursor, markup: str) -> None:
        """Insert rendered markdown at ``cursor``, the start of a plain empty block. Qt leaves that block empty
        in front of HTML that begins with a list (a gap before it that the finished reply has not): it goes."""
        start = cursor.position()
        cursor.insertHtml(markup)
        document = self.browser.document()
        block = document.findBlock(start)
        if (start > 0 and block.position() == start and block.length() == 1 and block.next().isValid()
                and block.next().textList() is not None and block.next().position() == start + 1):
            gap = QTextCursor(document)
            gap.setPosition(start - 1)
            gap.setPosition(start, QTextCursor.MoveMode.KeepAnchor)
            gap.removeSelectedText()


def new_block(cursor: QTextCursor) -> None:
    """Start a new block with plain formats (``insertBlock()`` would carry over the last HTML block's
    background and margins, e.g. a user message's tint onto the next header)."""
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


def code_format() -> QTextCharFormat:
    """Monospace, for the text of a code block still open (highlighted once its fence closes)."""
    fmt = QTextCharFormat()
    fmt.setFontFamilies(["monospace"])
    fmt.setFontStyleHint(QFont.StyleHint.Monospace)
    return fmt


def _rebased(splitter: BlockSplitter, offset: int) -> BlockSplitter:
    """The splitter's state for the text after ``offset`` (the tail that remains)."""
    splitter._scanned -= offset
    splitter.boundary = 0
    return splitter


class _Region:
    """A growing markdown text at the end of the document: committed blocks, then the re-rendered tail."""

    def __init__(self, painter: Painter, style: str = "") -> None:
        self.painter = painter
        self.style = style  # CSS of a wrapping div (the muted thinking block), or ""
        self.splitter = BlockSplitter()
        self.spans = DraftSpans()
        self.length = 0
        self.committed: list[tuple[str, int]] = []  # (markdown, offset) of the blocks already drawn
        self.pending: list[tuple[str, int]] = []  # finished blocks not drawn yet
        self.tail = ""
        self.tail_start = 0
        self.start_pos = 0  # document position where the region begins
        self.tail_pos = 0  # document position where the tail's drawing begins
        self._tail_plain = -1  # characters of the tail drawn as plain code text (-1: drawn as HTML)

    def feed(self, piece: str, provenance: str) -> None:
        if provenance == "draft":
            self.spans.add(self.length, self.length + len(piece))
        self.length += len(piece)
        self.tail += piece
        boundary = self.splitter.feed(self.tail)
        if boundary > 0:
            block, self.tail = self.tail[:boundary], self.tail[boundary:]
            self.pending.append((block, self.tail_start))
            self.tail_start += boundary
            self.splitter = _rebased(self.splitter, boundary)

    def close(self) -> None:
        """The region is complete (the thinking block when ``</think>`` came): its tail is drawn as a finished
        block, and what follows starts on a block of its own (however many frames the region took)."""
        if self.tail:
            self.pending.append((self.tail, self.tail_start))
            self.tail_start += len(self.tail)
            self.tail = ""
            self.splitter = BlockSplitter()
        self.flush()

    def _marked(self, text: str, start: int) -> str:
        if not self.painter.tinting:
            return text
        return mark_drafts(text, self.spans.within(start, start + len(text)))

    def begin(self) -> None:
        """Draw everything so far at the document's end (a new region, or after a full redraw)."""
        cursor = self.painter.end_cursor()
        self.start_pos = self.tail_pos = cursor.position()
        self.pending = [*self.committed, *self.pending]
        self.committed = []
        self._tail_plain = -1
        self.flush()

    def flush(self) -> None:
        painter = self.painter
        if self.pending:
            cursor = painter.clear_from(self.tail_pos)
            for text, start in self.pending:  # block by block: the same document however frames grouped them
                if text.strip():  # a blank line between blocks draws nothing
                    painter.insert_html(cursor, self._wrap(painter.render(self._marked(text, start))))
                    new_block(cursor)
            self.tail_pos = cursor.position()
            self.committed += self.pending
            self.pending = []
            self._tail_plain = -1
        if self.splitter.in_fence:  # an open code block: append new text as it is, highlight it when it closes
            if self._tail_plain < 0:
                cursor = painter.clear_from(self.tail_pos)
                self._tail_plain = 0
            else:
                cursor = painter.end_cursor()
            cursor.insertText(self.tail[self._tail_plain:], code_format())
            self._tail_plain = len(self.tail)
        else:
            cursor = painter.clear_from(self.tail_pos)
            self._tail_plain = -1
            if self.tail.strip():
                painter.insert_html(cursor, self._wrap(painter.render(self._marked(self.tail, self.tail_start))))

    def _wrap(self, body: str) -> str:
        return f'<div style="{self.style}">{body}</div>' if self.style else body


class ReplyStream:
    """The streaming reply: its header, a thinking region while ``<think>`` runs, then the answer region."""

    def __init__(self, painter: Painter, entry: ChatEntry, index: int) -> None:
        self.painter = painter
        self.entry = entry
        self.index = index
        self.phase = "start"  # start → thinking → answer
        self.held = ""  # text held back until a tag is complete
        self.thinking: _Region | None = None
        self.answer: _Region | None = None
        self.start_pos = 0

    def begin(self) -> None:
        cursor = self.painter.end_cursor()
        self.start_pos = self.painter.starts[self.index] = cursor.position()
        cursor.insertHtml(self.painter.header_html(self.entry, self.index, streaming=True))
        new_block(cursor)
        if self.thinking is not None:
            self._thinking_label()
        for region in (self.thinking, self.answer):
            if region is not None:
                region.begin()

    def feed(self, piece: str, provenance: str) -> None:
        if self.phase == "start":
            self.held += piece
            head = self.held.lstrip()
            if head.startswith(THINK_OPEN):
                self.phase, rest, self.held = "thinking", head[len(THINK_OPEN):].lstrip(), ""
                self.thinking = _Region(self.painter, f"color:{self.painter.colors.muted};")
                self._thinking_label()
                self.thinking.begin()
                if rest:
                    self.feed(rest, provenance)
            elif not (head and THINK_OPEN.startswith(head)):
                self.phase, rest, self.held = "answer", head, ""
                self._start_answer(rest, provenance)
        elif self.phase == "thinking":
            assert self.thinking is not None
            self.held += piece
            if THINK_CLOSE in self.held:
                before, after = self.held.split(THINK_CLOSE, 1)
                self.held = ""
                self.thinking.feed(before, provenance)
                self.thinking.close()
                self.phase = "answer"
                self._start_answer(after.lstrip(), provenance)
            else:
                safe = _hold_back(self.held, THINK_CLOSE)
                self.held = self.held[len(safe):]
                if safe:
                    self.thinking.feed(safe, provenance)
        else:
            assert self.answer is not None
            self.answer.feed(piece, provenance)

    def _thinking_label(self) -> None:
        cursor = self.painter.end_cursor()
        cursor.insertHtml(f'<p style="color:{self.painter.colors.muted}"><i>Thinking…</i></p>')
        new_block(cursor)

    def _start_answer(self, text: str, provenance: str) -> None:
        self.answer = _Region(self.painter)
        self.answer.begin()
        if text:
            self.answer.feed(text, provenance)

    def flush(self) -> None:
        region = self.answer or self.thinking
        if region is not None:
            region.flush()


class StreamRenderer:
    """The reply being streamed, drawn a frame at a time: its entry and regions, the queue between frames, and
    the HUD's numbers (shown once a frame, not per token)."""

    def __init__(self, painter: Painter, follower: Follower, hud: Hud, parent: QObject) -> None:
        self.painter = painter
        self.follower = follower
        self.hud = hud
        self.pacer = FramePacer(parent, self.frame)
        self.entry: ChatEntry | None = None  # the reply being streamed
        self.stream: ReplyStream | None = None
        self.frames_drawn = 0  # frames that drew streamed text (what the frame pacing bounds)
        self.hud_updates = 0  # frames that updated the HUD (at most one every HUD_INTERVAL_MS)
        self._hud_stats: dict[str, Any] | None = None  # the newest stats the HUD has not shown yet
        self._hud_shown_at = -math.inf  # time.monotonic() of the HUD's latest update while streaming

    def begin(self, entry: ChatEntry, index: int) -> None:
        """Start drawing ``entry``, the conversation's ``index``-th message, at the document's end."""
        self.entry = entry
        self.stream = ReplyStream(self.painter, entry, index)
        self.pacer.drop()
        self._hud_stats, self._hud_shown_at = None, -math.inf  # a new reply's first numbers show at once
        with self.follower.keeping_place():
            self.painter.prepare()
            self.stream.begin()

    def queue(self, events: Iterable[dict[str, Any]]) -> None:
        if self.entry is not None and self.stream is not None:
            self.pacer.queue(self.entry, events)

    def frame(self) -> None:
        """One frame: the text queued since the last frame fed to the reply and drawn (only the tail that
        changed), and the HUD updated with the newest stats when ``HUD_INTERVAL_MS`` has passed since its last
        update."""
        self.pacer.timer.stop()
        stream = self.stream
        if stream is None:
            return
        queued, stats = self.pacer.take()
        for piece, provenance in queued:
            stream.feed(piece, provenance)
        self._hud_stats = stats or self._hud_stats
        now = time.monotonic()
        if self._hud_stats is not None and (now - self._hud_shown_at) * 1000 >= HUD_INTERVAL_MS:
            self.hud.show_stats(self._hud_stats)
            self._hud_stats, self._hud_shown_at = None, now
            self.hud_updates += 1
        with self.follower.keeping_place():
            stream.flush()
        self.pacer.last_frame = time.monotonic()
        self.frames_drawn += 1

    def stop(self) -> tuple[ChatEntry | None, ReplyStream | None, dict[str, Any] | None]:
        """No reply streams any more: the one that did (if any), its drawing, and the stats its next frame would
        have shown (the newest the HUD has not shown yet); its queued text is dropped (the entry holds it all)."""
        entry, stream, stats = self.entry, self.stream, self.pacer.stats or self._hud_stats
        self._hud_stats = None
        self.entry = None
        self.stream = None
        self.pacer.drop()
        return entry, stream, stats

    def redraw(self, keep_place: bool = False) -> None:
        """The whole conversation drawn again: at its end (``keep_place`` False, the view following again), or
        where the reader was (a reply switched to another version above the end, a cut)."""
        with self.follower.keeping_place() if keep_place else self.follower.moved_by_the_view():
            self.painter.draw_all(self.entry, self.stream)
        if not keep_place:
            self.follower.to_latest()

    def cut(self, count: int) -> None:
        """Only the first ``count`` messages stay drawn, the reader's place kept (or the end followed)."""
        with self.follower.keeping_place():
            if self.entry is not None or not self.painter.cut(count):
                self.painter.draw_all(self.entry, self.stream)

    def redraw_finished(self, stream: ReplyStream, index: int) -> None:
        """The streamed drawing replaced by the finished message, drawn once whole."""
        with self.follower.keeping_place():
            cursor = self.painter.select_from(stream.start_pos)
            cursor.removeSelectedText()
            self.painter.insert_entry(index, cursor)
