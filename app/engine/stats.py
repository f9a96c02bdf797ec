"""Running statistics of one reply: speed, drafting, acceptance by draft position."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


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
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=32), repr=False)

    def record_token(self) -> None:
        """One more emitted token (called before the token is streamed, so live stats include it)."""
        self.generated += 1
        self._recent.append((time.perf_counter(), 1))

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
    def tokens_per_pass(self) -> float | None:
        return self.generated / self.target_passes if self.target_passes else None

    @property
    def decode_tps(self) -> float:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def rolling_tps(self) -> float:
        if len(self._recent) < 2:
            return self.decode_tps
        span = self._recent[-1][0] - self._recent[0][0]
        return sum(n for _, n in list(self._recent)[1:]) / span if span > 0 else self.decode_tps

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
            "time_to_first_token": self.first_token_seconds,
            "generated": self.generated,
            "decode_tps": self.decode_tps,
            "rolling_tps": self.rolling_tps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "proposed": self.proposed,
            "acceptance": self.acceptance,
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
