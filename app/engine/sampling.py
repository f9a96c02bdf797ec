"""How the target picks each token, and how the draft head proposes one.

The target's picks are made by llama.cpp's sampler chain in native code (app/native/sampler.py): one
chain per reply, reset to the seed, so a seeded reply is repeatable and is what llama-server gives.
Plain decoding and speculative decoding sample exactly the emitted tokens, in order, from the same
seeded stream, so at any temperature they emit the same tokens (up to float differences between
batched and single evaluation).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from app.engine.config import SamplingParams
from app.native.sampler import SamplerChain


class Sampler:
    """One reply's sampling settings; ``chain`` makes the native sampler that applies them."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params

    def chain(self, n_vocab: int, for_backend: bool = False) -> SamplerChain:
        """A fresh native chain at the start of the seeded stream (the caller closes it)."""
        p = self.params
        return SamplerChain(temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
                            repeat_penalty=p.repeat_penalty, repeat_last_n=p.repeat_last_n, seed=p.seed,
                            n_vocab=n_vocab, for_backend=for_backend)


def draft_pick(logits: npt.NDArray[np.float32], p_min: float) -> tuple[int, bool]:
    """The draft head's proposal (argmax) and whether it is confident enough (softmax prob >= p_min).

    A d2t head's row is -inf outside the draft vocabulary; one contiguous argmax over the whole row
    is still faster than gathering the draft ids first (21 vs 41 µs for Qwen's 248320 here).
    """
    best = int(np.argmax(logits))
    if p_min <= 0.0:
        return best, True
    finite = logits[np.isfinite(logits)]
    top = float(logits[best])
    prob = 1.0 / float(np.sum(np.exp(finite.astype(np.float64) - top)))
    return best, prob >= p_min
