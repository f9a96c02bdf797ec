"""The conversation list beside the chat: newest first, a search box, and "New chat".

Reads the chat history (``HistoryStore``); emits ``conversation_selected(id)`` when the user picks a
conversation and ``new_chat_requested`` for the button. The window decides what either means.
"""

from __future__ import annotations

from PySide6 import QtGui
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLineEdit, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from app.history import HistoryStore


class Sidebar(QWidget):
    conversation_selected = Signal(int)
    new_chat_requested = Signal()

    def __init__(self, history: HistoryStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = history
        self.current_id: int | None = None

        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.new_chat_requested.emit)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _text: self.refresh())
        self.list = QListWidget()
        # a long title is elided to the list's width (its tooltip has all of it), never scrolled sideways
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.currentItemChanged.connect(self._picked)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        self.setMinimumWidth(180)
        self.setMaximumWidth(420)  # the splitter beside it sets the width in between (remembered)
        self.refresh()

    def refresh(self) -> None:
        """List the conversations matching the search box again, keeping the current one highlighted."""
        self.list.blockSignals(True)
        try:
            self.list.clear()
            for conv in self.history.conversations(self.search.text().strip()):
                item = QListWidgetItem(conv.title or "Untitled")
                item.setData(Qt.ItemDataRole.UserRole, conv.id)
                item.setToolTip(QtGui.Qt.convertFromPlainText(conv.title))  # a title is text, never HTML
                self.list.addItem(item)
                if conv.id == self.current_id:
                    self.list.setCurrentItem(item)
            if self.current_id is None:
                self.list.setCurrentRow(-1)
        finally:
            self.list.blockSignals(False)

    def set_current(self, conversation_id: int | None) -> None:
        """Mark the window's current conversation (None: a new, unsaved chat) without emitting anything."""
        self.current_id = conversation_id
        self.refresh()

    def conversation_ids(self) -> list[int]:
        """The ids listed, top to bottom."""
        return [int(self.list.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.list.count())]

    def _picked(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if item is None:
            return
        conversation_id = int(item.data(Qt.ItemDataRole.UserRole))
        if conversation_id != self.current_id:
            self.current_id = conversation_id
            self.conversation_selected.emit(conversation_id)
