"""The ``scaled`` demo (the real model's proportions, the built-in chat demo) through the real patched CPU backend.

Every mode decodes the table token-identically to plain decoding, the English chat replies with the passage
in every mode, and the small d2t draft vocabulary drafts the table's successors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.session import ChatSession
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DEMO_PASSAGE, DemoModel
from app.native import draft_probe
from app.native.handles import Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

N_TOKENS = 40
WARM = SamplingParams(temperature=0.8, seed=5)
VARIANTS: list[tuple[Mode, str | None]] = [("embedded", None), ("sidecar", "full"), ("sidecar", "d2t")]


@pytest.fixture(scope="module")
def words(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("scaled-words"), size="scaled", acceptance=0.8, seed=4,
                             language="words")


@pytest.fixture(scope="module")
def english(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("scaled-english"), size="scaled")


def _generate(demo: DemoModel, mode: Mode, draft: str | None, params: SamplingParams) -> list[int]:
    path = {"full": demo.sidecar_full, "d2t": demo.sidecar_d2t}.get(draft or "")
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode=mode, draft=path, draft_depth=3, n_ctx=512))
    try:
        return decoder.generate(table_prompt(demo), N_TOKENS, Sampler(params)).tokens
    finally:
        decoder.close()


def test_every_mode_emits_the_table_exactly_as_plain_decoding(words: DemoModel) -> None:
    assert words.table is not None
    prompt = table_prompt(words)
    greedy = _generate(words, "off", None, SamplingParams())
    assert greedy == words.table.continuation(prompt[-1], N_TOKENS)
    warm = _generate(words, "off", None, WARM)
    for mode, draft in VARIANTS:
        assert _generate(words, mode, draft, SamplingParams()) == greedy, (mode, draft)
        assert _generate(words, mode, draft, WARM) == warm, (mode, draft)


def test_the_d2t_head_drafts_the_tables_successors_at_its_acceptance(words: DemoModel) -> None:
    assert words.table is not None
    sequence = list(words.table.cycle[:200])
    with Model(words.target) as target:
        probe = draft_probe.probe(target, sequence, words.sidecar_d2t)
    assert probe.target_next == [words.table.successor(t) for t in sequence]
    assert probe.draft_next == [words.table.draft_successor(t) for t in sequence]


@pytest.mark.parametrize(("mode", "draft"), [("off", None), *VARIANTS])
def test_the_english_chat_replies_with_the_passage_in_every_mode(english: DemoModel, mode: Mode,
                                                                  draft: str | None) -> None:
    path: Path | None = {"full": english.sidecar_full, "d2t": english.sidecar_d2t}.get(draft or "")
    session = ChatSession(EngineConfig(english.target, mode=mode, draft=path, draft_depth=3, n_ctx=1024))
    try:
        reply, text = session.reply([Message("user", "Hello! Tell me something about FastMTP.")],
                                    ChatOptions(max_tokens=400, sampling=SamplingParams(temperature=0.0)))
    finally:
        session.close()
    assert (text, reply.stop_reason) == (DEMO_PASSAGE, "eos")
