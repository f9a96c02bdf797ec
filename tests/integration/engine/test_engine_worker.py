"""The engine in its own process: streamed events, cancel, crash survival, refused pairs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.engine.session import ChatSession
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

HELLO = [Message("system", "You are a demo."), Message("user", "Hello there, who are you?")]
OPTIONS = ChatOptions(max_tokens=40, sampling=SamplingParams(temperature=0.8, seed=3))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("worker-demo"), size="tiny", acceptance=0.9, seed=6)


def _config(demo: DemoModel, draft: Path | None = None) -> EngineConfig:
    return EngineConfig(demo.target, mode="sidecar" if draft else "off", draft=draft, draft_depth=3, n_ctx=1024)


def test_worker_streams_the_same_reply_as_the_engine_in_process(demo: DemoModel) -> None:
    session = ChatSession(_config(demo))
    try:
        expected, expected_text = session.reply(HELLO, OPTIONS)
    finally:
        session.close()
    with EngineClient() as client:
        assert client.load(_config(demo, demo.sidecar_d2t))["kind"] == "loaded"
        events = list(client.generate(HELLO, OPTIONS))
    tokens = [e for e in events if e["kind"] == "token"]
    done = events[-1]
    assert done["kind"] == "done"
    assert [e["token"] for e in tokens] == done["tokens"] == expected.tokens
    assert done["text"] == expected_text and "".join(e["piece"] for e in tokens).strip() == expected_text.strip()
    assert {e["provenance"] for e in tokens} == {"draft", "target"}
    assert tokens[-1]["stats"]["generated"] == len(tokens)
    assert done["stats"]["acceptance"] > 0.7


def test_the_end_of_turn_token_ends_the_stream_without_showing_itself(demo: DemoModel) -> None:
    with EngineClient() as client:
        client.load(_config(demo, demo.sidecar_d2t))
        events = list(client.generate(HELLO, ChatOptions(max_tokens=400)))
    tokens, done = [e for e in events if e["kind"] == "token"], events[-1]
    assert done["stop_reason"] == "eos"
    assert tokens[-1]["piece"] == "" and not any("<|im_end|>" in e["piece"] for e in tokens)
    assert "".join(e["piece"] for e in tokens) == done["text"]


def test_cancel_mid_reply_keeps_the_partial_reply(demo: DemoModel) -> None:
    with EngineClient() as client:
        client.load(_config(demo, demo.sidecar_d2t))
        seen = 0
        events = []
        for event in client.generate(HELLO, ChatOptions(max_tokens=400)):
            events.append(event)
            seen += event["kind"] == "token"
            if seen == 10:
                client.cancel()
        done = events[-1]
        assert done["kind"] == "done" and done["stop_reason"] == "cancelled"
        assert 10 <= len(done["tokens"]) < 400
        again = list(client.generate(HELLO, OPTIONS))[-1]  # the worker is still fine
        assert again["kind"] == "done"


def test_reset_empties_the_engine_so_the_next_reply_reads_its_whole_prompt(demo: DemoModel) -> None:
    greedy = ChatOptions(max_tokens=20)
    with EngineClient() as client:
        client.load(_config(demo, demo.sidecar_d2t))
        first = list(client.generate(HELLO, greedy))[-1]
        follow = [*HELLO, Message("assistant", first["text"]), Message("user", "Go on, please.")]
        kept = list(client.generate(follow, greedy))[-1]
        assert kept["stats"]["reused_tokens"] > 0  # the second turn extends what the engine holds
        assert client.reset()["kind"] == "reset_done"
        again = list(client.generate(follow, greedy))[-1]
        assert again["stats"]["reused_tokens"] == 0  # nothing held any more: the whole prompt is read
        assert again["stats"]["prompt_tokens"] == kept["stats"]["prompt_tokens"] + kept["stats"]["reused_tokens"]
        assert again["tokens"] == kept["tokens"]


def test_a_killed_worker_becomes_an_error_event_and_restarts(demo: DemoModel) -> None:
    with EngineClient() as client:
        client.load(_config(demo, demo.sidecar_d2t))
        kept: list[int] = []
        last: dict[str, object] = {}
        for event in client.generate(HELLO, ChatOptions(max_tokens=100_000)):
            if event["kind"] == "token":
                kept.append(event["token"])
                if len(kept) == 8:
                    assert client.pid is not None
                    os.kill(client.pid, signal.SIGKILL)
            last = event
        assert last["kind"] == "error" and last["error"] == "WorkerCrashed"
        assert "SIGKILL" in str(last["message"]) and "kept" in str(last["advice"])
        assert len(kept) >= 8
        assert isinstance(last["log_tail"], list) and last["log_tail"]  # llama.cpp's own lines
        assert client.restart() is not None
        assert list(client.generate(HELLO, OPTIONS))[-1]["kind"] == "done"


def test_refused_pairs_are_error_events_and_the_worker_lives_on(demo: DemoModel, unpatched_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with EngineClient() as client:
        wrong = client.load(_config(demo, demo.target))
        assert wrong["kind"] == "error" and wrong["error"] == "SidecarError"
        assert client.load(_config(demo))["kind"] == "loaded"
    monkeypatch.setenv("FASTMTP_BACKEND_DIR", str(unpatched_dir))
    with EngineClient() as client:
        refused = client.load(_config(demo, demo.sidecar_d2t))
        assert refused["kind"] == "error" and refused["error"] == "UnpatchedBackendError"
        assert "backend build" in str(refused["advice"])
        assert client.load(_config(demo, demo.sidecar_full))["kind"] == "loaded"  # full sidecars still work
