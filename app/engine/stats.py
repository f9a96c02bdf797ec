"""Running statistics of one reply: speed, drafting, acceptance by draft position.

Decode speed has one definition, here and nowhere else (``decode_tps``): the tokens after the first over the time
from the first token to the last, ``(tokens - 1) / (t_last - t_first)``. The prompt pass and the wait for the
first token are not in it (time to first token is its own figure), so a reply's speed does not depend on its
prompt's length. The HUD, the reply's footer, ``bench``, ``quickstart`` and the Benchmark page all show this
figure (a remote server's own timings go through it too), each saying the sampling and depth it was measured
at (``describe_sampling``, ``describe_depth``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.core.units import format_tokens
from app.engine.config import EngineConfig, SamplingParams


def decode_tps(tokens: int, span_seconds: float) -> float:
    """Decode speed, the one definition: ``(tokens - 1) / span_seconds``, where ``span_seconds`` is the time from
    the first token to the last; 0.0 with fewer than two tokens or no time between them."""
    return (tokens - 1) / span_seconds if tokens >= 2 and span_seconds > 0 else 0.0


def pooled_decode_tps(replies: Iterable[tuple[int, float]]) -> float:
    """Several replies (``(tokens, span_seconds)`` each) as one figure: every reply's tokens after its first over
    the sum of their spans, the same definition as ``decode_tps`` summed over replies."""
    intervals, seconds = 0, 0.0
    for tokens, span in replies:
        if tokens >= 2 and span > 0:
            intervals += tokens - 1
            seconds += span
    return decode_tps(intervals + 1, seconds)


def describe_sampling(params: SamplingParams) -> str:
    """How tokens were picked, as a measurement states it: ``greedy`` or ``temperature 0.7``."""
    return "greedy" if params.temperature <= 0 else f"temperature {params.temperature:g}"


def describe_depth(config: EngineConfig) -> str:
    """The draft depth a measurement ran at: ``depth 3``, ``adaptive depth ≤8``, or ``no drafting`` (off)."""
    if config.mode == "off":
        return "no drafting"
    return f"adaptive depth ≤{config.draft_depth}" if config.adaptive else f"depth {config.draft_depth}"


@dataclass
class ReplyStats:
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    first_token_seconds: float | None = None
    generated: int = 0
    decode_seconds: float = 0.0
    decode_cpu_seconds: float = 0.0  # the decoding thread's CPU time over the same span, set when the reply ends
    target_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    proposed: int = 0  # every draft token made, tested or not (llama-server's ``draft_n`` counts these)
    draft_seconds: float = 0.0
    depth: int = 0  # the draft depth of the latest round (adaptive depth changes it round by round)
    # time inside llama.cpp (llama_decode and rollback, each followed by llama_synchronize, so a GPU's work is
    # in it) during the decode phase, target / draft: the rest is ours
    verify_native_seconds: float = 0.0
    draft_native_seconds: float = 0.0
    drafted_at: list[int] = field(default_factory=list)  # per draft position: how many were tested
    accepted_at: list[int] = field(default_factory=list)  # per draft position: how many were accepted
    first_token_at: float | None = None  # perf_counter() when the first token was emitted
    last_token_at: float | None = None  # ... and the latest one
    # the context meter: tokens in the context now (prompt + reply so far) of the context's size; the prompt's
    # tokens already evaluated by an earlier reply (kept, not read again); whole oldest turns left out to fit
    context_used: int = 0
    context_size: int = 0
    reused_tokens: int = 0
    trimmed_turns: int = 0
    sampling: str = ""  # how the reply was sampled (``describe_sampling``), set by the session that asked for it
    depth_setting: str = ""  # the draft depth it ran at (``describe_depth``), likewise
    threads: int = 0  # the decode threads it ran with: the set count, or the idle cores when none is set
    # what the target's and the draft's one-token passes ran with at its end: 1 or ``threads``, measured; 0 while
    # that is still being measured (``one_token_threads``)
    one_token_threads: int = 0
    draft_one_token_threads: int = 0
    # the attention kernel: True flash attention, False the plain one (``engine.attention``), None llama.cpp's choice
    flash_attn: bool | None = None
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=32), repr=False)

    def record_token(self) -> None:
        """One more emitted token (called before the token is streamed, so live stats include it)."""
        now = time.perf_counter()
        self.generated += 1
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        self._recent.append(now)

    def record_round(self, tested: int, accepted: int, proposed: int | None = None) -> None:
        """One target pass: ``tested`` drafts were checked, the first ``accepted`` of them matched
        (``proposed`` drafts were made, those after the first mismatch untested)."""
        self.target_passes += 1
        self.proposed += tested if proposed is None else proposed
        self.drafted += tested
        self.accepted += accepted
        while len(self.drafted_at) < tested:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(tested):
            self.drafted_at[i] += 1
            if i < accepted:
                self.accepted_at[i] += 1

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def accepted_of_drafted(self) -> float | None:
        """Accepted of every draft made, tested or not: llama-server's ``draft_n_accepted / draft_n``."""
        return self.accepted / self.proposed if self.proposed else None

    @property
    def tokens_per_pass(self) -> float | None:
        return self.generated / self.target_passes if self.target_passes else None

    @property
    def decode_span_seconds(self) -> float:
        """Time from the first emitted token to the latest one."""
        if self.first_token_at is None or self.last_token_at is None:
            return 0.0
        return self.last_token_at - self.first_token_at

    @property
    def decode_tps(self) -> float:
        """The reply's decode speed (``decode_tps``, the one definition)."""
        return decode_tps(self.generated, self.decode_span_seconds)

    @property
    def rolling_tps(self) -> float:
        """The same definition over the latest 32 tokens (the HUD's live figure)."""
        if len(self._recent) < 2:
            return self.decode_tps
        return decode_tps(len(self._recent), self._recent[-1] - self._recent[0]) or self.decode_tps

    @property
    def rounds(self) -> int:
        """Target passes of the decode phase (the first token comes from the prompt pass)."""
        return max(self.target_passes - 1, 0)

    @property
    def verify_ms_per_round(self) -> float | None:
        """The target's pass per round, rollback included: device time too (llama_decode is synchronized)."""
        return self.verify_native_seconds / self.rounds * 1000.0 if self.rounds else None

    @property
    def draft_ms_per_round(self) -> float | None:
        """The draft head's passes per round (catch-up and every draft step), rollback included."""
        return self.draft_native_seconds / self.rounds * 1000.0 if self.rounds else None

    @property
    def draft_ms_per_step(self) -> float | None:
        """Draft time per draft token made; 0 when nothing was drafted (``off``), None when draft passes ran
        but made no token (a p_min cutoff)."""
        if self.proposed:
            return self.draft_native_seconds / self.proposed * 1000.0
        return 0.0 if self.draft_native_seconds == 0.0 else None

    @property
    def python_ms_per_round(self) -> float | None:
        """Decode time outside llama.cpp (decode and rollback, each synchronized) per target pass: the loop's
        own host cost. With ``verify_ms_per_round`` and ``draft_ms_per_round`` it adds up to the decode time."""
        if not self.rounds:
            return None
        return (self.decode_seconds - self.verify_native_seconds - self.draft_native_seconds) / self.rounds * 1000.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "prompt_tps": self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else None,
            "prompt_seconds": self.prompt_seconds,
            "reused_tokens": self.reused_tokens,
            "context_used": self.context_used,
            "context_size": self.context_size,
            "trimmed_turns": self.trimmed_turns,
            "time_to_first_token": self.first_token_seconds,
            "generated": self.generated,
            "decode_tps": self.decode_tps,
            "decode_span_seconds": self.decode_span_seconds,
            "rolling_tps": self.rolling_tps,
            "sampling": self.sampling,
            "depth_setting": self.depth_setting,
            "threads": self.threads,
            "one_token_threads": self.one_token_threads,
            "draft_one_token_threads": self.draft_one_token_threads,
            "flash_attn": self.flash_attn,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "proposed": self.proposed,
            "acceptance": self.acceptance,
            "accepted_of_drafted": self.accepted_of_drafted,
            "acceptance_by_position": [a / d if d else None for a, d in zip(self.accepted_at, self.drafted_at,
                                                                           strict=True)],
            "tokens_per_pass": self.tokens_per_pass,
            "target_passes": self.target_passes,
            "depth": self.depth,
            # per round (target pass): verify + draft + host (Python) = decode time; device time is native
            "verify_ms_per_round": self.verify_ms_per_round,
            "draft_ms_per_round": self.draft_ms_per_round,
            "draft_ms_per_step": self.draft_ms_per_step,
            "python_ms_per_round": self.python_ms_per_round,
            "draft_time_share": self.draft_seconds / self.decode_seconds if self.decode_seconds > 0 else 0.0,
        }


