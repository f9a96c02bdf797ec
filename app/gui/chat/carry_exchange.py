"""A chat that reached its context limit ("Stop at the limit") goes on in a new one carrying its last question and
answer. Qt-free: only the history changes here; the Chat page opens the new chat and puts an unanswered question
back into the message box."""

from __future__ import annotations

from app.chats.history import Conversation, HistoryStore


def carry_last_exchange(history: HistoryStore, conversation: Conversation) -> tuple[int, str | None]:
    """A new conversation with ``conversation``'s title, system prompt and settings, holding its last answered
    question and its answer. Returns the new conversation's id and the text of a last question that was never
    answered (removed from the old chat, so it can go back into the box), or None."""
    messages = [m for m in history.messages(conversation.id) if m.role in ("user", "assistant")]
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    unanswered = last_user is not None and last_user == len(messages) - 1
    carried = messages[:last_user] if unanswered else messages
    exchange = carried[-2:] if len(carried) >= 2 and carried[-2].role == "user" else carried[-1:]
    created = history.create_conversation(conversation.title, conversation.system_prompt, conversation.settings)
    for message in exchange:
        history.add_message(created, message.role, message.content, message.stats)
    if unanswered and last_user is not None:
        history.delete_messages_from(conversation.id, messages[last_user].id)
        return created, messages[last_user].content
    return created, None
