"""Which quantization fits the GPU: file sizes from the catalog plus the context's memory, shown as arithmetic.

The estimate is deliberately plain so a user can check it by hand: the model file and the sidecar are
loaded whole, the full-attention layers keep an f16 K and V per token, the gated delta-net layers keep
a fixed recurrent state per sequence, and a fixed overhead covers the CUDA context and compute buffers.

One formula, two feeders: :func:`context_cost` takes a catalog :class:`Architecture`, which is either the
catalog's own (the quantizations not downloaded yet) or one read from a GGUF file's header
(:func:`architecture_from_header`: a model on disk, for the context sized to the machine in
``models/context_size.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import FastMTPError, GGUFError
from app.core.units import format_bytes
from app.gguftools.header import ArrayRef, GgufHeader
from app.release.catalog import Architecture, Catalog, load_catalog

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class ContextCost:
    kv_bytes_per_token: int
    kv_bytes: int
    recurrent_bytes: int
    overhead_bytes: int
    formula: list[str]

    @property
    def total(self) -> int:
        return self.kv_bytes + self.recurrent_bytes + self.overhead_bytes


@dataclass(frozen=True)
class QuantFit:
    name: str
    file_bytes: int
    total_bytes: int
    fits: bool

    def to_dict(self) -> dict[str, Any]:
        return {"quant": self.name, "file_bytes": self.file_bytes, "total_bytes": self.total_bytes, "fits": self.fits}


@dataclass(frozen=True)
class FitReport:
    vram_bytes: int
    vram_source: str
    context: int
    sidecar_bytes: int
    cost: ContextCost
    quants: list[QuantFit]

    @property
    def recommended(self) -> str | None:
        fitting = [q for q in self.quants if q.fits]
        return fitting[-1].name if fitting else None

    def to_dict(self) -> dict[str, Any]:
        return {"vram_bytes": self.vram_bytes, "vram_source": self.vram_source, "context": self.context,
                "sidecar_bytes": self.sidecar_bytes, "kv_bytes_per_token": self.cost.kv_bytes_per_token,
                "kv_bytes": self.cost.kv_bytes, "recurrent_bytes": self.cost.recurrent_bytes,
                "overhead_bytes": self.cost.overhead_bytes, "formula": self.cost.formula,
                "quants": [q.to_dict() for q in self.quants], "recommended": self.recommended,
                "sizes_approximate": True}


def context_cost(arch: Architecture, context: int, snapshots: int = 0) -> ContextCost:
    """Memory that depends on the context (KV cache) or on the model's shape alone (recurrent state, overhead).

    ``snapshots``: recurrent-state copies kept per sequence for rolling back rejected drafts (llama.cpp's
    ``n_rs_seq``, the draft depth): the state is held ``1 + snapshots`` times."""
    full_layers = arch.n_layer // arch.full_attention_interval
    linear_layers = arch.n_layer - full_layers
    kv_layers = full_layers + arch.mtp_layers
    per_token = kv_layers * 2 * arch.n_head_kv * arch.head_dim * arch.kv_bytes
    ssm = arch.linear_v_heads * arch.linear_key_dim * arch.linear_value_dim * 4
    conv = max(arch.conv_kernel - 1, 0) * 3 * arch.linear_v_heads * arch.linear_value_dim * 4
    recurrent = linear_layers * (ssm + conv) * (1 + snapshots)
    overhead = arch.overhead_mib * MIB
    copies = f" x (1 + {snapshots} rollback snapshots for drafting)" if snapshots else ""
    formula = [
        f"KV per token = ({full_layers} full-attention layers [{arch.n_layer}/{arch.full_attention_interval}] + "
        f"{arch.mtp_layers} MTP layer) x 2 (K,V) x {arch.n_head_kv} KV heads x {arch.head_dim} head dim x "
        f"{arch.kv_bytes} bytes (f16) = {per_token} bytes",
        f"KV cache = {per_token} bytes x {context} tokens = {format_bytes(per_token * context)}",
        f"recurrent state = {linear_layers} delta-net layers x ({arch.linear_v_heads} heads x {arch.linear_key_dim} x "
        f"{arch.linear_value_dim} x 4 bytes + conv {max(arch.conv_kernel - 1, 0)} x 3 x {arch.linear_v_heads} x "
        f"{arch.linear_value_dim} x 4 bytes){copies} = {format_bytes(recurrent)}",
        f"fixed overhead (compute buffers, output logits; on a GPU the CUDA context, on a CPU the attention scores) = "
        f"{arch.overhead_mib} MiB",
        "needed = model file + sidecar + KV cache + recurrent state + overhead",
    ]
    return ContextCost(per_token, per_token * context, recurrent, overhead, formula)


def architecture_from_header(header: GgufHeader, overhead_mib: int) -> Architecture:
    """The shape :func:`context_cost` needs, read from a model's GGUF header (``{arch}.block_count``,
    ``attention.head_count_kv`` / ``key_length`` / ``value_length``, ``full_attention_interval``, ``ssm.*``,
    ``nextn_predict_layers``): the same fields the catalog writes by hand. A model without recurrent layers reads
    as every layer full attention; ``overhead_mib`` is the caller's (it depends on the device, not the file).

    Raises:
        GGUFError: the header lacks ``{arch}.block_count`` (not a model this arithmetic can size).
    """
    arch = header.architecture

    def number(key: str, default: int = 0) -> int:
        value = header.value(f"{arch}.{key}")
        if isinstance(value, ArrayRef):  # per-layer values (some architectures): the largest
            items = [v for v in header.read_array(f"{arch}.{key}") if isinstance(v, int)] if value.count else []
            return max(items, default=default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default

    block_count = number("block_count")
    if block_count < 1:
        raise GGUFError(f"{header.path.name} does not say how many layers it has ({arch or 'no'}.block_count), so "
                        "the memory its context needs cannot be worked out.",
                        "Use a model GGUF (a target), not a sidecar or another kind of file.")
    mtp = min(number("nextn_predict_layers"), block_count - 1)
    n_embd, n_head = number("embedding_length"), max(number("attention.head_count"), 1)
    key_length = number("attention.key_length") or n_embd // n_head
    value_length = number("attention.value_length") or key_length
    v_heads = number("ssm.time_step_rank")
    return Architecture(
        n_embd=n_embd, n_layer=block_count - mtp, full_attention_interval=max(number("full_attention_interval", 1), 1),
        n_head_kv=number("attention.head_count_kv") or n_head, head_dim=(key_length + value_length) // 2, kv_bytes=2,
        linear_v_heads=v_heads, linear_key_dim=number("ssm.state_size"),
        linear_value_dim=number("ssm.inner_size") // v_heads if v_heads else 0,
        conv_kernel=number("ssm.conv_kernel"), mtp_layers=mtp, overhead_mib=overhead_mib)


def fit(vram_bytes: int, context: int, vram_source: str, catalog: Catalog | None = None) -> FitReport:
    catalog = catalog or load_catalog()
    if context < 1:
        raise FastMTPError(f"--context {context} is not a context length.", "Give a number of tokens, e.g. 32768.")
    cost = context_cost(catalog.architecture, context)
    sidecar = catalog.sidecar.size or 0
    quants = []
    for quant in catalog.quants:
        size = quant.size or 0
        total = size + sidecar + cost.total
        quants.append(QuantFit(quant.name, size, total, total <= vram_bytes))
    return FitReport(vram_bytes, vram_source, context, sidecar, cost, quants)


def detected_vram() -> tuple[int, str]:
    """All NVIDIA GPUs' memory together (llama.cpp splits layers across them)."""
    from app.backend.toolchain import detect_gpus

    gpus = detect_gpus()
    if not gpus:
        raise FastMTPError("No NVIDIA GPU was found (nvidia-smi), so the GPU memory is unknown.",
                           "Give it yourself: python -m app fit --vram-gib 24")
    names = " + ".join(f"{g.name} {g.memory_mib} MiB" for g in gpus)
    return sum(g.memory_mib for g in gpus) * MIB, names


def format_report(report: FitReport) -> list[str]:
    lines = [f"GPU memory: {format_bytes(report.vram_bytes)} ({report.vram_source}); context {report.context} tokens",
             ""]
    lines += ["  " + line for line in report.cost.formula]
    lines.append("")
    lines.append(f"  {'quant':8} {'file':>10} {'+ sidecar':>10} {'+ context':>10} {'= needed':>10}  fits")
    for q in report.quants:
        sizes = (q.file_bytes, report.sidecar_bytes, report.cost.total, q.total_bytes)
        lines.append(f"  {q.name:8} " + " ".join(f"{format_bytes(n):>10}" for n in sizes)
                     + f"  {'yes' if q.fits else 'no'}")
    lines.append("")
    lines.append("File sizes are the catalog's estimates; the download checks the exact ones.")
    if report.recommended:
        lines.append(f"Recommended: {report.recommended} (the largest that fits).")
    else:
        lines.append("None fits: use a shorter --context, or offload layers to the CPU (slower).")
    return lines
