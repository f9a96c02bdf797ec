"""The engine's plain records: what to load, how to draft, how to sample, what a reply is made of.

Imports nothing native (no ctypes, no backend), so the GUI process and the engine client can use these
without loading llama.cpp; only the engine's worker process does that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["off", "embedded", "sidecar"]
MODES: tuple[Mode, ...] = ("off", "embedded", "sidecar")
Provenance = Literal["draft", "target"]

# The draft depth (tokens the draft head proposes per round; with adaptive depth, the deepest it may go):
# the one range the settings file, the Settings page, the CLI and the decoder all check against.
DRAFT_DEPTH_MIN = 1
DRAFT_DEPTH_MAX = 8
DEFAULT_DRAFT_DEPTH = 3


def clamp_draft_depth(depth: int) -> int:
    """``depth`` brought into the draft-depth range (for values read from files)."""
    return min(max(depth, DRAFT_DEPTH_MIN), DRAFT_DEPTH_MAX)


@dataclass(frozen=True)
class SamplingParams:
    """How the target picks each token; the defaults are greedy (temperature 0) for exact, repeatable runs."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int = 0


# The one set of defaults for a conversation: the chat settings, the chat-settings dialog and the terminal
# `chat` command start from these. (`generate` and the benchmarks stay greedy, SamplingParams' own defaults,
# so a scripted run gives the same tokens every time; their other knobs are these.)
CHAT_SAMPLING = SamplingParams(temperature=0.7)
CHAT_MAX_TOKENS = 1024


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    mode: Mode = "off"
    draft: Path | None = None
    draft_depth: int = DEFAULT_DRAFT_DEPTH  # the draft depth
    p_min: float = 0.0
    adaptive: bool = False
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    flash_attn: bool | None = None
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers (host:port) whose devices take the offloaded layers
    depth_memory: Path | None = None  # adaptive: the folder where what it learned is kept between loads (None: not)
    # the target's picks made inside its graph (llama.cpp's backend sampling): no logit rows copied to the host;
    # None: where layers are offloaded to a GPU
    backend_sampling: bool | None = None

    @property
    def samples_on_backend(self) -> bool:
        return self.n_gpu_layers != 0 if self.backend_sampling is None else self.backend_sampling


@dataclass
class ChatOptions:
    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    thinking: bool = True
