"""``bench attention``: decode speed with flash attention against llama.cpp's plain kernel as the context grows.

A real chat's context is thousands of tokens (a reasoning model thinks before it answers), so the kernel that reads
the cache decides more of a pass the longer the chat runs. For each context length this fills the context with a
prompt of that many tokens and decodes a reply, in each drafting mode and with each kernel, interleaved run by run;
decode and prompt speeds are medians. ``engine.attention`` chooses the kernel from what this shows on a CPU.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.bench.report import spread
from app.engine.config import EngineConfig

KERNELS: dict[str, bool] = {"flash": True, "plain": False}


@dataclass
class AttentionCell:
    """One drafting mode at one context length with one kernel: decode and prompt tok/s of each run."""

    mode: str
    context: int
    kernel: str
    decode_tps: list[float] = field(default_factory=list)
    prompt_tps: list[float] = field(default_factory=list)
    ran: set[bool | None] = field(default_factory=set)  # the kernel each reply said it ran (True: flash)

    def median(self) -> float:
        return statistics.median(self.decode_tps) if self.decode_tps else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "context": self.context, "kernel": self.kernel,
                **spread(self.decode_tps, "tps", 1), "median_prompt_tps": round(statistics.median(self.prompt_tps), 1)
                if self.prompt_tps else None, "samples": len(self.decode_tps),
                "flash_attn_ran": sorted(self.ran, key=str)}


@dataclass
class AttentionBench:
    model: str
    tokens: int
    runs: int
    threads: int | None
    load_average: tuple[float, float]
    cells: list[AttentionCell]

    def cell(self, mode: str, context: int, kernel: str) -> AttentionCell:
        return next(c for c in self.cells if (c.mode, c.context, c.kernel) == (mode, context, kernel))

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "tokens": self.tokens, "runs": self.runs, "threads": self.threads,
                "load_average": list(self.load_average), "cells": [c.to_dict() for c in self.cells]}

    def markdown(self) -> str:
        lines = [f"Decode tok/s by the context filled before the reply ({self.model}; {self.tokens} tokens a reply, "
                 f"{self.runs} interleaved runs, threads {self.threads or 'default'}; load average "
                 f"{self.load_average[0]:.2f} at the start, {self.load_average[1]:.2f} at the end)", "",
                 "| drafting | context | flash attention tok/s | plain kernel tok/s | plain / flash | "
                 "prompt tok/s flash, plain |", "|---|---:|---:|---:|---:|---|"]
        modes = list(dict.fromkeys(c.mode for c in self.cells))
        contexts = sorted({c.context for c in self.cells})
        for mode in modes:
            for context in contexts:
                flash, plain = self.cell(mode, context, "flash"), self.cell(mode, context, "plain")
                ratio = plain.median() / flash.median() if flash.median() else 0.0
                prompts = ", ".join(f"{statistics.median(c.prompt_tps):.0f}" if c.prompt_tps else "-"
                                    for c in (flash, plain))
                lines.append(f"| {mode} | {context:,} | {flash.median():.1f} | {plain.median():.1f} | "
                             f"**{ratio:.2f}x** | {prompts} |")
        return "\n".join(lines)


def run(target: Path, d2t: Path, *, contexts: list[int], tokens: int = 128, runs: int = 3, depth: int = 3,
        threads: int | None = None, prompt: list[int] | None = None) -> AttentionBench:
    """Decode ``tokens`` after a prompt of each length in ``contexts`` (``prompt`` repeated, else the target's
    tokens of a sentence), with drafting off and the d2t sidecar at ``depth``, under both kernels."""
    from app.engine.speculative import SpeculativeDecoder

    n_ctx = max(contexts) + tokens + 64
    modes = {"off": EngineConfig(target, mode="off", n_ctx=n_ctx, n_threads=threads),
             f"d2t k={depth}": EngineConfig(target, mode="sidecar", draft=d2t, draft_depth=depth, n_ctx=n_ctx,
                                            n_threads=threads)}
    cells = {(mode, context, kernel): AttentionCell(mode, context, kernel)
             for mode in modes for context in contexts for kernel in KERNELS}
    started = os.getloadavg()[0]
    decoders = {(mode, kernel): SpeculativeDecoder(replace(config, flash_attn=flash))
                for mode, config in modes.items() for kernel, flash in KERNELS.items()}
    try:
        first = next(iter(decoders.values()))
        unit = prompt or first.target.tokenize(" The keeper climbs the tower every evening to light the lamp.")
        for run_index in range(runs + 1):  # the first round warms every decoder up and is not counted
            for context in contexts:
                text = (unit * (context // len(unit) + 1))[:context]
                order = list(decoders.items())
                for (mode, kernel), decoder in order[::-1] if run_index % 2 else order:
                    decoder.reset()
                    stats = decoder.generate(text, tokens).stats
                    if run_index:
                        cell = cells[(mode, context, kernel)]
                        cell.decode_tps.append(stats.decode_tps)
                        cell.ran.add(stats.flash_attn)
                        if stats.prompt_seconds > 0:
                            cell.prompt_tps.append(stats.prompt_tokens / stats.prompt_seconds)
    finally:
        for decoder in decoders.values():
            decoder.close()
    return AttentionBench(model=target.name, tokens=tokens, runs=runs, threads=threads,
                          load_average=(started, os.getloadavg()[0]), cells=list(cells.values()))
