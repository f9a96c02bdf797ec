"""The engine worker's message protocol: one JSON object per line, both ways.

Requests (caller → worker): ``load`` {config}, ``generate`` {messages, options}, ``cancel``, ``reset``,
``shutdown``. Events (worker → caller): ``ready``, ``load_progress`` {file, fraction} (a load's model files as
they are read, throttled), ``loaded``, ``token`` {token, piece, provenance, stats},
``done`` {tokens, provenance, text, stop_reason, stats}, ``error`` {error, message, advice, log_tail}.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, SamplingParams


def encode(kind: str, **fields: Any) -> str:
    return json.dumps({"kind": kind, **fields}, default=str) + "\n"


def decode(line: str) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"not a protocol message: {line[:80]!r}")
    return data


def config_to_dict(config: EngineConfig) -> dict[str, Any]:
    return asdict(config)


def config_from_dict(data: dict[str, Any]) -> EngineConfig:
    fields = dict(data)
    fields["target"] = Path(fields["target"])
    fields["draft"] = Path(fields["draft"]) if fields.get("draft") else None
    fields["rpc"] = tuple(fields.get("rpc") or ())
    fields["depth_memory"] = Path(fields["depth_memory"]) if fields.get("depth_memory") else None
    return EngineConfig(**fields)


def options_to_dict(options: ChatOptions) -> dict[str, Any]:
    return asdict(options)


def options_from_dict(data: dict[str, Any]) -> ChatOptions:
    fields = dict(data)
    fields["sampling"] = SamplingParams(**fields["sampling"])
    fields["stop"] = tuple(fields.get("stop", ()))
    return ChatOptions(**fields)


def messages_from_list(items: list[dict[str, str]]) -> list[Message]:
    return [Message(m["role"], m["content"]) for m in items]
