"""``bench long-chat``: a long scripted chat through the engine worker (issue 34), and a chat reopened from disk.

Two phases, each through the real worker process (``EngineClient``, the window's path) with a second worker beside
it for the baseline:

- **turns**: one chat of ``turns`` scripted user messages (40-60 words each, greedy replies of ``max_tokens``) in a
  context of ``n_ctx`` tokens under the default overflow policy ("trim"), named so the worker keeps its state
  between turns. Every turn is recorded (time to first token, prompt tokens read and reused, turns trimmed, context
  used, stop reason, state); a turn that fails ends the benchmark. Every ``reread_every`` turns the second worker,
  emptied first (``EngineClient.reset``), reads the same prompt from scratch (the messages that turn kept), so the
  kept state's time to first token and the re-read's sit side by side.
- **reopen**: ``runs`` chats of at least ``reopen_tokens`` tokens are built and left (the worker goes on to another
  chat), so their states are written to the state folder. Then, run by run, the worker process is restarted (its
  memory copies are gone, only the files are left), warmed with a reply outside any chat, and each chat's next turn
  is sent: its state "restored" from "disk", against the same turn read from scratch by the second worker, the two
  in alternating order. Greedy: the two replies must be the same tokens.

Times to first token are the caller's: from the request to the first ``token`` event, so a restore's reading of the
state file and the worker's lookup are in them (the engine's own ``time_to_first_token`` starts after those and is
recorded beside). The state files' sizes give the bytes on disk per 1,000 tokens.

The arithmetic (medians, ratios, bytes per 1,000 tokens) and the report are plain functions of the records, so they
are tested without an engine.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from app.bench.report import round_or_none
from app.core.errors import EngineError
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, SamplingParams

CONVERSATION = "long-chat"
REOPEN_PREFIX = "reopen-"
SYSTEM = Message("system", "You are a helpful assistant. Answer in a few sentences.")
TARGET_REOPEN_RATIO = 5.0  # issue 34: a reopened chat reaches its first token at least 5x sooner than a re-read
STATE_CACHE_BYTES = 64 * 1024 ** 3  # the benchmark's own temporary folder: nothing evicted while it runs
FAILED_STOPS = ("context_full", "cancelled")  # a reply that ended so did not get its turn

# the scripted user messages are drawn from these: varied subjects, 9-16 words a sentence
SENTENCES = (
    "I have been thinking about moving to a smaller town near the coast next spring.",
    "My sister says the rent there is lower, but the winters are long and grey.",
    "Could you explain how a heat pump keeps a house warm when the air outside is freezing?",
    "Yesterday I tried baking sourdough bread for the first time and it came out flat.",
    "The starter had bubbles, so I suspect the dough did not rest long enough before baking.",
    "We are planning a cycling trip through the hills with two children and a small trailer.",
    "What should we pack for four days if the forecast shows rain on at least two of them?",
    "At work our team is replacing an old billing system written fifteen years ago.",
    "Nobody remembers why half of the tables exist, and the documentation stops in the middle.",
    "I would like a plan for testing the new system before we switch the customers over.",
    "My grandfather kept bees for decades and left me his notebooks full of careful drawings.",
    "Some pages describe swarms in May and the way he calmed them with smoke and patience.",
    "How does a beehive decide where to move when the colony grows too large for its home?",
    "The library in our neighbourhood is closing on Sundays because of budget cuts.",
    "A group of parents wants to run a reading hour there with volunteers instead.",
    "Which questions should we ask the council before we promise anything to the families?",
    "I started learning the cello at forty and my fingers still hurt after every practice.",
    "My teacher suggests scales every morning, but I would rather play simple songs.",
    "Is it better to practise for twenty minutes each day or for two hours at the weekend?",
    "Our kitchen tap drips all night and the plumber cannot come until next month.",
    "I found a video about replacing the washer, but the parts in it look different from mine.",
    "The river behind the school floods almost every autumn after heavy storms in the mountains.",
    "Students measured the water level for three years and drew charts for the town meeting.",
    "What could the town build so that the fields upstream hold more of the water?",
    "A friend lent me a novel about a lighthouse keeper who writes letters to nobody.",
    "I liked the quiet chapters about the sea, but the ending confused me completely.",
    "Why do some writers leave the last scene open instead of telling us what happened?",
    "Our football club needs a new way to share the training schedule with forty players.",
    "Messages in the group chat get lost, and the paper list at the field is always wet.",
    "The old apple tree in the garden gave hundreds of small sour apples this year.",
    "We made juice and cider, yet there are still boxes of fruit in the shed.",
    "How long do apples keep in a cool cellar, and should they touch each other?",
    "My laptop fan runs loudly whenever I open more than a few tabs in the browser.",
    "I cleaned the dust out last week, but the noise came back after two days.",
    "A neighbour asked me to look after her cat while she visits her son abroad.",
    "The cat hides under the bed all day and only eats when the house is dark.",
    "For a school project my son wants to build a small weather station on the balcony.",
    "He asks which sensors are cheap and still accurate enough to compare with the airport.",
    "I keep forgetting the names of people I meet at conferences within minutes.",
    "Are there simple habits that help remember a name after hearing it only once?",
)
FOLLOW_UPS = (
    "Thanks. Could you sum up the main point of what you just said in a few words?",
    "Good. What would you do first if you were in my place tomorrow morning?",
    "I see. Is there anything I should avoid doing while I try this out?",
    "That helps. Which part of this is the most common mistake people make?",
    "Fine. How would you explain the same idea to a child of ten?",
)


def user_message(turn: int, seed: int = 0) -> str:
    """The scripted user message of ``turn``: sentences drawn (without repeats) until 40-60 words."""
    rng = random.Random(1000 * seed + turn)
    order = rng.sample(range(len(SENTENCES)), len(SENTENCES))
    words: list[str] = []
    chosen: list[str] = []
    for index in order:
        sentence = SENTENCES[index]
        if len(words) + len(sentence.split()) > 60:
            continue
        chosen.append(sentence)
        words += sentence.split()
        if len(words) >= 40:
            break
    return " ".join(chosen)


# ---------------------------------------------------------------------------------------------- the records


@dataclass
class TurnRecord:
    """One turn of the long chat, and (every few turns) the same prompt read from scratch by the second worker."""

    turn: int
    ttft_s: float  # the caller's: request -> first token event
    engine_ttft_s: float | None  # the engine's time_to_first_token (after the state lookup and restore)
    prompt_tokens: int  # tokens read for this turn
    reused_tokens: int  # tokens the kept state spared
    trimmed_turns: int
    context_used: int
    context_size: int
    stop_reason: str
    state: str
    reply_tokens: int
    reread_ttft_s: float | None = None
    reread_prompt_tokens: int | None = None
    reread_identical: bool | None = None

    @property
    def whole_prompt(self) -> int:
        return self.prompt_tokens + self.reused_tokens

    @property
    def failed(self) -> bool:
        return self.stop_reason in FAILED_STOPS

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("ttft_s", "engine_ttft_s", "reread_ttft_s"):
            if data[key] is not None:
                data[key] = round(data[key], 4)
        return data


@dataclass
class ReopenRecord:
    """One reopen: a chat's next turn after a worker restart (its state from disk), beside the same turn re-read."""

    run: int
    conversation: str
    chat_tokens: int  # the tokens of the chat's state taken up (restored_tokens)
    ttft_s: float
    engine_ttft_s: float | None
    state: str
    state_source: str
    state_seconds: float | None
    state_note: str
    prompt_tokens: int  # read after the restore (the new message)
    reread_ttft_s: float
    reread_prompt_tokens: int
    identical: bool
    first: str = "restored"  # which of the two went first in this run

    @property
    def from_disk(self) -> bool:
        return self.state == "restored" and self.state_source == "disk"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("ttft_s", "engine_ttft_s", "state_seconds", "reread_ttft_s"):
            if data[key] is not None:
                data[key] = round(data[key], 4)
        return data


