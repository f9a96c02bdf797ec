"""What the chat says about its context (issue 34): the meter ("3.1k / 32k tokens", warning near the end), a cut
reply's Continue, the note that the oldest turns were left out, and "stop at the limit"'s offer of a new chat.

The words come from the engine's stats (``engine.stats.context_meter``); these widgets only show them.
"""

from __future__ import annotations

import html
import math
import time
from typing import Any

from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QWidget

from app.engine.stats import context_meter, context_nearly_full
from app.gui.chat.alert_strip import alert_strip

CUT_REASONS = ("length", "context_full")
# while a reply streams the meter changes at most this often: under 1,000 tokens its text changes with every token,
# and each change lays the chat's top bar (and the window) out again (issue 36 item 2); the reply's end shows all
STREAMING_METER_INTERVAL_S = 0.5  # a reply that stopped for one of these can be continued


class ContextMeter(QLabel):
    """The context meter in the chat's top bar: tokens in the context of its size, amber from 90% on."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("context_meter")
        self.setToolTip("Tokens of this conversation in the model's context, of the context's size. Near the end, "
                        "the chat's overflow policy decides: the oldest turns are left out, or it stops.")
        self.warning = False
        self._styled = False  # its style sheet set once (then only when the warning changes)
        self._streamed_at = -math.inf  # time.monotonic() of the latest ``show_streaming`` that changed it
        self.show_stats({})

    def show_stats(self, stats: dict[str, Any]) -> None:
        """The meter for these stats (a reply's, or ``{"context_used": 0, "context_size": n}``); blank without a
        context size (a remote server does not say)."""
        self.setText(context_meter(stats))  # the same text again is no change
        warning = context_nearly_full(stats)
        if warning != self.warning or not self._styled:  # a style sheet set re-polishes and lays the window out
            self.warning, self._styled = warning, True
            self.setStyleSheet("#context_meter { color: #b45309; font-weight: 600; }" if warning else "")

    def show_streaming(self, stats: dict[str, Any]) -> None:
        """``show_stats`` for a streaming reply's newest stats, at most every ``STREAMING_METER_INTERVAL_S``."""
        now = time.monotonic()
        if now - self._streamed_at >= STREAMING_METER_INTERVAL_S:
            self._streamed_at = now
            self.show_stats(stats)


class CutNotice(QFrame):
    """Under a reply cut by its cap or by the full context: why, and Continue (the same reply goes on)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, layout = alert_strip(self, "cut_notice", "#eef6ff", "#3b82f6", "#1e3a8a")
        self.continue_button = QPushButton("Continue")
        self.continue_button.setToolTip("Go on with this reply where it stopped")
        layout.addWidget(self.continue_button)

    def show_for(self, stop_reason: str | None, max_tokens: int) -> None:
        """Shown for a reply that stopped for ``stop_reason`` (hidden unless it was cut)."""
        if stop_reason not in CUT_REASONS:
            self.hide()
            return
        why = (f"the reply cap ({max_tokens:,} tokens, in Chat settings)" if stop_reason == "length" and max_tokens
               else "the reply cap" if stop_reason == "length" else "the full context")
        self.text.setText(f"This reply was cut by {why}. Continue goes on with it.")
        self.show()


class TrimNote(QFrame):
    """A quiet note when the oldest turns were left out of the model's context to fit (the default policy)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, _layout = alert_strip(self, "trim_note", "#f3f4f6", "#9ca3af", "#374151")

    def show_for(self, stats: dict[str, Any]) -> None:
        turns = int(stats.get("trimmed_turns") or 0)
        if turns <= 0:
            self.hide()
            return
        read = int(stats.get("prompt_tokens") or 0)
        again = f" It read {read:,} tokens again to fit." if read > 0 and not stats.get("reused_tokens") else ""
        which = "The oldest turn of this chat is" if turns == 1 else f"The {turns} oldest turns of this chat are"
        self.text.setText(f"{which} no longer in the model's context (the system prompt and the latest turns "
                          f"are).{again}")
        self.show()


class LimitBanner(QFrame):
    """"Stop at the limit" reached: the figures, and a new chat that carries the last exchange."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.text, layout = alert_strip(self, "limit_banner", "#fff4d6", "#d97706", "#78350f")
        self.new_chat_button = QPushButton("New chat with the last exchange")
        layout.addWidget(self.new_chat_button)

    def show_error(self, event: dict[str, Any]) -> None:
        message = html.escape(str(event.get("message") or ""), quote=False)
        advice = html.escape(str(event.get("advice") or ""), quote=False)
        self.text.setText(f"<b>{message}</b>" + (f"<br>{advice}" if advice else ""))
        self.show()


def reading_label(total: int, trimmed: bool) -> str:
    """The prompt bar's words while a long prompt is read: a pasted document, or a trimmed chat read again."""
    return f"Re-reading {total:,} tokens" if trimmed else f"Reading your message ({total:,} tokens)"
