"""Adaptive depth's bookkeeping while the verify pass runs, on a thread of its own.

A round of speculative decoding waits for adaptive depth twice: to learn from the round just played (``observe``)
and to choose the next depth (``depth``), ~120 us of Python a round in the engine, 1% of a one-thread round on the
scaled demo and more of a GPU's few-millisecond round. Neither needs to happen between the passes: llama.cpp releases
the GIL for the verify pass, so while it runs, a thread can learn from the round before and choose the depth of the
round after. The choice then lags one round more (it has seen every round but the one being played), which changes
nothing a round's noise would not. The learner itself stays turn by turn: its rounds are decided and observed in
order, only one decision ahead (``AdaptiveDepth``'s queue of decided rounds).

That helps only with a core to spare: with every core decoding, the thread would take one from llama.cpp's workers,
which wait for each other at every step of a pass. Then, and whenever ``overlap`` is off, everything runs in turn, as
before.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import NamedTuple

from app.engine.adaptive import AdaptiveDepth, RoundTiming

log = logging.getLogger(__name__)


class Observation(NamedTuple):
    """One played round, as ``AdaptiveDepth.observe`` takes it."""

    depth: int
    tested: int
    accepted: int
    timing: RoundTiming


_STOP = object()  # the thread's last job


class DepthWorker:
    """Drives one ``AdaptiveDepth`` for the engine: ``next_depth`` at the start of a round, ``verify_starts`` just
    before the verify pass, ``observed`` after it, ``settle`` before anything else reads the learner."""

    def __init__(self, adaptive: AdaptiveDepth, overlap: bool) -> None:
        self.adaptive = adaptive
        self.overlap = overlap
        self._kept: Observation | None = None  # the latest round, observed by the next job (overlap)
        self._ahead: int | None = None  # a depth decided and not played yet
        self._in_flight = False  # a job handed to the thread whose depth was not taken yet
        self._playing = False  # a depth handed out whose round was not observed yet
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[int | BaseException] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def next_depth(self) -> int:
        """The depth of the round about to start: the one decided during the last verify pass, else decided now."""
        if self._in_flight:
            self._ahead = self._take()
        self._playing = True
        if self._ahead is not None:
            depth, self._ahead = self._ahead, None
            return depth
        return self.adaptive.depth()

    def verify_starts(self) -> None:
        """The verify pass is about to run: the thread observes the round before this one and decides the next."""
        if not self.overlap or self._in_flight or self._ahead is not None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="adaptive-depth", daemon=True)
            self._thread.start()
        kept, self._kept = self._kept, None
        self._in_flight = True
        self._jobs.put(kept)

    def observed(self, observation: Observation) -> None:
        """The round just played: kept for the next job when the thread does the bookkeeping, observed now if not."""
        self._playing = False
        if self.overlap:
            if self._kept is not None:  # a round whose verify pass handed nothing to the thread (none ran)
                self.adaptive.observe(*self._kept)
            self._kept = observation
        else:
            self.adaptive.observe(*observation)

    def settle(self) -> None:
        """Wait for the thread and observe the round it has not: the learner has seen every round played and may be
        read (a snapshot, the bench's log); a depth it decided ahead is kept for the next round."""
        if self._in_flight:
            self._ahead = self._take()
        if self._kept is not None:
            kept, self._kept = self._kept, None
            self.adaptive.observe(*kept)

    def abandon(self) -> None:
        """A reply ended between ``next_depth`` and ``observed`` (an error): its round was never played. Settle and give
        back its depth and any decided after it, so that the learner's decided rounds and observed ones pair up."""
        self.settle()
        if self._ahead is not None:
            self.adaptive.withdraw()
            self._ahead = None
        if self._playing:
            self.adaptive.withdraw()
            self._playing = False

    def close(self) -> None:
        """Settle, give back a depth decided and never to be played, and end the thread. A failure of the learner
        here is logged, not raised: it costs only its estimates, and the engine closing must go on."""
        try:
            self.abandon()
        except Exception:
            log.exception("adaptive depth failed while closing")
        finally:
            if self._thread is not None:
                self._jobs.put(_STOP)
                self._thread.join()
                self._thread = None

    def _take(self) -> int:
        self._in_flight = False
        result = self._results.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def _run(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            try:
                if isinstance(job, Observation):
                    self.adaptive.observe(*job)
                self._results.put(self.adaptive.depth())
            except BaseException as exc:  # handed to the engine's thread, which raises it in the reply
                self._results.put(exc)
