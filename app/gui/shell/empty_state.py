"""A short line over an empty list or table ("No chats yet …"): an empty white box says nothing to a new user,
not even that something will appear there or how to get it.

``EmptyState(view, text)`` is a label on the view's viewport, shown exactly while the view's model has no rows
(it follows the model's inserts, removals and resets), muted like a placeholder and transparent to the mouse,
so a click or a drop on the view still reaches it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QAbstractItemView, QLabel
from shiboken6 import isValid


class EmptyState(QLabel):
    """``text`` over ``view`` while it lists nothing."""

    def __init__(self, view: QAbstractItemView, text: str) -> None:
        super().__init__(text, view.viewport())
        self._view = view
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        view.viewport().installEventFilter(self)
        model = view.model()
        for signal in (model.rowsInserted, model.rowsRemoved, model.modelReset, model.layoutChanged):
            signal.connect(lambda *_args: self.follow())
        self.follow()

    def follow(self) -> None:
        """Shown while the model has no rows; as wide as the viewport, a little in from its edges. (A view being
        destroyed empties its model first: nothing to show then.)"""
        if not isValid(self._view) or not isValid(self):
            return
        self.setGeometry(self._view.viewport().rect().adjusted(10, 12, -10, -4))
        self.setVisible(self._view.model().rowCount() == 0)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            self.follow()
        return False
