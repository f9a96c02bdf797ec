"""``bench long-chat``'s arithmetic and report, on made-up turn, reopen and state-file records (no engine)."""

from __future__ import annotations

import json

import pytest

from app.bench.long_chat import (
    TARGET_REOPEN_RATIO,
    LongChatBench,
    ReopenRecord,
    StateFile,
    TurnRecord,
    _window,
    median,
    ratio,
    user_message,
)
from app.engine.chat_template import Message


def _turn(turn: int, ttft: float, reread: float | None = None, *, read: int = 60, reused: int = 0,
          trimmed: int = 0, identical: bool = True, same_prompt: bool = True) -> TurnRecord:
    record = TurnRecord(turn, ttft, ttft * 0.9, read, reused, trimmed, read + reused + 64, 2048, "length",
                        "kept" if reused else "reread", 64)
    if reread is not None:
        record.reread_ttft_s = reread
        record.reread_prompt_tokens = read + reused + (0 if same_prompt else 1)
        record.reread_identical = identical
    return record


def _reopen(run: int, ttft: float, reread: float, *, tokens: int = 1600, identical: bool = True,
            source: str = "disk") -> ReopenRecord:
    return ReopenRecord(run, f"reopen-{run}", tokens, ttft, ttft * 0.5, "restored", source, 0.01, "", 30, reread,
                        tokens + 30, identical)


def _bench(**fields: object) -> LongChatBench:
    turns = [
        _turn(1, 0.5),
        _turn(2, 0.1, 1.0, reused=200),  # sampled: kept 0.1 against 1.0
        _turn(3, 0.2, reused=300),
        _turn(4, 0.3, 2.0, reused=400),  # sampled: 0.3 against 2.0
        _turn(5, 0.9, read=900, trimmed=2),
        _turn(6, 0.2, 3.0, reused=1000, trimmed=2, identical=False),  # sampled: 0.2 against 3.0
    ]
    reopens = [_reopen(1, 0.2, 2.0), _reopen(2, 0.4, 2.4, tokens=1550), _reopen(3, 0.3, 1.5)]
    files = [StateFile("long-chat", 2000, 40_000_000), StateFile("reopen-1", 1000, 25_000_000),
             StateFile("reopen-2", 1500, 33_000_000), StateFile("empty", 0, 1_000)]
    bench = LongChatBench("synthetic", "sidecar", 2048, 64, 2, 1500, turns, reopens, files, (1.5, 2.5))
    for name, value in fields.items():
        setattr(bench, name, value)
    return bench


def test_medians_and_ratios_of_the_sampled_turns_and_the_reopens() -> None:
    s = _bench().summary()
    assert s["sampled_turns"] == [2, 4, 6]
    assert s["kept_median_ttft_s"] == 0.2 and s["reread_median_ttft_s"] == 2.0
    assert s["kept_vs_reread"] == 10.0  # the ratio of the medians
    assert s["all_turns_median_ttft_s"] == 0.25  # median of 0.5, 0.1, 0.2, 0.3, 0.9, 0.2
    assert s["reopen_median_ttft_s"] == 0.3 and s["reopen_reread_median_ttft_s"] == 2.0
    assert s["reopen_vs_reread"] == pytest.approx(6.67) and s["reopen_target_met"]
    assert s["reopen_chat_tokens"] == 1550 and s["reopen_from_disk"] == 3 and s["reopen_identical"]
    assert (s["turns"], s["failed_turns"], s["turns_with_trim"], s["max_trimmed_turns"]) == (6, 0, 2, 2)
    assert s["trims"] == 1  # turn 5 left two turns out, turn 6 kept the same start
    assert s["turns_identical"] == 2 and s["same_prompts"] == 3
    assert s["max_context_used"] == 1000 + 60 + 64


def test_bytes_per_1000_tokens_is_the_median_over_the_files_with_tokens() -> None:
    files = _bench().state_files
    assert [f.bytes_per_1000 for f in files] == [20_000_000.0, 25_000_000.0, 22_000_000.0, 0.0]
    assert _bench().summary()["state_bytes_per_1000_tokens"] == 22_000_000  # the file without tokens is left out


