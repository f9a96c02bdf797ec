"""``bench spec``: our speculative loop across modes and depths, side by side with upstream llama-server.

Every variant runs every prompt of each prompt set once per run; runs are interleaved variant by
variant so machine noise hits all alike, and the reported figures are medians over runs. Decode
tok/s is generated tokens over decode time (after the prompt), as llama-server's
``predicted_per_second``. The bound is what the measured acceptance allows with the measured
costs: (1 - a^(k+1)) / (1 - a) tokens per round for k draft steps plus one verify pass, against
one plain pass per token; efficiency is the measured speedup over ``off`` divided by it. Our rows
split each round into the verify pass, the draft steps and our host (Python) time; native times
are taken after ``llama_synchronize``, so a GPU's work counts as native, not as ours.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.bench.report import device_description
from app.engine.chat_template import Message
from app.engine.session import ChatSession
from app.engine.speculative import EngineConfig, Mode
from app.native.handles import default_threads
from app.resources import resources_dir

DraftKind = Literal["full", "d2t"]
PROMPT_SETS = ("document", "reasoning")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    engine: Literal["ours", "upstream", "remote"]
    mode: Mode
    draft: DraftKind | None = None
    n_max: int = 3
    adaptive: bool = False
    remote: str = ""  # engine "remote": the server's name (it drafts, or not, its own way)

    @property
    def label(self) -> str:
        if self.engine == "remote":
            return f"remote {self.remote}"
        if self.mode == "off":
            what = "off"
        else:
            what = ("d2t sidecar" if self.draft == "d2t" else "full sidecar") if self.mode == "sidecar" else "embedded"
            what += f" adaptive k<={self.n_max}" if self.adaptive else f" k={self.n_max}"
        return what if self.engine == "ours" else f"llama-server {what}"

    @property
    def fixed_key(self) -> tuple[Mode, DraftKind | None, int]:
        """What an upstream variant is compared with: same mode, draft and fixed depth."""
        return self.mode, self.draft, 0 if self.mode == "off" else self.n_max


def load_prompts(name: str) -> list[str]:
    """The prompts of ``resources/prompts/<name>.txt`` (``---`` separates them, ``#`` lines are comments)."""
    text = (resources_dir() / "prompts" / f"{name}.txt").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return [p.strip() for p in "\n".join(lines).split("\n---\n") if p.strip()]


@dataclass
class Sample:
    """One variant over one prompt set in one run (all its prompts summed)."""

    generated: int = 0
    decode_seconds: float = 0.0
    passes: int = 0
    tested: int = 0
    proposed: int = 0
    accepted: int = 0
    draft_native: float = 0.0
    verify_native: float = 0.0

    @property
    def tps(self) -> float:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass
class Row:
    variant: Variant
    prompt_set: str
    samples: list[Sample] = field(default_factory=list)

    def median(self, fn: Callable[[Sample], float]) -> float:
        return statistics.median(fn(s) for s in self.samples)

    @property
    def tps(self) -> float:
        return self.median(lambda s: s.tps)

    @property
    def acceptance(self) -> float | None:  # of the drafts actually tested
        tested = sum(s.tested for s in self.samples)
        return sum(s.accepted for s in self.samples) / tested if tested else None

    @property
    def tokens_per_pass(self) -> float | None:
        passes = sum(s.passes for s in self.samples)
        return sum(s.generated for s in self.samples) / passes if passes else None

    # Our rows split each round three ways: the target's verify pass, the draft steps, and our host
    # (Python) time; the native parts are synchronized (``Context.decode`` waits for the device), so on a
    # GPU the device's work is in them, not in the host share. llama-server rows have none of these.

    @property
    def python_ms_per_round(self) -> float | None:
        """Decode time not spent inside llama.cpp (decode and rollback), per target pass: our loop's own cost."""
        if self.variant.engine != "ours" or not self.samples[0].passes:
            return None
        return self.median(lambda s: (s.decode_seconds - s.draft_native - s.verify_native) / s.passes * 1000)

    @property
    def draft_ms(self) -> float | None:
        """Draft time per draft token made (0 in ``off``)."""
        if self.variant.engine != "ours":
            return None
        if not any(s.proposed for s in self.samples):
            return 0.0 if not any(s.draft_native for s in self.samples) else None
        return self.median(lambda s: s.draft_native / s.proposed * 1000 if s.proposed else 0.0)

    @property
    def draft_ms_per_round(self) -> float | None:
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.draft_native / s.passes * 1000 if s.passes else 0.0)

    @property
    def verify_ms(self) -> float | None:
        """The target's verify pass (rollback included) per round."""
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.verify_native / s.passes * 1000 if s.passes else 0.0)

    @property
    def round_ms(self) -> float | None:
        """Decode wall time per round: verify + draft + host."""
        if self.variant.engine != "ours":
            return None
        return self.median(lambda s: s.decode_seconds / s.passes * 1000 if s.passes else 0.0)


