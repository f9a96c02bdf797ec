"""The Chat page's column beside the conversation list, top to bottom: the top bar (the model selector, Thinking,
Chat settings…, the context meter), the strips that come and go (a damaged history, engine errors, the drafting
warning, the demo note, the load bar, the context's limit, the trim note, the reading bar), the transcript with its
composer, and the notice under a cut reply with Continue. Layout, and how its strips show an event the Chat page
hands them (a load's progress, a long prompt read, the latest reply's context); the Chat page wires it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.gui.chat.banners import Banner, DemoNote, DraftingBanner, history_banner
from app.gui.chat.chat_view import ChatView
from app.gui.chat.context_strip import ContextMeter, CutNotice, LimitBanner, TrimNote, reading_label
from app.machines.remote_client import NO_TINT_REASON

PROMPT_BAR_FROM = 1024  # a prompt this long (tokens to read) shows the reading bar, with Stop to cancel it


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
        self._legend_text: str | None = None  # the tint legend, kept while a remote engine shows why it is off
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 12)
        layout.addLayout(top)
        for strip in (self.history_banner, self.banner, self.drafting_banner, self.demo_note, self.load_bar,
                      self.limit_banner, self.trim_note, self.reading_bar):
            layout.addWidget(strip)
        layout.addWidget(self.chat, 1)
        layout.addWidget(self.cut_notice)

    def show_load_progress(self, event: dict[str, Any]) -> None:
        """A model file of the load under way, read this far: shown as a bar until the load ends."""
        name = str(event.get("file") or "the model").replace("%", "%%")  # the bar's format reads % as its own
        self.load_bar.setFormat(f"Loading {name} … %p%")
        self.load_bar.setValue(round(float(event.get("fraction") or 0.0) * 100))
        self.load_bar.show()

    def show_prompt_progress(self, event: dict[str, Any]) -> None:
        """A long prompt read batch by batch: "Reading your message: 40%" (Stop cancels it)."""
        total = int(event.get("total") or 0)
        if total < PROMPT_BAR_FROM:
            return
        done = int(event.get("done") or 0)
        self.reading_bar.setFormat(reading_label(total, bool(event.get("trimmed_turns"))) + ": %p%")
        self.reading_bar.setValue(done * 100 // total)
        self.reading_bar.setVisible(done < total)

    def show_context(self, stats: dict[str, Any] | None, context_size: int, local: bool, max_tokens: int) -> None:
        """The meter, Continue and the trim note for the latest reply's stats; None: an empty chat, whose meter
        reads 0 of ``context_size``. Continue is offered for a ``local`` engine only: a remote server is asked for
        a new reply, not for more of one."""
        self.limit_banner.hide()
        if stats is None:
            self.meter.show_stats({"context_used": 0, "context_size": context_size})
            self.cut_notice.hide()
            self.trim_note.hide()
            return
        if stats.get("context_size"):
            self.meter.show_stats(stats)
        self.cut_notice.show_for(stats.get("stop_reason") if local else None, max_tokens)
        self.trim_note.show_for(stats)

    def show_tinting(self, remote: bool) -> None:
        """Per-token tint off for a remote engine, with the one-line reason where the legend was."""
        if remote:
            self._legend_text = self._legend_text or self.chat.legend.text()
            self.chat.legend.setText(NO_TINT_REASON)
        elif self._legend_text:
            self.chat.legend.setText(self._legend_text)
        self.chat.show_drafts.setEnabled(not remote)
        self.chat.show_drafts.setToolTip(NO_TINT_REASON if remote else "")
