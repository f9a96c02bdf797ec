"""The overflow policy (issue 34): which turns go into the context, decided before any work.

A prompt's size here is its words plus a few tokens of template per message, a stand-in for the rendered and
tokenized prompt that the session passes (the real tokenizer is exercised in tests/integration/engine/
test_long_chats.py); the policy only ever sees a count.
"""

from __future__ import annotations

import pytest

from app.core.errors import ContextFullError
from app.engine.chat_template import Message
from app.engine.context_window import MIN_REPLY_ROOM, fit_conversation, reply_room

PER_MESSAGE = 4  # template tokens around each message


def count(messages: list[Message]) -> int:
    return sum(len(m.content.split()) + PER_MESSAGE for m in messages) + 3  # + the assistant's generation prompt


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def conversation(turns: int, size: int = 40, system: bool = True) -> list[Message]:
    messages = [Message("system", "You are terse.")] if system else []
    for t in range(turns):
        messages += [Message("user", words(size, f"q{t}-")), Message("assistant", words(size, f"a{t}-"))]
    return messages


def test_a_conversation_that_fits_is_left_whole() -> None:
    messages = [*conversation(3), Message("user", "and now?")]
    window = fit_conversation(messages, count, 4096)
    assert window.messages == messages and window.dropped_turns == 0 and window.prompt_tokens == count(messages)


def test_trim_keeps_the_system_prompt_and_the_latest_turns_dropping_whole_oldest_turns() -> None:
    messages = [*conversation(20), Message("user", "the question being sent")]
    n_ctx = 512
    window = fit_conversation(messages, count, n_ctx)
    assert window.messages[0] == messages[0]  # the system prompt stays
    assert window.messages[-1] == messages[-1]  # the message being sent stays
    assert window.messages[1].role == "user"  # whole turns: the kept part starts at a user message
    assert window.messages[1:] == messages[-(len(window.messages) - 1):]  # the latest turns, in order
    assert window.dropped_turns == (len(messages) - len(window.messages)) // 2
    # a trim leaves a reply room of a quarter of the context, so the next turns need not trim again at once
    assert window.prompt_tokens + reply_room(n_ctx, 0) <= n_ctx
    assert window.prompt_tokens == count(window.messages)


def test_the_next_turn_keeps_the_same_first_turn_while_it_fits_so_its_prompt_extends_the_evaluated_one() -> None:
    n_ctx = 512
    messages = [*conversation(20), Message("user", "next")]
    first = fit_conversation(messages, count, n_ctx)
    following = [*messages, Message("assistant", words(10, "r")), Message("user", "and the next")]
    second = fit_conversation(following, count, n_ctx, start=first.start)
    assert second.start == first.start and second.messages[:len(first.messages)] == first.messages
    # without the remembered start, the rule alone would keep more (fewer turns dropped), and so re-read them all
    fresh = fit_conversation(following, count, n_ctx)
    assert fresh.start >= first.start
    # once the kept part no longer leaves room, it trims again, further on
    longer = [*following]
    for t in range(8):
        longer += [Message("assistant", words(30, f"x{t}-")), Message("user", words(5, f"y{t}-"))]
    third = fit_conversation(longer, count, n_ctx, start=first.start)
    assert third.start > first.start and third.prompt_tokens + reply_room(n_ctx, 0) <= n_ctx


def test_a_trim_keeps_a_quarter_of_the_context_free_or_the_reply_cap_when_larger() -> None:
    assert reply_room(4096, 0) == 1024 and reply_room(4096, 200) == 1024 and reply_room(4096, 1500) == 1500
    assert reply_room(4096, 100_000) == 2048 and reply_room(128, 0) == MIN_REPLY_ROOM
    messages = [*conversation(20), Message("user", "go")]
    capped = fit_conversation(messages, count, 1024, max_tokens=400)
    uncapped = fit_conversation(messages, count, 1024)
    assert capped.prompt_tokens + 400 <= 1024 and capped.dropped_turns >= uncapped.dropped_turns


def test_a_continued_reply_counts_its_tokens() -> None:
    messages = [*conversation(20), Message("user", "go")]
    plain = fit_conversation(messages, count, 1024)
    continued = fit_conversation(messages, count, 1024, extra_tokens=300)
    assert continued.dropped_turns > plain.dropped_turns
    assert continued.prompt_tokens + 300 + reply_room(1024, 0) <= 1024


def test_stop_policy_refuses_with_the_figures_and_drops_nothing() -> None:
    messages = [*conversation(20), Message("user", "go")]
    with pytest.raises(ContextFullError) as refused:
        fit_conversation(messages, count, 512, policy="stop")
    error = refused.value
    assert error.policy == "stop" and error.context == 512 and error.used == count(messages)
    assert "512" in error.message and "new chat" in error.advice
    assert error.to_dict()["policy"] == "stop"
    # while it fits, stop changes nothing
    short = [*conversation(2), Message("user", "go")]
    assert fit_conversation(short, count, 512, policy="stop").messages == short


@pytest.mark.parametrize("policy", ["trim", "stop"])
def test_a_message_larger_than_the_whole_context_is_refused_before_any_work(policy: str) -> None:
    messages = [*conversation(2), Message("user", words(600, "w"))]
    with pytest.raises(ContextFullError) as refused:
        fit_conversation(messages, count, 512, policy="trim" if policy == "trim" else "stop")
    assert "Your message needs" in refused.value.message and "512" in refused.value.message
    assert "Shorten the message" in refused.value.advice


def test_a_conversation_without_a_system_prompt_or_starting_with_an_assistant_message() -> None:
    messages = [Message("assistant", "Hello! Ask me anything."), *conversation(20, system=False)[0:],
                Message("user", "go")]
    window = fit_conversation(messages, count, 400)
    assert window.messages[-1] == messages[-1] and window.dropped_turns >= 1
    assert window.messages[0].role == "user"
