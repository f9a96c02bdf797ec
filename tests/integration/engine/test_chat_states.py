"""Long chats reopen at once, on the real patched CPU backend and demo model files: a chat's kept state (the
target's and the draft head's sequence state and the decoder's host rows) saved to a real file, taken up again and
replying exactly as if the decoder had never left; the misses (an edit, a regenerate, another model file); damaged
files set aside; llama.cpp refusing a state; and the worker protocol end to end."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import EngineError
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, Mode, SamplingParams
from app.engine.sampling import Sampler
from app.engine.speculative import SpeculativeDecoder
from app.engine.state_cache import StateCache, file_name, key_for
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.native.loader import backend_manifest
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

GREEDY = SamplingParams()
WARM = SamplingParams(temperature=0.8, seed=5)
MODES: list[tuple[Mode, str | None]] = [("off", None), ("embedded", None), ("sidecar", "d2t")]
CAP = 256 * 1024 * 1024


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("states-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")  # long replies, rejected drafts now and then


def _config(demo: DemoModel, mode: Mode, draft: str | None = None, target: Path | None = None) -> EngineConfig:
    return EngineConfig(target or demo.target, mode=mode, draft=demo.sidecar_d2t if draft else None, n_ctx=2048)


def _turns(demo: DemoModel, reply1: list[int]) -> tuple[list[int], list[int]]:
    first = table_prompt(demo)
    return first, [*first, *reply1, *table_prompt(demo, 5)]


def _never_leaving(decoder: SpeculativeDecoder, demo: DemoModel, sampling: SamplingParams) -> tuple[list[int], ...]:
    """Turn one, then turn two in the same decoder: what a kept state must reproduce."""
    decoder.reset()
    first = table_prompt(demo)
    reply1 = decoder.generate(first, 40, Sampler(sampling)).tokens
    _, second = _turns(demo, reply1)
    return reply1, decoder.generate(second, 60, Sampler(sampling)).tokens


@pytest.mark.parametrize("mode,draft", MODES, ids=["off", "embedded", "d2t-sidecar"])
def test_a_chat_taken_up_from_its_file_replies_as_if_never_left(demo: DemoModel, mode: Mode, draft: str | None,
                                                                tmp_path: Path) -> None:
    config = _config(demo, mode, draft)
    decoder = SpeculativeDecoder(config)
    key = key_for(config, backend_manifest().id)
    try:
        for sampling in (GREEDY, WARM):
            reply1, expected = _never_leaving(decoder, demo, sampling)
            decoder.reset()
            first, second = _turns(demo, reply1)
            assert decoder.generate(first, 40, Sampler(sampling)).tokens == reply1
            snapshot = decoder.snapshot()
            assert snapshot.tokens == decoder.tokens and (snapshot.draft is None) == (mode == "off")
            assert StateCache(tmp_path, CAP).save("chat", key, snapshot) is None
            decoder.generate(table_prompt(demo, 9), 30, Sampler(sampling))  # another chat takes the decoder
            found = StateCache(tmp_path, CAP).lookup("chat", key, second)  # the app started again: the disk
            assert found.source == "disk" and found.snapshot is not None
            decoder.restore(found.snapshot)
            reply2 = decoder.generate(second, 60, Sampler(sampling))
            assert reply2.tokens == expected, (mode, sampling)
            assert reply2.stats.prompt_tokens == len(second) - len(snapshot.tokens)  # only the new turn was read
            if mode != "off" and sampling == GREEDY:  # drafts were rejected along the way, and rolled back
                assert 0 < reply2.stats.accepted < reply2.stats.drafted
    finally:
        decoder.close()


def test_the_state_in_memory_is_taken_up_too_and_a_restore_twice_is_the_same(demo: DemoModel) -> None:
    decoder = SpeculativeDecoder(_config(demo, "sidecar", "d2t"))
    try:
        reply1, expected = _never_leaving(decoder, demo, GREEDY)
        first, second = _turns(demo, reply1)
        decoder.reset()
        decoder.generate(first, 40, Sampler(GREEDY))
        snapshot = decoder.snapshot()
        for _ in range(2):  # the snapshot is not used up: restored, replied, restored again
            decoder.restore(snapshot)
            assert decoder.generate(second, 60, Sampler(GREEDY)).tokens == expected
    finally:
        decoder.close()


def _saved(demo: DemoModel, folder: Path, config: EngineConfig) -> tuple[list[int], list[int], list[int]]:
    """Turn one's state saved for "chat" in ``folder``; (reply1, turn two's prompt, turn two's reply read afresh)."""
    decoder = SpeculativeDecoder(config)
    try:
        reply1, expected = _never_leaving(decoder, demo, GREEDY)
        first, second = _turns(demo, reply1)
        decoder.reset()
        decoder.generate(first, 40, Sampler(GREEDY))
        assert StateCache(folder, CAP).save("chat", key_for(config, backend_manifest().id), decoder.snapshot()) is None
    finally:
        decoder.close()
    return reply1, second, expected