@dataclass(frozen=True)
class StateFile:
    """A state file the benchmark's chats left: its chat, the tokens in it and its bytes."""

    conversation: str
    tokens: int
    bytes: int

    @property
    def bytes_per_1000(self) -> float:
        return self.bytes / self.tokens * 1000.0 if self.tokens else 0.0


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(slow: float | None, fast: float | None) -> float | None:
    """How many times sooner ``fast`` is than ``slow`` (None without both)."""
    if slow is None or fast is None or fast <= 0:
        return None
    return slow / fast


@dataclass
class LongChatBench:
    model: str
    mode: str
    n_ctx: int
    max_tokens: int
    reread_every: int
    reopen_tokens: int
    turns: list[TurnRecord]
    reopens: list[ReopenRecord] = field(default_factory=list)
    state_files: list[StateFile] = field(default_factory=list)
    load_average: tuple[float | None, float | None] = (None, None)  # at the start and the end

    # -------------------------------------------------------------------------- the arithmetic

    def sampled(self) -> list[TurnRecord]:
        """The turns the second worker also read from scratch."""
        return [t for t in self.turns if t.reread_ttft_s is not None]

    def trims(self) -> int:
        """Turns that left out more earlier turns than the turn before (each reads the turns it keeps again)."""
        before = [0, *(t.trimmed_turns for t in self.turns)]
        return sum(t.trimmed_turns > left_out for t, left_out in zip(self.turns, before, strict=False))

    def summary(self) -> dict[str, Any]:
        sampled = self.sampled()
        kept = median([t.ttft_s for t in sampled])
        reread = median([t.reread_ttft_s for t in sampled if t.reread_ttft_s is not None])
        restored = median([r.ttft_s for r in self.reopens])
        reopen_reread = median([r.reread_ttft_s for r in self.reopens])
        reopen_ratio = ratio(reopen_reread, restored)
        per_1000 = median([f.bytes_per_1000 for f in self.state_files if f.tokens])
        return {
            "turns": len(self.turns),
            "failed_turns": sum(t.failed for t in self.turns),
            "trims": self.trims(),
            "turns_with_trim": sum(t.trimmed_turns > 0 for t in self.turns),
            "max_trimmed_turns": max((t.trimmed_turns for t in self.turns), default=0),
            "max_context_used": max((t.context_used for t in self.turns), default=0),
            "all_turns_median_ttft_s": round_or_none(median([t.ttft_s for t in self.turns]), 4),
            "sampled_turns": [t.turn for t in sampled],
            "kept_median_ttft_s": round_or_none(kept, 4),
            "reread_median_ttft_s": round_or_none(reread, 4),
            "kept_vs_reread": round_or_none(ratio(reread, kept), 2),
            "turns_identical": sum(bool(t.reread_identical) for t in sampled),
            "same_prompts": sum(t.reread_prompt_tokens == t.whole_prompt for t in sampled),
            "reopen_runs": len(self.reopens),
            "reopen_chat_tokens": min((r.chat_tokens for r in self.reopens), default=0),
            "reopen_from_disk": sum(r.from_disk for r in self.reopens),
            "reopen_median_ttft_s": round_or_none(restored, 4),
            "reopen_reread_median_ttft_s": round_or_none(reopen_reread, 4),
            "reopen_vs_reread": round_or_none(reopen_ratio, 2),
            "reopen_target_met": reopen_ratio is not None and reopen_ratio >= TARGET_REOPEN_RATIO,
            "reopen_identical": bool(self.reopens) and all(r.identical for r in self.reopens),
            "state_bytes_per_1000_tokens": None if per_1000 is None else round(per_1000),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "mode": self.mode, "n_ctx": self.n_ctx, "overflow": "trim",
                "max_tokens": self.max_tokens, "reread_every": self.reread_every,
                "reopen_tokens": self.reopen_tokens,
                "load_average": [None if v is None else round(v, 2) for v in self.load_average],
                "summary": self.summary(), "turns": [t.to_dict() for t in self.turns],
                "reopens": [r.to_dict() for r in self.reopens],
                "state_files": [{**asdict(f), "bytes_per_1000_tokens": round(f.bytes_per_1000)}
                                for f in self.state_files]}

    # -------------------------------------------------------------------------- the report

    def markdown(self) -> str:
        s = self.summary()
        loads = " to ".join(f"{v:.1f}" for v in self.load_average if v is not None) or "n/a"
        drafting = "drafting off" if self.mode == "off" else "the d2t sidecar"
        lines = [f"A long chat through the engine worker ({self.model}, {drafting}; context {self.n_ctx:,}, overflow "
                 f"trim; {s['turns']} turns of {self.max_tokens} tokens, greedy; load average {loads})", "",
                 "| measure | kept / restored state | re-read from scratch | ratio |", "|---|---|---|---|",
                 f"| time to first token, turns {_turn_list(s['sampled_turns'])} (medians) | "
                 f"{_s(s['kept_median_ttft_s'])} | {_s(s['reread_median_ttft_s'])} | {_x(s['kept_vs_reread'])} |",
                 f"| time to first token, a {s['reopen_chat_tokens']:,}-token chat reopened from disk after a restart "
                 f"(medians of {s['reopen_runs']}) | {_s(s['reopen_median_ttft_s'])} | "
                 f"{_s(s['reopen_reread_median_ttft_s'])} | {_x(s['reopen_vs_reread'])} "
                 f"(target >= {TARGET_REOPEN_RATIO:.0f}x: {'met' if s['reopen_target_met'] else 'NOT met'}) |",
                 "",
                 f"- Turns: {s['turns'] - s['failed_turns']} of {s['turns']} answered, {s['failed_turns']} failed; "
                 f"{s['trims']} trims (turns that left out more of the oldest turns and read the rest again); "
                 f"{s['turns_with_trim']} turns kept fewer than all earlier turns (up to {s['max_trimmed_turns']} "
                 f"left out); context used up to {s['max_context_used']:,} of {self.n_ctx:,}; median time to first "
                 f"token over all turns {_s(s['all_turns_median_ttft_s'])}.",
                 f"- Same prompt on both sides: {s['same_prompts']} of {len(s['sampled_turns'])} sampled turns; "
                 f"identical replies: {s['turns_identical']} of {len(s['sampled_turns'])}.",
                 f"- Reopened: {s['reopen_from_disk']} of {s['reopen_runs']} restored from disk; identical to the "
                 f"re-read reply: {'yes' if s['reopen_identical'] else 'no'}.",
                 f"- State on disk: {_mib(s['state_bytes_per_1000_tokens'])} per 1,000 tokens (median of "
                 f"{len(self.state_files)} files: " + ", ".join(
                     f"{f.tokens:,} tokens {_mib(f.bytes)}" for f in self.state_files) + ").",
                 "", "| turn | state | read | reused | trimmed turns | context used | stop | TTFT s | "
                 "re-read TTFT s |", "|---:|---|---:|---:|---:|---:|---|---:|---:|"]
        for t in self.turns:
            again = "" if t.reread_ttft_s is None else f"{t.reread_ttft_s:.3f}" + (
                "" if t.reread_identical else " (reply differs)")
            lines.append(f"| {t.turn} | {t.state} | {t.prompt_tokens:,} | {t.reused_tokens:,} | {t.trimmed_turns} | "
                         f"{t.context_used:,} | {t.stop_reason} | {t.ttft_s:.3f} | {again} |")
        lines += ["", "| reopen run | chat tokens | state | from | restore s | TTFT s | re-read TTFT s | ratio | "
                  "identical |", "|---:|---:|---|---|---:|---:|---:|---:|---|"]
        for r in self.reopens:
            restore = "" if r.state_seconds is None else f"{r.state_seconds:.3f}"
            lines.append(f"| {r.run} | {r.chat_tokens:,} | {r.state} | {r.state_source or '-'} | {restore} | "
                         f"{r.ttft_s:.3f} | {r.reread_ttft_s:.3f} | "
                         f"{_x(round_or_none(ratio(r.reread_ttft_s, r.ttft_s), 2))}"
                         f" | {'yes' if r.identical else 'no'} |")
        return "\n".join(lines)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"**{value:.1f}x**"


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024 ** 2:.1f} MiB"


