"""Per-chat settings: the system prompt (from a preset or written), thinking on or off, and sampling.

Stored with the conversation in the history (``Conversation.settings`` and ``system_prompt``); Qt-free.

The seed: in the "random" mode (the default) every reply at a temperature above 0 draws a fresh seed, so
regenerate gives another reply; the "fixed" mode uses ``seed`` for every reply. The seed a reply used is
kept with its stats, so a reply can be reproduced by setting that seed as the fixed one.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from app.core import defaults
from app.engine.config import CHAT_MAX_TOKENS, CHAT_SAMPLING, OVERFLOW_POLICIES, ChatOptions, SamplingParams

PRESETS: dict[str, str] = {
    "Helpful assistant": "You are a helpful assistant.",
    "Concise": "You are a helpful assistant. Answer briefly and precisely; no preamble.",
    "Programmer": "You are an expert programmer. Answer with working code in fenced blocks and short explanations.",
    "Tutor": "You are a patient tutor. Explain step by step and check understanding with a question at the end.",
    "None": "",
}
DEFAULT_PRESET = "Helpful assistant"
CUSTOM = "Custom"

SeedMode = Literal["random", "fixed"]
SEED_MODES: tuple[SeedMode, ...] = ("random", "fixed")
SEED_LIMIT = 2**31  # seeds are drawn below this, so any of them can be typed back in as the fixed seed
REPLY_TOKENS_MAX = 1 << 20  # a reply cap or thinking budget above any context is kept as no more than this
OLD_DEFAULT_MAX_TOKENS = 1024  # every chat's reply cap before replies ran to the end: read as no cap, not a choice
OLD_DEFAULT_SEED = 1  # the seed every chat had before the seed mode: read as the random default, not as a choice
# the chat settings dialog's ranges: a saved (or imported) chat's value outside its range, or not finite, takes the
# default (an imported history may hold anything; a 401-digit temperature once kept the window from starting)
RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0), "top_k": (0, 1000), "top_p": (0.0, 1.0), "min_p": (0.0, 1.0),
    "repeat_penalty": (0.5, 2.0), "seed": (0, SEED_LIMIT - 1), "max_tokens": (0, REPLY_TOKENS_MAX),
    "thinking_budget": (0, REPLY_TOKENS_MAX),
}


@dataclass
class ChatSettings:
    preset: str = DEFAULT_PRESET  # a PRESETS key, or CUSTOM for a written system prompt
    system_prompt: str = PRESETS[DEFAULT_PRESET]
    thinking: bool = True
    # sampling: the one set of chat defaults (``CHAT_SAMPLING``), shared with the terminal ``chat``
    temperature: float = CHAT_SAMPLING.temperature
    top_k: int = CHAT_SAMPLING.top_k
    top_p: float = CHAT_SAMPLING.top_p
    min_p: float = CHAT_SAMPLING.min_p
    repeat_penalty: float = CHAT_SAMPLING.repeat_penalty
    seed_mode: SeedMode = "random"
    seed: int = OLD_DEFAULT_SEED  # the fixed mode's seed (and the one used at temperature 0)
    max_tokens: int = CHAT_MAX_TOKENS  # 0: until the model stops or the context is full
    overflow: str = defaults.OVERFLOW_POLICY  # a full context: "trim" (keep the latest turns) or "stop"
    thinking_budget: int = 0  # thinking tokens before the thinking is closed for the answer; 0: no budget

    def reply_seed(self) -> int:
        """The seed for one reply: a fresh draw in the random mode at a temperature above 0, else ``seed``
        (temperature 0 is greedy: the seed changes nothing)."""
        if self.seed_mode == "random" and self.temperature > 0:
            return secrets.randbelow(SEED_LIMIT)
        return self.seed

    def options(self, seed: int | None = None) -> ChatOptions:
        """The engine's options for a reply in this chat, with ``seed`` (from :meth:`reply_seed`) when given."""
        return ChatOptions(max_tokens=self.max_tokens, thinking=self.thinking, overflow=self.overflow,
                           thinking_budget=self.thinking_budget, sampling=SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
            repeat_penalty=self.repeat_penalty, seed=self.seed if seed is None else seed))

    def to_dict(self) -> dict[str, Any]:
        """What the history keeps in ``Conversation.settings`` (the system prompt has its own column)."""
        data = asdict(self)
        del data["system_prompt"]
        return data

    @classmethod
    def from_conversation(cls, system_prompt: str, settings: dict[str, Any]) -> ChatSettings:
        """A saved chat's settings; unknown keys are ignored and missing or mistyped ones take defaults.

        A chat saved before the seed mode has a plain ``seed``: the old hard-coded 1 (never chosen) reads as
        the random default, any other value as the fixed seed the user set."""
        chat = cls(system_prompt=system_prompt)
        for f in fields(cls):
            if f.name == "system_prompt" or f.name not in settings:
                continue
            value, default = settings[f.name], getattr(chat, f.name)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                try:
                    value = float(value) if ok else value
                except OverflowError:  # an int too large for a float
                    ok = False
                ok = ok and math.isfinite(value)
            else:
                ok = isinstance(value, type(default)) and not isinstance(value, bool)
            if f.name == "seed_mode":
                ok = value in SEED_MODES
            elif f.name == "overflow":
                ok = value in OVERFLOW_POLICIES
            elif f.name in RANGES:
                low, high = RANGES[f.name]
                ok = ok and low <= value <= high
            if ok:
                setattr(chat, f.name, value)
        if "overflow" not in settings and chat.max_tokens == OLD_DEFAULT_MAX_TOKENS:  # saved before issue 34
            chat.max_tokens = CHAT_MAX_TOKENS
        if "seed_mode" not in settings and chat.seed != OLD_DEFAULT_SEED:
            chat.seed_mode = "fixed"
        if "preset" not in settings:  # a chat saved before presets: its prompt is its own
            chat.preset = next((name for name, text in PRESETS.items() if text == system_prompt), CUSTOM)
        return chat
