"""The conversation list beside the chat: pinned chats first, then newest first, a search box, and "New chat".

Reads and changes the chat history (``HistoryStore``): a chat is renamed in place (F2, or "Rename" in its
context menu: the title becomes an edit box), pinned or unpinned (kept above newer chats, marked with a pin),
or deleted after the user confirmed it (Delete in the list, or the context menu). Emits
``conversation_selected(id)`` when the user picks a conversation, ``new_chat_requested`` for the button and
``conversation_deleted(id)`` after a delete; the window decides what each means for the chat it shows.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from PySide6 import QtGui
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QIcon, QKeySequence, QPainter, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.chats.history import HistoryError, HistoryStore
from app.gui.shell import icons
from app.gui.shell.confirm_dialog import confirm_destructive
from app.gui.shell.empty_state import EmptyState
from app.gui.shell.palette import LIGHT, Palette

RENAME_KEY = "F2"
DELETE_KEY = "Del"
NO_CHATS = "No chats yet. Your conversations are kept here."
NO_MATCH = "No chat matches the search."
DATE_ROLE = int(Qt.ItemDataRole.UserRole) + 2  # the short date shown at the row's right (issue 36 item 9)


def chat_date(when: float, now: float) -> str:
    """When a chat last changed, as short as tells it: today the time (``14:05``), this past week the weekday
    (``Mon``), earlier the date (``3 Nov``; with the year when it is not this year's)."""
    then, today = datetime.fromtimestamp(when), datetime.fromtimestamp(now)
    if then.date() == today.date():
        return then.strftime("%H:%M")
    if today.date() - timedelta(days=6) <= then.date() < today.date():
        return then.strftime("%a")
    if then.year == today.year:
        return f"{then.day} {then.strftime('%b')}"
    return f"{then.day} {then.strftime('%b %Y')}"


class DatedRows(QStyledItemDelegate):
    """Draws a row as usual with the title elided short of the date, and the date right-aligned in a muted
    colour: the title stays the item's text (renaming edits the title alone)."""

    def __init__(self, muted: Callable[[], QColor], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._muted = muted

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        date = str(index.data(DATE_ROLE) or "")
        if not date:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        widget = opt.widget
        style = widget.style() if widget is not None else None
        if style is None:
            super().paint(painter, option, index)
            return
        metrics = opt.fontMetrics
        gap = metrics.horizontalAdvance(date) + 14
        text_rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        opt.text = metrics.elidedText(opt.text, Qt.TextElideMode.ElideRight,
                                      max(text_rect.width() - gap, 0))
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        painter.save()
        painter.setPen(opt.palette.highlightedText().color() if selected
                       else self._muted())
        rect = opt.rect.adjusted(0, 0, -6, 0)
        painter.drawText(rect, int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), date)
        painter.restore()


class Sidebar(QWidget):
    conversation_selected = Signal(int)
    new_chat_requested = Signal()
    conversation_deleted = Signal(int)

    def __init__(self, history: HistoryStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.current_id: int | None = None
        self._colours = LIGHT
        self._filling = False  # ``refresh`` is filling the list: its item changes are not renames

        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip("Start a new chat (Ctrl+N)")
        self.new_button.clicked.connect(self.new_chat_requested.emit)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _text: self.refresh())
        self.list = QListWidget()
        # a long title is elided to the list's width (its tooltip has all of it), never scrolled sideways
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setIconSize(QSize(14, 14))  # the pin mark, the size of a capital letter
        self.now: Callable[[], float] = time.time  # the clock the dates are told against (tests set it)
        self.list.setItemDelegate(DatedRows(lambda: QColor(self._colours.muted), self.list))
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)  # F2 and the menu start a rename
        self.list.currentItemChanged.connect(self._picked)
        self.list.itemChanged.connect(self._edited)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.empty = EmptyState(self.list, NO_CHATS)  # an empty list says what will be there

        # Delete only while the list has the focus, where it cannot be a key meant for a text box (F2 is the
        # window's: it renames the open chat from anywhere)
        self.delete_action = QAction("Delete chat…", self.list)
        self.delete_action.setShortcut(QKeySequence(DELETE_KEY))
        self.delete_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.delete_action.triggered.connect(lambda: self.delete(self.current_id))
        self.list.addAction(self.delete_action)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        # with the chat beside it (its top bar showing the context meter) the window fits a 1024-wide screen
        self.setMinimumWidth(136)
        self.setMaximumWidth(420)  # the splitter beside it sets the width in between (remembered)
        self.refresh()

    def refresh(self) -> None:
        """List the conversations matching the search box again, keeping the current one highlighted."""
        self.list.blockSignals(True)
        self._filling = True
        try:
            self.list.clear()
            pin = icons.icon("pin", self._colours.muted)
            blank = QPixmap(self.list.iconSize())  # unpinned titles start where the pinned ones do
            blank.fill(Qt.GlobalColor.transparent)
            height = self.list.fontMetrics().height() + 10  # rows of one height, pinned or not
            for conv in self.history.conversations(self.search.text().strip()):
                item = QListWidgetItem(conv.title or "Untitled")
                item.setData(Qt.ItemDataRole.UserRole, conv.id)
                item.setData(Qt.ItemDataRole.UserRole + 1, conv.pinned)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                item.setData(DATE_ROLE, chat_date(conv.updated, self.now()))
                tip = QtGui.Qt.convertFromPlainText(conv.title)  # a title is text, never HTML
                changed = datetime.fromtimestamp(conv.updated).strftime("%A %d %B %Y, %H:%M")
                item.setToolTip(tip + f"<p>Last message: {changed}</p>"
                                + ("<p><i>Pinned: stays at the top</i></p>" if conv.pinned else ""))
                item.setIcon(pin if conv.pinned else QIcon(blank))
                item.setSizeHint(QSize(1, height))
                self.list.addItem(item)
                if conv.id == self.current_id:
                    self.list.setCurrentItem(item)
            if self.current_id is None:
                self.list.setCurrentRow(-1)
            self.empty.setText(NO_MATCH if self.search.text().strip() else NO_CHATS)
        finally:
            self._filling = False
            self.list.blockSignals(False)

    def set_current(self, conversation_id: int | None) -> None:
        """Mark the window's current conversation (None: a new, unsaved chat) without emitting anything."""
        self.current_id = conversation_id
        self.refresh()

    def set_palette(self, colours: Palette) -> None:
        """The pin mark in the theme's colours."""
        self._colours = colours
        self.refresh()

    def dates(self) -> list[str]:
        """The dates shown beside the titles, top to bottom (what a user reads; for tests)."""
        return [str(self.list.item(i).data(DATE_ROLE)) for i in range(self.list.count())]

    def conversation_ids(self) -> list[int]:
        """The ids listed, top to bottom."""
        return [int(self.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.list.count())]

    def pinned_ids(self) -> list[int]:
        """The ids listed with the pin mark, top to bottom."""
        return [conversation_id for row, conversation_id in enumerate(self.conversation_ids())
                if self.list.item(row).data(Qt.ItemDataRole.UserRole + 1)]

    # ------------------------------------------------------------------ rename, pin, delete

    def item_for(self, conversation_id: int | None) -> QListWidgetItem | None:
        """The list's row of a conversation, or None (not listed: filtered out by the search, or unsaved)."""
        if conversation_id is None:
            return None
        return next((self.list.item(row) for row, listed in enumerate(self.conversation_ids())
                     if listed == conversation_id), None)

    def begin_rename(self, conversation_id: int | None) -> bool:
        """Turn the chat's title into an edit box (Enter keeps the new title, Esc the old one); False when the
        chat is not listed or the list is disabled (a reply is streaming)."""
        item = self.item_for(conversation_id)
        if item is None or not self.isEnabled():
            return False
        self.list.scrollToItem(item)
        self.list.setFocus()
        self.list.editItem(item)
        return True

    def rename(self, conversation_id: int, title: str) -> None:
        """Give the chat a new title (blank: the old one stays)."""
        title = " ".join(title.split())
        if title:
            with contextlib.suppress(HistoryError):  # deleted meanwhile (``python -m app history delete``)
                self.history.rename(conversation_id, title)
        self.refresh()

    def is_pinned(self, conversation_id: int | None) -> bool:
        item = self.item_for(conversation_id)
        return bool(item is not None and item.data(Qt.ItemDataRole.UserRole + 1))

    def toggle_pin(self, conversation_id: int | None) -> None:
        """Pin the chat (it stays at the top), or unpin a pinned one."""
        if conversation_id is not None and self.item_for(conversation_id) is not None and self.isEnabled():
            self.set_pinned(conversation_id, not self.is_pinned(conversation_id))

    def set_pinned(self, conversation_id: int, pinned: bool) -> None:
        with contextlib.suppress(HistoryError):
            self.history.set_pinned(conversation_id, pinned)
        self.refresh()

    def delete(self, conversation_id: int | None, confirm: bool = True) -> bool:
        """Delete the chat for good once the user confirmed it; True when it was deleted."""
        item = self.item_for(conversation_id)
        if conversation_id is None or item is None or not self.isEnabled():
            return False
        if confirm and not self.confirm_delete(item.text()):
            return False
        try:
            self.history.delete(conversation_id)
        except HistoryError:
            return False
        if self.current_id == conversation_id:
            self.current_id = None
        self.refresh()
        self.conversation_deleted.emit(conversation_id)
        return True

    def confirm_delete(self, title: str) -> bool:
        """Ask before a chat is deleted (Cancel is the default button: Enter or Esc keeps it)."""
        return confirm_destructive(self, "Delete chat", f"Delete the chat \u201c{title}\u201d?",
                                   "Its messages are removed from the history; this cannot be undone.", "Delete")

    def context_menu(self, conversation_id: int) -> QMenu:
        """Rename, Pin or Unpin, Delete: for the chat under the mouse, whichever chat is open."""
        pinned = self.is_pinned(conversation_id)
        menu = QMenu(self)
        # the keys are shown after a tab, not bound: the sidebar's own actions answer them
        menu.addAction(f"Rename\t{RENAME_KEY}", lambda: self.begin_rename(conversation_id))
        menu.addAction("Unpin" if pinned else "Pin to the top", lambda: self.set_pinned(conversation_id, not pinned))
        menu.addSeparator()
        menu.addAction(f"Delete…\t{DELETE_KEY}", lambda: self.delete(conversation_id))
        return menu

    def _context_menu(self, position: QPoint) -> None:
        item = self.list.itemAt(position)
        if item is None or not self.isEnabled():
            return
        menu = self.context_menu(int(item.data(Qt.ItemDataRole.UserRole)))
        menu.exec(self.list.viewport().mapToGlobal(position))
        menu.deleteLater()

    def _edited(self, item: QListWidgetItem) -> None:
        """The edit box closed with Enter: the new title is saved. The list is filled again once the editor
        has closed (clearing it now would delete the item the editor is still writing to)."""
        if self._filling:
            return
        title = " ".join(item.text().split())
        if title:
            with contextlib.suppress(HistoryError):  # deleted meanwhile (``python -m app history delete``)
                self.history.rename(int(item.data(Qt.ItemDataRole.UserRole)), title)
        QTimer.singleShot(0, self.refresh)  # a blank title shows the old one again

    def _picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if item is None:
            return
        conversation_id = int(item.data(Qt.ItemDataRole.UserRole))
        if conversation_id != self.current_id:
            self.current_id = conversation_id
            self.conversation_selected.emit(conversation_id)