def _turn_list(turns: list[int]) -> str:
    return ", ".join(str(t) for t in turns) if turns else "(none)"


# ---------------------------------------------------------------------------------------------- the run


def _reply(client: Any, messages: list[Message], options: ChatOptions, conversation: str | None,
           what: str) -> tuple[float, dict[str, Any]]:
    """One reply: the caller's time to the first token event, and the ``done`` event (an error raises)."""
    started = time.perf_counter()
    first: float | None = None
    last: dict[str, Any] = {}
    for event in client.generate(messages, options, conversation):
        if first is None and event["kind"] == "token":
            first = time.perf_counter() - started
        last = event
    if last.get("kind") != "done":
        raise EngineError(f"{what} failed: {last.get('message') or last or 'no answer'}",
                          str(last.get("advice") or "See the engine log."))
    if last.get("stop_reason") in FAILED_STOPS:
        raise EngineError(f"{what} failed: the reply stopped with {last['stop_reason']!r}.")
    return (first if first is not None else time.perf_counter() - started), last


def _loaded(client: Any, config: EngineConfig) -> None:
    answer = client.load(config)
    if answer.get("kind") != "loaded":
        raise EngineError(f"the engine did not load: {answer.get('message') or answer}")


def _engine_ttft(done: dict[str, Any]) -> float | None:
    value = (done.get("stats") or {}).get("time_to_first_token")
    return None if value is None else float(value)


