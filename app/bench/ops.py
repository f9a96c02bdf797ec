"""``bench ops``: what one target pass costs, op by op, and how a verify pass grows with its tokens.

Two questions a GPU run must answer: why a (k+1)-token verify pass costs more than a 1-token pass (2x
for k=3 on an H200 with the 27b demo), and where a pass's time goes. So:

- plain passes, in a context without any callback (what the engine's verify passes cost): one token
  and k+1 tokens after a prompt, each timed with ``llama_synchronize`` and rolled back, each size
  ``runs`` times in a row after two warm-ups (so CUDA graphs replay, as in the engine), the median;
  their ratio to the 1-token pass for each k; the prompt pass (tok/s); the plain 1-token pass against
  the bytes of weights a pass reads (and the device's bandwidth when given);
- the same passes once more in a context with the eval callback (``OpProfiler``): every node timed,
  grouped by op type, by layer kind (recurrent, attention, MTP, output, input) and by the backend
  that ran it, with llama.cpp's graph split counts. One draft step of the MTP head is profiled too
  when a draft is given. Profiling computes one node at a time, so its sums are above the plain
  times (shares are what to read; ``profiled_ms`` vs ``ms`` says by how much).
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.bench.report import device_description
from app.engine.attention import default_kernel
from app.engine.config import DRAFT_DEPTH_MAX
from app.native.handles import Context, FloatArray, Model
from app.native.profile import NodeRecord, OpProfiler

Log = Callable[[str], None]

# ops that compute nothing (a view of another tensor's memory)
VIEW_OPS = frozenset({"NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
# ops only a recurrent (linear-attention / SSM) layer has
RECURRENT_OPS = frozenset({"GATED_DELTA_NET", "SSM_CONV", "SSM_SCAN", "RWKV_WKV6", "RWKV_WKV7", "GATED_LINEAR_ATTN"})
# graph outputs llama.cpp names without a layer number
OUTPUT_NAMES = frozenset({"result_norm", "result_output", "result_output_d2t", "h_nextn", "mtp_shared_head_norm",
                          "result_embd", "result_embd_pooled"})
INPUT_NAMES = frozenset({"model.input_embed", "inp_embd", "inp_scaled"})
_LAYER = re.compile(r"-(\d+)(?= \(|$)")


def layer_groups(records: list[NodeRecord]) -> list[str]:
    """Each node's group in graph order: ``layer N``, ``output`` or ``input``; a node without a layer number
    in its name (``node_57``, a view) belongs with the node before it."""
    groups: list[str] = []
    current = "input"
    for record in records:
        base = record.name.split(" (")[0]
        match = _LAYER.search(base)
        if match:
            current = f"layer {int(match.group(1))}"
        elif base in OUTPUT_NAMES or base.startswith("result_"):
            current = "output"
        elif base in INPUT_NAMES:
            current = "input"
        groups.append(current)
    return groups


def layer_kinds(records: list[NodeRecord]) -> list[str]:
    """Each node's layer kind: ``recurrent`` (a layer with gated-delta-net / SSM ops), ``attention`` (any
    other trunk layer), ``mtp`` (the MTP block, ``mtp_*`` nodes), ``output`` (norm, LM head) or ``input``."""
    groups = layer_groups(records)
    ops_of: dict[str, set[str]] = defaultdict(set)
    mtp_layers: set[str] = set()
    for group, record in zip(groups, records, strict=True):
        ops_of[group].add(record.op)
        if record.name.startswith("mtp_"):
            mtp_layers.add(group)
    kinds = []
    for group in groups:
        if not group.startswith("layer "):
            kinds.append(group)
        elif group in mtp_layers:
            kinds.append("mtp")
        else:
            kinds.append("recurrent" if ops_of[group] & RECURRENT_OPS else "attention")
    return kinds


@dataclass
class Profile:
    """The nodes of one profiled pass, and what they add up to by op, layer kind and backend."""

    records: list[NodeRecord]

    @property
    def total_ms(self) -> float:
        return sum(r.seconds for r in self.records) * 1000.0

    def _grouped(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        total = self.total_ms or 1.0
        groups: dict[str, dict[str, Any]] = {}
        for key, record in zip(keys, self.records, strict=True):
            group = groups.setdefault(key, {"ms": 0.0, "nodes": 0, "backends": {}})
            group["ms"] += record.seconds * 1000.0
            group["nodes"] += 1
            if record.op not in VIEW_OPS:
                group["backends"][record.backend] = group["backends"].get(record.backend, 0) + 1
        for group in groups.values():
            group["share"] = round(group["ms"] / total, 4)
            group["ms"] = round(group["ms"], 4)
        return dict(sorted(groups.items(), key=lambda item: -item[1]["ms"]))

    def by_op(self) -> dict[str, dict[str, Any]]:
        return self._grouped(r.op for r in self.records)

    def by_layer_kind(self) -> dict[str, dict[str, Any]]:
        kinds = layer_kinds(self.records)
        grouped = self._grouped(kinds)
        layers = {(k, g) for k, g in zip(kinds, layer_groups(self.records), strict=True) if g.startswith("layer ")}
        for kind, info in grouped.items():  # how many layers of each kind
            info["layers"] = sum(1 for k, _ in layers if k == kind)
        return grouped

    def by_backend(self) -> dict[str, dict[str, Any]]:
        computing = [r for r in self.records if r.op not in VIEW_OPS]
        return Profile(computing)._grouped(r.backend for r in computing)

    def splits_seen(self) -> int:
        """Runs of consecutive computing nodes on one backend: the splits this pass really had."""
        backends = [r.backend for r in self.records if r.op not in VIEW_OPS]
        return sum(1 for i, b in enumerate(backends) if i == 0 or b != backends[i - 1])

    def host_fallbacks(self) -> dict[str, int]:
        """Ops that ran on the CPU although another backend ran the rest of the pass (counts by op)."""
        computing = [r for r in self.records if r.op not in VIEW_OPS]
        if all(r.backend == "CPU" for r in computing):
            return {}
        fallen: dict[str, int] = defaultdict(int)
        for r in computing:
            if r.backend == "CPU":
                fallen[r.op] += 1
        return dict(fallen)

    def to_dict(self) -> dict[str, Any]:
        return {"profiled_ms": round(self.total_ms, 4), "nodes": len(self.records), "splits_seen": self.splits_seen(),
                "by_op": self.by_op(), "by_layer_kind": self.by_layer_kind(), "by_backend": self.by_backend(),
                "host_fallbacks": self.host_fallbacks()}


@dataclass
class Pass:
    label: str  # "1 token", "4 tokens", "prompt 512", "draft step"
    kind: str  # "decode", "prompt" or "draft"
    tokens: int
    seconds: list[float] = field(default_factory=list)  # plain passes, synchronized
    profile: Profile | None = None
    # the process's CPU time of each plain pass: on a CPU backend, the pass without the waits for a core that
    # another job's load adds to ``seconds`` (every thread's, so it exceeds the wall time with several threads)
    cpu_seconds: list[float] = field(default_factory=list)
    # what the pass asks the graph to hand back to the host: logits rows and MTP hidden (nextn) rows
    logits_rows: int = 0
    hidden_rows: int = 0
    row_bytes: tuple[int, int] = (0, 0)  # bytes of one logits row and of one hidden row

    @property
    def ms(self) -> float:
        return statistics.median(self.seconds) * 1000.0 if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return statistics.median(self.cpu_seconds) * 1000.0 if self.cpu_seconds else 0.0

    @property
    def host_bytes(self) -> int:
        """Bytes llama.cpp copies out of the graph to the host after the pass (logits and hidden rows)."""
        return self.logits_rows * self.row_bytes[0] + self.hidden_rows * self.row_bytes[1]


@dataclass
class OpsResult:
    model: str
    device: str
    n_gpu_layers: int
    file_bytes: int
    pass_bytes: int  # weights a decode pass reads: the file less the token embeddings and the MTP block
    passes: list[Pass]
    graph: dict[str, Any]  # llama.cpp's node and split counts per context
    bandwidth_gbs: float | None = None
    runs: int = 0
    flash_attn: bool | None = None  # the attention kernel the engine takes here (``engine.attention``)

    def decode_pass(self, tokens: int) -> Pass | None:
        return next((p for p in self.passes if p.kind == "decode" and p.tokens == tokens), None)

    def verify_ratio(self) -> dict[str, float]:
        """Time of a (k+1)-token pass over a 1-token pass, keyed by k."""
        one = self.decode_pass(1)
        if one is None or one.ms <= 0:
            return {}
        return {str(p.tokens - 1): round(p.ms / one.ms, 3) for p in self.passes
                if p.kind == "decode" and p.tokens > 1}

    def prompt_tps(self) -> float | None:
        prompt = next((p for p in self.passes if p.kind == "prompt"), None)
        return round(prompt.tokens / (prompt.ms / 1000.0), 1) if prompt and prompt.ms > 0 else None

    def bandwidth(self) -> dict[str, Any]:
        one = self.decode_pass(1)
        if one is None or one.ms <= 0:
            return {}
        seconds = one.ms / 1000.0
        out: dict[str, Any] = {"ms_per_token": round(one.ms, 4), "file_bytes": self.file_bytes,
                               "pass_bytes": self.pass_bytes,
                               "file_gbs": round(self.file_bytes / seconds / 1e9, 2),
                               "pass_gbs": round(self.pass_bytes / seconds / 1e9, 2)}
        if self.bandwidth_gbs:
            floor = self.pass_bytes / (self.bandwidth_gbs * 1e9) * 1000.0
            out |= {"device_gbs": self.bandwidth_gbs, "floor_ms": round(floor, 4),
                    "share_of_bandwidth": round(self.pass_bytes / seconds / 1e9 / self.bandwidth_gbs, 4)}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "device": self.device, "n_gpu_layers": self.n_gpu_layers, "runs": self.runs,
            "flash_attn": self.flash_attn,
            "graph": self.graph, "verify_ratio": self.verify_ratio(), "prompt_tps": self.prompt_tps(),
            "bandwidth": self.bandwidth(),
            "passes": [{"label": p.label, "kind": p.kind, "tokens": p.tokens, "ms": round(p.ms, 4),
                        "ms_runs": [round(s * 1000.0, 4) for s in p.seconds], "cpu_ms": round(p.cpu_ms, 4),
                        "logits_rows": p.logits_rows, "hidden_rows": p.hidden_rows, "host_bytes": p.host_bytes,
                        **(p.profile.to_dict() if p.profile else {})} for p in self.passes],
        }

    def markdown(self, top: int = 12) -> str:
        ratio = self.verify_ratio()
        kernel = {True: "flash attention", False: "the plain attention kernel", None: "llama.cpp's attention"}
        lines = [f"**{self.model}** on {self.device}, GPU layers {self.n_gpu_layers}, {kernel[self.flash_attn]}\n",
                 "| pass | tokens | ms (median, plain) | vs 1 token | CPU ms | logits rows | hidden rows | to host KiB "
                 "| profiled ms | nodes | splits seen |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in self.passes:
            vs = f"{ratio[str(p.tokens - 1)]:.2f}x" if p.kind == "decode" and str(p.tokens - 1) in ratio else \
                ("1.00x" if p.kind == "decode" and p.tokens == 1 else "–")
            prof = p.profile
            lines.append(f"| {p.label} | {p.tokens} | {p.ms:.3f} | {vs} | {p.cpu_ms:.3f} | {p.logits_rows} | "
                         f"{p.hidden_rows} | {p.host_bytes / 1024:.0f} | "
                         f"{f'{prof.total_ms:.3f}' if prof else '–'} | {len(prof.records) if prof else '–'} | "
                         f"{prof.splits_seen() if prof else '–'} |")
        profiles = [(p, p.profile) for p in self.passes if p.profile is not None]
        for title, method in (("op", "by_op"), ("layer kind", "by_layer_kind"), ("backend", "by_backend")):
            groups = [(p, getattr(profile, method)()) for p, profile in profiles]
            keys: dict[str, float] = defaultdict(float)
            for _, g in groups:
                for key, info in g.items():
                    keys[key] += info["ms"]
            chosen = sorted(keys, key=lambda k: -keys[k])[:top]
            lines += ["", f"Profiled ms by {title} (share of the profiled pass):", "",
                      f"| {title} | " + " | ".join(p.label for p, _ in groups) + " |",
                      "|---|" + "---|" * len(groups)]
            for key in chosen:
                cells = []
                for _, g in groups:
                    info = g.get(key)
                    cells.append(f"{info['ms']:.3f} ({info['share']:.0%})" if info else "–")
                lines.append(f"| {key} | " + " | ".join(cells) + " |")
        lines.append("")
        for name, counts in self.graph.items():
            splits, nodes = counts.get("splits", {}), counts.get("nodes", {})
            lines.append(f"- {name} context: llama.cpp reported graph splits {splits.get('batch', '?')} (full batch), "
                         f"{splits.get('single', '?')} (one token); nodes {nodes.get('batch', '?')}, "
                         f"{nodes.get('single', '?')}")
        fallbacks = {k: v for _, profile in profiles for k, v in profile.host_fallbacks().items()}
        # llama.cpp keeps the token embeddings on the CPU, so one GET_ROWS per pass is there by design
        lines.append("- ops on the CPU while another backend ran the rest: "
                     + (", ".join(f"{k} ({v})" for k, v in fallbacks.items()) if fallbacks else "none"))
        if ratio:
            lines.append("- verify pass / 1-token pass: " + ", ".join(f"k={k} {v:.2f}x" for k, v in ratio.items()))
        if self.prompt_tps() is not None:
            lines.append(f"- prompt: {self.prompt_tps():.1f} tok/s")
        bw = self.bandwidth()
        if bw:
            text = (f"- plain decode: {bw['ms_per_token']:.3f} ms per token; weights read per pass "
                    f"{bw['pass_bytes'] / 1e9:.3f} GB -> {bw['pass_gbs']:.1f} GB/s "
                    f"(file {bw['file_bytes'] / 1e9:.3f} GB -> {bw['file_gbs']:.1f} GB/s)")
            if "floor_ms" in bw:
                text += (f"; at {bw['device_gbs']:.0f} GB/s the floor is {bw['floor_ms']:.3f} ms "
                         f"({bw['share_of_bandwidth']:.0%} of the bandwidth used)")
            lines.append(text)
        return "\n".join(lines) + "\n"


def weight_bytes(path: Path) -> tuple[int, int]:
    """The file's size, and the bytes of the tensors a decode pass reads (all but the token embeddings,
    of which a pass reads a row per token, and the MTP block, which only the draft context runs)."""
    from app.gguftools.header import gguf_header

    header = gguf_header(path)
    arch = header.architecture
    blocks = header.value(f"{arch}.block_count")
    nextn = header.value(f"{arch}.nextn_predict_layers")
    trunk = int(blocks) - int(nextn or 0) if isinstance(blocks, int) else None
    total = 0
    for tensor in header.tensors:
        name = tensor.name
        if name.startswith("token_embd."):
            continue
        if trunk is not None and name.startswith("blk.") and int(name.split(".")[1]) >= trunk:
            continue
        total += int(tensor.n_bytes)
    return path.stat().st_size, total


def run(target: Path, draft: Path | None = None, *, tokens_per_pass: list[int] | None = None,
        prompt_tokens: int = 512, runs: int = 10, profile_runs: int = 1, n_threads: int | None = None,
        n_gpu_layers: int = 0, bandwidth_gbs: float | None = None, log: Log = lambda _m: None) -> OpsResult:
    """Time and profile the passes; ``draft`` (an MTP sidecar, or ``target`` itself for its embedded head)
    adds the profile of one draft step."""
    sizes = sorted({1, *(tokens_per_pass or [1, 2, 3, 4, 5])})
    if sizes[0] < 1 or sizes[-1] > DRAFT_DEPTH_MAX + 1:  # k+1 for each draft depth; each needs a snapshot
        raise ValueError(f"tokens per pass must be 1 to {DRAFT_DEPTH_MAX + 1}")
    prompt = [int(t) for t in 1000 + np.arange(prompt_tokens) % 4000]
    n_ctx = prompt_tokens + sizes[-1] + 16
    n_batch = max(prompt_tokens, sizes[-1])
    file_bytes, pass_bytes = weight_bytes(target)
    embedded = draft is not None and draft.resolve() == target.resolve()
    with Model(target, n_gpu_layers=n_gpu_layers, load_mtp=embedded) as model:
        # the kernel the engine runs with these settings, so the profile is of the passes a reply makes
        flash = default_kernel(n_ctx=n_ctx, n_batch=n_batch, n_head=model.n_head, on_cpu=n_gpu_layers == 0)
        ctx_args: dict[str, Any] = {"n_ctx": n_ctx, "n_batch": n_batch, "n_threads": n_threads,
                                    "n_rs_seq": sizes[-1], "nextn_outputs": draft is not None, "flash_attn": flash}
        target_profiler = OpProfiler(model.lib)
        draft_model = None
        contexts: list[Context] = []
        try:
            plain = Context(model, **ctx_args)
            contexts.append(plain)
            profiled = Context(model, **ctx_args, timer=target_profiler)
            contexts.append(profiled)
            graph = {"target": plain.graph_counts()}
            passes, hidden = _time_target(plain, profiled, target_profiler, prompt, sizes, runs, profile_runs, log)
            if draft is not None and hidden is not None:
                draft_model = model if embedded else Model(draft, n_gpu_layers=n_gpu_layers, load_mtp=True)
                passes.append(_time_draft(draft_model, plain, prompt, hidden, n_ctx, n_batch, n_threads, runs,
                                          profile_runs, contexts, graph, flash))
                log(f"draft step: {passes[-1].ms:.3f} ms")
        finally:
            for ctx in reversed(contexts):
                ctx.close()
            if draft_model is not None and draft_model is not model:
                draft_model.close()
    return OpsResult(target.name, device_description(), n_gpu_layers, file_bytes, pass_bytes, passes, graph,
                     bandwidth_gbs, runs, flash)


def _timed(ctx: Context, tokens: list[int], pos: int, into: Pass | None = None, **kwargs: Any) -> float:
    """Seconds of one synchronized pass (``Context.decode`` waits for the device); with ``into``, its wall and
    process CPU times are kept there too."""
    before = ctx.native_seconds
    cpu = time.process_time()
    ctx.decode(tokens, pos, **kwargs)
    seconds = ctx.native_seconds - before
    if into is not None:
        into.seconds.append(seconds)
        into.cpu_seconds.append(time.process_time() - cpu)
    return seconds


def _rollback(ctx: Context, n_keep: int) -> None:
    if not ctx.truncate(n_keep):
        raise RuntimeError(f"llama.cpp could not roll the context back to {n_keep} positions")


def _time_target(plain: Context, profiled: Context, profiler: OpProfiler, prompt: list[int], sizes: list[int],
                 runs: int, profile_runs: int, log: Log) -> tuple[list[Pass], FloatArray | None]:
    """The target's passes, plain and profiled; also the prompt's nextn hidden rows (for a draft)."""
    n = len(prompt)
    rows = (plain.n_vocab * 4, plain.n_embd * 4)
    nextn = plain.nextn_outputs  # a drafting target hands back every row's hidden state
    prompt_pass = Pass(f"prompt {n}", "prompt", n, logits_rows=1, hidden_rows=n if nextn else 0, row_bytes=rows)
    decode = {k: Pass(f"{k} token" + ("s" if k > 1 else ""), "decode", k, logits_rows=k,
                      hidden_rows=k if nextn else 0, row_bytes=rows) for k in sizes}
    started = time.perf_counter()
    _timed(plain, prompt, 0)  # warm-up: first-pass allocations
    _rollback(plain, 0)
    for _ in range(max(1, min(runs, 3))):  # prompt passes are long: three are enough for a median
        _timed(plain, prompt, 0, prompt_pass)
        _rollback(plain, 0)
    _timed(plain, prompt, 0)
    hidden = plain.nextn_rows(n) if plain.nextn_outputs else None
    log(f"prompt {n} tokens: {prompt_pass.ms:.2f} ms ({time.perf_counter() - started:.1f} s)")
    tokens = [int(t) for t in 1000 + np.arange(sizes[-1])]
    # Blocked, as the engine's fixed-depth verify passes come: each size twice to warm up (its graph and
    # buffers), then ``runs`` times in a row. Interleaving sizes would time something the engine never
    # does on CUDA: ggml-cuda replays a CUDA graph only after two identical graphs in a row.
    for k in sizes:
        for i in range(2 + runs):
            _timed(plain, tokens[:k], n, decode[k] if i >= 2 else None, logits="all")
            _rollback(plain, n)
    log("plain passes: " + ", ".join(f"{k} tok {p.ms:.3f} ms" for k, p in decode.items()))
    # the same passes node by node
    prompt_pass.profile = Profile(_profiled(profiled, profiler, prompt, 0, "last"))  # one: it is long
    for k in sizes:
        _profiled(profiled, profiler, tokens[:k], n, "all")  # warm-up
        decode[k].profile = _median_profile([_profiled(profiled, profiler, tokens[:k], n, "all")
                                             for _ in range(profile_runs)])
    log("profiled passes: " + ", ".join(f"{p.label} {p.profile.total_ms:.2f} ms"
                                        for p in [prompt_pass, *decode.values()] if p.profile))
    return [*decode.values(), prompt_pass], hidden


def _profiled(ctx: Context, profiler: OpProfiler, tokens: list[int], pos: int, logits: str) -> list[NodeRecord]:
    profiler.take()
    ctx.decode(tokens, pos, logits=logits)
    records = profiler.take()
    if pos > 0:
        _rollback(ctx, pos)
    return records


def _median_profile(runs: list[list[NodeRecord]]) -> Profile:
    """One profile whose node times are the per-node medians over runs (the same graph each time)."""
    if len(runs) == 1 or any(len(r) != len(runs[0]) for r in runs):
        return Profile(runs[0])
    return Profile([NodeRecord(first.name, first.op, first.backend, first.buffer,
                               statistics.median(run[i].seconds for run in runs))
                    for i, first in enumerate(runs[0])])


def _time_draft(draft_model: Model, tctx: Context, prompt: list[int], hidden: FloatArray, n_ctx: int, n_batch: int,
                n_threads: int | None, runs: int, profile_runs: int, contexts: list[Context],
                graph: dict[str, Any], flash_attn: bool | None = None) -> Pass:
    """One MTP draft step (one token, its hidden row from the target) after catching up on the prompt."""
    n = len(prompt)
    shifted = np.zeros_like(hidden)
    shifted[1:] = hidden[:-1]
    profiler = OpProfiler(draft_model.lib)
    plain = Context(draft_model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, draft_for=tctx,
                    flash_attn=flash_attn)
    contexts.append(plain)
    profiled = Context(draft_model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, draft_for=tctx,
                       timer=profiler, flash_attn=flash_attn)
    contexts.append(profiled)
    graph["draft"] = plain.graph_counts()
    # one token: one hidden row (the next step's input) and one logits row
    step = Pass("draft step", "draft", 1, logits_rows=1, hidden_rows=1, row_bytes=(plain.n_vocab * 4, plain.n_embd * 4))
    for ctx in (plain, profiled):
        ctx.decode(prompt, 0, hidden=shifted, logits="none")
    profiler.take()
    last = hidden[-1:]
    for r in range(runs + 2):
        _timed(plain, [prompt[-1]], n, step if r >= 2 else None, hidden=last, logits="last")
        _rollback(plain, n)
    records = []
    for _ in range(profile_runs + 1):
        profiler.take()
        profiled.decode([prompt[-1]], n, hidden=last, logits="last")
        records.append(profiler.take())
        _rollback(profiled, n)
    step.profile = _median_profile(records[1:])
    return step
