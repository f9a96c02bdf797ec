"""The conversation as the chat view shows it: its messages, each with its pieces' provenance and a stats footer.

Qt-free (the view draws it, the chat page saves it): an entry keeps where each piece of a reply came from (an
accepted draft or the target's own pick), which the history stores and the view tints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.chats.history import StoredMessage
from app.engine.stats import acceptance_words
from app.gui.chat.markdown import DraftSpans, split_thinking


@dataclass
class ChatEntry:
    """One message of the conversation as shown: its pieces with provenance, and a stats footer."""

    role: str
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, "user" | "draft" | "target")
    footer: str = ""
    final: str | None = None
    message_id: int | None = None  # its row in the history, once saved
    thinking_open: bool = False
    version_ids: tuple[int, ...] = ()  # a regenerated reply's versions, oldest first (empty: it has one)

    @property
    def versions(self) -> int:
        """How many versions the reply has (its header shows ‹ 2/3 › from two on)."""
        return max(1, len(self.version_ids))

    @property
    def version(self) -> int:
        """Which of them this is, from 1 (1 when it has one version)."""
        return self.version_ids.index(self.message_id) + 1 if self.message_id in self.version_ids else 1

    def version_step(self, step: int) -> int | None:
        """The history id of the version ``step`` away (-1 older, +1 newer); None past either end."""
        at = self.version - 1 + step
        return self.version_ids[at] if self.versions > 1 and 0 <= at < len(self.version_ids) else None

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


def entry_from_stored(message: StoredMessage, version_ids: tuple[int, ...] = ()) -> ChatEntry:
    """A saved message as shown: its text, with the accepted drafts its saved provenance names (so the tint
    comes back), for a reply the footer its saved stats give, and the ids of its versions (``version_ids``:
    regenerated replies keep the earlier ones, which its arrows switch between)."""
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
    entry = ChatEntry(message.role, pieces, message_id=message.id, version_ids=version_ids)
    if message.role == "assistant" and message.stats and message.stats.get("stop_reason") != "interrupted":
        entry.footer = describe_reply({"stats": message.stats, "stop_reason": message.stats.get("stop_reason")})
    elif message.role == "assistant" and not message.complete:  # saved as it streamed, never finished
        reason = (message.stats or {}).get("stop_reason")
        entry.footer = STOP_WORDS["interrupted"] if reason == "interrupted" else UNFINISHED_WORDS
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
    acceptance = acceptance_words(stats)
    if acceptance is not None:
        parts.append(acceptance.text)
    if stats.get("tokens_per_pass") is not None:
        parts.append(f"{stats['tokens_per_pass']:.2f} tokens/pass")
    reason = event.get("stop_reason")
    if reason and reason != "eos":  # a reply that ended on its own says nothing more
        parts.append(STOP_WORDS.get(str(reason), str(reason)))
    return " · ".join(parts)


# why a reply ended, in the footer's words (the engine's ``stop_reason``)
STOP_WORDS = {
    "length": "cut by the reply cap",
    "context_full": "cut: the context is full",
    "cancelled": "stopped (cancelled)",
    "stop": "ended at a stop word",
    "interrupted": "interrupted: the app was closed before the reply ended",
}
# a reply saved as it streamed that never finished and says no more (the app was killed, or an error ended it)
UNFINISHED_WORDS = "interrupted: the reply did not finish"
INTERRUPTED_STATS: dict[str, Any] = {"stop_reason": "interrupted"}  # what a reply cut by quitting is saved with
