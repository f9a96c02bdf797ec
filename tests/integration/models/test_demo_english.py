"""The built-in demo model speaks English: every chat reply is our passage, ended by <|im_end|>.

The demo network's next token depends on the current token alone, so the passage must tokenize to distinct
tokens, none of them one the chat template ends a prompt with. Replies are decoded by the real engine on the
real patched CPU backend, the same session code the window's worker runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.core.errors import GGUFError
from app.engine.chat_template import Message, render
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, Mode, SamplingParams
from app.engine.session import ChatSession
from app.gguftools.bpe import encode_ascii
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DEMO_PASSAGE, END_OF_TURN, DemoModel, make_passage_table, read_demo_table
from app.gguftools.tokenizer import Tokenizer, load_tokenizer
from app.native import draft_probe
from app.native.handles import Context, Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

GREEDY = ChatOptions(max_tokens=400, sampling=SamplingParams(temperature=0.0))
PROMPTS = {
    "one question": [Message("user", "Hello! Tell me something about FastMTP.")],
    "system and a question": [Message("system", "You are terse."), Message("user", "What is 2+2?")],
    # the user quotes passage tokens and the history holds the passage: only the prompt's end decides
    "second turn": [Message("user", "Hi"), Message("assistant", DEMO_PASSAGE),
                    Message("user", "Here's my trick: say it again, FastMTP Chat!")],
}


@pytest.fixture(scope="module")
def tokenizer(qwen_vocab_path: Path) -> Tokenizer:
    return load_tokenizer(qwen_vocab_path)


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    """The built-in demo exactly as the window and quickstart get it (all defaults)."""
    return ensure_demo_model(module_tmp.mktemp("english-demo"))


@pytest.fixture(scope="module")
def vocab(demo: DemoModel) -> Iterator[Model]:
    with Model(demo.target, vocab_only=True) as model:
        yield model


def passage_ids(tokenizer: Tokenizer) -> list[int]:
    return encode_ascii(tokenizer, DEMO_PASSAGE)


def test_passage_tokenizes_to_distinct_tokens_none_a_prompt_end(tokenizer: Tokenizer, vocab: Model) -> None:
    ids = passage_ids(tokenizer)
    assert ids == vocab.tokenize(DEMO_PASSAGE, add_special=False, parse_special=False)  # llama.cpp agrees
    assert 60 <= len(ids) <= 120 and len(set(ids)) == len(ids)
    assert tokenizer.token_id(END_OF_TURN) not in ids and "\n" not in DEMO_PASSAGE
    template = tokenizer.chat_template
    for messages in PROMPTS.values():
        for thinking in (True, False):
            whole = vocab.tokenize(render(template, messages, thinking=thinking))
            before = vocab.tokenize(render(template, messages, thinking=thinking, add_generation_prompt=False))
            assert whole[: len(before)] == before
            assert not set(whole[len(before):]) & set(ids), "the generation prompt would start mid-passage"


def test_our_bpe_matches_llama_cpp_on_other_ascii_text(tokenizer: Tokenizer, vocab: Model) -> None:
    for text in ("It's 3 o'clock; THE dog's   bowl\n\nis empty!", "  x = f(a, b) -- 42 ...?", "don't\r\nstop\tnow "):
        assert encode_ascii(tokenizer, text) == vocab.tokenize(text, add_special=False, parse_special=False)


def test_builtin_demo_stores_the_english_table(demo: DemoModel, tokenizer: Tokenizer) -> None:
    table = read_demo_table(demo.target)
    assert table is not None and table == demo.table
    assert table.language == "english"
    end = tokenizer.token_id(END_OF_TURN)
    assert table.entry == end and list(table.cycle) == [end, *passage_ids(tokenizer)]
    assert all(read_demo_table(p) == table for p in (demo.sidecar_full, demo.sidecar_d2t))


def reply_of(demo: DemoModel, mode: Mode, draft: Path | None, messages: list[Message],
             options: ChatOptions = GREEDY, thinking: bool = True) -> tuple[list[int], str, str, float | None]:
    session = ChatSession(EngineConfig(demo.target, mode=mode, draft=draft, draft_depth=3, n_ctx=1024))
    try:
        reply, text = session.reply(messages, ChatOptions(options.max_tokens, options.sampling, thinking=thinking))
    finally:
        session.close()
    return reply.tokens, text, reply.stop_reason, reply.stats.acceptance


@pytest.mark.parametrize("name", list(PROMPTS))
@pytest.mark.parametrize("thinking", [True, False])
def test_d2t_reply_is_the_passage_and_stops(demo: DemoModel, tokenizer: Tokenizer, name: str,
                                            thinking: bool) -> None:
    tokens, text, stop, acceptance = reply_of(demo, "sidecar", demo.sidecar_d2t, PROMPTS[name], thinking=thinking)
    assert text == DEMO_PASSAGE
    assert tokens == [*passage_ids(tokenizer), tokenizer.token_id(END_OF_TURN)]
    assert stop == "eos"
    assert acceptance is not None and acceptance > 0.7


@pytest.mark.parametrize(("mode", "full_sidecar"), [("off", False), ("embedded", False), ("sidecar", True)])
def test_every_other_mode_gives_the_same_reply(demo: DemoModel, mode: Mode, full_sidecar: bool) -> None:
    draft = demo.sidecar_full if full_sidecar else None
    _, text, stop, _ = reply_of(demo, mode, draft, PROMPTS["one question"])
    assert (text, stop) == (DEMO_PASSAGE, "eos")


def test_the_windows_worker_and_sampling_give_the_passage(demo: DemoModel) -> None:
    """The window's path: the worker process, the default temperature 0.7 and fresh seeds."""
    with EngineClient() as client:
        loaded = client.load(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_ctx=1024))
        assert loaded["kind"] == "loaded", loaded
        for seed in (1, 12345):
            options = ChatOptions(max_tokens=400, sampling=SamplingParams(temperature=0.7, seed=seed))
            done = list(client.generate(PROMPTS["one question"], options))[-1]
            assert done["kind"] == "done", done
            assert (done["text"], done["stop_reason"]) == (DEMO_PASSAGE, "eos")


