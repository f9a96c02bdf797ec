"""``bench lossless``: does every drafting variant emit exactly the plain decoding, with real rejections?

The property the product promises ("the output is the target's"), checked on whatever machine and
backend this runs on: a GPU's batched verify pass may round differently from a one-token pass, so
the CPU tests alone do not prove it there. Each variant generates from the same prompts at
temperature 0 and at a seeded temperature; tokens are compared with ``off`` position by position,
and the rejections are counted, since a check where every draft was accepted proves little.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.engine.config import DEFAULT_DRAFT_DEPTH, DRAFT_DEPTH_MAX, EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.speculative import SpeculativeDecoder

SETTINGS: dict[str, SamplingParams] = {
    "temp0": SamplingParams(temperature=0.0),
    "temp0.8-seed7": SamplingParams(temperature=0.8, seed=7),
}


@dataclass(frozen=True)
class LosslessVariant:
    label: str
    mode: Mode
    draft: Path | None = None
    draft_depth: int = DEFAULT_DRAFT_DEPTH
    adaptive: bool = False


@dataclass
class VariantOutcome:
    label: str
    setting: str
    identical: bool
    first_difference: int | None
    generated: int
    tested: int
    accepted: int

    @property
    def rejected(self) -> int:
        return self.tested - self.accepted


@dataclass
class LosslessResult:
    outcomes: list[VariantOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.identical for o in self.outcomes)

    @property
    def rejections(self) -> int:
        return sum(o.rejected for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rejections": self.rejections,
                "outcomes": [{**o.__dict__, "rejected": o.rejected} for o in self.outcomes]}

    def markdown(self) -> str:
        lines = ["| variant | sampling | identical to off | drafts tested | rejected |", "|---|---|---|---|---|"]
        for o in self.outcomes:
            same = "yes" if o.identical else f"**no** (from token {o.first_difference})"
            lines.append(f"| {o.label} | {o.setting} | {same} | {o.tested} | {o.rejected} |")
        return "\n".join(lines) + "\n"


def default_variants(target_has_mtp: bool, d2t: Path | None, full: Path | None) -> list[LosslessVariant]:
    variants: list[LosslessVariant] = []
    if target_has_mtp:
        variants.append(LosslessVariant("embedded k=3", "embedded"))
    if full is not None:
        variants.append(LosslessVariant("full sidecar k=3", "sidecar", full))
    if d2t is not None:
        variants += [LosslessVariant("d2t sidecar k=3", "sidecar", d2t),
                     LosslessVariant(f"d2t sidecar adaptive k<={DRAFT_DEPTH_MAX}", "sidecar", d2t,
                                     draft_depth=DRAFT_DEPTH_MAX, adaptive=True)]
    return variants


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run(target: Path, prompts: list[list[int]], variants: list[LosslessVariant], *, n_tokens: int = 96,
        n_gpu_layers: int = 0, n_threads: int | None = None) -> LosslessResult:
    """Generate with ``off`` and each variant under every sampling setting and compare token for token."""
    def generate(variant: LosslessVariant) -> dict[str, list[tuple[list[int], int, int]]]:
        config = EngineConfig(target, mode=variant.mode, draft=variant.draft, draft_depth=variant.draft_depth,
                              adaptive=variant.adaptive, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
        decoder = SpeculativeDecoder(config)
        try:
            out: dict[str, list[tuple[list[int], int, int]]] = {}
            for name, params in SETTINGS.items():
                out[name] = []
                for prompt in prompts:
                    decoder.reset()
                    reply = decoder.generate(prompt, n_tokens, Sampler(params))
                    out[name].append((reply.tokens, reply.stats.drafted, reply.stats.accepted))
            return out
        finally:
            decoder.close()

    reference = generate(LosslessVariant("off", "off"))
    result = LosslessResult()
    for variant in variants:
        got = generate(variant)
        for name in SETTINGS:
            ours = [tokens for tokens, _, _ in got[name]]
            plain = [tokens for tokens, _, _ in reference[name]]
            differences = [_first_difference(a, b) for a, b in zip(ours, plain, strict=True)]
            first = next((d for d in differences if d is not None), None)
            result.outcomes.append(VariantOutcome(
                variant.label, name, identical=ours == plain, first_difference=first,
                generated=sum(len(t) for t in ours), tested=sum(d for _, d, _ in got[name]),
                accepted=sum(a for _, _, a in got[name])))
    return result
