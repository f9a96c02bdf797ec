"""Render the model's own chat template (Jinja, from the GGUF) into the prompt text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.core.errors import EngineError

# The fallback when a GGUF carries no template: Qwen's ChatML.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def _raise(message: str) -> None:
    raise TemplateError(message)


def render(template: str | None, messages: list[Message], *, thinking: bool = True,
           add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages``; ``thinking`` maps to Qwen's ``enable_thinking`` switch."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    context: dict[str, Any] = {
        "messages": [m.to_dict() for m in messages],
        "add_generation_prompt": add_generation_prompt,
        "enable_thinking": thinking,
        "bos_token": "",
        "eos_token": "<|im_end|>",
    }
    try:
        return env.from_string(template or CHATML).render(**context)
    except TemplateError as exc:
        raise EngineError(f"The model's chat template could not be rendered: {exc}",
                          "The GGUF's tokenizer.chat_template is broken; use a release file.") from exc
