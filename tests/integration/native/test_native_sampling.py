"""The target samples through llama.cpp's sampler chain: seeded replies at temperatures 0.7 and 1.0 are the
same with and without drafting (with real rejections), repeatable, and llama-server's own for the same seed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.builder import BuildOptions
from app.engine.config import EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.speculative import Reply, SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.machines.upstream_server import UpstreamServer, build_server
from app.native.handles import Context, Model
from app.native.sampler import SamplerChain
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

N_TOKENS = 80
# The demo's table token leads the next by 5-12 logits, so at the chat's temperatures (0.7 and 1.0) the draws are
# made (one per token) but nearly always land on the table's token; the drafts' rejections come from the d2t
# head's wrong words. At temperature 8 over eight candidates the picks really leave the table, so a draw that
# went astray between plain and drafted decoding would show there.
WARM = SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=1234)
ONE = SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, seed=77)
HOT = SamplingParams(temperature=8.0, top_k=8, top_p=1.0, min_p=0.0, seed=11)
PENALISED = SamplingParams(temperature=8.0, top_k=8, top_p=1.0, min_p=0.0, repeat_penalty=1.3, seed=5)
SETTINGS = {"t0.7": WARM, "t1.0": ONE, "t8": HOT, "t8-penalty": PENALISED}
RANDOM = {"t8", "t8-penalty"}


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("sampling-demo"), size="tiny", acceptance=0.9, seed=21,
                             language="words")


def _reply(demo: DemoModel, mode: Mode, params: SamplingParams, *, draft: Path | None = None, depth: int = 3,
           adaptive: bool = False, prompt: list[int] | None = None) -> Reply:
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode=mode, draft=draft, draft_depth=depth,
                                              adaptive=adaptive, n_ctx=1024))
    try:
        return decoder.generate(prompt or table_prompt(demo), N_TOKENS, Sampler(params))
    finally:
        decoder.close()


def _off_table(demo: DemoModel, prompt: list[int], tokens: list[int]) -> int:
    """How many picks were not the table's next token after the token before them."""
    assert demo.table is not None
    before = [prompt[-1], *tokens[:-1]]
    return sum(demo.table.continuation(b, 1)[0] != t for b, t in zip(before, tokens, strict=True))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_seeded_sampling_is_lossless_in_every_drafting_mode_with_rejections(demo: DemoModel, name: str) -> None:
    params = SETTINGS[name]
    prompt = table_prompt(demo)
    plain = _reply(demo, "off", params)
    assert len(plain.tokens) == N_TOKENS
    if name in RANDOM:
        assert _off_table(demo, prompt, plain.tokens) >= 10  # the sampler really left the table
    for mode, draft, depth, adaptive in [("embedded", None, 3, False), ("sidecar", demo.sidecar_d2t, 3, False),
                                         ("sidecar", demo.sidecar_d2t, 1, False),
                                         ("sidecar", demo.sidecar_d2t, 4, True)]:
        drafted = _reply(demo, mode, params, draft=draft, depth=depth, adaptive=adaptive)
        label = (name, mode, depth, adaptive)
        assert drafted.tokens == plain.tokens, label
        stats = drafted.stats
        assert stats.accepted > 0 and stats.drafted - stats.accepted >= 3, (label, stats.drafted, stats.accepted)


def test_a_seed_gives_the_same_reply_and_another_seed_another(demo: DemoModel) -> None:
    first = _reply(demo, "sidecar", HOT, draft=demo.sidecar_d2t)
    again = _reply(demo, "sidecar", HOT, draft=demo.sidecar_d2t)
    other = _reply(demo, "sidecar", replace(HOT, seed=HOT.seed + 1), draft=demo.sidecar_d2t)
    assert first.tokens == again.tokens
    assert first.tokens != other.tokens


