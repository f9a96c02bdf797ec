"""The conversation: a transcript that streams the reply token by token, the input box, Send and Stop.

Each assistant token keeps where it came from (an accepted draft or the target's own pick); the
"colour accepted drafts" toggle tints the drafted ones, which makes the speculative decoding visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QKeyEvent, QTextBlockFormat, QTextCharFormat, QTextCursor
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

from app.engine.chat_template import Message
from app.gui.hud import Hud
from app.history import StoredMessage

DRAFT_TINT = QColor("#cdeedd")
_USER_BACKGROUND = QColor("#eef2fb")
_MUTED = QColor("#6b7280")


@dataclass
class ChatEntry:
    """One message of the conversation as shown: its pieces with provenance, and a stats footer."""

    role: str
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, "user" | "draft" | "target")
    footer: str = ""
    final: str | None = None

    @property
    def text(self) -> str:
        return self.final if self.final is not None else "".join(piece for piece, _ in self.pieces)


def entry_from_stored(message: StoredMessage) -> ChatEntry:
    """A saved message as shown: its text, and for a reply the footer its saved stats give."""
    entry = ChatEntry(message.role, [(message.content, "user" if message.role == "user" else "target")])
    if message.role == "assistant" and message.stats:
        entry.footer = describe_reply({"stats": message.stats, "stop_reason": message.stats.get("stop_reason")})
    return entry


def describe_reply(event: dict[str, Any]) -> str:
    """The footer of a finished reply: tokens, speed, acceptance, tokens per pass, why it stopped."""
    stats = event.get("stats") or {}
    parts = [f"{stats.get('generated', len(event.get('tokens', [])))} tokens",
             f"{stats.get('decode_tps') or 0:.1f} tok/s"]
    if stats.get("acceptance") is not None:
        parts.append(f"acceptance {stats['acceptance'] * 100:.0f}%")
    if stats.get("tokens_per_pass") is not None:
        parts.append(f"{stats['tokens_per_pass']:.2f} tokens/pass")
    if event.get("stop_reason"):
        parts.append(str(event["stop_reason"]))
    return " · ".join(parts)


class MessageInput(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatView(QWidget):
    """Transcript with the HUD over its corner, and the input row. Emits ``send_requested(text)`` and
    ``stop_requested``; the window feeds replies back through ``begin_reply`` / ``append_token`` /
    ``finish_reply``."""

    send_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entries: list[ChatEntry] = []
        self._streaming: ChatEntry | None = None

        self.transcript = QTextBrowser()
        self.transcript.setOpenExternalLinks(True)
        self.transcript.document().setDocumentMargin(14)
        self.hud = Hud()
        stack = QGridLayout()
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(self.transcript, 0, 0)
        hud_corner = QWidget()  # keeps the HUD off the frame and clear of the scroll bar
        corner = QHBoxLayout(hud_corner)
        corner.setContentsMargins(0, 6, self.transcript.verticalScrollBar().sizeHint().width() + 6, 0)
        corner.addWidget(self.hud)
        stack.addWidget(hud_corner, 0, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight)

        self.input = MessageInput()
        self.input.setPlaceholderText("Message the model — Enter sends, Shift+Enter for a new line")
        self.input.setFixedHeight(64)
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

        self.show_drafts = QCheckBox("Colour accepted drafts")
        self.show_drafts.setChecked(True)
        self.show_drafts.toggled.connect(lambda _on: self.redraw())
        legend = QLabel(f'<span style="background:{DRAFT_TINT.name()}">&nbsp;drafted and accepted&nbsp;</span>'
                        "&nbsp; plain: the target's own pick")
        legend.setStyleSheet(f"color: {_MUTED.name()};")
        overlay_row = QHBoxLayout()
        overlay_row.addWidget(self.show_drafts)
        overlay_row.addWidget(legend)
        overlay_row.addStretch(1)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(stack, 1)
        layout.addLayout(overlay_row)
        layout.addLayout(row)

    # ------------------------------------------------------------------ conversation

    def history(self) -> list[Message]:
        """The finished messages, for the engine."""
        return [Message(e.role, e.text) for e in self.entries if e is not self._streaming]

    def set_busy(self, busy: bool) -> None:
        self.send_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy and self._streaming is not None)

    def show_conversation(self, messages: list[StoredMessage]) -> None:
        """Replace the transcript with a saved conversation (system messages are not shown)."""
        self._streaming = None
        self.entries = [entry_from_stored(m) for m in messages if m.role in ("user", "assistant")]
        self.hud.reset()
        self.redraw()

    def add_user(self, text: str) -> None:
        entry = ChatEntry("user", [(text, "user")])
        self.entries.append(entry)
        self._render_entry(entry)

    def begin_reply(self) -> None:
        self._streaming = ChatEntry("assistant")
        self.entries.append(self._streaming)
        self._render_entry(self._streaming)
        self.hud.reset()
        self.stop_button.setEnabled(True)

    def append_token(self, event: dict[str, Any]) -> None:
        """One streamed ``token`` event: its text at the end of the transcript, and the HUD."""
        entry = self._streaming
        if entry is None:
            return
        piece = str(event.get("piece", ""))
        if not entry.pieces:
            piece = piece.lstrip()
        entry.pieces.append((piece, str(event.get("provenance", "target"))))
        self.hud.show_stats(event.get("stats") or {})
        scrollbar = self.transcript.verticalScrollBar()
        at_bottom = scrollbar.value() >= scrollbar.maximum() - 4
        cursor = self._body_end()
        cursor.insertText(piece, self._piece_format(entry.pieces[-1][1]))
        if at_bottom:
            scrollbar.setValue(scrollbar.maximum())

    def finish_reply(self, event: dict[str, Any]) -> ChatEntry | None:
        """The reply's ``done`` event (or an ``error`` that ended it): final text and stats footer.

        Returns the finished reply's entry, or None when no reply was streaming."""
        entry = self._streaming
        self._streaming = None
        self.stop_button.setEnabled(False)
        if entry is None:
            return None
        if event.get("kind") == "done":
            text = str(event.get("text", ""))
            if text.strip() != entry.text.strip():
                entry.final = text.strip()
            entry.footer = describe_reply(event)
            self.hud.show_stats(event.get("stats") or {}, final=True)
        else:
            entry.footer = f"stopped by an error: {event.get('message', '')}"
        self.redraw()
        return entry

    def transcript_text(self) -> str:
        return self.transcript.toPlainText()

    # ------------------------------------------------------------------ rendering

    def redraw(self) -> None:
        """Draw the whole conversation again (after the overlay toggle, or a reply's final text)."""
        self.transcript.clear()
        for entry in self.entries:
            self._render_entry(entry)
        self.transcript.verticalScrollBar().setValue(self.transcript.verticalScrollBar().maximum())

    def _keep_clear_of_hud(self) -> None:
        """Start the text below the HUD, so the newest reply is never hidden under it at the top."""
        root = self.transcript.document().rootFrame()
        fmt = root.frameFormat()
        fmt.setTopMargin(self.hud.sizeHint().height() + 8)
        root.setFrameFormat(fmt)

    def _render_entry(self, entry: ChatEntry) -> None:
        if self.transcript.document().isEmpty():
            self._keep_clear_of_hud()
        cursor = QTextCursor(self.transcript.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        block = QTextBlockFormat()
        block.setTopMargin(10)
        block.setLeftMargin(4)
        if entry.role == "user":
            block.setBackground(_USER_BACKGROUND)
        header = QTextCharFormat()
        header.setFontWeight(QFont.Weight.Bold)
        header.setForeground(QColor("#1f3a8a") if entry.role == "user" else QColor("#065f46"))
        if not self.transcript.document().isEmpty():
            cursor.insertBlock(block)
        else:
            cursor.setBlockFormat(block)
        cursor.insertText("You" if entry.role == "user" else "Assistant", header)
        body = QTextBlockFormat(block)
        body.setTopMargin(2)
        cursor.insertBlock(body)
        if entry.final is not None:
            cursor.insertText(entry.final, QTextCharFormat())
        else:
            for piece, provenance in entry.pieces:
                cursor.insertText(piece, self._piece_format(provenance))
        if entry.footer:
            footer = QTextCharFormat()
            footer.setForeground(_MUTED)
            footer.setFontPointSize(max(self.font().pointSizeF() - 1.5, 7.0))
            footer_block = QTextBlockFormat()
            footer_block.setLeftMargin(4)
            cursor.insertBlock(footer_block)
            cursor.insertText(entry.footer, footer)

    def _body_end(self) -> QTextCursor:
        cursor = QTextCursor(self.transcript.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _piece_format(self, provenance: str) -> QTextCharFormat:
        fmt = QTextCharFormat()
        if provenance == "draft" and self.show_drafts.isChecked():
            fmt.setBackground(DRAFT_TINT)
        return fmt

    def _submit(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or not self.send_button.isEnabled():
            return
        self.input.clear()
        self.send_requested.emit(text)
