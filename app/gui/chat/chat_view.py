"""The conversation: a transcript that streams the reply as markdown, the input box, Send and Stop.

Each assistant token keeps where it came from (an accepted draft or the target's own pick); the
"colour accepted drafts" toggle tints the drafted ones, which makes the speculative decoding visible.

Streaming is frame-paced: token events only queue (``append_tokens``, a batch at a time from the engine
bridge), and a frame tick (at most one every ``RENDER_INTERVAL_MS``, about 30 a second, whatever the token
rate) feeds the queued pieces to the reply, draws them and updates the HUD once. Streaming cost stays flat with
the reply's length: finished markdown blocks are rendered once, and each frame renders only the unfinished
tail. Inside an open code fence new text is appended as it is; the block is highlighted once when its fence
closes. Links in the
transcript carry the actions: ``copy-code:N``, ``copy:I``, ``edit:I``, ``regenerate:I``, ``think:I``.

The transcript follows a streaming reply while the user is at its bottom (within ``FOLLOW_SLACK_PX``);
once they scroll up it keeps their position and shows "Jump to latest ↓" over the middle of its bottom edge.
The button, or scrolling back down by hand, hides it and following resumes.

On a wide window the text keeps a readable measure: the document's side margins grow so its lines hold at most
``MAX_LINE_CHARS`` characters of ordinary text, centred (``_measure_margins``).

The HUD floats over one corner of the transcript (``set_hud_placement``; the user drags it to another or folds
it to one line). The document keeps a margin on the HUD's side as tall as the HUD, so the first message (HUD
at the top) or the newest text while following (HUD at the bottom) is never under it.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QKeyEvent,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.chats.history import StoredMessage
from app.engine.chat_template import Message
from app.gui.chat.hud import CORNERS, Hud, corner_alignment, nearest_corner
from app.gui.chat.markdown import (
    THINK_CLOSE,
    THINK_OPEN,
    BlockSplitter,
    DraftSpans,
    MarkdownRenderer,
    _hold_back,
    mark_drafts,
    split_thinking,
)
from app.gui.shell.palette import LIGHT, Palette

DRAFT_TINT = QColor(LIGHT.draft_tint)
RENDER_INTERVAL_MS = 33  # a frame: streamed text and the HUD are drawn at most this often; tokens in between queue
FOLLOW_SLACK_PX = 6  # this close to the bottom counts as at the bottom: the view follows the reply
MAX_LINE_CHARS = 86  # about the longest line of ordinary text (prose runs ~5% over); wider windows centre it
_MEASURE_SAMPLE = "The quick brown fox jumps over the lazy dog, then drafts three tokens ahead. "


@dataclass
class ChatEntry:
    """One message of the conversation as shown: its pieces with provenance, and a stats footer."""

    role: str
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, "user" | "draft" | "target")
    footer: str = ""
    final: str | None = None
    message_id: int | None = None  # its row in the history, once saved
    thinking_open: bool = False

    @property
    def text(self) -> str:
        return self.final if self.final is not None else "".join(piece for piece, _ in self.pieces)

    @property
    def answer(self) -> str:
        """The text without its thinking block."""
        return split_thinking(self.text)[1] if self.role == "assistant" else self.text

    def draft_spans(self) -> DraftSpans:
        spans = DraftSpans()
        if self.final is None:
            at = 0
            for piece, provenance in self.pieces:
                if provenance == "draft":
                    spans.add(at, at + len(piece))
                at += len(piece)
        return spans

    def settle(self, text: str) -> None:
        """The engine's final text of this reply. The streamed pieces stay (their provenance is the tint) when
        the final text is the streamed one with its end cut off (the end-of-turn token's piece, blanks);
        otherwise the final text replaces them."""
        streamed = self.text
        final = text.strip()
        if final == streamed.strip():
            return
        start = len(streamed) - len(streamed.lstrip())
        if not streamed[start:].startswith(final):
            self.final = final
            return
        keep, kept = start + len(final), []
        for piece, provenance in self.pieces:
            if keep <= 0:
                break
            kept.append((piece[:keep], provenance))
            keep -= len(piece)
        self.pieces = kept

    def draft_ranges(self) -> list[tuple[int, int]] | None:
        """The accepted-draft ranges of ``text``, as the history stores them; None when the pieces no longer
        describe the text (the final text replaced the streamed one)."""
        if self.final is not None:
            return None
        return self.draft_spans().within(0, len(self.text))


def entry_from_stored(message: StoredMessage) -> ChatEntry:
    """A saved message as shown: its text, with the accepted drafts its saved provenance names (so the tint
    comes back), and for a reply the footer its saved stats give."""
    own = "user" if message.role == "user" else "target"
    pieces: list[tuple[str, str]] = []
    at = 0
    for start, end in message.drafts or ():
        if start > at:
            pieces.append((message.content[at:start], own))
        pieces.append((message.content[start:end], "draft"))
        at = end
    if at < len(message.content) or not pieces:
        pieces.append((message.content[at:], own))
    entry = ChatEntry(message.role, pieces, message_id=message.id)
    if message.role == "assistant" and message.stats:
        entry.footer = describe_reply({"stats": message.stats, "stop_reason": message.stats.get("stop_reason")})
    return entry


def describe_reply(event: dict[str, Any]) -> str:
    """The footer of a finished reply: the drafting mode that produced it, tokens, speed, acceptance, tokens
    per pass, why it stopped."""
    stats = event.get("stats") or {}
    parts = [f"{stats.get('generated', len(event.get('tokens', [])))} tokens",
             f"{stats.get('decode_tps') or 0:.1f} tok/s"]
    if isinstance(stats.get("mode"), str) and stats["mode"]:
        parts.insert(0, stats["mode"].replace(" · ", ", "))
    if stats.get("time_to_first_token") is not None:
        parts.append(f"first token {stats['time_to_first_token'] * 1000:.0f} ms")
    if stats.get("acceptance") is not None:
        parts.append(f"acceptance {stats['acceptance'] * 100:.0f}%")
    if stats.get("tokens_per_pass") is not None:
        parts.append(f"{stats['tokens_per_pass']:.2f} tokens/pass")
    if event.get("stop_reason"):
        parts.append(str(event["stop_reason"]))
    return " · ".join(parts)


class Transcript(QTextBrowser):
    """The transcript's browser: it loads no resource at all, whatever a message names.

    Qt reads an ``<img>``'s file from disk (``/dev/zero`` until memory runs out) unless ``loadResource``
    answers first; an empty answer (never ``None``, after which QTextDocument opens the file itself) leaves
    nothing to read, locally or over the network. The renderer shows images as links anyway.

    ``resized`` tells the chat view to fit the text's measure to the new width."""

    resized = Signal()

    def loadResource(self, type: int, name: QUrl | str) -> Any:
        return QByteArray()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.resized.emit()


def readable_width(metrics: QFontMetrics, chars: int = MAX_LINE_CHARS) -> int:
    """The width of ``chars`` characters of ordinary English text (spaces included) in this font."""
    return round(metrics.horizontalAdvance(_MEASURE_SAMPLE) * chars / len(_MEASURE_SAMPLE))


class MessageInput(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class _Region:
    """A growing markdown text at the end of the document: committed blocks, then the re-rendered tail."""

    def __init__(self, view: ChatView, style: str = "") -> None:
        self.view = view
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
        if not self.view.show_drafts.isChecked():
            return text
        return mark_drafts(text, self.spans.within(start, start + len(text)))

    def begin(self) -> None:
        """Draw everything so far at the document's end (a new region, or after a full redraw)."""
        cursor = self.view._end_cursor()
        self.start_pos = self.tail_pos = cursor.position()
        self.pending = [*self.committed, *self.pending]
        self.committed = []
        self._tail_plain = -1
        self.flush()

    def flush(self) -> None:
        view = self.view
        if self.pending:
            cursor = view._clear_from(self.tail_pos)
            for text, start in self.pending:  # block by block: the same document however frames grouped them
                if text.strip():  # a blank line between blocks draws nothing
                    view._insert_html(cursor, self._wrap(view.renderer.render(self._marked(text, start),
                                                                              view._register_code)))
                    _new_block(cursor)
            self.tail_pos = cursor.position()
            self.committed += self.pending
            self.pending = []
            self._tail_plain = -1
        if self.splitter.in_fence:  # an open code block: append new text as it is, highlight it when it closes
            if self._tail_plain < 0:
                cursor = view._clear_from(self.tail_pos)
                self._tail_plain = 0
            else:
                cursor = view._end_cursor()
            cursor.insertText(self.tail[self._tail_plain:], view._code_format())
            self._tail_plain = len(self.tail)
        else:
            cursor = view._clear_from(self.tail_pos)
            self._tail_plain = -1
            if self.tail.strip():
                view._insert_html(cursor, self._wrap(view.renderer.render(self._marked(self.tail, self.tail_start),
                                                                          view._register_code)))

    def _wrap(self, body: str) -> str:
        return f'<div style="{self.style}">{body}</div>' if self.style else body


def _new_block(cursor: QTextCursor) -> None:
    """Start a new block with plain formats (``insertBlock()`` would carry over the last HTML block's
    background and margins, e.g. a user message's tint onto the next header)."""
    cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())


def _rebased(splitter: BlockSplitter, offset: int) -> BlockSplitter:
    """The splitter's state for the text after ``offset`` (the tail that remains)."""
    splitter._scanned -= offset
    splitter.boundary = 0
    return splitter


class _ReplyStream:
    """The streaming reply: its header, a thinking region while ``<think>`` runs, then the answer region."""

    def __init__(self, view: ChatView, entry: ChatEntry, index: int) -> None:
        self.view = view
        self.entry = entry
        self.index = index
        self.phase = "start"  # start → thinking → answer
        self.held = ""  # text held back until a tag is complete
        self.thinking: _Region | None = None
        self.answer: _Region | None = None
        self.start_pos = 0

    def begin(self) -> None:
        cursor = self.view._end_cursor()
        self.start_pos = cursor.position()
        cursor.insertHtml(self.view._header_html(self.entry, self.index, streaming=True))
        _new_block(cursor)
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
                self.thinking = _Region(self.view, f"color:{self.view.colors.muted};")
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
        cursor = self.view._end_cursor()
        cursor.insertHtml(f'<p style="color:{self.view.colors.muted}"><i>Thinking…</i></p>')
        _new_block(cursor)

    def _start_answer(self, text: str, provenance: str) -> None:
        self.answer = _Region(self.view)
        self.answer.begin()
        if text:
            self.answer.feed(text, provenance)

    def flush(self) -> None:
        region = self.answer or self.thinking
        if region is not None:
            region.flush()


class ChatView(QWidget):
    """Transcript with the HUD over its corner, and the input row.

    Emits ``send_requested(text)``, ``stop_requested``, ``regenerate_requested`` (the last reply),
    ``edit_submitted(index, text)`` (a user message changed: the conversation goes on from it), and
    ``hud_placement_changed(corner, collapsed)`` when the user moved or folded the HUD; the window feeds
    replies back through ``begin_reply`` / ``append_token`` / ``finish_reply``."""

    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_submitted = Signal(int, str)
    hud_placement_changed = Signal(str, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list[ChatEntry] = []
        self._streaming: ChatEntry | None = None
        self._stream: _ReplyStream | None = None
        self.editing: int | None = None  # the index of the user message being edited
        self.colors = LIGHT
        self.renderer = MarkdownRenderer(self.colors)
        self.code_blocks: list[str] = []
        self._busy = False
        self._render_timer = QTimer(self)  # the next frame, while a streamed reply has queued tokens
        self._render_timer.setSingleShot(True)
        self._render_timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._render_timer.timeout.connect(self.flush_render)
        self._queued: list[tuple[str, str]] = []  # (piece, provenance) streamed since the last frame
        self._queued_stats: dict[str, Any] | None = None  # the newest token's stats, for the HUD's next frame
        self._last_frame = 0.0  # time.monotonic() of the last frame drawn
        self.frames_drawn = 0  # frames that drew streamed text (what the frame pacing bounds)

        self.transcript = Transcript()
        self.transcript.setOpenLinks(False)
        self.transcript.anchorClicked.connect(self.activate_link)
        self.transcript.document().setDocumentMargin(14)
        self.transcript.document().setUndoRedoEnabled(False)  # a growing undo stack would slow every edit
        self.transcript.resized.connect(self._measure_margins)
        self.hud = Hud()
        self._follow = True  # the user is at the bottom: new text keeps the view there
        self._moving = 0  # > 0 while the view itself edits the document or scrolls (not the user)
        bar = self.transcript.verticalScrollBar()
        bar.valueChanged.connect(self._scrolled)
        bar.rangeChanged.connect(self._range_changed)
        stack = QGridLayout()
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(self.transcript, 0, 0)
        self._stack = stack
        self.hud_corner = CORNERS[0]
        self._hud_carrier = QWidget()  # keeps the HUD off the frame and clear of the scroll bar
        carrier = QHBoxLayout(self._hud_carrier)
        carrier.addWidget(self.hud)
        stack.addWidget(self._hud_carrier, 0, 0, corner_alignment(self.hud_corner))
        self._drag_origin: QPoint | None = None  # the carrier's position when a drag of the HUD began
        self.hud.dragged.connect(self._drag_hud)
        self.hud.dropped.connect(self._drop_hud)
        self.hud.note_changed.connect(self._hud_margins)  # a taller HUD needs a wider margin
        self.hud.corner_requested.connect(lambda corner: self.set_hud_placement(corner, self.hud.collapsed, True))
        self.hud.collapsed_changed.connect(lambda collapsed: self.set_hud_placement(self.hud_corner, collapsed, True))
        self.jump_button = QPushButton("Jump to latest ↓")
        self.jump_button.setToolTip("Scroll to the newest text and follow the reply again")
        self.jump_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump_button.clicked.connect(self.scroll_to_latest)
        self._jump_corner = QWidget()  # over the middle of the transcript's bottom edge: clear of any HUD corner
        jump = QHBoxLayout(self._jump_corner)
        jump.setContentsMargins(0, 0, 0, 10)
        jump.addWidget(self.jump_button)
        stack.addWidget(self._jump_corner, 0, 0, Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignHCenter)
        self._jump_corner.hide()

        self.input = MessageInput()
        self.input.setPlaceholderText("Message the model — Enter sends, Shift+Enter for a new line")
        self.input.setFixedHeight(64)
        self.input.setTabChangesFocus(True)  # Tab moves on to Send (Shift+Tab back), as in any form
        self.input.submitted.connect(self._submit)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self._submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop_requested.emit)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        row.addLayout(buttons)

        self.edit_label = QLabel("Editing your message: sending replaces it and everything after it.")
        self.edit_cancel = QPushButton("Cancel edit")
        self.edit_cancel.clicked.connect(self.cancel_edit)
        edit_row = QHBoxLayout()
        edit_row.addWidget(self.edit_label, 1)
        edit_row.addWidget(self.edit_cancel)
        self.edit_bar = QWidget()
        self.edit_bar.setLayout(edit_row)
        self.edit_bar.hide()

        self.show_drafts = QCheckBox("Colour accepted drafts")
        self.show_drafts.setChecked(True)
        self.show_drafts.toggled.connect(lambda _on: self.redraw())
        self.legend = QLabel()
        self._update_legend()
        overlay_row = QHBoxLayout()
        overlay_row.addWidget(self.show_drafts)
        overlay_row.addWidget(self.legend)
        overlay_row.addStretch(1)

        self.composer = QWidget()  # the rows under the transcript, as wide as its text column on a wide window
        column = QVBoxLayout(self.composer)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(overlay_row)
        column.addWidget(self.edit_bar)
        column.addLayout(row)
        centred = QHBoxLayout()
        centred.addStretch(0)
        centred.addWidget(self.composer, 1)
        centred.addStretch(0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(stack, 1)
        layout.addLayout(centred)
        self._place_hud()

    # ------------------------------------------------------------------ the HUD's place

    def set_hud_placement(self, corner: str, collapsed: bool, by_user: bool = False) -> None:
        """Put the HUD in ``corner`` (one of ``CORNERS``; anything else is the default), folded or not;
        ``by_user`` emits ``hud_placement_changed`` so the window remembers it."""
        self.hud_corner = corner if corner in CORNERS else CORNERS[0]
        if collapsed != self.hud.collapsed:
            self.hud.set_collapsed(collapsed)
        self._place_hud()
        if by_user:
            self.hud_placement_changed.emit(self.hud_corner, self.hud.collapsed)

    def _place_hud(self) -> None:
        """Align the HUD's carrier to its corner, clear of the frame and the scroll bar, and give the document
        the margin on that side."""
        scroll = self.transcript.verticalScrollBar().sizeHint().width()
        left = self.hud_corner.endswith("left")
        top = self.hud_corner.startswith("top")
        layout = self._hud_carrier.layout()
        assert layout is not None
        layout.setContentsMargins(6 if left else 0, 6 if top else 0, 0 if left else scroll + 6, 0 if top else 6)
        self._stack.setAlignment(self._hud_carrier, corner_alignment(self.hud_corner))
        self._stack.invalidate()  # also after a drag that ended in the same corner: back into place
        self._hud_margins()

    def _hud_margins(self) -> None:
        """The document's margins: on the HUD's side as tall as the HUD where it is over the text column (the
        other side keeps the usual one), and at the sides what ``_measure_margins`` says."""
        self._measure_margins()

    def _measure_margins(self) -> None:
        """Side margins that keep lines at most ``MAX_LINE_CHARS`` characters long, the text centred (none on a
        window too narrow for that), and the HUD's margin (``_hud_margins``): on a wide window the centred
        column passes beside the HUD, and the text needs no room above or below it. Set only when something
        changed (every change lays the document out again)."""
        document = self.transcript.document()
        base = document.documentMargin()
        measure = readable_width(self.transcript.fontMetrics())
        side = max(0.0, (self.transcript.viewport().width() - 2 * base - measure) / 2)
        self.composer.setMaximumWidth(round(measure + 2 * base) + self.send_button.sizeHint().width() + 12)
        clear = float(self.hud.sizeHint().height() + 8) if self._hud_over_text(base + side) else base
        top = self.hud_corner.startswith("top")
        root = document.rootFrame()
        fmt = root.frameFormat()
        wanted = (side, side, clear if top else base, base if top else clear)
        if any(abs(now - new) >= 1 for now, new in zip((fmt.leftMargin(), fmt.rightMargin(), fmt.topMargin(),
                                                           fmt.bottomMargin()), wanted, strict=True)):
            fmt.setLeftMargin(wanted[0])
            fmt.setRightMargin(wanted[1])
            fmt.setTopMargin(wanted[2])
            fmt.setBottomMargin(wanted[3])
            root.setFrameFormat(fmt)

    def _hud_over_text(self, inset: float) -> bool:
        """Whether the HUD covers part of a text column ``inset`` pixels in from each side of the viewport: the
        HUD sits 6 pixels in from its side (clear of the scroll bar), and the text keeps 4 pixels of air."""
        return inset < self.hud.sizeHint().width() + 6 + 4

    def _drag_hud(self, offset: QPoint) -> None:
        """The HUD follows the mouse over the transcript (kept inside it) until it is dropped."""
        if self._drag_origin is None:
            self._drag_origin = self._hud_carrier.pos()
        area = self.transcript.geometry()
        size = self._hud_carrier.size()
        target = self._drag_origin + offset
        x = min(max(target.x(), area.left()), area.right() - size.width())
        y = min(max(target.y(), area.top()), area.bottom() - size.height())
        self._hud_carrier.move(x, y)
        self._hud_carrier.raise_()

    def _drop_hud(self) -> None:
        """Dropped: it snaps to the corner nearest to where it was let go."""
        self._drag_origin = None
        area = self.transcript.geometry()
        centre = self._hud_carrier.geometry().center() - area.topLeft()
        self.set_hud_placement(nearest_corner(centre.x(), centre.y(), area.width(), area.height()),
                               self.hud.collapsed, by_user=True)

    # ------------------------------------------------------------------ conversation

    def history(self) -> list[Message]:
        """The finished messages, for the engine."""
        return [Message(e.role, e.text) for e in self.entries if e is not self._streaming]

    def set_palette(self, palette: Palette) -> None:
        """Colours for the light or the dark theme."""
        self.colors = palette
        self.renderer = MarkdownRenderer(palette)
        self._update_legend()
        self.redraw()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.send_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy and self._streaming is not None)

    def show_conversation(self, messages: list[StoredMessage]) -> None:
        """Replace the transcript with a saved conversation (system messages are not shown)."""
        self._streaming = None
        self._stream = None
        self._drop_queue()
        self.cancel_edit()
        self.entries = [entry_from_stored(m) for m in messages if m.role in ("user", "assistant")]
        self.hud.reset()
        self.redraw()

    def add_user(self, text: str, message_id: int | None = None) -> ChatEntry:
        entry = ChatEntry("user", [(text, "user")], message_id=message_id)
        self.entries.append(entry)
        self._insert_entry(len(self.entries) - 1)
        self.scroll_to_latest()  # the user just sent it: show it, and follow the reply that comes
        return entry

    def begin_reply(self, message_id: int | None = None) -> ChatEntry:
        self._streaming = ChatEntry("assistant", message_id=message_id, thinking_open=True)
        self.entries.append(self._streaming)
        self._stream = _ReplyStream(self, self._streaming, len(self.entries) - 1)
        self._drop_queue()
        with self._keeping_place():
            self._prepare_document()
            self._stream.begin()
        self.hud.reset()
        self.stop_button.setEnabled(True)
        return self._streaming

    def append_token(self, event: dict[str, Any]) -> None:
        """One streamed ``token`` event (``append_tokens`` of one)."""
        self.append_tokens((event,))

    def append_tokens(self, events: Iterable[dict[str, Any]]) -> None:
        """Streamed ``token`` events: their text joins the reply at once (what is saved) and queues for the next
        frame, which draws it and shows the newest stats in the HUD."""
        entry = self._streaming
        if entry is None or self._stream is None:
            return
        stats = None
        for event in events:
            piece = str(event.get("piece", ""))
            if not entry.pieces:
                piece = piece.lstrip()
            provenance = str(event.get("provenance", "target"))
            entry.pieces.append((piece, provenance))
            self._queued.append((piece, provenance))
            stats = event.get("stats") or stats
        if stats is not None:
            self._queued_stats = stats
        if not self._render_timer.isActive():  # the next frame, one frame after the last (at once if it was long ago)
            since = (time.monotonic() - self._last_frame) * 1000
            self._render_timer.start(max(0, round(RENDER_INTERVAL_MS - since)))

    def flush_render(self) -> None:
        """One frame: the streamed text queued since the last frame fed to the reply and drawn (only the tail
        that changed), and the HUD updated once (the frame timer calls it)."""
        self._render_timer.stop()
        stream = self._stream
        if stream is None:
            return
        queued, self._queued = self._queued, []
        stats, self._queued_stats = self._queued_stats, None
        for piece, provenance in queued:
            stream.feed(piece, provenance)
        if stats is not None:
            self.hud.show_stats(stats)
        with self._keeping_place():
            stream.flush()
        self._last_frame = time.monotonic()
        self.frames_drawn += 1

    def _drop_queue(self) -> None:
        self._render_timer.stop()
        self._queued = []
        self._queued_stats = None

    def finish_reply(self, event: dict[str, Any]) -> ChatEntry | None:
        """The reply's ``done`` event (or an ``error`` that ended it): final text and stats footer.

        Returns the finished reply's entry, or None when no reply was streaming."""
        entry, stream = self._streaming, self._stream
        self._streaming = None
        self._stream = None
        stats = self._queued_stats
        self._drop_queue()  # the finished reply is drawn whole below, from its pieces
        self.stop_button.setEnabled(False)
        if entry is None or stream is None:
            return None
        if stats is not None:  # the HUD as the last frame would have left it (a ``done`` then shows the final)
            self.hud.show_stats(stats)
        if event.get("kind") == "done":
            entry.settle(str(event.get("text", "")))
            entry.footer = describe_reply(event)
            self.hud.show_stats(event.get("stats") or {}, final=True)
        else:
            entry.footer = f"stopped by an error: {event.get('message', '')}"
        entry.thinking_open = False
        with self._keeping_place():
            cursor = self._select_from(stream.start_pos)  # the whole reply, drawn again once, finished
            cursor.removeSelectedText()
            self._insert_entry(len(self.entries) - 1, cursor)
        return entry

    def streaming_entry(self) -> ChatEntry | None:
        return self._streaming

    def transcript_text(self) -> str:
        return self.transcript.toPlainText()

    # ------------------------------------------------------------------ following the reply

    def scroll_to_latest(self) -> None:
        """To the bottom, following again ("Jump to latest ↓", a sent message, a redraw)."""
        self._follow = True
        self._to_bottom()
        self._jump_corner.hide()

    @contextmanager
    def _keeping_place(self) -> Iterator[None]:
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
            bar.setValue(bar.maximum() if self._follow else value)
            self._moving -= 1

    def _to_bottom(self) -> None:
        bar = self.transcript.verticalScrollBar()
        self._moving += 1
        try:
            bar.setValue(bar.maximum())
        finally:
            self._moving -= 1

    def _scrolled(self, value: int) -> None:
        """The scroll bar moved: by the user unless the view is moving it. Up stops following, down to
        the bottom resumes it."""
        if self._moving:
            return
        self._follow = value >= self.transcript.verticalScrollBar().maximum() - FOLLOW_SLACK_PX
        self._jump_corner.setVisible(not self._follow)

    def _range_changed(self, _minimum: int, _maximum: int) -> None:
        """The document's height changed (new text, possibly laid out after the edit, or a resize): the
        view stays at the bottom while following, and the user's position is left alone otherwise."""
        if self._follow and not self._moving:
            self._to_bottom()

    # ------------------------------------------------------------------ actions

    def activate_link(self, url: QUrl) -> None:
        """A click on a link in the transcript: copy code, copy / edit / regenerate a message, thinking."""
        action, _, arg = url.toString().partition(":")
        if action in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
            return
        if not arg.isdigit():
            return
        index = int(arg)
        if action == "copy-code" and index < len(self.code_blocks):
            QGuiApplication.clipboard().setText(self.code_blocks[index])
        elif action == "copy" and index < len(self.entries):
            QGuiApplication.clipboard().setText(self.entries[index].answer.strip())
        elif action == "think" and index < len(self.entries):
            self.entries[index].thinking_open = not self.entries[index].thinking_open
            self.redraw()
        elif action == "regenerate" and not self._busy:
            self.regenerate_requested.emit()
        elif action == "edit" and not self._busy and index < len(self.entries):
            self.start_edit(index)

    def start_edit(self, index: int) -> None:
        """Put a user message into the input box; sending it replaces it and what came after."""
        self.editing = index
        self.input.setPlainText(self.entries[index].text)
        self.edit_bar.show()
        self.input.setFocus()

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.input.clear()
        self.editing = None
        self.edit_bar.hide()

    def truncate(self, count: int) -> None:
        """Keep only the first ``count`` entries (after an edit or for a regenerated reply)."""
        self.entries = self.entries[:count]
        self.redraw()

    # ------------------------------------------------------------------ rendering

    def redraw(self) -> None:
        """Draw the whole conversation again (after the overlay toggle, a theme change, a truncation)."""
        self._moving += 1
        try:
            self.transcript.clear()
            self.code_blocks = []
            for index, entry in enumerate(self.entries):
                if entry is not self._streaming:
                    self._insert_entry(index)
            if self._stream is not None:
                self._prepare_document()
                self._stream.begin()
        finally:
            self._moving -= 1
        self.scroll_to_latest()

    def _prepare_document(self) -> None:
        """Keep the text clear of the HUD: the first message starts below it (HUD at the top), the newest
        text ends above it (HUD at the bottom)."""
        document = self.transcript.document()
        if not document.isEmpty():
            return
        document.setDefaultStyleSheet(f"a {{ color: {self.colors.muted}; }} p {{ margin-top: 2px; }}")
        self._hud_margins()
        self._measure_margins()

    def _insert_entry(self, index: int, cursor: QTextCursor | None = None) -> None:
        self._prepare_document()
        cursor = cursor or self._end_cursor()
        cursor.insertHtml(self._entry_html(self.entries[index], index))
        _new_block(cursor)

    def _entry_html(self, entry: ChatEntry, index: int) -> str:
        parts = [self._header_html(entry, index)]
        if entry.role == "user":
            parts.append(f'<div style="background-color:{self.colors.user_background}">'
                         f'{self.renderer.plain(entry.text)}</div>')
        else:
            text = entry.text
            if self.show_drafts.isChecked():
                spans = entry.draft_spans()
                text = mark_drafts(text, spans.within(0, len(text))) if spans else text
            thinking, answer, _ = split_thinking(text)
            if thinking is not None:
                words = len(thinking.split())
                arrow = "▾" if entry.thinking_open else "▸"
                parts.append(f'<p style="color:{self.colors.muted}"><a href="think:{index}">{arrow} Thinking '
                             f'({words} words)</a></p>')
                if entry.thinking_open:
                    body = self.renderer.render(thinking, self._register_code)
                    parts.append(f'<div style="color:{self.colors.muted}">{body}</div>')
            parts.append(self.renderer.render(answer, self._register_code))
        if entry.footer:
            parts.append(f'<p style="color:{self.colors.muted}; font-size: small;">{html.escape(entry.footer)}</p>')
        return "".join(parts)

    def _header_html(self, entry: ChatEntry, index: int, streaming: bool = False) -> str:
        user = entry.role == "user"
        colour = "#1f3a8a" if user else "#065f46"
        if self.colors is not LIGHT:
            colour = "#93c5fd" if user else "#6ee7b7"
        links = []
        if not streaming:
            links.append(f'<a href="copy:{index}">copy</a>')
            if user:
                links.append(f'<a href="edit:{index}">edit</a>')
            elif index == len(self.entries) - 1:
                links.append(f'<a href="regenerate:{index}">regenerate</a>')
        actions = " &nbsp;".join(links)
        return (f'<p style="margin-top: 10px"><b style="color:{colour}">{"You" if user else "Assistant"}</b>'
                f'&nbsp;&nbsp; <span style="font-size: small">{actions}</span></p>')

    def _register_code(self, code: str) -> int:
        self.code_blocks.append(code)
        return len(self.code_blocks) - 1

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.transcript.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _clear_from(self, position: int) -> QTextCursor:
        """Remove everything from ``position`` (the start of a block) to the end; the cursor is left there, in a
        plain block, as ``_new_block`` leaves it. (Removing text keeps its first block's format: a list item
        stays one, and the next insertion would differ from the same text inserted into a fresh block.)"""
        cursor = self._select_from(position)
        cursor.removeSelectedText()
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setBlockCharFormat(QTextCharFormat())
        cursor.setCharFormat(QTextCharFormat())
        return cursor

    def _insert_html(self, cursor: QTextCursor, markup: str) -> None:
        """Insert rendered markdown at ``cursor``, the start of a plain empty block. Qt leaves that block empty
        in front of HTML that begins with a list (a gap before it that the finished reply has not): it goes."""
        start = cursor.position()
        cursor.insertHtml(markup)
        block = self.transcript.document().findBlock(start)
        if (start > 0 and block.position() == start and block.length() == 1 and block.next().isValid()
                and block.next().textList() is not None and block.next().position() == start + 1):
            gap = QTextCursor(self.transcript.document())
            gap.setPosition(start - 1)
            gap.setPosition(start, QTextCursor.MoveMode.KeepAnchor)
            gap.removeSelectedText()

    def _select_from(self, position: int) -> QTextCursor:
        cursor = QTextCursor(self.transcript.document())
        cursor.setPosition(position)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        return cursor

    def _code_format(self) -> QTextCharFormat:
        fmt = QTextCharFormat()
        fmt.setFontFamilies(["monospace"])
        fmt.setFontStyleHint(QFont.StyleHint.Monospace)
        return fmt

    def _update_legend(self) -> None:
        tint = self.colors.draft_tint
        self.legend.setText(f'<span style="background:{tint}">&nbsp;drafted and accepted&nbsp;</span>'
                            "&nbsp; plain: the target's own pick")
        self.legend.setStyleSheet(f"color: {self.colors.muted};")

    def _submit(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or not self.send_button.isEnabled():
            return
        self.input.clear()
        if self.editing is not None:
            index, self.editing = self.editing, None
            self.edit_bar.hide()
            self.edit_submitted.emit(index, text)
            return
        self.send_requested.emit(text)