def test_an_edit_a_regenerate_and_another_model_file_each_drop_the_state(demo: DemoModel, tmp_path: Path) -> None:
    config = _config(demo, "sidecar", "d2t")
    key = key_for(config, backend_manifest().id)
    path = tmp_path / file_name("chat")
    reply1, second, _ = _saved(demo, tmp_path, config)
    first = table_prompt(demo)
    edited = [*second[:5], (second[5] + 1) % 100, *second[6:]]
    found = StateCache(tmp_path, CAP).lookup("chat", key, edited)
    assert found.snapshot is None and "changed" in found.reason and not path.exists()

    _saved(demo, tmp_path, config)
    regenerated = first  # the same question again: the kept reply is not part of the prompt
    assert StateCache(tmp_path, CAP).lookup("chat", key, regenerated).snapshot is None and not path.exists()

    _saved(demo, tmp_path, config)
    other = tmp_path / "other" / "target.gguf"  # the same model bytes, another file: another identity
    other.parent.mkdir()
    shutil.copy2(demo.target, other)
    other_key = key_for(_config(demo, "sidecar", "d2t", target=other), backend_manifest().id)
    found = StateCache(tmp_path, CAP).lookup("chat", other_key, second)
    assert found.snapshot is None and "another model" in found.reason and not path.exists()

    _saved(demo, tmp_path, config)
    off_key = key_for(_config(demo, "off"), backend_manifest().id)  # the same file, another drafting mode
    assert StateCache(tmp_path, CAP).lookup("chat", off_key, second).snapshot is None and not path.exists()
    assert reply1


DAMAGES = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "a flipped byte": lambda p: p.write_bytes(_flipped(p.read_bytes(), p.stat().st_size // 2)),
    "foreign magic": lambda p: p.write_bytes(b"GGUF" + p.read_bytes()[4:]),
    "a huge size claimed": lambda p: p.write_bytes(p.read_bytes()[:12] + b"\xff\xff\xff\x7f" + p.read_bytes()[16:]),
}


def _flipped(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x40]) + data[offset + 1:]


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_file_is_set_aside_and_the_turn_reads_the_chat_again(demo: DemoModel, tmp_path: Path,
                                                                      damage: str) -> None:
    config = _config(demo, "sidecar", "d2t")
    _, second, expected = _saved(demo, tmp_path, config)
    path = tmp_path / file_name("chat")
    DAMAGES[damage](path)
    found = StateCache(tmp_path, CAP).lookup("chat", key_for(config, backend_manifest().id), second)
    assert found.snapshot is None and "damaged" in found.reason
    assert path.with_name(path.name + ".bad").is_file() and not path.exists()
    decoder = SpeculativeDecoder(config)
    try:
        reply = decoder.generate(second, 60, Sampler(GREEDY))  # nothing taken up: the whole chat is read
        assert reply.tokens == expected and reply.stats.prompt_tokens == len(second)
    finally:
        decoder.close()


def test_a_state_llama_cpp_refuses_leaves_an_empty_decoder_that_reads_the_chat_again(demo: DemoModel) -> None:
    """A snapshot whose checks pass on our side but whose bytes are another context's (the draft head's state
    given to the target): llama.cpp refuses it in words, the decoder is left empty, the next turn reads it all."""
    decoder = SpeculativeDecoder(_config(demo, "sidecar", "d2t"))
    try:
        reply1, expected = _never_leaving(decoder, demo, GREEDY)
        first, second = _turns(demo, reply1)
        decoder.reset()
        decoder.generate(first, 40, Sampler(GREEDY))
        snapshot = decoder.snapshot()
        assert snapshot.draft is not None
        swapped = type(snapshot)(snapshot.tokens, snapshot.draft, snapshot.target, snapshot.n_embd,
                                 snapshot.pending_h, snapshot.held_tokens, snapshot.held_rows)
        with pytest.raises(EngineError, match="saved state"):
            decoder.restore(swapped)
        assert decoder.tokens == [] and decoder.pending_h is None
        short = type(snapshot)(snapshot.tokens[:-3], snapshot.target, snapshot.draft, snapshot.n_embd,
                               snapshot.pending_h, snapshot.held_tokens, snapshot.held_rows)
        with pytest.raises(EngineError, match="ends at position"):  # tokens that do not match the state's length
            decoder.restore(short)
        reply = decoder.generate(second, 60, Sampler(GREEDY))
        assert reply.tokens == expected and reply.stats.prompt_tokens == len(second)
    finally:
        decoder.close()


