"""Per-chat settings: the system prompt (from a preset or written), thinking on or off, and sampling.

Stored with the conversation in the history (``Conversation.settings`` and ``system_prompt``); Qt-free.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from app.engine.sampling import SamplingParams
from app.engine.session import ChatOptions

PRESETS: dict[str, str] = {
    "Helpful assistant": "You are a helpful assistant.",
    "Concise": "You are a helpful assistant. Answer briefly and precisely; no preamble.",
    "Programmer": "You are an expert programmer. Answer with working code in fenced blocks and short explanations.",
    "Tutor": "You are a patient tutor. Explain step by step and check understanding with a question at the end.",
    "None": "",
}
DEFAULT_PRESET = "Helpful assistant"
CUSTOM = "Custom"


@dataclass
class ChatSettings:
    preset: str = DEFAULT_PRESET  # a PRESETS key, or CUSTOM for a written system prompt
    system_prompt: str = PRESETS[DEFAULT_PRESET]
    thinking: bool = True
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int = 1
    max_tokens: int = 1024

    def options(self) -> ChatOptions:
        """The engine's options for a reply in this chat."""
        return ChatOptions(max_tokens=self.max_tokens, thinking=self.thinking, sampling=SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
            repeat_penalty=self.repeat_penalty, seed=self.seed))

    def to_dict(self) -> dict[str, Any]:
        """What the history keeps in ``Conversation.settings`` (the system prompt has its own column)."""
        data = asdict(self)
        del data["system_prompt"]
        return data

    @classmethod
    def from_conversation(cls, system_prompt: str, settings: dict[str, Any]) -> ChatSettings:
        """A saved chat's settings; unknown keys are ignored and missing or mistyped ones take defaults."""
        chat = cls(system_prompt=system_prompt)
        for f in fields(cls):
            if f.name == "system_prompt" or f.name not in settings:
                continue
            value, default = settings[f.name], getattr(chat, f.name)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                value = float(value) if ok else value
            else:
                ok = isinstance(value, type(default)) and not isinstance(value, bool)
            if ok:
                setattr(chat, f.name, value)
        if "preset" not in settings:  # a chat saved before presets: its prompt is its own
            chat.preset = next((name for name, text in PRESETS.items() if text == system_prompt), CUSTOM)
        return chat
