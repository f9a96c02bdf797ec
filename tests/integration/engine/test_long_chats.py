"""Conversations that never hit a wall (issue 34), on the real patched CPU backend and the demo model:

Continue extends a cut reply with exactly the tokens one longer reply has; a thinking budget closes the thinking
and the answer that follows is plain decoding of what came before; the overflow policy keeps a long chat going
(and keeps the trimmed start so later turns read only their new message), or stops it with the figures; a prompt
is read in batches with progress and can be cancelled; the stats carry the context meter. Greedy and seeded, with
drafting off, the embedded head and the d2t sidecar, where drafts are rejected (the demo accepts about 90%, the hot
sampler far less).
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from app.core.errors import ContextFullError
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.session import ChatSession
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

GREEDY = SamplingParams()
WARM = SamplingParams(temperature=0.8, seed=5)
HOT = SamplingParams(temperature=8.0, top_k=8, top_p=1.0, min_p=0.0, seed=11)  # rejects many drafts
VARIANTS: list[tuple[Mode, str | None]] = [("off", None), ("embedded", None), ("sidecar", "d2t")]
IDS = ["off", "embedded", "d2t-sidecar"]


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("long-chat-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")


def _config(demo: DemoModel, mode: Mode, draft: str | None, **fields: object) -> EngineConfig:
    path = demo.sidecar_d2t if draft == "d2t" else None
    return replace(EngineConfig(demo.target, mode=mode, draft=path, n_ctx=2048), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode,draft", VARIANTS, ids=IDS)
def test_continue_gives_exactly_the_tokens_of_one_longer_reply(demo: DemoModel, mode: Mode,
                                                               draft: str | None) -> None:
    prompt = table_prompt(demo)
    decoder = SpeculativeDecoder(_config(demo, mode, draft))
    try:
        for params in (GREEDY, WARM, HOT):
            whole = decoder.generate(prompt, 70, Sampler(params)).tokens
            cut = decoder.generate(prompt, 23, Sampler(params))
            assert cut.stop_reason == "length" and cut.tokens == whole[:23]
            rest = decoder.generate([*prompt, *cut.tokens], 70 - 23, Sampler(params), resume=True)
            assert cut.tokens + rest.tokens == whole, (mode, params)
            assert rest.stats.prompt_tokens == 1  # only the cut reply's last token is read: nothing again
    finally:
        decoder.close()


def test_continue_after_the_engine_lost_the_reply_is_still_exact_when_greedy(demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    decoder = SpeculativeDecoder(_config(demo, "sidecar", "d2t"))
    try:
        whole = decoder.generate(prompt, 60, Sampler(GREEDY)).tokens
        cut = decoder.generate(prompt, 20, Sampler(GREEDY)).tokens
        assert demo.table is not None
        decoder.generate(list(demo.table.cycle[100:104]), 5, Sampler(GREEDY))  # another chat came in between
        rest = decoder.generate([*prompt, *cut], 40, Sampler(GREEDY), resume=True)
        assert rest.stats.prompt_tokens == len(prompt) + len(cut)  # read again: it was gone
        assert cut + rest.tokens == whole
    finally:
        decoder.close()


def _session(demo: DemoModel, mode: Mode = "off", draft: str | None = None, **fields: object) -> ChatSession:
    return ChatSession(_config(demo, mode, draft, **fields))


def _words(session: ChatSession, demo: DemoModel, start: int, n: int) -> str:
    """``n`` table words from ``start`` on, as text (the demo continues the table from them)."""
    assert demo.table is not None
    cycle = demo.table.cycle
    return session.decoder.target.detokenize([cycle[(start + i) % len(cycle)] for i in range(n)]).strip()


@pytest.mark.parametrize("mode,draft", VARIANTS, ids=IDS)
def test_session_continue_extends_the_same_reply(demo: DemoModel, mode: Mode, draft: str | None) -> None:
    session = _session(demo, mode, draft)
    try:
        messages = [Message("system", "Be brief."), Message("user", _words(session, demo, 3, 12))]
        options = ChatOptions(max_tokens=80, sampling=WARM)
        whole, _ = session.reply(messages, options)
        cut, _ = session.reply(messages, replace(options, max_tokens=30))
        assert cut.stop_reason == "length"
        rest, _ = session.reply(messages, replace(options, max_tokens=50, continue_tokens=tuple(cut.tokens)))
        assert cut.tokens + rest.tokens == whole.tokens[:len(cut.tokens) + len(rest.tokens)]
        assert len(cut.tokens) + len(rest.tokens) == len(whole.tokens)
    finally:
        session.close()


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.mark.parametrize("mode,draft", [("off", None), ("sidecar", "d2t")], ids=["off", "d2t-sidecar"])
def test_a_thinking_budget_closes_the_thinking_and_the_answer_is_plain_decoding_after_it(
        demo: DemoModel, mode: Mode, draft: str | None) -> None:
    session = _session(demo, mode, draft)
    plain = SpeculativeDecoder(_config(demo, "off", None))
    try:
        session.template = THINKING_TEMPLATE  # a template that opens the thinking, as Qwen3.8's does
        messages = [Message("user", _words(session, demo, 0, 10))]
        budget = 12
        reply, text = session.reply(messages, ChatOptions(max_tokens=60, thinking_budget=budget))
        closing = session.decoder.target.tokenize("\n</think>\n\n", parse_special=True)
        at = next(i for i in range(len(reply.tokens)) if reply.tokens[i:i + len(closing)] == closing)
        assert budget <= at <= budget + 8  # closed once the budget was spent (a draft round may overrun it)
        assert "</think>" in text and reply.tokens.count(closing[0]) >= 1
        after = at + len(closing)
        prompt = session.prompt_tokens(messages)
        answer = plain.generate([*prompt, *reply.tokens[:after]], len(reply.tokens) - after, Sampler(GREEDY))
        assert reply.tokens[after:] == answer.tokens[:len(reply.tokens) - after]
        # no budget: the model thinks on; thinking off: no budget applies
        _free, free_text = session.reply(messages, ChatOptions(max_tokens=60))
        assert "</think>" not in free_text
    finally:
        session.close()
        plain.close()


def test_a_long_chat_trims_whole_oldest_turns_keeps_the_system_prompt_and_never_fails(demo: DemoModel) -> None:
    session = _session(demo, "sidecar", "d2t", n_ctx=512)
    try:
        system = Message("system", "You answer in table words.")
        history = [system]
        trims, reads = [], []
        for turn in range(16):
            history.append(Message("user", _words(session, demo, turn * 7, 25)))
            options = ChatOptions(max_tokens=60, sampling=WARM)
            reply, text = session.reply(history, options)
            assert reply.stop_reason in ("length", "eos")
            assert reply.stats.context_size == 512 and 0 < reply.stats.context_used <= 512
            # the prompt and the reply: all evaluated, but for the last token unless the reply ended on a draft
            assert reply.stats.context_used - len(session.decoder.tokens) in (0, 1)
            trims.append(reply.stats.trimmed_turns)
            reads.append(reply.stats.prompt_tokens)
            history.append(Message("assistant", text))
        assert max(trims) > 0  # it did trim, and every turn got its reply
        # after a trim, the next turn keeps the same start: only its new message (and the last reply) is read
        follow = [i for i in range(1, len(trims)) if trims[i] == trims[i - 1] > 0]
        assert follow and min(reads[i] for i in follow) < 60
    finally:
        session.close()


@pytest.mark.parametrize("mode,draft", VARIANTS, ids=IDS)
@pytest.mark.parametrize("params", [GREEDY, HOT], ids=["greedy", "seeded-hot"])
def test_a_trimmed_reply_is_plain_decoding_of_the_turns_kept(demo: DemoModel, mode: Mode, draft: str | None,
                                                             params: SamplingParams) -> None:
    session = _session(demo, mode, draft, n_ctx=384)
    plain = SpeculativeDecoder(_config(demo, "off", None, n_ctx=384))
    try:
        history = [Message("system", "Short.")]
        for turn in range(6):
            history += [Message("user", _words(session, demo, turn, 30)),
                        Message("assistant", _words(session, demo, turn + 50, 30))]
        history.append(Message("user", _words(session, demo, 99, 8)))
        options = ChatOptions(max_tokens=40, sampling=params)
        window = session.fit(history, options)
        session._window_starts = []
        assert window.dropped_turns > 0 and window.messages[0] == history[0] and window.messages[-1] == history[-1]
        reply, _ = session.reply(history, options)
        expected = plain.generate(session.prompt_tokens(window.messages), 40, Sampler(params))
        assert reply.tokens == expected.tokens and reply.stats.trimmed_turns == window.dropped_turns
    finally:
        session.close()
        plain.close()


def test_stop_policy_and_a_message_larger_than_the_context_are_refused_before_any_work(demo: DemoModel) -> None:
    session = _session(demo, n_ctx=256)
    try:
        history = [Message("user", _words(session, demo, 0, 20))]
        _reply, text = session.reply(history, ChatOptions(max_tokens=20))
        evaluated = list(session.decoder.tokens)
        history += [Message("assistant", text)]
        for turn in range(8):
            history += [Message("user", _words(session, demo, turn * 5, 25)),
                        Message("assistant", _words(session, demo, turn, 10))]
        history.append(Message("user", "go on"))
        with pytest.raises(ContextFullError) as stopped:
            session.reply(history, ChatOptions(max_tokens=20, overflow="stop"))
        assert stopped.value.policy == "stop" and stopped.value.context == 256 and stopped.value.used > 256
        assert session.decoder.tokens == evaluated  # nothing was read
        with pytest.raises(ContextFullError) as too_big:
            session.reply([Message("user", _words(session, demo, 0, 400))], ChatOptions(max_tokens=20))
        assert "Your message needs" in too_big.value.message and session.decoder.tokens == evaluated
    finally:
        session.close()


def test_a_long_prompt_is_read_in_batches_with_progress_and_a_cancel_forgets_it(demo: DemoModel) -> None:
    assert demo.table is not None
    prompt = list(demo.table.cycle[:900])
    decoder = SpeculativeDecoder(_config(demo, "sidecar", "d2t", n_batch=128))
    try:
        seen: list[tuple[int, int]] = []
        reply = decoder.generate(prompt, 5, Sampler(GREEDY), on_prompt_progress=lambda d, t: seen.append((d, t)))
        assert [d for d, _ in seen] == [*range(128, 900, 128), 900] and {t for _, t in seen} == {900}
        assert reply.stats.context_used == 900 + len(reply.tokens) and reply.stats.context_size == 2048
        cancel = threading.Event()
        other = list(demo.table.cycle[40:940])

        def progress(done: int, _total: int) -> None:
            if done >= 256:
                cancel.set()

        cancelled = decoder.generate(other, 5, Sampler(GREEDY), cancel=cancel, on_prompt_progress=progress)
        assert cancelled.stop_reason == "cancelled" and cancelled.tokens == [] and decoder.tokens == []
        again = decoder.generate(prompt, 5, Sampler(GREEDY))
        assert again.tokens == reply.tokens and again.stats.prompt_tokens == 900
    finally:
        decoder.close()


@pytest.mark.parametrize("mode,draft", VARIANTS, ids=IDS)
def test_a_prompt_read_in_many_batches_gives_the_reply_of_one_batch(demo: DemoModel, mode: Mode,
                                                                     draft: str | None) -> None:
    """Only the last batch asks for logits; the draft context still gets every row's hidden state."""
    assert demo.table is not None
    prompt = list(demo.table.cycle[10:910])
    replies = []
    for n_batch in (128, 1024):
        decoder = SpeculativeDecoder(_config(demo, mode, draft, n_batch=n_batch))
        try:
            reply = decoder.generate(prompt, 40, Sampler(HOT))
            replies.append((reply.tokens, reply.stats.accepted, reply.stats.drafted))
        finally:
            decoder.close()
    assert replies[0] == replies[1]
