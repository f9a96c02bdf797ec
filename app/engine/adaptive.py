"""Adaptive draft depth: pick, round by round, the depth that emits the most tokens per second.

Two things decide the best depth, and both are measured while the reply streams:
- how far the drafts get accepted: the acceptance at each draft position, given that the drafts
  before it were accepted (it usually falls with depth on real text);
- what a round costs at each depth: draft steps plus a verify pass over ``depth + 1`` tokens plus our
  own bookkeeping. On a GPU the verify pass costs about the same for 2 or 8 tokens; on a CPU every
  extra token costs a few percent more. A straight line through the measured rounds covers both.

Expected tokens per round at depth ``k`` are ``1 + a1 + a1*a2 + ... + a1*...*ak``; the depth with the
highest expected tokens per second wins. Depth 0 (no drafting) wins when drafting does not pay; a
neighbouring depth is tried now and then so the line stays true as the text changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DECAY = 0.95  # per observation: the last few dozen rounds count most
PROBE_EVERY = 16  # rounds between tries of a depth next to the best one


@dataclass
class AdaptiveDepth:
    n_max: int
    # per draft position: decayed counts of rounds that tested it, and of those that accepted it
    tested: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    # per depth: decayed mean of the measured round time in seconds, and its weight
    cost: dict[int, float] = field(default_factory=dict)
    weight: dict[int, float] = field(default_factory=dict)
    rounds: int = 0
    _probe_up: bool = True

    def __post_init__(self) -> None:
        # a mild optimistic prior at every position: 4 of 5 accepted
        self.tested = [5.0] * self.n_max
        self.accepted = [4.0] * self.n_max

    def depth(self) -> int:
        """The depth for the next round."""
        self.rounds += 1
        if self.n_max not in self.cost:  # start deep: drafting usually pays
            return self.n_max
        if len(self.cost) < 2:  # a second depth gives the line its slope
            return 1 if self.n_max > 1 else 0
        best = self.best()
        if self.rounds % PROBE_EVERY == 0:
            self._probe_up = not self._probe_up
            step = 1 if self._probe_up else -1
            if 0 <= best + step <= self.n_max:
                return best + step
            return best - step if 0 <= best - step <= self.n_max else best
        return best

    def best(self) -> int:
        """The depth with the highest expected tokens per second under the current estimates."""
        intercept, slope = self._line()
        best_k, best_rate = 0, 0.0
        expected, reach = 1.0, 1.0
        for k in range(self.n_max + 1):
            if k:
                reach *= self.acceptance_at(k - 1)
                expected += reach
            rate = expected / max(intercept + slope * k, 1e-9)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def acceptance_at(self, position: int) -> float:
        """Acceptance at draft ``position`` (0-based) given the ones before it were accepted."""
        return min(self.accepted[position] / self.tested[position], 0.999)

    def observe(self, depth: int, tested: int, accepted: int, seconds: float) -> None:
        """One finished round: drafted to ``depth``, ``tested`` drafts checked, ``accepted`` kept, in ``seconds``."""
        for i in range(tested):
            self.tested[i] = self.tested[i] * DECAY + 1.0
            self.accepted[i] = self.accepted[i] * DECAY + (1.0 if i < accepted else 0.0)
        for k in self.weight:  # every depth's measurement ages, so a depth not tried lately counts less
            self.weight[k] *= DECAY
        weight = self.weight.get(depth, 0.0) + 1.0
        previous = self.cost.get(depth, seconds)
        self.cost[depth] = previous + (seconds - previous) / min(weight, 1.0 / (1.0 - DECAY))
        self.weight[depth] = weight

    def _line(self) -> tuple[float, float]:
        """Round time as ``intercept + slope * depth``: a weighted least-squares line through the per-depth
        means (a mean measured long ago weighs little)."""
        total = sum(self.weight.values())
        if total <= 0.0:  # nothing measured yet: every depth costs the same
            return 1.0, 0.0
        mean_k = sum(w * k for k, w in self.weight.items()) / total
        mean_c = sum(w * self.cost[k] for k, w in self.weight.items()) / total
        spread = sum(w * (k - mean_k) ** 2 for k, w in self.weight.items())
        if spread <= 1e-12:
            return mean_c, 0.0
        covariance = sum(w * (k - mean_k) * (self.cost[k] - mean_c) for k, w in self.weight.items())
        slope = max(covariance / spread, 0.0)
        return mean_c - slope * mean_k, slope
