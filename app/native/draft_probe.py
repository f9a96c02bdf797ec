"""Look at what an MTP draft head predicts, position by position, next to the target.

Teacher-forced: the target evaluates a whole token sequence once, the draft head then evaluates the
same sequence with the target's nextn hidden rows shifted right by one, exactly the inputs it gets
when drafting one token ahead. Used by the backend self-test, the tests and ``bench draft-head``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.native.handles import Context, FloatArray, Model


@dataclass
class DraftProbe:
    target_next: list[int]  # target's greedy choice after each position
    draft_next: list[int]  # draft head's greedy choice after each position
    draft_logits: FloatArray  # (n_positions, n_vocab)

    def acceptance(self, start: int = 0) -> float:
        """Share of positions from ``start`` where a one-token draft would be accepted (greedy)."""
        pairs = list(zip(self.target_next[start:], self.draft_next[start:], strict=True))
        return sum(t == d for t, d in pairs) / len(pairs) if pairs else 0.0


def greedy(model: Model, prompt: list[int], n_new: int, n_threads: int | None = None) -> list[int]:
    """Plain greedy decoding with the target alone: the reference every MTP mode must reproduce."""
    out: list[int] = []
    with Context(model, n_ctx=len(prompt) + n_new + 8, n_batch=max(len(prompt), 1), n_threads=n_threads) as ctx:
        ctx.decode(prompt, 0)
        for step in range(n_new):
            token = int(np.argmax(ctx.logits(-1)))
            out.append(token)
            ctx.decode([token], len(prompt) + step)
    return out


def draft_inputs(tctx: Context, n: int) -> tuple[FloatArray, FloatArray]:
    """The target's nextn hidden rows of its last ``n``-token batch, and the same shifted right by one
    (row 0 zero): what the draft context is fed for those positions."""
    hidden = tctx.nextn_rows(n)
    shifted = np.zeros_like(hidden)
    shifted[1:] = hidden[:-1]
    return hidden, shifted


def probe(target: Model, tokens: list[int], draft_path: Path | None = None, n_threads: int | None = None,
          n_gpu_layers: int = 0) -> DraftProbe:
    """Draft predictions along ``tokens``; ``draft_path`` None means the target's embedded MTP head.

    For the embedded head ``target`` must have been loaded with ``load_mtp=True``.
    """
    n = len(tokens)
    with Context(target, n_ctx=n + 8, n_batch=n, n_threads=n_threads, nextn_outputs=True) as tctx:
        tctx.decode(tokens, 0, logits="all")
        target_next = [int(np.argmax(tctx.logits(i))) for i in range(n)]
        _, shifted = draft_inputs(tctx, n)
        draft_model = target if draft_path is None else Model(draft_path, load_mtp=True, n_gpu_layers=n_gpu_layers)
        try:
            with Context(draft_model, n_ctx=n + 8, n_batch=n, n_threads=n_threads, draft_for=tctx) as dctx:
                dctx.decode(tokens, 0, hidden=shifted, logits="all")
                logits = np.stack([dctx.logits(i) for i in range(n)])
        finally:
            if draft_model is not target:
                draft_model.close()
    return DraftProbe(target_next, [int(x) for x in np.argmax(logits, axis=1)], logits)
