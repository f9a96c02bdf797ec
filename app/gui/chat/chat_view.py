"""The conversation: a transcript that streams the reply as markdown, the input box, Send and Stop.

Each assistant token keeps where it came from (an accepted draft or the target's own pick); the
"colour accepted drafts" toggle tints the drafted ones, which makes the speculative decoding visible. The
messages are ``ChatEntry`` (messages.py, Qt-free), held with their code blocks, renderer, palette and tint in one
``TranscriptState`` (transcript_state.py) that this widget owns and hands to the painter; drawing them, the
frame-paced streaming of a reply and following it are stream_render.py. This widget composes the page, is the only
writer of the transcript's state (``replace_entry``, ``truncate``, …) and acts on the transcript's links; while the
user has scrolled up from a streaming reply it shows "Jump to latest ↓" over the middle of its bottom edge.

On a wide window the text keeps a readable measure: the document's side margins grow so its lines hold at most
``MAX_LINE_CHARS`` characters of ordinary text, centred (``_measure_margins``).

The HUD floats over one corner of the transcript (``set_hud_placement``; the user drags it to another or folds
it to one line). The document keeps a margin on the HUD's side as wide as the HUD, so no text is ever under it,
wherever it is scrolled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QPoint, Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QGuiApplication, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.chats.history import StoredMessage
from app.engine.chat_template import Message
from app.gui.chat.hud import CORNERS, Hud, corner_alignment, nearest_corner
from app.gui.chat.markdown import MarkdownRenderer
from app.gui.chat.messages import ChatEntry as ChatEntry  # app.gui.chat.chat_page imports it from here
from app.gui.chat.messages import describe_reply, entry_from_stored
from app.gui.chat.stream_render import RENDER_INTERVAL_MS as RENDER_INTERVAL_MS  # app.bench.window paces by it
from app.gui.chat.stream_render import Follower, Painter, StreamRenderer, Transcript, fit_column, readable_width
from app.gui.chat.transcript_state import TranscriptState
from app.gui.shell.palette import LIGHT, Palette

DRAFT_TINT = QColor(LIGHT.draft_tint)


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
    """Transcript with the HUD over its corner, and the input row.

    Emits ``send_requested(text)``, ``stop_requested``, ``regenerate_requested`` (the last reply),
    ``edit_submitted(index, text)`` (a user message changed: the conversation goes on from it),
    ``version_requested(index, step)`` (a reply's ‹ or ›: its older or newer version, -1 or +1), and
    ``hud_placement_changed(corner, collapsed)`` when the user moved or folded the HUD; the window feeds
    replies back through ``begin_reply`` / ``append_token`` / ``finish_reply``."""

    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_submitted = Signal(int, str)
    version_requested = Signal(int, int)
    hud_placement_changed = Signal(str, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = TranscriptState(LIGHT)  # the messages as drawn: only this widget changes them
        self.editing: int | None = None  # the index of the user message being edited
        self._busy = False

        self.transcript = Transcript()
        self._paint = Painter(self.state, self.transcript, self._measure_margins)
        self.transcript.anchorClicked.connect(self.activate_link)
        self.transcript.resized.connect(self._measure_margins)
        self.hud = Hud()
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
        self.hud.resized.connect(self._measure_margins)  # a wider HUD needs a wider margin
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
        self._follower = Follower(self.transcript, self._jump_corner.setVisible)
        self._live = StreamRenderer(self._paint, self._follower, self.hud, self)

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
        self.show_drafts.toggled.connect(self._set_tint)
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
        self._measure_margins()

    def _measure_margins(self) -> None:
        """Side margins that keep lines at most ``MAX_LINE_CHARS`` characters long, the text centred, and the
        HUD's side wide enough that the HUD stands beside the text column, never over it (``fit_column``).
        Set only when something changed (every change lays the document out again)."""
        base = self.transcript.document().documentMargin()
        measure = readable_width(self.transcript.fontMetrics())
        self.composer.setMaximumWidth(round(measure + 2 * base) + self.send_button.sizeHint().width() + 12)
        fit_column(self.transcript, measure, self.hud.sizeHint(), self.hud_corner, self.hud.collapsed)

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

    @property
    def entries(self) -> list[ChatEntry]:
        """The messages shown, oldest first (the transcript state's list: read it, change it through this view)."""
        return self.state.entries

    @property
    def code_blocks(self) -> list[str]:
        """The drawn code blocks' text, by their ``copy-code`` number."""
        return self.state.code_blocks

    @property
    def colors(self) -> Palette:
        """The theme's colours the transcript is drawn in."""
        return self.state.palette

    @property
    def renderer(self) -> MarkdownRenderer:
        return self.state.renderer

    def history(self) -> list[Message]:
        """The finished messages, for the engine."""
        return [Message(e.role, e.text) for e in self.entries if e is not self._live.entry]

    def set_palette(self, palette: Palette) -> None:
        """Colours for the light or the dark theme."""
        self.state.set_palette(palette)
        self._update_legend()
        self.redraw()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.send_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy and self._live.entry is not None)

    def show_conversation(self, messages: list[StoredMessage],
                          versions: dict[int, tuple[int, ...]] | None = None) -> None:
        """Replace the transcript with a saved conversation (system messages are not shown); ``versions``: the
        regenerated replies' version ids (``HistoryStore.version_ids``), for their arrows."""
        self._live.stop()
        self.cancel_edit()
        self.state.entries = [entry_from_stored(m, (versions or {}).get(m.id, ())) for m in messages
                              if m.role in ("user", "assistant")]
        self.hud.reset()
        self.redraw()

    def add_user(self, text: str, message_id: int | None = None, version_ids: tuple[int, ...] = ()) -> ChatEntry:
        """A sent message; ``version_ids``: an edited message's versions (its ‹ › arrows)."""
        entry = ChatEntry("user", [(text, "user")], message_id=message_id, version_ids=version_ids)
        self.state.entries.append(entry)
        if len(self.entries) >= 2 and self.entries[-2].role == "assistant":
            self._paint.refresh_header(len(self.entries) - 2)  # no longer the last reply: no "regenerate" link
        self._paint.insert_entry(len(self.entries) - 1)
        self.scroll_to_latest()  # the user just sent it: show it, and follow the reply that comes
        return entry

    def begin_reply(self, message_id: int | None = None) -> ChatEntry:
        entry = ChatEntry("assistant", message_id=message_id, thinking_open=True)
        self.state.entries.append(entry)
        self._live.begin(entry, len(self.entries) - 1)
        self.hud.reset()
        self.stop_button.setEnabled(True)
        return entry

    def append_token(self, event: dict[str, Any]) -> None:
        """One streamed ``token`` event (``append_tokens`` of one)."""
        self.append_tokens((event,))

    def append_tokens(self, events: Iterable[dict[str, Any]]) -> None:
        """Streamed ``token`` events: their text joins the reply at once (what is saved) and queues for the next
        frame, which draws it and shows the newest stats in the HUD."""
        self._live.queue(events)

    def flush_render(self) -> None:
        """One frame: the streamed text queued since the last frame fed to the reply and drawn (only the tail
        that changed), and the HUD updated once (the frame timer calls it)."""
        self._live.frame()

    @property
    def frames_drawn(self) -> int:
        """Frames that drew streamed text (what the frame pacing bounds)."""
        return self._live.frames_drawn

    @property
    def hud_updates(self) -> int:
        """Frames that updated the HUD (at most one every ``HUD_INTERVAL_MS``; ``bench window`` counts them)."""
        return self._live.hud_updates

    def finish_reply(self, event: dict[str, Any]) -> ChatEntry | None:
        """The reply's ``done`` event (or an ``error`` that ended it): final text and stats footer.

        Returns the finished reply's entry, or None when no reply was streaming."""
        entry, stream, stats = self._live.stop()  # the finished reply is drawn whole below, from its pieces
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
        self._live.redraw_finished(stream, len(self.entries) - 1)
        return entry

    def streaming_entry(self) -> ChatEntry | None:
        return self._live.entry

    def transcript_text(self) -> str:
        return self.transcript.toPlainText()

    def scroll_to_latest(self) -> None:
        """To the bottom, following again ("Jump to latest ↓", a sent message, a redraw)."""
        self._follower.to_latest()

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
        elif action == "regenerate" and not self._busy and index == len(self.entries) - 1 \
                and self.entries[index].role == "assistant":  # only the last reply can be regenerated
            self.regenerate_requested.emit()
        elif action == "edit" and not self._busy and index < len(self.entries):
            self.start_edit(index)
        elif action in ("older", "newer") and not self._busy and index < len(self.entries):
            self.version_requested.emit(index, -1 if action == "older" else 1)

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
        """Keep only the first ``count`` entries (after an edit or for a regenerated reply), the reader's place
        kept: the rest is not drawn again when it need not be (``StreamRenderer.cut``)."""
        self.state.truncate(count)
        self._live.cut(count)

    def replace_entry(self, index: int, entry: ChatEntry) -> None:
        """The ``index``-th message becomes ``entry`` (another version of it), drawn where the reader is."""
        self.state.replace(index, entry)
        self.redraw(keep_place=True)

    # ------------------------------------------------------------------ rendering

    def redraw(self, keep_place: bool = False) -> None:
        """Draw the whole conversation again (after the overlay toggle, a theme change), at its end, or where
        the reader was with ``keep_place`` (a reply switched to another of its versions)."""
        self._live.redraw(keep_place)

    def _end_cursor(self) -> QTextCursor:
        """The end of the transcript's document (where the next message goes)."""
        return self._paint.end_cursor()

    def _set_tint(self, on: bool) -> None:
        """"Colour accepted drafts" toggled: everything drawn again with or without the tint."""
        self.state.tint = on
        self.redraw()

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