CONTEXT_WARN_SHARE = 0.9  # the meter warns from here on: the next turns trim (or stop, by the chat's policy)


@dataclass(frozen=True)
class AcceptanceWords:
    """How a reply's acceptance reads in the HUD, footers and status lines: ``name`` and ``figure`` ("acceptance
    90%", a server's "drafts kept 64%"), ``counts`` beside them, ``detail`` (a tooltip) saying what it counts."""

    name: str
    share: float
    figure: str
    counts: str
    detail: str

    @property
    def text(self) -> str:
        return f"{self.name} {self.figure}"


def acceptance_words(stats: dict[str, Any]) -> AcceptanceWords | None:
    """One reading of acceptance for every place that shows it, our engine's and a server's.

    Two counts exist and differ by a fifth at depth 3: accepted of the drafts *tested* (a round's drafts up to its
    first mismatch; the per-token rate ``a`` that break-even and the bound take) and accepted of every draft *made*
    (llama-server's and vLLM's figure, lower: drafts after a mismatch count as made and not accepted). Our engine
    knows both and shows the first, naming the second; a server reports only the second, so it is shown as such,
    never under the first's name.
    """
    tested, made = stats.get("acceptance"), stats.get("accepted_of_drafted")
    accepted = int(stats.get("accepted") or 0)
    if isinstance(tested, int | float):
        drafted = int(stats.get("drafted") or 0)
        detail = (f"{accepted} of the {drafted} drafts tested were accepted (each round tests its drafts up to "
                  "the first mismatch)")
        if isinstance(made, int | float):
            detail += (f"; of all {int(stats.get('proposed') or 0)} drafts made, {made:.0%} (the figure "
                       "llama-server prints)")
        return AcceptanceWords("acceptance", float(tested), f"{tested * 100:.0f}%", f"{accepted}/{drafted}",
                               detail + ".")
    if isinstance(made, int | float):
        proposed = int(stats.get("proposed") or stats.get("drafted") or 0)
        return AcceptanceWords("drafts kept", float(made), f"{made * 100:.0f}%", f"{accepted}/{proposed}",
                               f"{accepted} of the {proposed} drafts the server made were accepted (its own count; "
                               "it does not say which drafts it tested, so this is lower than the acceptance our "
                               "engine shows for the same drafts).")
    return None


