"""The window's one-line status in the status bar: lasting states ("Ready", "Generating…") and notices (events such
as "Chat deleted") that give way to the lasting state after a while, without ever moving the layout."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

NOTICE_MS = 5_000  # how long a status notice (an event, not a state) stays in the status bar


class StatusLabel(QLabel):
    """The window's one-line status (in the status bar). Its text never changes the layout: the label takes
    the room it is given (it asks for none), elides what does not fit, and keeps the whole text in ``text()``
    and the tooltip. A plain QLabel asked for its text's width, so "Loading the model…" re-laid out the
    window and re-wrapped the chat."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._lasting = ""  # the state a notice covers for a while ("Ready", "Generating…")
        self.notice_timer = QTimer(self)  # a notice's time: then the lasting text is back
        self.notice_timer.setSingleShot(True)
        self.notice_timer.timeout.connect(lambda: self._show(self._lasting))
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def setText(self, text: str) -> None:
        """A lasting state: shown until the next one (it also ends a notice shown now, being newer)."""
        self.notice_timer.stop()
        self._lasting = text
        self._show(text)

    def show_notice(self, text: str, msecs: int | None = None) -> None:
        """Something that happened ("Chat deleted", "Exported 2 chats"): shown for ``msecs`` (``NOTICE_MS``),
        then the lasting state is back, as QStatusBar's temporary messages do; it must not stay for good."""
        self._show(text)
        self.notice_timer.start(NOTICE_MS if msecs is None else msecs)

    def _show(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def text(self) -> str:
        return self._full

    def displayed_text(self) -> str:
        """What the label shows: the text, elided to its width."""
        return super().text()

    def minimumSizeHint(self) -> QSize:
        return QSize(0, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(0, self.fontMetrics().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        super().setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, self.width()))
