"""An owning wrapper over llama.cpp's sampler chain: the target's token picks, made in native code.

The chain is llama-server's own, in its order (repetition penalties, top-k, top-p, min-p, temperature,
then a seeded distribution), so a seeded reply here is the reply llama-server gives for the same prompt
and settings. Samplers that would do nothing with the given values are left out of the chain; they
neither change the candidates nor draw from the random stream, so the picks are the same.

Lossless drafting rests on one property of llama.cpp's ``dist`` sampler: every ``sample`` call draws
exactly one number from its seeded stream, and nothing else draws. Verification samples the batch's
rows in order and stops at the first pick that differs from the draft, so it samples exactly the
emitted tokens, in order, as plain decoding does: both consume the same draws and emit the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

import numpy as np

from app.native.handles import Context, llama


class SamplerChain:
    """A ``llama_sampler`` chain for one reply (``close()`` frees it; idempotent).

    Greedy (temperature <= 0) picks the first of the highest logits and draws nothing. On the host and without
    a repetition penalty it is one numpy argmax over the row, in place: llama.cpp's greedy sampler picks the
    same token but first copies the row into its candidate array, 5-8x the time (``bench sampler``).

    ``for_backend`` makes a chain that can run inside the model's graph (``attach``): on a GPU the picks are
    made there and no logit row is copied to the host. The dist sampler then draws its numbers for a whole
    verify pass up front but commits only the picks that are kept, so the stream stays one draw per emitted
    token, as on the host.
    """

    def __init__(self, *, temperature: float, top_k: int, top_p: float, min_p: float, repeat_penalty: float,
                 repeat_last_n: int, seed: int, n_vocab: int, for_backend: bool = False) -> None:
        self.lib = llama()
        lib = self.lib
        greedy = temperature <= 0.0
        self.uses_history = repeat_penalty != 1.0 and repeat_last_n != 0
        self._open = True
        self._ptr: Any = None
        self._attached: Context | None = None
        if greedy and not self.uses_history and not for_backend:
            return
        params = lib.llama_sampler_chain_default_params()
        params.no_perf = True
        self._ptr = lib.llama_sampler_chain_init(params)
        if not self._ptr:
            raise MemoryError("llama.cpp could not create a sampler chain")
        links: list[Any] = []
        if self.uses_history:
            links.append(lib.llama_sampler_init_penalties(n_vocab, repeat_last_n, repeat_penalty, 0.0, 0.0))
        if greedy:
            links.append(lib.llama_sampler_init_greedy())
        else:
            if top_k > 0:
                links.append(lib.llama_sampler_init_top_k(top_k))
            if top_p < 1.0:
                links.append(lib.llama_sampler_init_top_p(top_p, 0))
            if min_p > 0.0:
                links.append(lib.llama_sampler_init_min_p(min_p, 0))
            links.append(lib.llama_sampler_init_temp(temperature))
            links.append(lib.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        for link in links:  # the chain owns each link from here on and frees it with itself
            lib.llama_sampler_chain_add(self._ptr, link)

    @property
    def ptr(self) -> Any:
        if not self._open:
            raise ValueError("the sampler chain is closed")
        return self._ptr

    @property
    def on_backend(self) -> bool:
        """Whether the picks are made in the model's graph (``attach`` succeeded)."""
        return self._attached is not None

    def attach(self, context: Context) -> bool:
        """Sample inside ``context``'s graph from its next pass on; False (and host sampling) where llama.cpp
        cannot: a repetition penalty (no backend version), or a backend that lacks an op. Detached on close."""
        if self._ptr is None or self.uses_history or self._attached is not None:
            return self._attached is context
        if not self.lib.llama_set_sampler(context.ptr, 0, self._ptr):
            return False
        self._attached = context
        return True

    def restart(self) -> None:
        """Back to the start of the seeded stream, with no history: the state of a new chain (a new reply)."""
        if self.ptr is not None:
            self.lib.llama_sampler_reset(self.ptr)

    def remember(self, tokens: Iterable[int]) -> None:
        """Tell the chain about tokens it did not pick (the conversation so far), as llama-server does for
        the prompt: the repetition penalty looks back over them. A no-op without a penalty."""
        if not self.uses_history:
            return
        ptr, accept = self.ptr, self.lib.llama_sampler_accept
        for token in tokens:
            accept(ptr, token)

    def sample(self, context: Context, index: int) -> int:
        """Pick the token at batch ``index`` of ``context``'s latest pass (one draw) and remember it."""
        ptr = self.ptr
        if ptr is None:  # greedy, nothing to remember
            return int(np.argmax(context.logits_view(index)))
        return int(self.lib.llama_sampler_sample(ptr, context.ptr, index))

    def close(self) -> None:
        context, self._attached = self._attached, None
        if context is not None and context.is_open:  # the context must not keep a pointer to a freed chain
            self.lib.llama_set_sampler(context.ptr, 0, None)
        if self._ptr:
            self.lib.llama_sampler_free(self._ptr)
        self._ptr = None
        self._open = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