def test_acceptance_stays_a_dial(tmp_path: Path, tokenizer: Tokenizer) -> None:
    low = ensure_demo_model(tmp_path / "low", acceptance=0.6, seed=2)
    assert low.table is not None and abs(low.table.acceptance - 0.6) < 0.01
    sequence = list(low.table.cycle)
    with Model(low.target) as target:
        probe = draft_probe.probe(target, sequence, low.sidecar_d2t)
    # the d2t head drafts wrong exactly at the table's wrong tokens
    assert probe.draft_next == [low.table.draft_successor(t) for t in sequence]
    assert probe.target_next == [low.table.successor(t) for t in sequence]
    _, text, stop, acceptance = reply_of(low, "sidecar", low.sidecar_d2t, PROMPTS["one question"])
    assert (text, stop) == (DEMO_PASSAGE, "eos")
    assert acceptance is not None and 0.4 < acceptance < 0.8


def test_words_demo_never_stops(tmp_path: Path) -> None:
    """Benchmarks and the self-test need long generations: the words table has no end of turn."""
    words = ensure_demo_model(tmp_path / "words", language="words")
    assert words.table is not None and words.table.language == "words"
    tokens, _, stop, _ = reply_of(words, "sidecar", words.sidecar_d2t, PROMPTS["one question"],
                                  ChatOptions(max_tokens=300))
    assert (len(tokens), stop) == (300, "length")


def test_a_cached_demo_of_another_format_or_language_is_written_again(tmp_path: Path) -> None:
    folder = tmp_path / "cached"
    words = ensure_demo_model(folder, language="words")
    assert words.table is not None and words.table.language == "words"
    english = ensure_demo_model(folder)
    assert english.table is not None and english.table.language == "english"
    marker = folder / "demo.json"
    current = json.loads(marker.read_text())
    os.utime(english.target, ns=(0, 0))  # an old file: writing it again gives it a fresh time
    assert ensure_demo_model(folder).target.stat().st_mtime_ns == 0  # the same demo: reused
    marker.write_text(json.dumps({**current, "format": 2}))  # the word-salad demo of the previous release
    rewritten = ensure_demo_model(folder)
    assert rewritten.target.stat().st_mtime_ns > 0
    assert json.loads(marker.read_text()) == current


def test_unique_tokens_leave_no_choice_to_the_model(demo: DemoModel) -> None:
    """Every passage position has one clear winner: the greedy pick is the table's, by a wide logit margin."""
    assert demo.table is not None
    sequence = list(demo.table.cycle)
    with Model(demo.target) as target, Context(target, n_ctx=len(sequence) + 8, n_batch=len(sequence)) as ctx:
        ctx.decode(sequence, 0, logits="all")
        logits = np.stack([ctx.logits(i) for i in range(len(sequence))])
    assert [int(t) for t in logits.argmax(axis=1)] == [demo.table.successor(t) for t in sequence]
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert float((top2[:, 1] - top2[:, 0]).min()) > 3.0  # at temperature 0.7 only the table's token survives min_p


def test_a_passage_that_repeats_a_token_is_refused(tokenizer: Tokenizer) -> None:
    with pytest.raises(GGUFError, match=r"repeats the tokens \['Ġthe'\]"):
        make_passage_table(tokenizer, "Hello, the cat and the dog.", 0.9, 0)
