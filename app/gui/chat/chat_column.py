"""The Chat page's column beside the conversation list, top to bottom: the top bar (the model selector, Thinking,
Chat settings…, the context meter), the strips that come and go (a damaged history, engine errors, the drafting
warning, the demo note, the load bar, the context's limit, the trim note, the reading bar), the transcript with its
composer, and the notice under a cut reply with Continue. Layout only: the Chat page wires it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.gui.chat.banners import Banner, DemoNote, DraftingBanner, history_banner
from app.gui.chat.chat_view import ChatView
from app.gui.chat.context_strip import ContextMeter, CutNotice, LimitBanner, TrimNote


class ChatColumn(QWidget):
    """``selector`` first in the top bar; ``damaged_copy``: where a damaged chat history was copied (None: it was
    not), said in a banner that stays until closed."""

    def __init__(self, selector: QWidget, damaged_copy: Path | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        top = QHBoxLayout()
        top.addWidget(selector)
        self.thinking_box = QCheckBox("Thinking")
        self.thinking_box.setToolTip("Let the model think in a <think> block before answering (this chat)")
        top.addSpacing(4)  # with the context meter shown the bar still fits a 1024-wide screen
        top.addWidget(self.thinking_box)
        self.chat_settings_button = QPushButton("Chat settings…")
        top.addWidget(self.chat_settings_button)
        top.addStretch(1)
        self.meter = ContextMeter()
        top.addWidget(self.meter)
        self.banner = Banner()  # the engine's errors; a load hides it
        self.drafting_banner = DraftingBanner()
        self.demo_note = DemoNote()  # shown by the window while the demo model is the chat's model
        self.load_bar = QProgressBar()  # "Loading target.gguf … 43%" while a load reads its model files
        self.load_bar.setRange(0, 100)
        self.load_bar.hide()
        self.reading_bar = QProgressBar()  # "Reading your message: 40%" while a long prompt is read (Stop cancels)
        self.reading_bar.setRange(0, 100)
        self.reading_bar.hide()
        self.cut_notice = CutNotice()
        self.trim_note = TrimNote()
        self.limit_banner = LimitBanner()
        self.history_banner = history_banner(damaged_copy)
        self.chat = ChatView()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.addLayout(top)
        for strip in (self.history_banner, self.banner, self.drafting_banner, self.demo_note, self.load_bar,
                      self.limit_banner, self.trim_note, self.reading_bar):
            layout.addWidget(strip)
        layout.addWidget(self.chat, 1)
        layout.addWidget(self.cut_notice)
