"""One-token passes at the faster of one thread and all of them, measured per context.

llama.cpp runs a pass over one token with ``n_threads`` and a bigger batch with ``n_threads_batch``. Where a
pass's work is small next to the machine (the demos' targets, every draft step of a small head), splitting one
token's work between threads costs more than it saves: on the 2-core EPYC the scaled demo decoded plainly at 137
tok/s with 2 threads against 166 with 1, while its 3- and 4-token verify passes ran 1.4x faster with 2 (issue 39).
A big model's one-token pass waits on memory and gains from every core. Which holds depends on the model, the
machine and the load, so each context measures it: its first one-token passes alternate between one thread and
all of them (``BLOCK`` at a time, so a trend in the pass times, such as a growing context, falls on both alike), and
it keeps the faster: one thread only when it is ``MARGIN`` faster (all of them is llama-server's default and ours
before). It measures again every ``RECHECK`` one-token passes, so a choice made under one load does not stick
under another; a change of the thread count starts a new measurement (``SpeculativeDecoder.use_threads``).
``EngineConfig.one_token_threads`` pins the count instead (``bench threads`` compares 1, all and the measured choice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.adaptive import lower_median

TRIALS = 6  # one-token passes timed at each count before choosing (the lower median of them is compared)
BLOCK = 2  # passes in a row at one count while measuring
MARGIN = 0.03  # one thread is chosen only this much faster than all of them
RECHECK = 2048  # one-token passes after a choice before it is measured again


@dataclass
class OneTokenThreads:
    """The thread count for one context's next one-token pass, and what its passes measured."""

    threads: int  # the decode threads: what every bigger batch runs with, and the other candidate here
    pinned: int | None = None  # a count given instead of measured (at most ``threads``)
    chosen: int | None = None  # the count settled on; None while measuring
    _times: dict[int, list[float]] = field(init=False)  # seconds of the measured passes, by count
    _since_choice: int = 0  # one-token passes since the count was chosen

    def __post_init__(self) -> None:
        self._times = {1: [], self.threads: []}
        if self.pinned is not None:
            self.chosen = max(1, min(self.pinned, self.threads))

    @property
    def measuring(self) -> bool:
        return self.threads > 1 and self.chosen is None

    def next_count(self) -> int:
        """The thread count the next one-token pass runs with."""
        if self.threads <= 1:
            return 1
        if self.chosen is not None:
            return self.chosen
        done = len(self._times[1]) + len(self._times[self.threads])
        return (self.threads, 1)[(done // BLOCK) % 2]

    def observe(self, count: int, seconds: float) -> None:
        """A one-token pass ran with ``count`` threads and took ``seconds`` (llama.cpp's own time for it)."""
        if self.threads <= 1 or self.pinned is not None:
            return
        if self.chosen is not None:
            self._since_choice += 1
            if self._since_choice >= RECHECK:  # measure again: the machine's load may have changed since
                self.chosen, self._since_choice = None, 0
                self._times = {1: [], self.threads: []}
            return
        if count in self._times and seconds > 0.0:
            self._times[count].append(seconds)
        one, many = self._times[1], self._times[self.threads]
        if len(one) >= TRIALS and len(many) >= TRIALS:
            self.chosen = 1 if lower_median(one) * (1.0 + MARGIN) < lower_median(many) else self.threads
            self._since_choice = 0
