"""The context sized to the machine (issue 34): "Auto", the default context of the window and the CLI.

The largest context a model can be loaded with here is worked out with the fit arithmetic (``models/fit.py``'s
:func:`~app.models.fit.context_cost`, fed from the model's GGUF header): the model file and its sidecar are
loaded whole, every full-attention layer (and the MTP layer) keeps an f16 K and V per token, the gated
delta-net layers keep a fixed recurrent state (times the rollback snapshots drafting keeps), and a fixed
overhead covers the compute buffers. What is left of the memory, less a headroom, divided by the bytes per
token, rounded down to a multiple of :data:`STEP`, is the context; never more than the model was trained on
(``{arch}.context_length``, which keeps the built-in demo at its small 8,192) and never below :data:`FLOOR`.

The memory is the GPU's when the layers are offloaded to one (all NVIDIA GPUs together, as ``fit`` counts it),
else the RAM available now (``/proc/meminfo``'s MemAvailable, else ``os.sysconf``). It is measured once per
process and kept (:func:`machine_memory`), so every load of a session sizes the same model the same way and a
loaded model's own memory does not shrink the next figure. Each result carries its arithmetic in words
(:attr:`ContextFit.summary`, :attr:`ContextFit.formula`); a user's own value is checked with the same
arithmetic (:attr:`ContextFit.fits`, :meth:`ContextFit.warning`) before it is loaded.

Qt-free and native-free: the window (Settings page, the load), ``python -m app context`` and ``--ctx auto``
share it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from app.core import defaults
from app.core.errors import FastMTPError
from app.core.units import GIB, MIB, format_bytes
from app.engine.attention import SCRATCH_CAP_BYTES
from app.gguftools.header import gguf_header
from app.models.fit import ContextCost, architecture_from_header, context_cost, detected_vram
from app.release.catalog import Architecture, load_catalog

AUTO = defaults.CONTEXT_AUTO  # a context of 0: the largest that fits
FLOOR = 2048  # Auto never goes below this (a reply needs room), even where the arithmetic says less
STEP = 256  # Auto rounds down to a multiple of this
HEADROOM_PERCENT = 10  # of the memory kept free: the desktop, the estimate's slack
# the fixed overhead on the CPU (no CUDA context): compute buffers and output logits, and at most the plain attention
# kernel's scores in the target's and the draft's contexts (``engine.attention``: beyond that it is not chosen)
RAM_OVERHEAD_MIB = 512 + 2 * SCRATCH_CAP_BYTES // MIB
# rollback copies of the recurrent state: as many as the deepest drafting keeps, so one figure serves every
# drafting mode of a model (switching modes keeps its context)
SNAPSHOTS = defaults.DRAFT_DEPTH_MAX

Device = Literal["gpu", "ram", "gpu+ram"]
LimitedBy = Literal["memory", "trained", "floor", "unknown", "yours"]
_DEVICE_WORDS: dict[str, str] = {"gpu": "GPU memory", "ram": "available RAM", "gpu+ram": "GPU memory and RAM"}


@dataclass(frozen=True)
class MemoryBudget:
    """The memory a model and its context must fit in: ``total_bytes`` (0: unknown), where it is, and how it
    was learned (a GPU's name and size, ``MemAvailable``, or "given")."""

    total_bytes: int
    device: Device
    source: str

    @property
    def known(self) -> bool:
        return self.total_bytes > 0

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes * (100 - HEADROOM_PERCENT) // 100

    @property
    def words(self) -> str:
        return _DEVICE_WORDS[self.device]


@dataclass(frozen=True)
class ContextPlan:
    """One model on this machine: every number the context's arithmetic needs, read and measured once; then
    :meth:`fit` answers for Auto or for any number of tokens at no cost (the Settings page, as the user types)."""

    target: Path
    sidecar: Path | None
    model_bytes: int
    sidecar_bytes: int
    trained_context: int | None  # the GGUF's ``{arch}.context_length``; None when it does not say
    arch: Architecture  # its overhead is the device's
    budget: MemoryBudget
    snapshots: int = SNAPSHOTS

    @property
    def cap(self) -> int:
        """The most Auto gives: the trained context, and never above the settings' range."""
        return min(self.trained_context or defaults.CONTEXT_MAX, defaults.CONTEXT_MAX)

    def cost(self, tokens: int) -> ContextCost:
        return context_cost(self.arch, tokens, self.snapshots)

    def fixed_bytes(self) -> int:
        """What does not grow with the context: the files, the recurrent state and the overhead."""
        cost = self.cost(0)
        return self.model_bytes + self.sidecar_bytes + cost.recurrent_bytes + cost.overhead_bytes

    def largest(self) -> int:
        """Tokens that fit the usable memory, before rounding, capping and the floor (0 when nothing fits)."""
        per_token = self.cost(1).kv_bytes_per_token
        room = self.budget.usable_bytes - self.fixed_bytes()
        if room <= 0:
            return 0
        return room // per_token if per_token else defaults.CONTEXT_MAX

    def auto(self) -> tuple[int, LimitedBy]:
        """Auto's context and what set it."""
        if not self.budget.known:
            return min(defaults.CONTEXT_SIZE, self.cap), "unknown"
        tokens = self.largest() // STEP * STEP
        if tokens >= self.cap:
            return self.cap, "trained"
        if tokens < FLOOR:
            return min(FLOOR, self.cap), "floor"
        return tokens, "memory"

    def fit(self, tokens: int | None = None) -> ContextFit:
        """The arithmetic for ``tokens`` (a user's own value), or for Auto's choice when None or 0."""
        if tokens is None or tokens <= AUTO:
            chosen, limited_by = self.auto()
            auto = True
        else:
            chosen, limited_by, auto = tokens, "yours", False
        cost = self.cost(chosen)
        needed = self.model_bytes + self.sidecar_bytes + cost.total
        fits = self.budget.known and needed <= self.budget.usable_bytes
        return ContextFit(chosen, auto, fits, limited_by, needed, cost, self)


@dataclass(frozen=True)
class ContextFit:
    """A context size with its arithmetic: what it needs against the memory there is."""

    tokens: int
    auto: bool
    fits: bool
    limited_by: LimitedBy
    needed_bytes: int
    cost: ContextCost
    plan: ContextPlan

    @property
    def context_bytes(self) -> int:
        """What the context adds to the files: KV cache, recurrent state and overhead."""
        return self.cost.total

    @property
    def beyond_trained(self) -> bool:
        trained = self.plan.trained_context
        return trained is not None and self.tokens > trained

    @property
    def summary(self) -> str:
        """One line: "32,768 tokens: 15.4 GiB model + 0.9 GiB sidecar + 2.0 GiB context, fits 24 GiB of GPU
        memory", or what it needs against what there is."""
        plan, budget = self.plan, self.plan.budget
        parts = [f"{format_bytes(plan.model_bytes)} model"]
        if plan.sidecar is not None:
            parts.append(f"{format_bytes(plan.sidecar_bytes)} sidecar")
        parts.append(f"{format_bytes(self.context_bytes)} context")
        head = f"{self.tokens:,} tokens: " + " + ".join(parts)
        if not budget.known:
            return f"{head} = {format_bytes(self.needed_bytes)}; the {budget.words} is unknown ({budget.source})"
        if self.fits:
            line = f"{head}, fits {format_bytes(budget.total_bytes)} of {budget.words}"
        else:
            line = (f"{head} = {format_bytes(self.needed_bytes)}, more than the {format_bytes(budget.usable_bytes)} "
                    f"usable of {format_bytes(budget.total_bytes)} of {budget.words}")
        if self.limited_by == "trained":
            line += " (the model's trained context)"
        elif self.limited_by == "floor":
            line += f" (the smallest Auto gives: {FLOOR:,})"
        elif self.beyond_trained:
            line += f" (beyond the {plan.trained_context:,} tokens the model was trained on)"
        return line

    @property
    def formula(self) -> list[str]:
        """Each step of the arithmetic, as a person would check it by hand."""
        plan, budget = self.plan, self.plan.budget
        lines = [line for line in self.cost.formula if not line.startswith("needed =")]  # said with sizes below
        sidecar = f" + sidecar {format_bytes(plan.sidecar_bytes)}" if plan.sidecar is not None else ""
        lines.append(f"needed = model {format_bytes(plan.model_bytes)}{sidecar} + KV cache "
                     f"{format_bytes(self.cost.kv_bytes)} + recurrent state {format_bytes(self.cost.recurrent_bytes)} "
                     f"+ overhead {format_bytes(self.cost.overhead_bytes)} = {format_bytes(self.needed_bytes)}")
        if budget.known:
            lines.append(f"memory = {format_bytes(budget.total_bytes)} of {budget.words} ({budget.source}); usable "
                         f"{format_bytes(budget.usable_bytes)} ({HEADROOM_PERCENT}% kept free)")
        else:
            lines.append(f"memory = unknown ({budget.source}): Auto uses {defaults.CONTEXT_SIZE:,} tokens")
        if self.auto and budget.known:
            per_token = self.cost.kv_bytes_per_token
            lines.append(f"largest context = (usable {format_bytes(budget.usable_bytes)} - everything else "
                         f"{format_bytes(plan.fixed_bytes())}) / {per_token} bytes per token = {plan.largest():,} "
                         f"tokens, rounded down to a multiple of {STEP}, at least {FLOOR:,}, at most the trained "
                         f"{plan.cap:,} = {self.tokens:,} tokens")
        return lines

    def warning(self) -> str | None:
        """When the context does not fit (a user's own value, or even Auto's floor): what it needs against what
        there is, and what to do; None when it fits or the memory is unknown."""
        if self.fits or not self.plan.budget.known:
            return None
        if self.auto:
            return (f"Even {self.tokens:,} tokens, the smallest context Auto gives, may not fit this machine: "
                    f"{self.summary}. The load may fail: a smaller quantization needs less.")
        auto, _ = self.plan.auto()
        return (f"The context of {self.tokens:,} tokens you chose may not fit this machine: {self.summary}. The load "
                f"may fail; Auto would use {auto:,} tokens (Settings, Context size; or --ctx auto).")

    def to_dict(self) -> dict[str, Any]:
        plan, budget = self.plan, self.plan.budget
        return {"context": self.tokens, "auto": self.auto, "fits": self.fits, "limited_by": self.limited_by,
                "trained_context": plan.trained_context, "target": str(plan.target),
                "sidecar": str(plan.sidecar) if plan.sidecar is not None else None,
                "model_bytes": plan.model_bytes, "sidecar_bytes": plan.sidecar_bytes,
                "kv_bytes_per_token": self.cost.kv_bytes_per_token, "kv_bytes": self.cost.kv_bytes,
                "recurrent_bytes": self.cost.recurrent_bytes, "overhead_bytes": self.cost.overhead_bytes,
                "context_bytes": self.context_bytes, "needed_bytes": self.needed_bytes,
                "memory_bytes": budget.total_bytes, "usable_bytes": budget.usable_bytes, "device": budget.device,
                "memory_source": budget.source, "headroom_percent": HEADROOM_PERCENT, "floor": FLOOR, "step": STEP,
                "summary": self.summary, "formula": self.formula, "warning": self.warning()}


# ----------------------------------------------------------------------------- the machine's memory


def available_ram() -> tuple[int, str] | None:
    """The RAM a new allocation can have now, and where that figure came from; None where it cannot be told."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    sysconf = getattr(os, "sysconf", None)
    if sysconf is None:  # Windows
        return None
    try:
        page = int(sysconf("SC_PAGE_SIZE"))
        try:
            return int(sysconf("SC_AVPHYS_PAGES")) * page, "free RAM (sysconf)"
        except (ValueError, OSError):  # macOS has no SC_AVPHYS_PAGES: half the RAM, a cautious guess
            return int(sysconf("SC_PHYS_PAGES")) * page // 2, "half the physical RAM (sysconf)"
    except (ValueError, OSError):
        return None


def _ram_budget(note: str = "") -> MemoryBudget:
    ram = available_ram()
    if ram is None:
        return MemoryBudget(0, "ram", "this system does not say" + note)
    return MemoryBudget(ram[0], "ram", ram[1] + note)


def _measure(device: Device) -> MemoryBudget:
    if device == "ram":
        return _ram_budget()
    try:
        vram, names = detected_vram()
    except FastMTPError:  # no NVIDIA GPU: the layers stay on the CPU
        return _ram_budget("; no NVIDIA GPU was found")
    if device == "gpu":
        return MemoryBudget(vram, "gpu", names)
    ram = available_ram()
    return MemoryBudget(vram + (ram[0] if ram else 0), "gpu+ram", f"{names} + {ram[1] if ram else 'no RAM figure'}; "
                        "the layers are split")


_BUDGETS: dict[Device, MemoryBudget] = {}
_LOCK = threading.Lock()


def offload_device(n_gpu_layers: int, n_layers: int) -> Device:
    """Where the layers go: all on the GPU (-1, or at least every layer), none (0), or split."""
    if n_gpu_layers == 0:
        return "ram"
    return "gpu" if n_gpu_layers < 0 or n_gpu_layers >= n_layers else "gpu+ram"


def machine_memory(device: Device) -> MemoryBudget:
    """This machine's memory for ``device``, measured on first use and kept for the process (a loaded model's own
    memory must not shrink the next load's figure, and one model keeps one context across reloads)."""
    with _LOCK:
        budget = _BUDGETS.get(device)
        if budget is None:
            budget = _BUDGETS[device] = _measure(device)
        return budget


def forget_measurements() -> None:
    """Measure the memory again on the next use (tests; a person who freed memory and asks again)."""
    with _LOCK:
        _BUDGETS.clear()


# ----------------------------------------------------------------------------- a model on this machine


def largest_sidecar(*sidecars: Path | None) -> Path | None:
    """Of the sidecars a model has (d2t, full), the largest that is there: what Auto counts, so that one context
    serves every drafting mode of the model."""
    present = [(p.stat().st_size, str(p), p) for p in sidecars if p is not None and p.is_file()]
    return max(present)[2] if present else None


def plan_context(target: Path, sidecar: Path | None = None, n_gpu_layers: int = 0,
                 budget: MemoryBudget | None = None) -> ContextPlan:
    """Read the target's header (and the sidecar's size) and this machine's memory for ``n_gpu_layers``
    (``budget`` given: that instead, e.g. ``--memory-gib``).

    Raises:
        GGUFError: the target is missing, not GGUF, damaged, or does not say its layers.
        OSError: the sidecar cannot be read.
    """
    header = gguf_header(target)
    trained = header.value(f"{header.architecture}.context_length")
    probe = architecture_from_header(header, 0)
    if budget is None:
        budget = machine_memory(offload_device(n_gpu_layers, probe.n_layer + probe.mtp_layers))
    overhead = load_catalog().architecture.overhead_mib if budget.device != "ram" else RAM_OVERHEAD_MIB
    return ContextPlan(target=Path(target), sidecar=sidecar, model_bytes=header.file_size,
                       sidecar_bytes=sidecar.stat().st_size if sidecar is not None else 0,
                       trained_context=trained if isinstance(trained, int) and trained > 0 else None,
                       arch=replace(probe, overhead_mib=overhead), budget=budget)


def given_budget(gib: float, n_gpu_layers: int) -> MemoryBudget:
    """A memory size a person gave (``--memory-gib``): the GPU's when layers are offloaded, else RAM's."""
    return MemoryBudget(int(gib * GIB), "ram" if n_gpu_layers == 0 else "gpu", "given")


def check_context(n_ctx: int, target: Path, sidecar: Path | None = None, n_gpu_layers: int = 0) -> ContextFit | None:
    """``n_ctx`` (0: Auto) for this model on this machine, with its arithmetic; None when the model cannot be read
    (the load then says why in words). Never raises."""
    try:
        return plan_context(target, sidecar, n_gpu_layers).fit(n_ctx)
    except (FastMTPError, OSError, ValueError):
        return None


def resolve_context(n_ctx: int, target: Path, sidecar: Path | None = None, n_gpu_layers: int = 0) -> int:
    """The context to load with: ``n_ctx`` itself when it is a user's own value, else Auto's figure (the engine's
    usual :data:`~app.core.defaults.CONTEXT_SIZE` when the model cannot be read: the load says why)."""
    if n_ctx > AUTO:
        return n_ctx
    fit = check_context(AUTO, target, sidecar, n_gpu_layers)
    return fit.tokens if fit is not None else defaults.CONTEXT_SIZE

