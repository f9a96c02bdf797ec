"""The app's main job from a terminal, with working defaults: backend, demo model, one reply.

Builds the patched backend if none is active (CUDA when nvcc and a GPU are there, else CPU), writes
the built-in demo model on first use, and answers one chat message with it, reporting how often the
FastMTP d2t draft head would have guessed the next token right.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app import paths
from app.backend import registry
from app.backend.builder import BuildOptions, build_backend
from app.backend.events import BuildEvent
from app.builtin_demo import ensure_demo_model
from app.engine.chat_template import Message, render


@dataclass
class QuickstartResult:
    backend_id: str
    model: str
    reply: str
    reply_tokens: int
    seconds: float
    draft_acceptance: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run(message: str, max_tokens: int = 48, on_build_event: Callable[[BuildEvent], None] | None = None,
        say: Callable[[str], None] = print) -> QuickstartResult:
    manifest = registry.active()
    if manifest is None:
        say("No backend yet: building the patched llama.cpp backend (a few minutes, once).")
        manifest = build_backend(BuildOptions(flavor="auto"), on_build_event)
    demo = ensure_demo_model(paths.demo_model_dir())

    from app.native import draft_probe
    from app.native.handles import Model

    n_gpu_layers = -1 if manifest.flavor == "cuda" else 0
    with Model(demo.target, n_gpu_layers=n_gpu_layers) as target:
        prompt = target.tokenize(render(None, [Message("user", message)]), parse_special=True)
        started = time.monotonic()
        reply = draft_probe.greedy(target, prompt, max_tokens)
        seconds = time.monotonic() - started
        probe = draft_probe.probe(target, prompt + reply, demo.sidecar_d2t, n_gpu_layers=n_gpu_layers)
        text = target.detokenize(reply)
    return QuickstartResult(manifest.id, str(demo.target), text.strip(), len(reply), round(seconds, 3),
                            probe.acceptance(len(prompt)))
