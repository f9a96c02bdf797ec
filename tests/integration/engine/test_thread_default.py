"""Decode threads follow the machine's load when none are set, and a set count is kept (issue 39).

Real parts only: the patched CPU backend, the tiny demo model with its d2t sidecar, and ``BusyCores``'s spinning
processes as the other work. The assertions are on the thread count the engine reports and the one llama.cpp holds
for each context, never on timing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from app.bench.busy_cores import BusyCores
from app.core import idle_cores
from app.core.idle_cores import SLACK, choose_threads, last_idle, physical_cores
from app.engine.config import EngineConfig
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

CORES = os.cpu_count() or 1
COUNTERS = Path("/proc/stat").is_file()  # idle cores measured from the kernel's counters (Linux)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("threads-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")


def _decoder(demo: DemoModel, n_threads: int | None = None) -> SpeculativeDecoder:
    return SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_threads=n_threads))


def _held_threads(decoder: SpeculativeDecoder) -> tuple[int, int]:
    """The decode threads llama.cpp holds for the target's and the draft context's batches (a one-token pass runs
    with these or with one thread, whichever measured faster: ``test_one_token_passes.py``)."""
    assert decoder.dctx is not None
    lib = decoder.tctx.lib
    for ctx in (decoder.tctx, decoder.dctx):
        assert lib.llama_n_threads(ctx.ptr) in (1, lib.llama_n_threads_batch(ctx.ptr))
    return lib.llama_n_threads_batch(decoder.tctx.ptr), lib.llama_n_threads_batch(decoder.dctx.ptr)


def _until_every_core_is_busy() -> None:
    """Return once the counters show the spinning children on every core (they take a moment to start), with the
    engine's next measure starting from there."""
    deadline = time.monotonic() + 60.0
    while COUNTERS and ((idle := idle_cores.measure(0.1)) is None or idle >= 1 - SLACK):
        assert time.monotonic() < deadline, f"BusyCores({CORES}) left {idle} cores idle for a minute"
    idle_cores.mark()


@pytest.mark.skipif(not COUNTERS or physical_cores() is None, reason="idle cores are measured from Linux's counters")
def test_with_no_thread_count_a_reply_under_load_decodes_with_one_thread(demo: DemoModel) -> None:
    decoder = _decoder(demo)
    try:
        assert decoder.follows_load
        with BusyCores(CORES):
            _until_every_core_is_busy()
            reply = decoder.generate(table_prompt(demo), 8)
        assert reply.stats.threads == 1 == decoder.threads
        assert reply.stats.to_dict()["threads"] == 1
        assert _held_threads(decoder) == (1, 1)  # the draft context switched with the target
        # without that load: what the idle cores measured at this reply's start say, in both contexts
        reply = decoder.generate(table_prompt(demo), 8)
        measured = last_idle()
        assert measured is not None and 0.0 <= measured <= CORES
        expected = choose_threads(measured, physical_cores() or 1, fallback=1)
        assert reply.stats.threads == expected == decoder.threads
        assert _held_threads(decoder) == (expected, expected)
    finally:
        decoder.close()


def test_a_set_thread_count_is_kept_under_load(demo: DemoModel) -> None:
    threads = max(2, min(CORES, 4))  # more than the load leaves: the default would pick one
    decoder = _decoder(demo, n_threads=threads)
    try:
        assert not decoder.follows_load
        with BusyCores(CORES):
            _until_every_core_is_busy()
            reply = decoder.generate(table_prompt(demo), 8)
        assert reply.stats.threads == threads == decoder.threads
        assert _held_threads(decoder) == (threads, threads)
    finally:
        decoder.close()