def context_meter(stats: dict[str, Any]) -> str:
    """The context meter's words: ``3.1k / 32k tokens`` (empty when the stats carry no context size)."""
    size = int(stats.get("context_size") or 0)
    if size <= 0:
        return ""
    return f"{format_tokens(int(stats.get('context_used') or 0))} / {format_tokens(size)} tokens"


def context_nearly_full(stats: dict[str, Any]) -> bool:
    """Whether the meter should warn: the context is at least ``CONTEXT_WARN_SHARE`` full."""
    size = int(stats.get("context_size") or 0)
    return size > 0 and int(stats.get("context_used") or 0) >= CONTEXT_WARN_SHARE * size


WRONG_PAIR_AFTER = 16  # drafts tested before a near-zero acceptance is called out (each costs one round then)
WRONG_PAIR_ACCEPTANCE = 0.05  # "near zero": a sidecar of this model accepts far more (the release: 92%)


def wrong_pair_warning(stats: dict[str, Any], sidecar: str | None = None) -> str | None:
    """A loud warning when a sidecar's drafts are almost never accepted in the first rounds, else None.

    llama.cpp loads any sidecar with the target's shapes, so one made from another model drafts happily and
    every draft is rejected: the reply stays correct (the target verifies) but slower than without drafting.
    """
    drafted = int(stats.get("drafted") or 0)
    acceptance = stats.get("acceptance")
    if drafted < WRONG_PAIR_AFTER or not isinstance(acceptance, int | float) or acceptance > WRONG_PAIR_ACCEPTANCE:
        return None
    accepted = int(stats.get("accepted", round(acceptance * drafted)))
    name = f"the sidecar {sidecar}" if sidecar else "the sidecar"
    return (f"Drafting accepts almost nothing: {accepted} of {drafted} drafted tokens were accepted "
            f"({accepted / drafted:.0%}). The likely cause: {name} was made from another model with the same "
            "shapes. Use the sidecar released for this model, or build one from it (`python -m app sidecar "
            "build`); until then turn drafting off, it only slows this reply down.")
