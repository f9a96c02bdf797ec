"""The context sized to the machine (issue 34): the arithmetic on GGUF files our own writer makes with known shapes
and sizes (the 27B's shape, a plain llama-like model, the built-in demo), against memory budgets given in bytes
and against this machine's own.

A model's size is its file's size; a "huge" model is a real GGUF header made sparse to a terabyte, so it fits no
machine without taking any disk.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import LlamaFileType

from app.core import defaults
from app.core.errors import GGUFError
from app.gguftools.demo_model import DemoModel
from app.gguftools.header import gguf_header
from app.gguftools.qwen35 import ARCH, QWEN35_27B, Qwen35Shape, hparams_kv
from app.gguftools.writer import kv_u32, plan_array, write_gguf
from app.models import context_size
from app.models.context_size import FLOOR, STEP, MemoryBudget, check_context, plan_context, resolve_context
from app.models.fit import architecture_from_header, context_cost
from app.release.catalog import load_catalog
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

GIB = 1 << 30
MIB = 1 << 20
# the 27B by hand: 16 full-attention layers (64 / 4) + the MTP layer, 4 KV heads of 256, f16 K and V
KV_PER_TOKEN_27B = (16 + 1) * 2 * 4 * 256 * 2
# 48 delta-net layers x (48 heads x 128 x 128 x 4 bytes + conv 3 x 3 x 48 x 128 x 4 bytes), held 1 + 8 times
RECURRENT_27B = 48 * (48 * 128 * 128 * 4 + 3 * 3 * 48 * 128 * 4) * (1 + defaults.DRAFT_DEPTH_MAX)
GPU_OVERHEAD = 1536 * MIB  # the catalog's
RAM_OVERHEAD = context_size.RAM_OVERHEAD_MIB * MIB


def write_model(path: Path, shape: Qwen35Shape = QWEN35_27B, sparse_to: int = 0) -> Path:
    """A qwen35 GGUF with ``shape``'s header and one 1 MiB tensor; ``sparse_to``: then grown to that size, sparse."""
    write_gguf(path, ARCH, hparams_kv(shape, LlamaFileType.MOSTLY_Q4_K_M),
               [plan_array("pad", np.zeros(MIB // 4, np.float32))])
    if sparse_to:
        os.truncate(path, sparse_to)
    return path


@pytest.fixture(scope="module")
def model_27b(module_tmp: ModuleFolders) -> Path:
    return write_model(module_tmp.mktemp("ctx") / "qwen-27b-shape.gguf")


@pytest.fixture(scope="module")
def huge(module_tmp: ModuleFolders) -> Path:
    return write_model(module_tmp.mktemp("ctx") / "huge.gguf", sparse_to=1 << 40)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("ctx-demo"))


def gpu(total: int) -> MemoryBudget:
    return MemoryBudget(total, "gpu", "given")


# ----------------------------------------------------------------------------- one formula, two feeders


def test_the_header_and_the_catalog_feed_one_formula(model_27b: Path) -> None:
    arch = architecture_from_header(gguf_header(model_27b), load_catalog().architecture.overhead_mib)
    assert arch == load_catalog().architecture  # the 27B's header says what the catalog writes by hand
    cost = context_cost(arch, 32_768, snapshots=defaults.DRAFT_DEPTH_MAX)
    assert cost.kv_bytes_per_token == KV_PER_TOKEN_27B == 69_632
    assert cost.kv_bytes == KV_PER_TOKEN_27B * 32_768
    assert cost.recurrent_bytes == RECURRENT_27B
    assert context_cost(arch, 1).recurrent_bytes * (1 + defaults.DRAFT_DEPTH_MAX) == RECURRENT_27B  # `fit`'s, as before


def test_a_model_without_recurrent_layers_counts_every_layer_as_attention(tmp_path: Path) -> None:
    a = "llama."
    path = write_gguf(tmp_path / "llama.gguf", "llama",
                      [kv_u32(a + "block_count", 32), kv_u32(a + "embedding_length", 4096),
                       kv_u32(a + "attention.head_count", 32), kv_u32(a + "attention.head_count_kv", 8),
                       kv_u32(a + "context_length", 8192)], [plan_array("pad", np.zeros(16, np.float32))])
    plan = plan_context(path, budget=MemoryBudget(64 * GIB, "ram", "given"))
    cost = plan.cost(1000)
    assert cost.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 and cost.recurrent_bytes == 0
    assert plan.fit().tokens == 8192 and plan.fit().limited_by == "trained"


def test_a_file_that_does_not_say_its_layers_is_refused_in_words_and_auto_falls_back(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "odd.gguf", "qwen35", [kv_u32("qwen35.context_length", 8192)],
                      [plan_array("pad", np.zeros(16, np.float32))])
    with pytest.raises(GGUFError, match="does not say how many layers"):
        plan_context(path, budget=gpu(24 * GIB))
    assert check_context(0, path) is None
    assert resolve_context(0, path) == defaults.CONTEXT_SIZE  # the load says what is wrong with the file
    assert resolve_context(0, tmp_path / "missing.gguf") == defaults.CONTEXT_SIZE
    assert resolve_context(6000, tmp_path / "missing.gguf") == 6000  # a user's own value is theirs


# ----------------------------------------------------------------------------- the limits


def test_auto_is_the_largest_multiple_of_the_step_that_fits_the_memory(model_27b: Path) -> None:
    model_bytes = model_27b.stat().st_size
    fixed = model_bytes + RECURRENT_27B + GPU_OVERHEAD
    # memory whose usable 90% holds everything else and 10,000 tokens and a little
    total = -(-(fixed + KV_PER_TOKEN_27B * 10_000 + 100) * 100 // 90)
    plan = plan_context(model_27b, budget=gpu(total))
    assert plan.fixed_bytes() == fixed and plan.largest() == 10_000
    fit = plan.fit()
    assert (fit.tokens, fit.auto, fit.fits, fit.limited_by) == (10_000 // STEP * STEP, True, True, "memory") == (
        9984, True, True, "memory")
    assert fit.needed_bytes == fixed + KV_PER_TOKEN_27B * 9984 <= plan.budget.usable_bytes
    assert plan.fit(9984) == replace(fit, auto=False, limited_by="yours")  # the same arithmetic for a user's value
    assert fit.warning() is None

    mine = plan.fit(10_240)  # a user's own value just past the memory: warned about with the same arithmetic
    assert not mine.fits and mine.limited_by == "yours"
    warning = mine.warning()
    assert warning is not None
    assert "10,240 tokens" in warning and mine.summary in warning and "Auto would use 9,984" in warning


def test_auto_stops_at_the_trained_context(model_27b: Path, tmp_path: Path) -> None:
    plan = plan_context(model_27b, budget=gpu(1 << 40))
    assert plan.trained_context == QWEN35_27B.context_length == 262_144
    assert plan.fit().tokens == 262_144 and plan.fit().limited_by == "trained"
    assert "(the model's trained context)" in plan.fit().summary
    short = write_model(tmp_path / "short.gguf", replace(QWEN35_27B, context_length=40_000))
    assert plan_context(short, budget=gpu(1 << 40)).fit().tokens == 40_000  # not rounded past what it knows
    beyond = plan_context(short, budget=gpu(1 << 40)).fit(65_536)
    assert beyond.fits and "beyond the 40,000 tokens the model was trained on" in beyond.summary


def test_auto_never_goes_below_the_floor_and_says_when_even_that_does_not_fit(huge: Path) -> None:
    fit = plan_context(huge, budget=gpu(24 * GIB)).fit()
    assert (fit.tokens, fit.fits, fit.limited_by) == (FLOOR, False, "floor")
    warning = fit.warning()
    assert warning is not None and warning.startswith(f"Even {FLOOR:,} tokens") and "1024 GiB model" in warning


def test_the_summary_and_the_formula_say_the_arithmetic(model_27b: Path, tmp_path: Path) -> None:
    sidecar = tmp_path / "sidecar.gguf"
    sidecar.write_bytes(b"\0" * (3 * MIB))
    plan = plan_context(model_27b, sidecar, budget=gpu(24 * GIB))
    fit = plan.fit(32_768)
    assert plan.sidecar_bytes == 3 * MIB
    assert re.fullmatch(r"32,768 tokens: 1\.0 MiB model \+ 3 MiB sidecar \+ [\d.]+ GiB context, fits 24 GiB of GPU "
                        r"memory", fit.summary), fit.summary
    assert fit.context_bytes == KV_PER_TOKEN_27B * 32_768 + RECURRENT_27B + GPU_OVERHEAD
    text = "\n".join(fit.formula)
    for needle in ("KV per token = (16 full-attention layers [64/4] + 1 MTP layer)", f"= {KV_PER_TOKEN_27B} bytes",
                   "(1 + 8 rollback snapshots for drafting)", "sidecar 3 MiB", "usable 21.6 GiB (10% kept free)"):
        assert needle in text, needle
    data = plan.fit().to_dict()
    assert data["auto"] is True and data["context"] == plan.fit().tokens and data["formula"] == plan.fit().formula
    assert data["memory_bytes"] == 24 * GIB and data["device"] == "gpu" and data["sidecar"] == str(sidecar)


def test_unknown_memory_gives_the_usual_context_and_says_so(model_27b: Path) -> None:
    fit = plan_context(model_27b, budget=MemoryBudget(0, "ram", "this system does not say")).fit()
    assert (fit.tokens, fit.limited_by, fit.fits, fit.warning()) == (defaults.CONTEXT_SIZE, "unknown", False, None)
    assert "unknown" in fit.summary


# ----------------------------------------------------------------------------- the built-in demo


def test_the_built_in_demo_stays_small(demo: DemoModel) -> None:
    roomy = plan_context(demo.target, demo.sidecar_d2t, budget=MemoryBudget(1 << 40, "ram", "given"))
    assert roomy.trained_context == 8192 and roomy.fit().tokens == 8192  # its trained context, however roomy
    here = check_context(0, demo.target, demo.sidecar_d2t)  # this machine's RAM, measured
    assert here is not None and FLOOR <= here.tokens <= 8192
    assert resolve_context(0, demo.target, demo.sidecar_d2t) == here.tokens
    assert here.plan.model_bytes == demo.target.stat().st_size
    assert here.plan.sidecar_bytes == demo.sidecar_d2t.stat().st_size


# ----------------------------------------------------------------------------- the machine's memory


def test_the_layers_decide_which_memory_counts() -> None:
    assert context_size.offload_device(0, 65) == "ram"
    assert context_size.offload_device(-1, 65) == "gpu"
    assert context_size.offload_device(65, 65) == "gpu"
    assert context_size.offload_device(20, 65) == "gpu+ram"
    assert context_size.given_budget(24, -1) == MemoryBudget(24 * GIB, "gpu", "given")
    assert context_size.given_budget(8, 0).device == "ram"


def test_this_machines_memory_is_measured_once_and_kept() -> None:
    context_size.forget_measurements()
    ram = context_size.machine_memory("ram")
    if sys.platform.startswith("linux"):
        assert ram.known and "MemAvailable" in ram.source
        meminfo = Path("/proc/meminfo").read_text()
        total = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1)) * 1024  # type: ignore[union-attr]
        assert 0 < ram.total_bytes <= total
    assert context_size.machine_memory("ram") is ram  # kept: one model, one context, through reloads
    gpu_budget = context_size.machine_memory("gpu")
    assert gpu_budget.device in ("gpu", "ram")
    if gpu_budget.device == "ram":  # no NVIDIA GPU here: the layers stay on the CPU, sized to the RAM
        assert "no NVIDIA GPU was found" in gpu_budget.source
    context_size.forget_measurements()


def test_the_largest_sidecar_is_the_one_auto_counts(tmp_path: Path) -> None:
    small, big = tmp_path / "d2t.gguf", tmp_path / "full.gguf"
    small.write_bytes(b"\0" * 10)
    big.write_bytes(b"\0" * 20)
    assert context_size.largest_sidecar(small, big) == big
    assert context_size.largest_sidecar(small, None, tmp_path / "missing.gguf") == small
    assert context_size.largest_sidecar(None, None) is None
