"""The engine worker's message protocol: one JSON object per line, both ways.

Requests (caller → worker): ``load`` {config}, ``generate`` {messages, options, conversation?}, ``cancel``,
``reset``, ``shutdown``. Events (worker → caller): ``ready``, ``load_progress`` {file, fraction} (a load's model
files as they are read, throttled), ``loaded``, ``prompt_progress`` {done, total} (the prompt's tokens read so far,
batch by batch), ``token`` {token, piece, provenance, stats},
``done`` {tokens, provenance, text, stop_reason, stats, state, state_tokens, restored_tokens, state_source,
state_seconds?, state_note, state_notices}, ``error`` {error, message, advice, log_tail}.

``conversation`` is the caller's id of the chat (any string): when a ``generate`` names another chat than the one
the engine holds, the chat it leaves keeps its evaluated state (``engine.state_cache``: in memory, and on disk in
``EngineConfig.state_cache_dir``), and the chat it comes to takes its kept state up when it is still valid.
``done`` says what the reply started from: ``state`` "restored" (a kept state, ``restored_tokens`` of it, from
``state_source`` "memory" or "disk" in ``state_seconds``), "kept" (the engine held the chat already) or "reread";
``state_tokens`` the prompt's tokens not read again; ``state_note`` why a kept state was not used (an edit, another
model, a damaged file); ``state_notices`` a save that failed (a full disk), each kind said once.
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
    fields["state_cache_dir"] = Path(fields["state_cache_dir"]) if fields.get("state_cache_dir") else None
    return EngineConfig(**fields)


def options_to_dict(options: ChatOptions) -> dict[str, Any]:
    return asdict(options)


def options_from_dict(data: dict[str, Any]) -> ChatOptions:
    fields = dict(data)
    fields["sampling"] = SamplingParams(**fields["sampling"])
    fields["stop"] = tuple(fields.get("stop", ()))
    fields["continue_tokens"] = tuple(int(t) for t in fields.get("continue_tokens", ()))
    return ChatOptions(**fields)


def messages_from_list(items: list[dict[str, str]]) -> list[Message]:
    return [Message(m["role"], m["content"]) for m in items]