def theoretical_tokens_per_round(a: float, k: int) -> float:
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


@dataclass
class SpecResult:
    rows: list[Row]
    n_tokens: int
    runs: int
    model: str
    device: str
    cut_short: bool = False  # the time limit stopped it before every run of every variant was done

    def row(self, variant: Variant, prompt_set: str) -> Row | None:
        return next((r for r in self.rows if r.variant == variant and r.prompt_set == prompt_set), None)

    def off_row(self, engine: str, prompt_set: str) -> Row | None:
        return next((r for r in self.rows if r.variant.engine == engine and r.variant.mode == "off"
                     and r.prompt_set == prompt_set), None)

    def upstream_peer(self, row: Row) -> Row | None:
        """llama-server at the same settings; for adaptive depth (which llama-server lacks), its fastest
        fixed depth with the same draft in this run: the strictest comparison."""
        if row.variant.engine != "ours":
            return None
        if row.variant.adaptive:
            same = [r for r in self.rows if r.variant.engine == "upstream" and r.prompt_set == row.prompt_set
                    and r.variant.mode == row.variant.mode and r.variant.draft == row.variant.draft]
            return max(same, key=lambda r: r.tps, default=None)
        return next((r for r in self.rows if r.variant.engine == "upstream" and r.prompt_set == row.prompt_set
                     and r.variant.fixed_key == row.variant.fixed_key), None)

    def bound(self, row: Row) -> float | None:
        """The speedup over ``off`` the measured acceptance and step costs allow with zero loop overhead:
        k draft steps and a verify pass per round against ``off``'s pass per token, all synchronized."""
        off = self.off_row("ours", row.prompt_set)
        a, draft_ms, verify_ms = row.acceptance, row.draft_ms, row.verify_ms
        if off is None or a is None or draft_ms is None or verify_ms is None or row.variant.mode == "off":
            return None
        plain_ms = off.verify_ms
        if not plain_ms or verify_ms <= 0:
            return None
        depths = range(1, row.variant.n_max + 1) if row.variant.adaptive else [row.variant.n_max]
        return max(theoretical_tokens_per_round(a, k) * plain_ms / (k * draft_ms + verify_ms) for k in depths)

    def summary(self, row: Row) -> dict[str, Any]:
        off = self.off_row(row.variant.engine, row.prompt_set) if row.variant.engine != "remote" else None
        peer = self.upstream_peer(row)
        bound = self.bound(row)
        vs_off = row.tps / off.tps if off is not None and off.tps > 0 else None
        return {
            "variant": row.variant.label, "engine": row.variant.engine, "mode": row.variant.mode,
            "draft": row.variant.draft, "n_max": row.variant.n_max, "adaptive": row.variant.adaptive,
            "prompt_set": row.prompt_set, "decode_tps_median": round(row.tps, 2),
            "decode_tps_runs": [round(s.tps, 2) for s in row.samples],
            "acceptance": _round(row.acceptance), "tokens_per_pass": _round(row.tokens_per_pass),
            "vs_off": _round(vs_off), "vs_upstream": _round(row.tps / peer.tps if peer and peer.tps > 0 else None),
            "bound": _round(bound), "efficiency": _round(vs_off / bound if vs_off and bound else None),
            # per round: verify pass + draft steps + host (Python) = round_ms (each a median over runs)
            "round_ms": _round(row.round_ms), "verify_ms_per_pass": _round(row.verify_ms),
            "draft_ms_per_step": _round(row.draft_ms), "draft_ms_per_round": _round(row.draft_ms_per_round),
            "python_ms_per_round": _round(row.python_ms_per_round),
            "drafted": sum(s.proposed for s in row.samples), "accepted": sum(s.accepted for s in row.samples),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "n_tokens": self.n_tokens, "runs": self.runs,
                "cut_short": self.cut_short,
                "rows": [self.summary(r) for r in self.rows]}

    def markdown(self) -> str:
        lines = []
        for prompt_set in PROMPT_SETS:
            rows = [r for r in self.rows if r.prompt_set == prompt_set]
            if not rows:
                continue
            lines += [f"\n**{prompt_set} prompts**\n",
                      "| variant | tok/s (median) | acceptance | tokens/pass | vs off | vs llama-server | bound | "
                      "efficiency | verify ms/pass | draft ms/step | Python ms/round |",
                      "|---|---|---|---|---|---|---|---|---|---|---|"]
            for row in rows:
                s = self.summary(row)
                lines.append(f"| {s['variant']} | {s['decode_tps_median']:.1f} | {_fmt(s['acceptance'], '.3f')} | "
                             f"{_fmt(s['tokens_per_pass'], '.2f')} | {_fmt(s['vs_off'], '.2f', 'x')} | "
                             f"{_fmt(s['vs_upstream'], '.2f', 'x')} | {_fmt(s['bound'], '.2f', 'x')} | "
                             f"{_fmt(s['efficiency'], '.0%')} | {_fmt(s['verify_ms_per_pass'], '.2f')} | "
                             f"{_fmt(s['draft_ms_per_step'], '.3f')} | {_fmt(s['python_ms_per_round'], '.2f')} |")
        return "\n".join(lines).strip() + "\n"

    def chart(self, path: Path) -> Path:
        """A grouped bar chart of decode tok/s per variant (ours solid, llama-server hatched)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sets = [p for p in PROMPT_SETS if any(r.prompt_set == p for r in self.rows)]
        fig, axes = plt.subplots(len(sets), 1, figsize=(12, 4.2 * len(sets)), squeeze=False)
        for ax, prompt_set in zip(axes[:, 0], sets, strict=True):
            rows = [r for r in self.rows if r.prompt_set == prompt_set]
            colors = [{"ours": "#4c78a8", "upstream": "#f58518", "remote": "#54a24b"}[r.variant.engine] for r in rows]
            bars = ax.bar(range(len(rows)), [r.tps for r in rows], color=colors)
            for bar, row in zip(bars, rows, strict=True):
                if row.variant.engine == "upstream":
                    bar.set_hatch("//")
            ax.set_xticks(range(len(rows)), [r.variant.label.replace("llama-server ", "srv ") for r in rows],
                          rotation=55, ha="right", fontsize=8)
            ax.set_ylabel("decode tok/s (median)")
            ax.set_title(f"{prompt_set} prompts — {self.model}, {self.n_tokens} tokens, {self.runs} runs "
                         "(blue: ours, orange: llama-server, green: remote)", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


# (mode name on the command line, engine mode, draft kind)
_MODES: list[tuple[str, Mode, DraftKind | None]] = [("embedded", "embedded", None), ("full", "sidecar", "full"),
                                                     ("d2t", "sidecar", "d2t")]


def default_variants(depths: list[int], modes: list[str], upstream: bool, adaptive_max: int = 8) -> list[Variant]:
    """Ours: off, then each drafting mode at each depth and adaptive (up to ``adaptive_max``, 0 for none);
    upstream: off and the sidecars."""
    variants = [Variant("ours", "off")] if "off" in modes else []
    for name, mode, draft in _MODES:
        if name in modes:
            variants += [Variant("ours", mode, draft, k) for k in depths]
            if adaptive_max:
                variants.append(Variant("ours", mode, draft, adaptive_max, adaptive=True))
    if upstream:
        variants.append(Variant("upstream", "off"))
        for name, mode, draft in _MODES:
            if name in modes and draft is not None:
                variants += [Variant("upstream", mode, draft, k) for k in depths]
    return variants


def run(target: Path, sidecars: dict[str, Path], *, variants: list[Variant], n_tokens: int = 128, runs: int = 3,
        prompt_sets: tuple[str, ...] = PROMPT_SETS, n_threads: int | None = None, n_gpu_layers: int = 0,
        server_binary: Path | None = None, log: Log = lambda _m: None,
        time_limit_s: float | None = None, remote: Any = None) -> SpecResult:
    """Run the matrix; ``server_binary`` is needed when ``variants`` include upstream ones, ``remote`` (a
    ``RemoteServer``) when they include a remote one: the same prompts as chat turns over its stream, with its
    own timings where it reports them (llama-server) and the stream's otherwise.

    With ``time_limit_s`` no variant but the first starts unless it would end within that much time
    (taking as long as the longest so far): the result keeps what was measured (rows without samples
    are left out) and says it was cut short, where a killed run would keep nothing (a lent GPU
    machine's budget).
    """
    began = time.monotonic()
    cut_short = False
    # the same thread count on both sides: llama-server's own default differs from ours (llama.cpp's, not
    # one per physical core), which made it look faster on a 2-core machine
    n_threads = n_threads or default_threads()
    longest = 0.0  # seconds of the longest variant run so far
    run_order = sorted(variants, key=_priority)  # what a run cut short by its time limit should still have
    prompts = {name: load_prompts(name) for name in prompt_sets}
    rows = {(v, p): Row(v, p) for v in variants for p in prompt_sets}
    token_prompts = tokenize_prompts(target, prompts)
    for run_index in range(runs):
        for index, variant in enumerate(run_order):
            started_any = run_index > 0 or index > 0  # the first variant always runs: something to report
            # start a variant only if the longest one so far would still end within the limit
            if time_limit_s is not None and started_any and \
                    time.monotonic() - began + longest >= time_limit_s:
                cut_short = True
                log(f"time limit of {time_limit_s:.0f} s reached: stopping before run {run_index + 1} "
                    f"of {variant.label}")
                break
            started = time.perf_counter()
            if variant.engine == "ours":
                samples = _run_ours(variant, target, sidecars, token_prompts, n_tokens, n_threads, n_gpu_layers)
            elif variant.engine == "remote":
                samples = _run_remote(remote, prompts, n_tokens)
            else:
                assert server_binary is not None, "upstream variants need the llama-server binary"
                samples = _run_upstream(variant, server_binary, target, sidecars, token_prompts, n_tokens,
                                        n_threads, n_gpu_layers)
            for prompt_set, sample in samples.items():
                rows[(variant, prompt_set)].samples.append(sample)
            longest = max(longest, time.perf_counter() - started)
            log(f"run {run_index + 1}/{runs} {variant.label}: "
                + ", ".join(f"{p} {s.tps:.1f} tok/s" for p, s in samples.items())
                + f" ({time.perf_counter() - started:.1f} s)")
        if cut_short:
            break
    measured = [row for row in rows.values() if row.samples]
    completed = min((len(row.samples) for row in measured), default=0)
    return SpecResult(measured, n_tokens, completed, target.name, device_description(), cut_short)


def _priority(variant: Variant) -> tuple[int, int, int]:
    """Run order: off, then the default depth 3 (d2t first, ours before llama-server), adaptive, then the
    depths further from 3. Medians do not depend on it; a run stopped by its time limit keeps the rows
    that matter most."""
    engine = {"ours": 0, "upstream": 1, "remote": 2}[variant.engine]
    if variant.engine == "remote":
        return 1, 0, engine  # beside the default depth: one row, the server's own drafting
    if variant.mode == "off":
        return 0, 0, engine
    mode = {"d2t": 0, None: 1, "full": 2}[variant.draft]
    depth = 1 if variant.adaptive else (0 if variant.n_max == 3 else 1 + abs(variant.n_max - 3))
    return 1 + depth, mode, engine


def _config(variant: Variant, target: Path, sidecars: dict[str, Path], n_threads: int | None,
            n_gpu_layers: int) -> EngineConfig:
    draft = sidecars[variant.draft] if variant.draft else None
    return EngineConfig(target, mode=variant.mode, draft=draft, n_max=variant.n_max, adaptive=variant.adaptive,
                        n_ctx=2048, n_threads=n_threads, n_gpu_layers=n_gpu_layers)


def tokenize_prompts(target: Path, prompts: dict[str, list[str]]) -> dict[str, list[list[int]]]:
    """Each prompt as the user turn of a chat, rendered with the target's template (thinking off)."""
    session = ChatSession(EngineConfig(target, n_ctx=256))
    try:
        return {name: [session.prompt_tokens([Message("user", p)], thinking=False) for p in texts]
                for name, texts in prompts.items()}
    finally:
        session.close()


def _run_ours(variant: Variant, target: Path, sidecars: dict[str, Path], prompts: dict[str, list[list[int]]],
              n_tokens: int, n_threads: int | None, n_gpu_layers: int) -> dict[str, Sample]:
    session = ChatSession(_config(variant, target, sidecars, n_threads, n_gpu_layers))
    decoder = session.decoder
    try:
        decoder.generate(prompts[next(iter(prompts))][0], 8)  # warm-up: first-pass allocations
        samples: dict[str, Sample] = {}
        for name, token_prompts in prompts.items():
            sample = Sample()
            for prompt in token_prompts:
                decoder.reset()  # a fresh conversation each time, as the server's cache_prompt=false
                stats = decoder.generate(prompt, n_tokens).stats
                sample.generated += stats.generated
                sample.decode_seconds += stats.decode_seconds
                sample.passes += stats.target_passes - 1  # the first token comes from the prompt pass
                sample.tested += stats.drafted
                sample.proposed += stats.proposed
                sample.accepted += stats.accepted
                sample.verify_native += stats.verify_native_seconds
                sample.draft_native += stats.draft_native_seconds
            samples[name] = sample
        return samples
    finally:
        session.close()


def _run_remote(server: Any, prompts: dict[str, list[str]], n_tokens: int) -> dict[str, Sample]:
    """Each prompt as a fresh chat turn (thinking off, greedy) streamed from a remote server."""
    from app.engine.remote import RemoteClient
    from app.engine.session import ChatOptions
    from app.remote_servers import RemoteError

    options = ChatOptions(max_tokens=n_tokens, thinking=False)
    with RemoteClient(server) as client:
        loaded = client.load()
        if loaded["kind"] == "error":
            raise RemoteError(loaded["message"], loaded.get("advice", ""))
        samples: dict[str, Sample] = {}
        for name, texts in prompts.items():
            sample = Sample()
            for text in texts:
                done = list(client.generate([Message("user", text)], options))[-1]
                if done["kind"] == "error":
                    raise RemoteError(done["message"], done.get("advice", ""))
                stats = done["stats"]
                sample.generated += int(stats["generated"])
                sample.decode_seconds += float(stats["decode_seconds"])
                sample.proposed += int(stats["proposed"])
                sample.accepted += int(stats["accepted"])
                sample.tested += int(stats["drafted"])
            samples[name] = sample
        return samples


def _run_upstream(variant: Variant, binary: Path, target: Path, sidecars: dict[str, Path],
                  prompts: dict[str, list[list[int]]], n_tokens: int, n_threads: int | None,
                  n_gpu_layers: int) -> dict[str, Sample]:
    from app.backend.upstream_server import UpstreamServer

    draft = sidecars[variant.draft] if variant.draft else None
    with UpstreamServer(binary, target, draft=draft, n_max=variant.n_max, threads=n_threads, ctx_size=2048,
                        n_gpu_layers=n_gpu_layers) as server:
        server.complete(prompts[next(iter(prompts))][0], 8)  # warm-up
        samples: dict[str, Sample] = {}
        for name, token_prompts in prompts.items():
            sample = Sample()
            for prompt in token_prompts:
                done = server.complete(prompt, n_tokens)
                predicted_ms = float(done.timings.get("predicted_ms", 0.0))
                sample.generated += int(done.timings.get("predicted_n", len(done.tokens)))
                sample.decode_seconds += predicted_ms / 1000.0
                sample.proposed += done.drafted
                sample.accepted += done.accepted
                sample.tested += done.drafted
            samples[name] = sample
        return samples