def test_greedy_is_the_highest_logit_and_the_repetition_penalty_changes_the_reply(demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    greedy = _reply(demo, "off", SamplingParams())
    assert demo.table is not None
    assert greedy.tokens == demo.table.continuation(prompt[-1], N_TOKENS)
    unpenalised = _reply(demo, "off", replace(PENALISED, repeat_penalty=1.0))
    penalised = _reply(demo, "off", PENALISED)
    assert penalised.tokens != unpenalised.tokens


def test_the_chain_samples_rows_of_a_batch_in_order(demo: DemoModel) -> None:
    """Sampling rows 0..n-1 of one batched pass gives what n one-token passes give (the verify pass's path)."""
    prompt = table_prompt(demo)
    with Model(demo.target) as model, Context(model, n_ctx=256, n_batch=64) as ctx:
        ctx.decode(prompt, 0, logits="last")
        with Sampler(HOT).chain(model.n_vocab) as chain:
            singles = [chain.sample(ctx, -1)]
            for i in range(11):
                ctx.decode([singles[-1]], len(prompt) + i, logits="last")
                singles.append(chain.sample(ctx, -1))
        ctx.truncate(0)
        ctx.decode(prompt[:-1], 0, logits="none")
        ctx.decode([prompt[-1], *singles[:-1]], len(prompt) - 1, logits="all")
        with Sampler(HOT).chain(model.n_vocab) as chain:
            batched = [chain.sample(ctx, i) for i in range(len(singles))]
    assert batched == singles


def test_a_closed_chain_refuses_to_sample(demo: DemoModel) -> None:
    chain = SamplerChain(temperature=0.7, top_k=8, top_p=1.0, min_p=0.0, repeat_penalty=1.0, repeat_last_n=64,
                         seed=1, n_vocab=10)
    chain.close()
    chain.close()  # idempotent
    with Model(demo.target) as model, Context(model, n_ctx=64, n_batch=16) as ctx, pytest.raises(ValueError):
        chain.sample(ctx, -1)


@pytest.fixture(scope="module")
def server_binary() -> Path:
    return build_server(BuildOptions(flavor="cpu"))


def test_llama_server_samples_the_same_reply_for_the_same_seed(server_binary: Path, demo: DemoModel) -> None:
    """Each setting's seeded reply, ours with the d2t sidecar, against llama-server's without a draft and with
    the sidecar (one server of each, every setting asked in turn)."""
    prompt = table_prompt(demo)
    ours = {name: _reply(demo, "sidecar", params, draft=demo.sidecar_d2t).tokens for name, params in SETTINGS.items()}
    for draft in (None, demo.sidecar_d2t):
        with UpstreamServer(server_binary, demo.target, draft=draft, draft_depth=3, ctx_size=1024,
                            threads=2) as server:
            for name, params in SETTINGS.items():
                theirs = server.complete(prompt, N_TOKENS, params.temperature, params.seed, top_k=params.top_k,
                                         top_p=params.top_p, min_p=params.min_p,
                                         repeat_penalty=params.repeat_penalty, repeat_last_n=params.repeat_last_n)
                assert theirs.tokens == ours[name], f"llama-server's seeded {name} reply differs (draft: {draft})"
                if draft is not None:
                    assert theirs.drafted > theirs.accepted, name  # llama-server's drafts were rejected too


def _backend_reply(demo: DemoModel, mode: Mode, params: SamplingParams, *, draft: Path | None = None,
                   depth: int = 3, adaptive: bool = False) -> tuple[Reply, bool]:
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode=mode, draft=draft, draft_depth=depth,
                                              adaptive=adaptive, n_ctx=1024, backend_sampling=True))
    try:
        first = decoder.generate(table_prompt(demo), N_TOKENS, Sampler(params))
        again = decoder.generate(table_prompt(demo), N_TOKENS, Sampler(params))  # the kept chain, restarted
        assert again.tokens == first.tokens
        return first, decoder.samples_on_backend
    finally:
        decoder.close()


@pytest.mark.parametrize("name", ["t0.7", "t8"])
def test_sampling_inside_the_graph_is_lossless_too(demo: DemoModel, name: str) -> None:
    """llama.cpp's backend sampling (what a GPU uses; the CPU backend can do it too): a verify pass's picks are
    made in the graph, each with its own draw, and only the kept ones advance the seeded stream."""
    params = SETTINGS[name]
    plain, on_backend = _backend_reply(demo, "off", params)
    assert on_backend
    if name in RANDOM:
        assert _off_table(demo, table_prompt(demo), plain.tokens) >= 10
    for mode, draft, depth, adaptive in [("sidecar", demo.sidecar_d2t, 3, False), ("embedded", None, 4, True)]:
        drafted, on_backend = _backend_reply(demo, mode, params, draft=draft, depth=depth, adaptive=adaptive)
        assert on_backend and drafted.tokens == plain.tokens, (name, mode)
        assert drafted.stats.drafted - drafted.stats.accepted >= 3


def test_greedy_in_the_graph_is_the_host_argmax_and_a_penalty_samples_on_the_host(demo: DemoModel) -> None:
    greedy, on_backend = _backend_reply(demo, "sidecar", SamplingParams(), draft=demo.sidecar_d2t)
    assert on_backend and greedy.tokens == _reply(demo, "off", SamplingParams()).tokens
    penalised, on_backend = _backend_reply(demo, "sidecar", PENALISED, draft=demo.sidecar_d2t)
    assert not on_backend  # llama.cpp has no in-graph repetition penalty: the host samples, the same stream
    assert penalised.tokens == _reply(demo, "off", PENALISED).tokens
