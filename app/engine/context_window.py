"""What of a conversation goes into the context: the overflow policy, applied before any work.

A conversation grows past any context in the end. Two policies (``OVERFLOW_POLICIES``):

- ``"trim"`` (the default): keep the system prompt and the latest turns, dropping whole oldest turns (a user
  message and the replies after it) until the prompt leaves room for a reply. qwen35's recurrent layers cannot
  be shifted, so a trim means the kept turns are read again; to pay that rarely, a trim leaves a quarter of the
  context free (``reply_room``), and the next turns keep the same first turn (``start``) until the context fills
  again, so their prompts extend the evaluated one and only the new message is read.
- ``"stop"``: nothing is dropped; a prompt that leaves no room for a reply is refused with a ``ContextFullError``
  whose ``policy`` is ``"stop"``, so the window can offer a new chat carrying the last exchange.

Either way a single message that cannot fit even alone (with the system prompt) is refused before any work,
in words that say its size and the context's.

Qt-free and native-free: the token count comes in as a function (the session's tokenizer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.errors import ContextFullError
from app.engine.chat_template import Message
from app.engine.config import OVERFLOW_POLICIES, OverflowPolicy

__all__ = ["OVERFLOW_POLICIES", "OverflowPolicy", "Window", "fit_conversation", "reply_room"]
MIN_REPLY_ROOM = 64  # tokens a reply gets at least; a prompt that leaves fewer is trimmed (or refused)

Counter = Callable[[list[Message]], int]  # the rendered, tokenized prompt's length for these messages


@dataclass(frozen=True)
class Window:
    """The messages that go into the context, and what was left out."""

    messages: list[Message]
    prompt_tokens: int  # the rendered prompt's length (without a continued reply's tokens)
    dropped_turns: int  # whole oldest turns left out (0: the whole conversation is in)
    start: int  # the index (among the non-system messages) of the first turn kept


def reply_room(n_ctx: int, max_tokens: int) -> int:
    """Tokens a trim keeps free for this reply and the next turns: a quarter of the context, or the reply cap when
    it is larger (up to half the context), never less than ``MIN_REPLY_ROOM``."""
    room = max(n_ctx // 4, min(max_tokens, n_ctx // 2))
    return max(room, MIN_REPLY_ROOM)


def _reply_need(n_ctx: int, max_tokens: int) -> int:
    """Room a prompt must leave to keep its first turn (no new trim): the reply cap, or an eighth of the context."""
    return max(min(max_tokens, n_ctx // 2) if max_tokens > 0 else n_ctx // 8, MIN_REPLY_ROOM)


def _turn_starts(rest: list[Message]) -> list[int]:
    """Where each turn begins among the non-system messages: at every user message (and at 0)."""
    starts = [i for i, m in enumerate(rest) if m.role == "user"]
    return starts if starts and starts[0] == 0 else [0, *starts]


def fit_conversation(messages: list[Message], count: Counter, n_ctx: int, *, policy: OverflowPolicy = "trim",
                     max_tokens: int = 0, extra_tokens: int = 0, start: int = 0) -> Window:
    """The messages to render for the next reply within ``n_ctx`` tokens.

    ``extra_tokens`` are tokens that follow the rendered prompt (a continued reply's); ``start`` is the first turn
    the previous reply kept (``Window.start``), so a trimmed conversation stays trimmed at the same place while
    it fits. Raises ``ContextFullError`` when the latest message cannot fit, or under the ``"stop"`` policy when
    the prompt leaves no room for a reply.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system):]
    starts = _turn_starts(rest)
    last = starts[-1]  # the latest turn (the message being sent) is never dropped

    def size(first: int) -> int:
        return count(system + rest[first:]) + extra_tokens

    whole = size(0)
    if whole + MIN_REPLY_ROOM <= n_ctx:
        return Window(list(messages), whole - extra_tokens, 0, 0)
    alone = size(last)
    if alone + MIN_REPLY_ROOM > n_ctx:
        what = "This reply and its message need" if extra_tokens else "Your message needs"
        raise ContextFullError(
            f"{what} {alone:,} tokens with the system prompt, more than the context of {n_ctx:,} tokens "
            f"can hold with room for a reply.",
            "Shorten the message (or split it over several), or raise the context size in Settings.",
            policy=policy, used=whole, context=n_ctx)
    if policy == "stop":
        raise ContextFullError(
            f"The conversation has reached the context limit: {whole:,} of {n_ctx:,} tokens.",
            "Start a new chat (it can carry the last exchange), switch this chat's overflow policy to keep the "
            "latest turns, or raise the context size in Settings.",
            policy=policy, used=whole, context=n_ctx)
    room = reply_room(n_ctx, max_tokens)
    # the turn the previous reply started from still leaves room for this reply: keep it, so this prompt extends
    # the evaluated one (only the new message is read) instead of re-reading every kept turn again
    if 0 < start < last and start in starts and size(start) + _reply_need(n_ctx, max_tokens) <= n_ctx:
        first = start
    else:
        first = next((s for s in starts if s >= start and size(s) + room <= n_ctx), last)
    dropped = len([s for s in starts if s < first])
    return Window(system + rest[first:], size(first) - extra_tokens, dropped, first)