def test_a_reopen_under_the_target_a_differing_reply_or_one_from_memory_is_said() -> None:
    slow = _bench(reopens=[_reopen(1, 1.0, 4.0), _reopen(2, 1.0, 4.9, identical=False, source="memory")])
    s = slow.summary()
    assert s["reopen_vs_reread"] == pytest.approx(4.45) and not s["reopen_target_met"]
    assert not s["reopen_identical"] and s["reopen_from_disk"] == 1
    text = slow.markdown()
    assert f"target >= {TARGET_REOPEN_RATIO:.0f}x: NOT met" in text and "identical to the re-read reply: no" in text


def test_failed_turns_are_counted_and_nothing_measured_gives_no_figures() -> None:
    failed = _turn(1, 0.2)
    failed.stop_reason = "context_full"
    s = _bench(turns=[failed], reopens=[], state_files=[]).summary()
    assert s["failed_turns"] == 1 and s["sampled_turns"] == []
    assert s["kept_vs_reread"] is None and s["reopen_vs_reread"] is None and not s["reopen_target_met"]
    assert s["state_bytes_per_1000_tokens"] is None and not s["reopen_identical"]
    assert "n/a" in _bench(turns=[failed], reopens=[], state_files=[]).markdown()


def test_trims_count_the_turns_that_left_out_more_than_the_turn_before() -> None:
    turns = [_turn(i, 0.1, trimmed=t) for i, t in enumerate([0, 0, 1, 1, 1, 3, 3, 4], start=1)]
    assert _bench(turns=turns).trims() == 3
    assert _bench(turns=[_turn(1, 0.1, trimmed=2)]).trims() == 1
    assert _bench(turns=[]).trims() == 0


def test_median_and_ratio_helpers() -> None:
    assert median([]) is None and median([3.0, 1.0, 2.0]) == 2.0
    assert ratio(2.0, 0.5) == 4.0 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_the_json_and_the_markdown_carry_every_turn_and_run() -> None:
    bench = _bench()
    data = json.loads(json.dumps(bench.to_dict()))
    assert data["overflow"] == "trim" and data["n_ctx"] == 2048 and data["load_average"] == [1.5, 2.5]
    assert len(data["turns"]) == 6 and len(data["reopens"]) == 3 and len(data["state_files"]) == 4
    assert data["turns"][1]["reread_ttft_s"] == 1.0 and data["turns"][0]["reread_ttft_s"] is None
    assert data["state_files"][0]["bytes_per_1000_tokens"] == 20_000_000
    text = bench.markdown()
    assert "| time to first token, turns 2, 4, 6 (medians) | 0.200 s | 2.000 s | **10.0x** |" in text
    assert "a 1,550-token chat reopened from disk" in text and "(target >= 5x: met)" in text
    assert "| 6 | kept | 60 | 1,000 | 2 | 1,124 | length | 0.200 | 3.000 (reply differs) |" in text
    assert "| 1 | 1,600 | restored | disk | 0.010 | 0.200 | 2.000 | **10.0x** | yes |" in text
    assert "21.0 MiB per 1,000 tokens" in text  # 22,000,000 bytes


def test_the_scripted_messages_are_40_to_60_words_and_vary() -> None:
    messages = [user_message(turn) for turn in range(1, 25)]
    assert all(40 <= len(m.split()) <= 60 for m in messages)
    assert len(set(messages)) == 24
    assert user_message(3) == user_message(3) and user_message(3, seed=1) != user_message(3)


def test_the_window_a_turn_kept_is_the_system_prompt_and_the_latest_turns() -> None:
    system = Message("system", "s")
    chat = [system, *(Message(role, f"{role}{i}") for i in range(3) for role in ("user", "assistant")),
            Message("user", "user3")]
    assert _window(chat, 0) == chat
    assert _window(chat, 2) == [system, Message("user", "user2"), Message("assistant", "assistant2"),
                                Message("user", "user3")]
