"""A hostile remote server cannot fill the memory, keep a stopped reply's connection open, or break the reply
with a chunk of the wrong shape or a timing that is not a number: a real chat server on 127.0.0.1 sends an
endless line, an endless ``/props``, an endless error body, wrong-shaped chunks, and Infinity/NaN timings.

The memory caps are measured, not guessed: ``remote test`` runs in a child process under ``RLIMIT_AS`` and its
peak resident set (``ru_maxrss``) is compared with the same command against a well-behaved server.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine.chat_template import Message
from app.engine.config import ChatOptions, SamplingParams
from app.machines.remote_client import RemoteClient
from app.machines.remote_servers import RemoteServer, add_server
from tests.helpers import peak_rss
from tests.helpers.chat_server import WORDS, ChatFault, ChatServer
from tests.helpers.file_keyring import child_keyring_env

MESSAGES = [Message("user", "Hello there")]
OPTIONS = ChatOptions(max_tokens=40, sampling=SamplingParams(temperature=0.0))
OVER_BASELINE_MIB = 100  # the stated cap: docs/security.md, "Remote servers"
AS_LIMIT_MIB = 1024  # today's unbounded reader hits this (MemoryError) instead of eating the machine
CONTAINERS = b"[" + b"{}," * ((2 << 20) // 3 - 8) + b"{}]"  # the line that parses to the most memory: ~55 MiB


def _reply(client: RemoteClient, options: ChatOptions = OPTIONS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = list(client.generate(MESSAGES, options))
    return events[:-1], events[-1]


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, float):
        yield value


# ----------------------------------------------------------------------------- Stop ends the reader


# a reader blocked inside a line, and one between lines; an endless flood is the line cap's test below (a flood
# reaches the 2 MiB cap in milliseconds, so a Stop after it would race the cap on a loaded machine)
@pytest.mark.parametrize("fault", [ChatFault(open_line=True), ChatFault(hold_after=2)],
                         ids=["open-line", "silent-server"])
def test_stop_closes_the_connection_at_once(fault: ChatFault) -> None:
    with ChatServer("llama-server") as server, RemoteClient(RemoteServer("box", server.url)) as client:
        server.queue_fault(fault)
        stream = client.generate(MESSAGES, OPTIONS)
        first = next(stream)
        assert first["kind"] == "token" and first["piece"] == WORDS[0]
        assert server.flooding.wait(30)
        client.cancel()
        done = list(stream)[-1]  # what arrived before the cancel, then the end
        assert done["kind"] == "done" and done["stop_reason"] == "cancelled"
        assert done["text"].startswith(WORDS[0])
        # the client is still open: only the cancel can have hung up on the server
        assert server.disconnected.wait(30), "the reader kept the connection open after Stop"


# ----------------------------------------------------------------------------- memory caps, in a child


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    return {**os.environ, **child_keyring_env(tmp_path)}


def _remote_test(server: ChatServer, env: dict[str, str]) -> peak_rss.Measured:
    add_server("box", server.url)
    return peak_rss.run(["remote", "test", "box"], env=env, as_limit_mib=AS_LIMIT_MIB, timeout=300)


@pytest.fixture
def baseline_mib(cli_env: dict[str, str]) -> float:
    with ChatServer("llama-server") as server:
        measured = _remote_test(server, cli_env)
    assert measured.returncode == 0, measured.stderr
    return measured.peak_mib


@pytest.mark.parametrize(("setup", "words"), [
    (lambda s: s.queue_fault(ChatFault(endless_line=True)), "box's reply has a line longer than 2 MiB"),
    (lambda s: s.queue_fault(ChatFault(status=500, endless_body=True)),
     'box answered HTTP 500: {"error": {"message": "no no no'),
    (lambda s: setattr(s, "endless_props", True), "box's answer to /props is larger than 2 MiB"),
    (lambda s: s.queue_fault(ChatFault(chunks=[{"content": "a", "tokens": [1], "stop": False}, CONTAINERS])),
     "box sent a reply chunk that is not what a llama-server sends: a chunk is a list, not an object"),
], ids=["endless-line", "endless-error-body", "endless-props", "line-of-2-MiB-of-objects"])
def test_an_endless_answer_stays_under_the_memory_cap_and_ends_with_a_message(
        setup: Any, words: str, cli_env: dict[str, str], baseline_mib: float) -> None:
    with ChatServer("llama-server") as server:
        setup(server)
        measured = _remote_test(server, cli_env)
    assert "Traceback" not in measured.stderr and "MemoryError" not in measured.stderr, measured.stderr[-2000:]
    assert measured.returncode == 1
    assert f"error: {words}" in measured.stderr
    assert "what to do:" in measured.stderr
    assert 0 < measured.peak_mib < baseline_mib + OVER_BASELINE_MIB, (measured.peak_mib, baseline_mib)


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(("kind", "chunk", "words"), [
    ("openai", {"choices": "abc"}, "'choices' is a string, not a list"),
    ("openai", {"choices": ["abc"]}, "a choice is a string, not an object"),
    ("openai", {"choices": [{"delta": "abc"}]}, "'delta' is a string, not an object"),
    ("openai", {"choices": [{"delta": {"content": 5}}]}, "'content' is a number, not a string"),
    ("openai", {"choices": [], "usage": {"prompt_tokens": "many"}}, "'prompt_tokens' is a string, not a count"),
    ("openai", [1, 2], "a chunk is a list, not an object"),
    ("llama-server", {"content": "x", "tokens": "abc"}, "'tokens' is a string, not a list of token ids"),
    ("llama-server", {"content": "x", "tokens": [1.5]}, "'tokens' holds something other than token ids"),
    ("llama-server", {"content": ["x"]}, "'content' is a list, not a string"),
    ("llama-server", b"[" * 200_000 + b"]" * 200_000, "a chunk is not JSON"),
], ids=["choices-str", "choice-str", "delta-str", "content-int", "usage-str", "chunk-list", "tokens-str",
        "tokens-float", "content-list", "deep-json"])
def test_a_wrong_shaped_chunk_is_an_error_that_names_the_server(kind: str, chunk: Any, words: str) -> None:
    first = {"content": WORDS[0], "tokens": [100], "stop": False} if kind == "llama-server" else \
        {"choices": [{"index": 0, "delta": {"content": WORDS[0]}}]}
    with ChatServer(kind) as server, RemoteClient(RemoteServer("box", server.url)) as client:  # type: ignore[arg-type]
        server.queue_fault(ChatFault(chunks=[first, chunk if isinstance(chunk, bytes) else json.dumps(chunk).encode()]))
        tokens, failed = _reply(client)
    assert [t["piece"] for t in tokens] == [WORDS[0]]
    assert failed["kind"] == "error" and failed["error"] == "RemoteError", failed
    assert failed["message"].startswith("box sent a reply chunk that is not what a "), failed["message"]
    assert words in failed["message"]
    assert failed["text"] == WORDS[0] and failed["partial"]  # what came is kept
    assert "object has no attribute" not in failed["message"]


def test_a_deeply_nested_props_answer_is_a_message() -> None:
    deep = b'{"build_info": "x", "chat_template": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with ChatServer("llama-server", props_body=deep) as server, \
            RemoteClient(RemoteServer("box", server.url)) as client:
        loaded = client.load()
    assert loaded["kind"] == "error"
    assert loaded["message"] == "box's answer to /props is not JSON (nested deeper than any answer should be)."


# ----------------------------------------------------------------------------- timings that are not numbers


FINAL = (b'{"content": "", "tokens": [], "stop": true, "stop_type": "eos", "tokens_evaluated": NaN, '
         b'"timings": {"prompt_n": 7, "prompt_per_second": Infinity, "predicted_n": NaN, '
         b'"predicted_per_second": Infinity, "predicted_ms": -Infinity, "draft_n": 10, '
         b'"draft_n_accepted": 1e999}}')


def test_timings_that_are_not_finite_are_dropped_never_shown(cli_env: dict[str, str]) -> None:
    chunks: list[Any] = [{"content": w, "tokens": [100 + i], "stop": False} for i, w in enumerate(WORDS)] + [FINAL]
    with ChatServer("llama-server") as server, RemoteClient(RemoteServer("box", server.url)) as client:
        server.queue_fault(ChatFault(chunks=chunks))
        tokens, done = _reply(client)
        server.queue_fault(ChatFault(chunks=chunks))
        measured = _remote_test(server, cli_env)
    assert done["kind"] == "done" and done["text"] == "".join(WORDS), done
    stats = done["stats"]
    for event in [*tokens, done]:
        assert all(math.isfinite(x) for x in _numbers(event["stats"])), event["stats"]
    assert stats["acceptance"] is None and stats["drafted"] == 0  # accepted was not a number: no acceptance
    assert stats["generated"] == len(WORDS) and stats["prompt_tokens"] == 7
    assert stats["decode_tps"] > 0 and stats["decode_seconds"] >= 0
    assert stats["server_timings"] == {"prompt_n": 7, "draft_n": 10}
    json.dumps(stats, allow_nan=False)  # what the HUD and the history get is plain JSON
    assert measured.returncode == 0, measured.stderr
    assert "inf" not in measured.stdout.lower() and "nan" not in measured.stdout.lower(), measured.stdout
    assert "acceptance - (the server reports no drafts)" in measured.stdout