# ---------------------------------------------------------------------------------------------- the worker

SYSTEM = Message("system", "You are a demo.")
OPTIONS = ChatOptions(max_tokens=30)  # greedy


def _reply(client: EngineClient, messages: list[Message], conversation: str | None) -> dict[str, Any]:
    done = list(client.generate(messages, OPTIONS, conversation))[-1]
    assert done["kind"] == "done", done
    return done


def _next(messages: list[Message], done: dict[str, Any], question: str) -> list[Message]:
    return [*messages, Message("assistant", done["text"]), Message("user", question)]


@pytest.fixture(scope="module")
def worker_demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("states-worker-demo"), size="tiny", acceptance=0.9, seed=6)


def test_two_chats_alternating_in_the_worker_take_up_their_states(worker_demo: DemoModel, tmp_path: Path) -> None:
    config = EngineConfig(worker_demo.target, mode="sidecar", draft=worker_demo.sidecar_d2t, n_ctx=2048,
                          state_cache_dir=tmp_path / "states", state_cache_bytes=CAP)
    a1 = [SYSTEM, Message("user", "Hello there, who are you?")]
    b1 = [SYSTEM, Message("user", "What can you do for me today?")]
    with EngineClient() as client:  # chat A alone: the replies a kept state must reproduce
        assert client.load(config)["kind"] == "loaded"
        alone1 = _reply(client, a1, "A")
        a2 = _next(a1, alone1, "Tell me more about that.")
        alone2 = _reply(client, a2, "A")
        assert (alone1["state"], alone2["state"]) == ("reread", "kept")
        a3 = _next(a2, alone2, "And then?")
        alone3 = _reply(client, a3, "A")
    with EngineClient() as client:
        client.load(config)
        first = _reply(client, a1, "A")
        other = _reply(client, b1, "B")  # A is left: kept in memory and written to disk
        assert other["state"] == "reread" and other["restored_tokens"] == 0 and other["state_notices"] == []
        back = _reply(client, a2, "A")
        assert back["state"] == "restored" and back["state_source"] == "memory"
        # what the decoder had evaluated of A when it was left: A alone kept exactly as many for its second turn
        assert back["restored_tokens"] == back["state_tokens"] == alone2["state_tokens"]
        assert 0 <= back["restored_tokens"] - first["stats"]["prompt_tokens"] <= len(first["tokens"])
        assert back["stats"]["prompt_tokens"] == alone2["stats"]["prompt_tokens"]  # only the new turn was read
        assert back["tokens"] == alone2["tokens"]
        assert _reply(client, _next(b1, other, "Go on."), "B")["state"] == "restored"
    for chat in ("A", "B"):  # A written when it was left, B at the engine's shutdown
        assert (tmp_path / "states" / file_name(chat)).is_file()
    with EngineClient() as client:  # the app started again: the states come from disk
        client.load(config)
        again = _reply(client, a3, "A")
        assert again["state"] == "restored" and again["state_source"] == "disk"
        assert again["tokens"] == alone3["tokens"]
        regenerated = _reply(client, b1, "B")  # B's first question asked again: its kept turns are not in it
        assert regenerated["state"] == "reread" and "changed" in regenerated["state_note"]
        edited = [SYSTEM, Message("user", "Hello there, who were you?"), *a3[2:]]
        assert _reply(client, edited, "A")["state_note"].startswith("the chat changed")
        unnamed = _reply(client, a1, None)  # no chat named: nothing taken up
        assert unnamed["restored_tokens"] == 0 and unnamed["state_note"] == ""


def test_a_state_folder_that_cannot_be_written_says_so_once_and_the_chats_go_on(worker_demo: DemoModel,
                                                                                 tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way")
    config = EngineConfig(worker_demo.target, mode="off", n_ctx=2048, state_cache_dir=blocked / "states",
                          state_cache_bytes=CAP)
    a1 = [SYSTEM, Message("user", "Hello there, who are you?")]
    b1 = [SYSTEM, Message("user", "What can you do for me today?")]
    with EngineClient() as client:
        client.load(config)
        first = _reply(client, a1, "A")
        left = _reply(client, b1, "B")
        assert len(left["state_notices"]) == 1 and "could not be saved" in left["state_notices"][0]
        back = _reply(client, _next(a1, first, "Tell me more."), "A")  # kept in memory all the same
        assert back["state"] == "restored" and back["state_notices"] == []  # said once
        assert _reply(client, _next(b1, left, "Go on."), "B")["state"] == "restored"