def _window(messages: list[Message], trimmed_turns: int) -> list[Message]:
    """The messages a turn kept: the system prompt and the turns from the first kept on (a user message and the reply
    after it each; the chat alternates)."""
    return [messages[0], *messages[1 + 2 * trimmed_turns:]]


def _state_files(folder: Path, chats: set[str], into: list[StateFile]) -> None:
    """The benchmark's chats' state files in ``folder`` now, each (chat, tokens) once."""
    from app.engine.state_cache import entries

    seen = {(f.conversation, f.tokens) for f in into}
    for entry in entries(folder):
        chat = entry.get("conversation")
        if entry["damaged"] or chat not in chats or (chat, entry["tokens"]) in seen:
            continue
        into.append(StateFile(str(chat), int(entry["tokens"]), int(entry["bytes"])))
        seen.add((str(chat), int(entry["tokens"])))


def _engine(stack: contextlib.ExitStack, config: EngineConfig, log_name: str | None = None) -> Any:
    from app.engine.client import EngineClient

    client = EngineClient()
    if log_name is not None:  # the second worker logs apart from the first (both are this process)
        client.log_path = client.log_path.with_name(log_name)
        client.previous_log_path = client.log_path.with_name(log_name + ".1")
    stack.callback(client.close)
    _loaded(client, config)
    return client


