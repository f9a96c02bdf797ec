"""The app's main job from a terminal, with working defaults: backend, demo model, one reply.

Builds the patched backend if none is active (CUDA when nvcc and a GPU are there, else CPU), writes
the built-in (English) demo model on first use, and answers one chat message with it through the chat
engine with FastMTP d2t drafting, the path the window takes. The same message is then answered once more
with drafting off, so the speed-up printed is one measured here, not a promise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app import paths
from app.backend import registry
from app.backend.builder import BuildOptions, build_backend
from app.backend.events import BuildEvent
from app.builtin_demo import ensure_demo_model
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig
from app.engine.speculative import Reply

DRAFT_DEPTH = 3  # the release's recommended --spec-draft-n-max
WHY_NO_GAIN = "a draft pass costs about as much as a target pass"


@dataclass
class QuickstartResult:
    """One reply with d2t drafting and the same reply decoded plainly; ``to_dict()`` is the ``--json`` answer."""

    backend_id: str
    model: str
    reply: str
    reply_tokens: int
    seconds: float  # the drafted reply, prompt included (not the model's loading)
    draft_acceptance: float  # share of drafted tokens the target accepted
    tokens_per_pass: float  # tokens emitted per target forward pass, drafted reply
    draft_tps: float  # decode speed with d2t drafting
    plain_tps: float  # decode speed with drafting off
    speedup: float  # draft_tps / plain_tps
    same_as_plain: bool  # drafting is lossless: the plain reply must be the same text
    stop_reason: str  # "eos" when the reply ended on its own
    note: str  # the speed-up in words, honest when it is below 1

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run(message: str, max_tokens: int = 256, on_build_event: Callable[[BuildEvent], None] | None = None,
        say: Callable[[str], None] = print) -> QuickstartResult:
    manifest = registry.active()
    if manifest is None:
        say("No backend yet: building the patched llama.cpp backend (a few minutes, once).")
        manifest = build_backend(BuildOptions(flavor="auto"), on_build_event)
    demo = ensure_demo_model(paths.demo_model_dir())
    n_gpu_layers = -1 if manifest.flavor == "cuda" else 0
    messages = [Message("user", message)]
    options = ChatOptions(max_tokens=max_tokens)  # greedy: both runs decode the same tokens

    drafted, text = _reply(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=DRAFT_DEPTH,
                                        n_gpu_layers=n_gpu_layers), messages, options)
    plain, plain_text = _reply(EngineConfig(demo.target, mode="off", n_gpu_layers=n_gpu_layers), messages, options)

    stats = drafted.stats
    speedup = stats.decode_tps / plain.stats.decode_tps if plain.stats.decode_tps > 0 else 0.0
    return QuickstartResult(
        backend_id=manifest.id,
        model=str(demo.target),
        reply=text.strip(),
        reply_tokens=len(drafted.tokens),
        seconds=round(stats.prompt_seconds + stats.decode_seconds, 3),
        draft_acceptance=stats.acceptance or 0.0,
        tokens_per_pass=stats.tokens_per_pass or 0.0,
        draft_tps=stats.decode_tps,
        plain_tps=plain.stats.decode_tps,
        speedup=speedup,
        same_as_plain=plain_text == text,
        stop_reason=drafted.stop_reason,
        note=speedup_note(speedup, on_gpu=n_gpu_layers != 0),
    )


def speedup_note(speedup: float, on_gpu: bool = False) -> str:
    """The measured speed-up in one line; below 1 it says why, so a slow tiny demo does not read as a fault."""
    head = f"speed-up {speedup:.2f}x over plain decoding"
    if speedup >= 1.0:
        return head
    if on_gpu:
        return f"{head}: on this tiny demo model drafting does not pay ({WHY_NO_GAIN}); on a 27B model it does"
    return f"{head}: on this small CPU model drafting does not pay ({WHY_NO_GAIN}); on a 27B model on a GPU it does"


def _reply(config: EngineConfig, messages: list[Message], options: ChatOptions) -> tuple[Reply, str]:
    """One reply through the chat engine (template, speculative decoder), the model unloaded afterwards."""
    from app.engine.session import ChatSession

    session = ChatSession(config)
    try:
        return session.reply(messages, options)
    finally:
        session.close()
