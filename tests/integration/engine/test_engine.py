"""The MTP engine on the real patched CPU backend and demo models: lossless, stats, errors."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from app.core.errors import ContextFullError, SidecarError
from app.engine.config import EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

HOT = SamplingParams(temperature=8.0, top_k=8, top_p=1.0, min_p=0.0, seed=11)  # really random on the demo
WARM = SamplingParams(temperature=0.8, seed=5)
GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("engine-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")  # long replies and prompts from anywhere in the table


def _decoder(demo: DemoModel, mode: Mode, draft: str | None = None, draft_depth: int = 3, adaptive: bool = False,
             n_ctx: int = 2048) -> SpeculativeDecoder:
    path = {"full": demo.sidecar_full, "d2t": demo.sidecar_d2t}.get(draft or "")
    return SpeculativeDecoder(EngineConfig(demo.target, mode=mode, draft=path, draft_depth=draft_depth,
                                           adaptive=adaptive, n_ctx=n_ctx))


def _run(decoder: SpeculativeDecoder, prompt: list[int], n: int, params: SamplingParams) -> list[int]:
    return decoder.generate(prompt, n, Sampler(params)).tokens


VARIANTS = [("embedded", None), ("sidecar", "full"), ("sidecar", "d2t")]


@pytest.mark.parametrize("mode,draft", VARIANTS, ids=["embedded", "full-sidecar", "d2t-sidecar"])
def test_every_mode_and_depth_emits_exactly_the_plain_decoding(demo: DemoModel, mode: Mode, draft: str | None) -> None:
    prompt = table_prompt(demo)
    temperatures = {"temp0": GREEDY, "temp0.8": WARM, "temp8": HOT}
    with_off = _decoder(demo, "off")
    reference = {name: _run(with_off, prompt, 48, params) for name, params in temperatures.items()}
    with_off.close()
    assert len(set(reference["temp8"])) > 20  # the hot sampler really does leave the table
    for draft_depth, adaptive in [(1, False), (2, False), (3, False), (4, False), (4, True)]:
        decoder = _decoder(demo, mode, draft, draft_depth, adaptive)
        try:
            for name, params in temperatures.items():  # back to back in one decoder, too
                assert _run(decoder, prompt, 48, params) == reference[name], (name, draft_depth, adaptive)
        finally:
            decoder.close()


def test_multi_turn_evaluates_only_the_new_tokens_and_matches_a_fresh_start(demo: DemoModel) -> None:
    decoder = _decoder(demo, "sidecar", "d2t")
    fresh = _decoder(demo, "off")
    try:
        turn1 = table_prompt(demo)
        reply1 = decoder.generate(turn1, 30, Sampler(WARM))
        turn2 = [*turn1, *reply1.tokens, *table_prompt(demo, 5)]
        reply2 = decoder.generate(turn2, 30, Sampler(WARM))
        # only the new user tokens (and the reply's last token, if the target had not evaluated it yet)
        assert reply2.stats.prompt_tokens <= 5 + 1
        assert reply2.tokens == fresh.generate(turn2, 30, Sampler(WARM)).tokens
    finally:
        decoder.close()
        fresh.close()


def test_long_prompt_then_short_one_and_back_to_back_requests_do_not_leak_state(demo: DemoModel) -> None:
    assert demo.table is not None
    long_prompt = list(demo.table.cycle[100:700])
    short_prompt = list(demo.table.cycle[5:9])
    decoder = _decoder(demo, "sidecar", "d2t")
    reference = _decoder(demo, "off")
    try:
        expect_long = _run(reference, long_prompt, 40, HOT)
        expect_short = _run(reference, short_prompt, 40, HOT)
        assert _run(decoder, long_prompt, 40, HOT) == expect_long
        assert _run(decoder, short_prompt, 40, HOT) == expect_short
        assert _run(decoder, short_prompt, 40, HOT) == expect_short
    finally:
        decoder.close()
        reference.close()


def test_cancel_keeps_the_partial_reply_and_resuming_continues_it(demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    decoder = _decoder(demo, "sidecar", "d2t")
    try:
        whole = _run(decoder, prompt, 60, GREEDY)
        cancel = threading.Event()
        seen: list[int] = []

        def on_token(token: int, _provenance: str, _stats: object) -> None:
            seen.append(token)
            if len(seen) == 17:
                cancel.set()

        partial = decoder.generate(prompt, 60, Sampler(GREEDY), on_token, cancel=cancel)
        assert partial.stop_reason == "cancelled"
        assert partial.tokens == seen and 17 <= len(partial.tokens) < 60
        assert partial.tokens == whole[: len(partial.tokens)]
        rest = decoder.generate([*prompt, *partial.tokens], 60 - len(partial.tokens), Sampler(GREEDY))
        assert partial.tokens + rest.tokens == whole
    finally:
        decoder.close()


def test_acceptance_and_tokens_per_pass_follow_the_theory(demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    depth1 = _decoder(demo, "sidecar", "d2t", draft_depth=1)
    try:
        stats = depth1.generate(prompt, 400, Sampler(GREEDY)).stats
    finally:
        depth1.close()
    assert stats.acceptance is not None and abs(stats.acceptance - 0.9) <= 0.05
    for k in (2, 3, 4):
        decoder = _decoder(demo, "sidecar", "d2t", draft_depth=k)
        try:
            s = decoder.generate(prompt, 400, Sampler(GREEDY)).stats
        finally:
            decoder.close()
        a = s.acceptance
        assert a is not None and s.tokens_per_pass is not None
        expected = (1 - a ** (k + 1)) / (1 - a)
        assert abs(s.tokens_per_pass - expected) / expected <= 0.10, (k, a, s.tokens_per_pass, expected)
        assert len(s.drafted_at) == k and s.drafted_at[0] >= s.drafted_at[-1]


def test_provenance_marks_accepted_drafts_and_target_tokens(demo: DemoModel) -> None:
    decoder = _decoder(demo, "sidecar", "d2t")
    seen: list[str] = []
    try:
        reply = decoder.generate(table_prompt(demo), 50, Sampler(GREEDY), lambda _t, p, _s: seen.append(p))
    finally:
        decoder.close()
    assert reply.provenance == seen
    assert reply.provenance.count("draft") == reply.stats.accepted
    # every target pass emits one target token, except a last pass that ended on an accepted draft
    ended_on_draft = reply.provenance[-1] == "draft"
    assert reply.provenance.count("target") == reply.stats.target_passes - ended_on_draft


def test_context_overflow_is_a_clear_error_and_a_full_context_keeps_the_reply(demo: DemoModel) -> None:
    assert demo.table is not None
    decoder = _decoder(demo, "sidecar", "d2t", n_ctx=256)
    reference = _decoder(demo, "off", n_ctx=256)
    try:
        with pytest.raises(ContextFullError) as caught:
            decoder.generate(list(demo.table.cycle[:300]), 10)
        assert "context" in caught.value.message and "300" in caught.value.message
        prompt = list(demo.table.cycle[:100])
        filled = decoder.generate(prompt, 400, Sampler(HOT))
        assert filled.stop_reason == "context_full"
        assert len(prompt) + len(filled.tokens) >= 250  # it wrote up to the end, drafting less and less
        expected = reference.generate(prompt, 400, Sampler(HOT))
        assert expected.stop_reason == "context_full" and filled.tokens == expected.tokens
    finally:
        decoder.close()
        reference.close()


def test_a_target_given_as_sidecar_is_refused_before_loading(demo: DemoModel) -> None:
    with pytest.raises(SidecarError) as caught:
        SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.target))
    assert "not an MTP draft sidecar" in caught.value.message


def test_p_min_cutoff_drafts_less_and_stays_lossless(demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    reference = _decoder(demo, "off")
    expected = _run(reference, prompt, 40, WARM)
    reference.close()
    drafted = []
    for p_min in (0.0, 0.5, 1.0):
        decoder = SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=4,
                                                  p_min=p_min, n_ctx=1024))
        try:
            reply = decoder.generate(prompt, 40, Sampler(WARM))
        finally:
            decoder.close()
        assert reply.tokens == expected
        drafted.append(reply.stats.drafted)
    assert drafted[0] >= drafted[1] >= drafted[2] == 0


def test_adaptive_depth_stops_drafting_where_drafts_fail_and_stays_lossless(module_tmp: ModuleFolders,
                                                                           demo: DemoModel) -> None:
    """A draft head that is almost always wrong: adaptive depth learns to skip drafting (rounds at depth 0
    hold their tokens for the draft context, probes catch it up in one pass), and the text is unchanged."""
    bad = ensure_demo_model(module_tmp.mktemp("engine-demo-bad"), size="tiny", acceptance=0.0, seed=4,
                            language="words")
    prompt = table_prompt(bad)
    plain = _decoder(bad, "off")
    reference = _run(plain, prompt, 160, GREEDY)
    plain.close()
    fixed = _decoder(bad, "sidecar", "full", draft_depth=4)
    adaptive = _decoder(bad, "sidecar", "full", draft_depth=4, adaptive=True)
    try:
        fixed_reply = fixed.generate(prompt, 160, Sampler(GREEDY))
        reply = adaptive.generate(prompt, 160, Sampler(GREEDY))
    finally:
        fixed.close()
        adaptive.close()
    assert fixed_reply.tokens == reference and reply.tokens == reference
    assert (fixed_reply.stats.acceptance or 0.0) < 0.2
    assert fixed_reply.stats.proposed >= 3.5 * fixed_reply.stats.target_passes  # fixed depth drafts 4 every round
    assert reply.stats.proposed < 0.5 * reply.stats.target_passes  # adaptive mostly does not draft at all
    assert reply.stats.proposed > 0  # but it keeps probing


def test_rounds_shallower_than_the_rollback_window_roll_back_to_the_exact_state(demo: DemoModel) -> None:
    """Adaptive depth keeps the target's rollback window at its deepest depth (8) and plays shallower rounds in it. The
    patch writes only the recurrent snapshots such a batch can fill (a 3-token pass copied nine conv states, 2.3% of
    its time); every rejection, of one draft up to all of them, must still roll back to the state after the last
    accepted token: the same tokens as plain decoding, at a temperature that rejects often."""
    prompt = table_prompt(demo)
    plain = _decoder(demo, "off")
    reference = {name: _run(plain, prompt, 96, params) for name, params in (("warm", WARM), ("hot", HOT))}
    plain.close()
    decoder = _decoder(demo, "sidecar", "d2t", draft_depth=8)
    depths = itertools.cycle([1, 2, 0, 3, 5, 8, 2, 1, 0, 4, 6, 2])
    decoder._depth = lambda: next(depths)  # type: ignore[method-assign]  # every depth from 0 to 8, in a mix
    try:
        replies = {name: decoder.generate(prompt, 96, Sampler(params)) for name, params in (("warm", WARM),
                                                                                               ("hot", HOT))}
    finally:
        decoder.close()
    for name, reply in replies.items():
        assert reply.tokens == reference[name], name
        assert 0 < reply.stats.accepted < reply.stats.proposed  # drafts both kept and rolled back
    # most drafts rejected: rollbacks of every length
    assert replies["hot"].stats.accepted < 0.5 * replies["hot"].stats.proposed


def test_drafting_after_more_rounds_without_it_than_a_batch_holds_stays_lossless(demo: DemoModel) -> None:
    """Rounds at depth 0 (adaptive depth where plain decoding is fastest) hold their tokens for the draft context;
    the first draft after more of them than one batch holds catches them up a batch at a time. It was one pass of
    them all: "batch holds 16 tokens, got 41", the reply ended (with the real model: after 511 such rounds)."""
    prompt = table_prompt(demo)
    plain = _decoder(demo, "off")
    reference = _run(plain, prompt, 80, GREEDY)
    plain.close()
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3,
                                              n_batch=16))
    depths = iter([0] * 40)
    decoder._depth = lambda: next(depths, 3)  # type: ignore[method-assign]  # 40 rounds without drafts, then 3
    try:
        reply = decoder.generate(prompt, 80, Sampler(GREEDY))
    finally:
        decoder.close()
    assert reply.tokens == reference
    assert reply.stats.proposed > 0 and (reply.stats.acceptance or 0.0) > 0.5  # drafting resumed, from a true state


def test_adaptive_depth_times_one_thread_in_cpu_time_and_several_in_wall_time(demo: DemoModel) -> None:
    """One decoding thread: its CPU time, which leaves other jobs' turns on the core out. Several: wall time, since
    one thread's CPU time is only its share of each pass and its waits at the others' barriers, split differently
    by batch size (on the scaled demo with two threads it ranked depth 2 12% ahead of depth 3, which ran 7% faster,
    and adaptive depth kept depth 2)."""
    decoder = _decoder(demo, "sidecar", "d2t", adaptive=True)
    try:
        for threads, counts_waiting in ((1, False), (2, True), (1, False)):
            decoder.use_threads(threads)
            start = decoder._round_clock()
            time.sleep(0.05)  # not synchronisation: the wait is what the clock is asked about
            waited = decoder._round_clock() - start
            assert (waited >= 0.05) == counts_waiting, (threads, waited)
    finally:
        decoder.close()


def _first_passes_reused(decoder: SpeculativeDecoder, prompt: list[int], depths: list[int]) -> dict[int, int]:
    """After ``prompt``, one verify-shaped pass at each depth in turn (rolled back but its first token, as after a
    rejected draft): whether each reused a kept graph."""
    decoder.generate(prompt, 1)  # the conversation read: the passes after it are a reply's
    position, reused = len(decoder.tokens), {}
    for depth in depths:
        before = decoder.tctx.graphs_reused
        decoder.tctx.decode(prompt[:depth + 1], position, logits="all")
        reused[depth] = decoder.tctx.graphs_reused - before
        assert decoder.tctx.truncate(position + 1)
        position += 1
    return reused


def test_a_benchmark_warm_up_builds_the_verify_graphs_of_the_depths_adaptive_depth_visits(demo: DemoModel) -> None:
    """``prepare_visit_graphs``, the warm-up ``bench spec`` gives adaptive depth: the verify graphs of the depth it
    plays (3 in a cold start), its neighbours and the next beyond are kept, so a reply's first pass at each reuses
    its graph, as a fixed depth's warm-up reply builds its one; a depth not prepared builds its graph, as does every
    depth without the warm-up. The prompt is a chat's length (a prompt of 16 tokens or fewer is a small batch too,
    and its graph takes the place of the one prepared first, the depth beyond)."""
    prompt = table_prompt(demo, 40)
    depths = [2, 3, 4, 5, 7]
    for prepared in (True, False):
        decoder = _decoder(demo, "sidecar", "d2t", draft_depth=8, adaptive=True)
        try:
            if prepared:
                decoder.prepare_visit_graphs()
                assert decoder.tokens == []  # the conversation forgotten
            reused = _first_passes_reused(decoder, prompt, depths)
        finally:
            decoder.close()
        assert reused == ({2: 1, 3: 1, 4: 1, 5: 1, 7: 0} if prepared else dict.fromkeys(depths, 0)), prepared