def run(config: EngineConfig, name: str, *, turns: int = 24, max_tokens: int = 64, reread_every: int = 4,
        reopen_tokens: int = 1500, runs: int = 3, log: Callable[[str], None] | None = None) -> LongChatBench:
    """Both phases on ``config`` (its state folder and cap are the benchmark's own: a temporary folder)."""
    from app.engine.verdict import load_average

    say = log or (lambda _line: None)
    options = ChatOptions(max_tokens=max_tokens, sampling=SamplingParams(), overflow="trim")
    result = LongChatBench(name, config.mode, config.n_ctx, max_tokens, reread_every, reopen_tokens, [])
    load_start = load_average()
    with tempfile.TemporaryDirectory(prefix="fastmtp-bench-long-chat-") as scratch, contextlib.ExitStack() as stack:
        folder = Path(scratch)
        kept_config = replace(config, state_cache_dir=folder, state_cache_bytes=STATE_CACHE_BYTES)
        say(f"loading {config.target.name} in two engine workers (the chat's, and one that reads from scratch) ...")
        chat = _engine(stack, kept_config)
        scratch_engine = _engine(stack, replace(config, state_cache_dir=None), "engine-bench-reread.log")
        rereads = iter(range(1_000_000))

        def from_scratch(messages: list[Message]) -> tuple[float, dict[str, Any]]:
            if scratch_engine.reset().get("kind") != "reset_done":  # nothing of the previous measurement is reused
                raise EngineError("the engine that reads from scratch could not be emptied.")
            return _reply(scratch_engine, messages, options, f"reread-{next(rereads)}", "a re-read from scratch")

        result.turns = list(_turns(chat, from_scratch, options, turns, reread_every, say))
        chats = {CONVERSATION, *(f"{REOPEN_PREFIX}{r + 1}" for r in range(runs))}
        result.reopens = list(_reopens(stack, chat, kept_config, from_scratch, options, reopen_tokens, runs, say,
                                       lambda: _state_files(folder, chats, result.state_files)))
        _state_files(folder, chats, result.state_files)
    result.load_average = (load_start, load_average())
    return result


