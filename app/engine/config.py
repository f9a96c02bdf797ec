"""The engine's plain records: what to load, how to draft, how to sample, what a reply is made of.

Imports nothing native (no ctypes, no backend), so the GUI process and the engine client can use these
without loading llama.cpp; only the engine's worker process does that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import app.core.defaults as defaults

Mode = Literal["off", "embedded", "sidecar"]
MODES: tuple[Mode, ...] = ("off", "embedded", "sidecar")
Provenance = Literal["draft", "target"]
# what a conversation longer than the context does (``engine.context_window``): keep the system prompt and the
# latest turns, or stop at the limit
OverflowPolicy = Literal["trim", "stop"]
OVERFLOW_POLICIES: tuple[OverflowPolicy, ...] = ("trim", "stop")
OVERFLOW_LABELS: dict[OverflowPolicy, str] = {
    "trim": "Keep the system prompt and the latest turns",
    "stop": "Stop at the limit",
}

# The draft depth (tokens the draft head proposes per round; with adaptive depth, the deepest it may go):
# the one range the settings file, the Settings page, the CLI and the decoder all check against (its values
# are written in ``app.core.defaults``).
DRAFT_DEPTH_MIN = defaults.DRAFT_DEPTH_MIN
DRAFT_DEPTH_MAX = defaults.DRAFT_DEPTH_MAX
DEFAULT_DRAFT_DEPTH = defaults.DRAFT_DEPTH


def clamp_draft_depth(depth: int) -> int:
    """``depth`` brought into the draft-depth range (for values read from files)."""
    return min(max(depth, DRAFT_DEPTH_MIN), DRAFT_DEPTH_MAX)


@dataclass(frozen=True)
class SamplingParams:
    """How the target picks each token; the defaults are greedy (temperature 0) for exact, repeatable runs."""

    temperature: float = defaults.GREEDY_TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P
    repeat_penalty: float = defaults.REPEAT_PENALTY
    repeat_last_n: int = defaults.REPEAT_LAST_N
    seed: int = defaults.SEED


# The one set of defaults for a conversation: the chat settings, the chat-settings dialog and the terminal
# `chat` command start from these. (`generate` and the benchmarks stay greedy, SamplingParams' own defaults,
# so a scripted run gives the same tokens every time; their other knobs are these.)
CHAT_SAMPLING = SamplingParams(temperature=defaults.CHAT_TEMPERATURE)
CHAT_MAX_TOKENS = defaults.CHAT_MAX_TOKENS


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    mode: Mode = "off"
    draft: Path | None = None
    draft_depth: int = DEFAULT_DRAFT_DEPTH  # the draft depth
    p_min: float = 0.0
    adaptive: bool = False
    n_ctx: int = defaults.CONTEXT_SIZE
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    # on a CPU, the threads of a one-token pass (batches take all of ``n_threads``): None measures one against all of
    # them per context (``engine.one_token_threads``); a number pins it
    one_token_threads: int | None = None
    flash_attn: bool | None = None
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers (host:port) whose devices take the offloaded layers
    depth_memory: Path | None = None  # adaptive: the folder where what it learned is kept between loads (None: not)
    # the target's picks made inside its graph (llama.cpp's backend sampling): no logit rows copied to the host;
    # None: where layers are offloaded to a GPU
    backend_sampling: bool | None = None
    # long chats reopen at once (``engine.state_cache``): the folder where the chats left keep their evaluated state
    # (None: in memory only, for the last few) and the most bytes its files may take
    state_cache_dir: Path | None = None
    state_cache_bytes: int = defaults.STATE_CACHE_MB * 1024 * 1024

    @property
    def samples_on_backend(self) -> bool:
        return self.n_gpu_layers != 0 if self.backend_sampling is None else self.backend_sampling


@dataclass
class ChatOptions:
    max_tokens: int = defaults.ENGINE_MAX_TOKENS  # 0: until the model stops or the context is full
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    thinking: bool = True
    overflow: str = defaults.OVERFLOW_POLICY  # "trim" | "stop" (``engine.context_window``)
    thinking_budget: int = 0  # thinking tokens before the thinking is closed for the answer; 0: no budget
    # Continue: the tokens of the reply being extended (the messages end at the user message it answers); or, when
    # the caller no longer has them (a chat reopened), its text, tokenized by the engine
    continue_tokens: tuple[int, ...] = ()
    continue_text: str = ""
