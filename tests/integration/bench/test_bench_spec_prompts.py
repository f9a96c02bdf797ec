"""``bench spec``'s prompts on the demo model: each prompt gets its own reply, as on a real model.

Without the reply's first word given, every chat prompt ends in the same markup and the demo target (whose
next token depends on the current one alone) would write the same reply to all of them: the benchmark would
time one text again and again, and one text's luck would pick the fastest fixed depth.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.bench.spec import PROMPT_SETS, demo_opening, load_prompts, tokenize_prompts
from app.engine.config import EngineConfig
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")  # the prompts are rendered with the target's own template


@pytest.fixture(scope="module")
def words_demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("bench-prompts"), size="tiny", acceptance=0.8, seed=3,
                             language="words")


def test_each_benchmark_prompt_starts_its_reply_on_its_own_table_word(words_demo: DemoModel) -> None:
    assert words_demo.table is not None
    texts = {name: load_prompts(name) for name in PROMPT_SETS}
    tokens = tokenize_prompts(words_demo.target, texts)
    openings = [prompt[-1] for name in PROMPT_SETS for prompt in tokens[name]]
    assert all(word in words_demo.table.cycle for word in openings)
    assert len(set(openings)) == len(openings) == sum(len(t) for t in texts.values())
    # the same prompt always gets the same word: runs and benches stay comparable
    again = tokenize_prompts(words_demo.target, {"document": texts["document"][:2]})["document"]
    assert again == tokens["document"][:2]
    assert demo_opening(words_demo.table.cycle, texts["document"][0]) == tokens["document"][0][-1]


def test_the_chat_demo_keeps_its_prompts_as_they_are(default_demo: DemoCopies, tmp_path: Path) -> None:
    """The ``english`` demo's one reply is the point of it (the passage); nothing is added there."""
    default_demo_model = default_demo.copy_to(tmp_path / "chat-demo")
    texts = {"document": load_prompts("document")[:2]}
    tokens = tokenize_prompts(default_demo_model.target, texts)["document"]
    assert default_demo_model.table is not None
    assert all(prompt[-1] not in default_demo_model.table.cycle for prompt in tokens)


def test_two_benchmark_prompts_get_different_replies_that_follow_the_table(words_demo: DemoModel) -> None:
    assert words_demo.table is not None
    prompts = tokenize_prompts(words_demo.target, {"reasoning": load_prompts("reasoning")[:2]})["reasoning"]
    decoder = SpeculativeDecoder(EngineConfig(words_demo.target, mode="sidecar", draft=words_demo.sidecar_d2t,
                                              draft_depth=3, n_ctx=512))
    try:
        replies = []
        for prompt in prompts:
            decoder.reset()
            replies.append(decoder.generate(prompt, 24).tokens)
    finally:
        decoder.close()
    for prompt, reply in zip(prompts, replies, strict=True):
        assert reply == words_demo.table.continuation(prompt[-1], 24)
    assert replies[0] != replies[1]