def _turns(chat: Any, from_scratch: Callable[[list[Message]], tuple[float, dict[str, Any]]], options: ChatOptions,
           turns: int, reread_every: int, say: Callable[[str], None]) -> Iterator[TurnRecord]:
    history: list[Message] = [SYSTEM]
    for turn in range(1, turns + 1):
        messages = [*history, Message("user", user_message(turn))]
        ttft, done = _reply(chat, messages, options, CONVERSATION, f"turn {turn} of the long chat")
        stats = done.get("stats") or {}
        record = TurnRecord(turn, ttft, _engine_ttft(done), int(stats.get("prompt_tokens", 0)),
                            int(stats.get("reused_tokens", 0)), int(stats.get("trimmed_turns", 0)),
                            int(stats.get("context_used", 0)), int(stats.get("context_size", 0)),
                            str(done.get("stop_reason", "")), str(done.get("state", "")), len(done.get("tokens", [])))
        if turn % reread_every == 0:
            again_ttft, again = from_scratch(_window(messages, record.trimmed_turns))
            record.reread_ttft_s = again_ttft
            record.reread_prompt_tokens = int((again.get("stats") or {}).get("prompt_tokens", 0))
            record.reread_identical = again.get("tokens") == done.get("tokens")
        say(f"turn {turn}/{turns}: {record.state}, read {record.prompt_tokens} reused {record.reused_tokens}, "
            f"trimmed {record.trimmed_turns}, context {record.context_used}/{record.context_size}, "
            f"TTFT {ttft:.3f} s" + ("" if record.reread_ttft_s is None else
                                    f" (re-read from scratch {record.reread_ttft_s:.3f} s)"))
        yield record
        history = [*messages, Message("assistant", str(done.get("text", "")))]


def _reopens(stack: contextlib.ExitStack, chat: Any, config: EngineConfig,
             from_scratch: Callable[[list[Message]], tuple[float, dict[str, Any]]], options: ChatOptions,
             reopen_tokens: int, runs: int, say: Callable[[str], None],
             sample_files: Callable[[], None]) -> Iterator[ReopenRecord]:
    chats: list[tuple[str, list[Message]]] = []
    for run in range(1, runs + 1):  # each run reopens a chat of its own, built (and left) before the restarts
        conversation = f"{REOPEN_PREFIX}{run}"
        history, used, turn = [SYSTEM], 0, 0
        while used < reopen_tokens:
            turn += 1
            messages = [*history, Message("user", user_message(turn, seed=run))]
            _ttft, done = _reply(chat, messages, options, conversation, f"building the chat {conversation}")
            stats = done.get("stats") or {}
            if int(stats.get("trimmed_turns", 0)):
                raise EngineError(f"the chat {conversation} was trimmed at {used:,} tokens while it was built, "
                                  f"short of {reopen_tokens:,}: the context is too small for it.",
                                  "Lower --reopen-tokens or raise --ctx.")
            used = int(stats.get("context_used", 0))
            history = [*messages, Message("assistant", str(done.get("text", "")))]
        say(f"built {conversation}: {turn} turns, {used:,} tokens")
        chats.append((conversation, [*history, Message("user", FOLLOW_UPS[(run - 1) % len(FOLLOW_UPS)])]))
    _reply(chat, [Message("user", "Something else: what is a good name for a cat?")],
           replace(options, max_tokens=8), "elsewhere", "a reply in another chat")  # the last chat is left too
    for run, (conversation, messages) in enumerate(chats, start=1):
        chat.close()  # the worker ends: what it held is written, the files are all that is left
        sample_files()
        say(f"run {run}/{runs}: restarting the engine worker ...")
        chat = _engine(stack, config)
        _reply(chat, [Message("user", "Hello.")], replace(options, max_tokens=4), None, "a warm-up reply")
        restored_first = run % 2 == 1  # the two sides take turns going first
        measured: dict[str, tuple[float, dict[str, Any]]] = {}
        for side in ("restored", "re-read") if restored_first else ("re-read", "restored"):
            measured[side] = (_reply(chat, messages, options, conversation, f"reopening {conversation}")
                              if side == "restored" else from_scratch(messages))
        (ttft, done), (again_ttft, again) = measured["restored"], measured["re-read"]
        stats = done.get("stats") or {}
        seconds = done.get("state_seconds")
        record = ReopenRecord(run, conversation, int(done.get("restored_tokens", 0)), ttft, _engine_ttft(done),
                              str(done.get("state", "")), str(done.get("state_source", "")),
                              None if seconds is None else float(seconds), str(done.get("state_note", "")),
                              int(stats.get("prompt_tokens", 0)), again_ttft,
                              int((again.get("stats") or {}).get("prompt_tokens", 0)),
                              again.get("tokens") == done.get("tokens"), "restored" if restored_first else "re-read")
        say(f"run {run}/{runs}: {record.state} from {record.state_source or '-'} ({record.chat_tokens:,} tokens), "
            f"TTFT {ttft:.3f} s against {again_ttft:.3f} s read from scratch; identical: "
            f"{'yes' if record.identical else 'no'}")
        yield record
    chat.close()
