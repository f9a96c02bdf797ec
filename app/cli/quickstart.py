"""The app's main job from a terminal, with working defaults: backend, demo model, and a measured answer.

Builds the patched backend if none is active (CUDA when nvcc and a GPU are there, else CPU), writes
the built-in (English) demo model on first use, and answers one chat message with it through the chat
engine with FastMTP d2t drafting, the path the window takes. Whether drafting pays is measured honestly
(``app.engine.verdict``): after a warm-up reply in each mode, the same message is answered with drafting off
and with d2t drafting in turn, ``ROUNDS`` times each (off, d2t, off, d2t, ...), greedy, so every reply is the
same text; the speeds are medians with their spread, and "no clear difference" is said when the spreads overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.backend import registry
from app.backend.builder import BuildOptions, build_backend
from app.backend.events import BuildEvent
from app.core import paths
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig
from app.engine.speculative import Reply
from app.engine.stats import describe_depth, describe_sampling
from app.engine.verdict import Condition, Sample, Verdict, compare, load_average
from app.gguftools.builtin_demo import ensure_demo_model

DRAFT_DEPTH = 3  # the release's recommended --spec-draft-n-max
ROUNDS = 3  # replies per mode after the warm-up, alternating (the verdict's minimum)
WHY_NO_GAIN = "a draft pass costs about as much as a target pass"


@dataclass
class QuickstartResult:
    """The drafted reply and the alternating measurement of both modes; ``to_dict()`` is the ``--json`` answer."""

    backend_id: str
    model: str
    reply: str
    reply_tokens: int
    seconds: float  # the last drafted reply, prompt included (not the model's loading)
    draft_acceptance: float  # share of drafted tokens the target accepted
    tokens_per_pass: float  # tokens emitted per target forward pass, drafted reply
    draft_tps: float  # decode speed with d2t drafting: the median of ``ROUNDS`` replies
    plain_tps: float  # decode speed with drafting off: likewise
    speedup: float  # draft_tps / plain_tps
    same_as_plain: bool  # drafting is lossless: the plain reply must be the same text
    stop_reason: str  # "eos" when the reply ended on its own
    note: str  # the verdict in words, honest when drafting does not pay or the difference is in the noise
    sampling: str = "greedy"  # what the speeds were measured at
    depth: str = f"depth {DRAFT_DEPTH}"
    verdict: dict[str, Any] = field(default_factory=dict)  # ``Verdict.to_dict()``: medians, spreads, load, samples

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run(message: str, max_tokens: int = 256, on_build_event: Callable[[BuildEvent], None] | None = None,
        say: Callable[[str], None] = print, rounds: int = ROUNDS) -> QuickstartResult:
    from app.engine.session import ChatSession

    manifest = registry.active()
    if manifest is None:
        say("No backend yet: building the patched llama.cpp backend (a few minutes, once).")
        manifest = build_backend(BuildOptions(flavor="auto"), on_build_event)
    demo = ensure_demo_model(paths.demo_model_dir())
    n_gpu_layers = -1 if manifest.flavor == "cuda" else 0
    messages = [Message("user", message)]
    options = ChatOptions(max_tokens=max_tokens)  # greedy: every reply decodes the same tokens

    configs = {"off": EngineConfig(demo.target, mode="off", n_gpu_layers=n_gpu_layers),
               "d2t": EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=DRAFT_DEPTH,
                                   n_gpu_layers=n_gpu_layers)}
    sessions: dict[str, ChatSession] = {}
    try:
        for name, config in configs.items():
            sessions[name] = ChatSession(config)
        say(f"Measuring: a warm-up reply in each mode, then {rounds} replies each with drafting off and with d2t, "
            "in turn.")
        replies, samples = measure(lambda name: sessions[name].reply(messages, options), rounds,
                                   {name: _condition(name, config) for name, config in configs.items()})
    finally:
        for session in sessions.values():
            session.close()
    judged = compare(samples, "off", "d2t")
    drafted, text = replies["d2t"]
    _plain, plain_text = replies["off"]
    stats = drafted.stats
    draft_tps, plain_tps = judged.b_median or 0.0, judged.a_median or 0.0
    speedup = draft_tps / plain_tps if plain_tps > 0 else 0.0
    return QuickstartResult(
        backend_id=manifest.id,
        model=str(demo.target),
        reply=text.strip(),
        reply_tokens=len(drafted.tokens),
        seconds=round(stats.prompt_seconds + stats.decode_seconds, 3),
        draft_acceptance=stats.acceptance or 0.0,
        tokens_per_pass=stats.tokens_per_pass or 0.0,
        draft_tps=draft_tps,
        plain_tps=plain_tps,
        speedup=speedup,
        same_as_plain=plain_text == text,
        stop_reason=drafted.stop_reason,
        note=speedup_note(judged, on_gpu=n_gpu_layers != 0),
        sampling=describe_sampling(options.sampling),
        depth=describe_depth(configs["d2t"]),
        verdict=judged.to_dict(),
    )


def _condition(name: str, config: EngineConfig) -> Condition:
    return Condition(name, describe_depth(config) if config.mode != "off" else "", "greedy", str(config.target),
                     config.n_threads)


def measure(reply: Callable[[str], tuple[Reply, str]], rounds: int,
            conditions: dict[str, Condition]) -> tuple[dict[str, tuple[Reply, str]], list[Sample]]:
    """A warm-up reply per mode (not counted), then ``rounds`` rounds of one reply per mode, in turn; the last reply
    of each mode and every counted sample (each reply's ``decode_tps``, with the load average then)."""
    last: dict[str, tuple[Reply, str]] = {}
    samples: list[Sample] = []
    for name in conditions:
        last[name] = reply(name)  # the warm-up: pages the files in, first-pass allocations
    for _round in range(rounds):
        for name, condition in conditions.items():
            last[name] = answer = reply(name)
            samples.append(Sample(condition, answer[0].stats.decode_tps, len(samples), True, load_average(),
                                  answer[0].stats.generated))
    return last, samples


def speedup_note(judged: Verdict, on_gpu: bool = False) -> str:
    """The verdict in words; when drafting is not clearly faster it says why, so a slow tiny demo does not read
    as a fault."""
    if not judged.decided:
        return judged.sentence()
    head = (f"d2t drafting against plain decoding: {judged.ratio:.2f}x, {judged.outcome} (median "
            f"{judged.b_median:.0f} against {judged.a_median:.0f} tok/s over {len(judged.b_tps)} alternating "
            f"replies each, {judged.sampling}" + (f", load {judged.load:.1f})" if judged.load is not None else ")"))
    if judged.outcome == "faster":
        return head
    if on_gpu:
        return f"{head}: on this tiny demo model drafting does not pay ({WHY_NO_GAIN}); on a 27B model it does"
    return f"{head}: on this small CPU model drafting does not pay ({WHY_NO_GAIN}); on a 27B model on a GPU it does"
