"""Benchmark: the window's decode speed beside the headless engine's (``python -m app bench window``).

Five variants on the same model pair and engine configuration; a sample of each is one conversation of ``turns``
turns (the prompts in turn, the same prompts and seed for every variant within a round):

- ``window_chat``: the turns sent through the real window, one chat (``MainWindow``'s chat page: its history,
  the system prompt, the chat template, the engine bridge, transcript, HUD and meter) at the chat's default
  sampling (``CHAT_SAMPLING``, a fixed seed per round): what a person gets;
- ``window_greedy``: the same at temperature 0;
- ``headless_greedy``: the same conversation (system prompt, every earlier turn and its reply, its own chat id so
  the engine keeps it as the window's does) through the engine client alone (its own worker process, no GUI),
  greedy;
- ``headless_chat``: the same at the chat's default sampling: the window's work without the window;
- ``generate``: each turn's prompt alone (the system prompt and that prompt, no history) through the engine
  client at the chat's default sampling: what ``python -m app generate`` runs on the same prompt and settings.

After one warm-up reply of each, the rounds alternate the variants (A/B/C/D, then B/C/D/A, ...: each variant
takes every place in the order alike, so a burst of load from elsewhere hits them all). Decode tok/s =
(tokens - 1) / (time of the last token - time of the first), timed where the tokens arrive: on the GUI thread
when the window's chat page receives them (a batch's tokens share its arrival time), in the caller's loop for the
headless client. Reported per variant: the median, min and max over the samples, the engine's own figure
(``stats.decode_tps``, measured in the worker), and for the window the process CPU seconds per token (this
process is the GUI process: the GUI thread, the engine bridge's threads; the worker is its own process).
The headline ratio (issue 36 item 2) is the HUD's figure (the engine's ``decode_tps`` of the window's replies at the
chat's sampling, what the HUD and the footer show) over ``generate``'s on the same prompts and settings; beside it
window / headless on the same conversation (what the GUI costs the engine) and headless with history / generate
(what the longer context costs). CPU per token, where the machine is shared the figure to trust over tok/s: the GUI
process's (``time.process_time`` over the reply: the GUI thread and the bridge's threads) and the engine worker's
(``/proc/PID/stat``, Linux), and per token the GUI deliveries (batches), frames drawn and HUD updates.

The window runs offscreen (``QT_QPA_PLATFORM=offscreen``) unless a display is there (Xvfb counts).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.bench.report import round_or_none
from app.engine.config import CHAT_SAMPLING, EngineConfig, SamplingParams
from app.engine.stats import describe_depth, describe_sampling

VARIANTS = ("window_chat", "window_greedy", "headless_greedy", "headless_chat", "generate")
WINDOW_VARIANTS = ("window_chat", "window_greedy")
PROMPTS = ("Tell me how the draft head proposes tokens.", "What does the target check in one pass?",
           "Write a few lines about speculative decoding.", "Why do accepted drafts save time?")
REPLY_TIMEOUT_S = 600  # one reply of the window, at the very most (a stuck engine ends the bench, not hangs it)


@dataclass
class Reply:
    """One measured reply."""

    tokens: int
    tps: float  # decode tok/s where the tokens arrived: (tokens - 1) / (last - first)
    engine_tps: float | None  # the worker's own ``stats.decode_tps``
    cpu_seconds: float | None = None  # this process's CPU time over the reply (the window's variants)
    batches: int | None = None  # deliveries to the GUI thread (the window's variants)
    load: float | None = None
    worker_cpu_seconds: float | None = None  # the engine worker's CPU time over the reply (Linux)
    frames: int | None = None  # frames the transcript drew (the window's variants)
    hud_updates: int | None = None  # the HUD's updates while streaming (the window's variants)
    turn: int = 0  # which turn of its conversation (0: the first)


@dataclass
class VariantResult:
    name: str
    where: str  # "window" or "headless"
    sampling: str  # ``describe_sampling``
    replies: list[Reply] = field(default_factory=list)

    @staticmethod
    def _spread(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"median": None, "min": None, "max": None}
        return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}

    @property
    def median_tps(self) -> float | None:
        return statistics.median(r.tps for r in self.replies) if self.replies else None

    @property
    def median_engine_tps(self) -> float | None:
        engine = [r.engine_tps for r in self.replies if r.engine_tps is not None]
        return statistics.median(engine) if engine else None

    @property
    def cpu_ms_per_token(self) -> list[float]:
        return [r.cpu_seconds / r.tokens * 1000 for r in self.replies if r.cpu_seconds is not None and r.tokens]

    @property
    def worker_cpu_ms_per_token(self) -> list[float]:
        return [r.worker_cpu_seconds / r.tokens * 1000 for r in self.replies
                if r.worker_cpu_seconds is not None and r.tokens]

    def _per_token(self, counts: list[int | None]) -> float | None:
        pairs = [(c, r.tokens) for c, r in zip(counts, self.replies, strict=True) if c is not None and r.tokens]
        return round(sum(c for c, _ in pairs) / sum(t for _, t in pairs), 4) if pairs else None

    def to_dict(self) -> dict[str, Any]:
        engine = [r.engine_tps for r in self.replies if r.engine_tps is not None]
        data: dict[str, Any] = {
            "where": self.where, "sampling": self.sampling, "samples": len(self.replies),
            "tps": [round(r.tps, 3) for r in self.replies], **self._spread([r.tps for r in self.replies]),
            "engine_tps": [round(t, 3) for t in engine],
            "engine_tps_median": round(statistics.median(engine), 3) if engine else None,
            "tokens": [r.tokens for r in self.replies],
            "turns": [r.turn + 1 for r in self.replies],
        }
        worker = self.worker_cpu_ms_per_token
        data["worker_cpu_ms_per_token"] = [round(c, 3) for c in worker]
        data["worker_cpu_ms_per_token_median"] = round(statistics.median(worker), 3) if worker else None
        if self.where == "window":
            cpu = self.cpu_ms_per_token
            data["gui_cpu_ms_per_token"] = [round(c, 3) for c in cpu]
            data["gui_cpu_ms_per_token_median"] = round(statistics.median(cpu), 3) if cpu else None
            data["gui_cpu_seconds"] = [round(r.cpu_seconds, 3) for r in self.replies if r.cpu_seconds is not None]
            data["batches"] = [r.batches for r in self.replies]
            data["batches_per_token"] = self._per_token([r.batches for r in self.replies])
            data["frames_per_token"] = self._per_token([r.frames for r in self.replies])
            data["hud_updates_per_token"] = self._per_token([r.hud_updates for r in self.replies])
        return data


@dataclass
class WindowBenchResult:
    model: str
    mode: str  # drafting mode and depth, as the engine states it
    threads: int | None
    max_tokens: int
    samples: int
    warmup: int
    frame_interval_ms: int
    turns: int
    variants: dict[str, VariantResult]
    load_start: float | None
    load_end: float | None
    device: str = ""
    commit: str = ""

    def ratio(self, a: str, b: str) -> float | None:
        ma, mb = self.variants[a].median_tps, self.variants[b].median_tps
        return round(ma / mb, 3) if ma is not None and mb else None

    def engine_ratio(self, a: str, b: str) -> float | None:
        ma, mb = self.variants[a].median_engine_tps, self.variants[b].median_engine_tps
        return round(ma / mb, 3) if ma is not None and mb else None

    def to_dict(self) -> dict[str, Any]:
        loads = [r.load for v in self.variants.values() for r in v.replies if r.load is not None]
        window_cpu = {name: v.to_dict()["gui_cpu_ms_per_token_median"] for name, v in self.variants.items()
                      if v.where == "window"}
        worker_cpu = {name: v.to_dict()["worker_cpu_ms_per_token_median"] for name, v in self.variants.items()}
        return {
            "model": self.model, "mode": self.mode, "threads": self.threads, "max_tokens": self.max_tokens,
            "samples": self.samples, "warmup": self.warmup, "frame_interval_ms": self.frame_interval_ms,
            "turns": self.turns,
            "ratio_hud_to_generate": self.engine_ratio("window_chat", "generate"),
            "ratio_window_chat_to_generate": self.ratio("window_chat", "generate"),
            "ratio_headless_chat_to_generate": self.ratio("headless_chat", "generate"),
            "chat_sampling": describe_sampling(CHAT_SAMPLING),
            "variants": {name: v.to_dict() for name, v in self.variants.items()},
            "ratio_window_chat_to_headless_greedy": self.ratio("window_chat", "headless_greedy"),
            "ratio_window_greedy_to_headless_greedy": self.ratio("window_greedy", "headless_greedy"),
            "ratio_window_chat_to_headless_chat": self.ratio("window_chat", "headless_chat"),
            "gui_cpu_ms_per_token": window_cpu,
            "worker_cpu_ms_per_token": worker_cpu,
            "load_average": {"start": round_or_none(self.load_start, 2), "end": round_or_none(self.load_end, 2),
                             "median": round(statistics.median(loads), 2) if loads else None},
            "device": self.device, "commit": self.commit,
        }

    def markdown(self) -> str:
        def num(x: float | None, digits: int = 2) -> str:
            return f"{x:.{digits}f}" if x is not None else "—"

        rows = ["| variant | sampling | decode tok/s, median (min-max) | engine's own (the HUD's) tok/s | "
                "GUI CPU ms/token | worker CPU ms/token | frames / token | HUD updates / token |",
                "|---|---|---:|---:|---:|---:|---:|---:|"]
        for v in self.variants.values():
            d = v.to_dict()
            spread = f"{d['median']:.1f} ({d['min']:.1f}-{d['max']:.1f})" if d["median"] is not None else "—"
            rows.append(f"| {v.name} | {v.sampling} | {spread} | {num(d['engine_tps_median'], 1)} | "
                        f"{num(d.get('gui_cpu_ms_per_token_median'))} | {num(d['worker_cpu_ms_per_token_median'])} | "
                        f"{num(d.get('frames_per_token'))} | {num(d.get('hud_updates_per_token'))} |")
        data = self.to_dict()
        load = data["load_average"]

        def fmt(x: float | None) -> str:
            return f"{x:.2f}x" if x is not None else "—"

        return ("\n".join(rows) + "\n\n"
                f"**the HUD's figure / generate's ({data['chat_sampling']}, the same prompts): "
                f"{fmt(data['ratio_hud_to_generate'])}** · as the tokens arrive: "
                f"{fmt(data['ratio_window_chat_to_generate'])} · headless with the chat's history / generate: "
                f"{fmt(data['ratio_headless_chat_to_generate'])}\n\n"
                f"window ({data['chat_sampling']}) / headless (greedy): "
                f"{fmt(data['ratio_window_chat_to_headless_greedy'])} · window greedy / headless greedy: "
                f"{fmt(data['ratio_window_greedy_to_headless_greedy'])} · window / headless at "
                f"{data['chat_sampling']}: {fmt(data['ratio_window_chat_to_headless_chat'])}\n\n"
                f"{self.model}, {self.mode}, {self.max_tokens} tokens a reply, {self.samples} interleaved samples "
                f"per variant (conversations of {self.turns} turns) after {self.warmup} warm-up each, threads "
                f"{self.threads or 'default'}, frames at most "
                f"every {self.frame_interval_ms} ms; load average {load['start']} at the start, {load['end']} at "
                f"the end (median {load['median']}); commit {self.commit or '?'}.\n")


def _decode_tps(times: list[float], counts: list[int]) -> tuple[int, float]:
    """(tokens, (tokens - 1) / (last - first)) from arrival times and how many tokens came at each: the one
    definition, ``app.engine.stats.decode_tps``, on the arrival times."""
    from app.engine.stats import decode_tps

    tokens = sum(counts)
    return tokens, decode_tps(tokens, times[-1] - times[0] if times else 0.0)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _process_cpu_seconds(pid: int | None) -> float | None:
    """A process's user + system CPU seconds so far (``/proc/PID/stat``), None where it cannot be read."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _cpu_between(before: float | None, after: float | None) -> float | None:
    return after - before if before is not None and after is not None else None


def run(config: EngineConfig, model_name: str, max_tokens: int = 256, samples: int = 3, warmup: int = 1,
        log: Callable[[str], None] | None = None, turns: int = 3) -> WindowBenchResult:
    """Measure the four variants (see the module's docstring) on ``config``."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QEventLoop, QTimer

    from app.bench.report import device_description
    from app.chats.history import HistoryStore
    from app.core.errors import EngineError
    from app.engine.chat_template import Message
    from app.engine.client import EngineClient
    from app.engine.verdict import load_average
    from app.gui.chat.chat_view import RENDER_INTERVAL_MS
    from app.gui.main import MainWindow
    from app.gui.shell.application import make_application
    from app.settings.app_settings import Settings
    from app.settings.chat_settings import ChatSettings

    say = log or (lambda _line: None)
    app = make_application([])  # as the window runs: named, and collecting cycles on the GUI thread only
    chat = ChatSettings(max_tokens=max_tokens, seed_mode="fixed")
    greedy = replace(chat, temperature=0.0)
    settings_of = {"window_chat": chat, "window_greedy": greedy, "headless_greedy": greedy, "headless_chat": chat,
                   "generate": chat}
    results = {name: VariantResult(name, name.split("_")[0], describe_sampling(SamplingParams(
        temperature=settings_of[name].temperature))) for name in VARIANTS}
    load_start = load_average()

    with tempfile.TemporaryDirectory(prefix="fastmtp-bench-window-") as scratch:
        history = HistoryStore(Path(scratch) / "history.sqlite3")
        window = MainWindow(history=history, settings=Settings(), remembers=False)  # the user's window state stays
        window.resize(1180, 700)
        window.show()
        page = window.chat_page
        # the selector names the measured mode (not Auto, which would switch modes between replies)
        window.model_selector.restore_mode("off" if config.mode == "off" else
                                           "sidecar-d2t" if config.mode == "sidecar" else config.mode)
        headless = EngineClient()
        loop = QEventLoop()
        guard = QTimer()
        guard.setSingleShot(True)
        guard.timeout.connect(loop.quit)
        failure: list[dict[str, Any]] = []

        def wait(what: str) -> None:
            guard.start(REPLY_TIMEOUT_S * 1000)
            loop.exec()
            timed_out = not guard.isActive()
            guard.stop()
            if failure:
                event = failure.pop()
                raise EngineError(f"The window's engine failed while {what}: {event.get('message', '')}",
                                  str(event.get("advice", "")))
            if timed_out:
                raise EngineError(f"The window's engine did not finish {what} in {REPLY_TIMEOUT_S} s.")

        def failed(event: dict[str, Any]) -> None:
            failure.append(event)
            loop.quit()

        window.bridge.error.connect(failed)
        try:
            say(f"loading {config.target.name} in the window and in a headless engine ...")
            window.bridge.loaded.connect(loop.quit)
            page.load(config)
            wait("loading")
            window.bridge.loaded.disconnect(loop.quit)
            headless.load(config)

            arrivals: list[float] = []
            counts: list[int] = []
            done: list[dict[str, Any]] = []

            def arrived(events: list[dict[str, Any]]) -> None:
                arrivals.append(time.perf_counter())
                counts.append(len(events))

            def finished(event: dict[str, Any]) -> None:
                done.append(event)
                loop.quit()

            window.bridge.tokens.connect(arrived)
            window.bridge.done.connect(finished)

            def window_reply(prompt: str, turn: int) -> Reply:
                """One turn sent in the window's open chat (the chat's history, system prompt and template)."""
                arrivals.clear()
                counts.clear()
                done.clear()
                app.processEvents()
                frames, hud = page.chat.frames_drawn, page.chat.hud_updates
                cpu, worker = time.process_time(), _process_cpu_seconds(window.bridge.engine_pid)
                page.send(prompt)
                wait("streaming a reply")
                cpu = time.process_time() - cpu
                worker = _cpu_between(worker, _process_cpu_seconds(window.bridge.engine_pid))
                tokens, tps = _decode_tps(arrivals, counts)
                stats = done[-1].get("stats") or {}
                return Reply(tokens, tps, stats.get("decode_tps"), cpu, len(arrivals), load_average(), worker,
                             page.chat.frames_drawn - frames, page.chat.hud_updates - hud, turn)

            def headless_reply(settings: ChatSettings, messages: list[Message], conversation: str | None,
                               turn: int) -> tuple[Reply, str]:
                """One reply of the engine client alone to ``messages``; and its text (the next turn's history)."""
                times: list[float] = []
                worker = _process_cpu_seconds(headless.pid)
                last: dict[str, Any] = {}
                for event in headless.generate(messages, settings.options(), conversation):
                    if event["kind"] == "token":
                        times.append(time.perf_counter())
                    last = event
                if last.get("kind") != "done":
                    raise EngineError(f"The headless engine failed: {last.get('message', '')}",
                                      str(last.get("advice", "")))
                worker = _cpu_between(worker, _process_cpu_seconds(headless.pid))
                tokens, tps = _decode_tps(times, [1] * len(times))
                reply = Reply(tokens, tps, (last.get("stats") or {}).get("decode_tps"), load=load_average(),
                              worker_cpu_seconds=worker, turn=turn)
                return reply, str(last.get("text", ""))

            conversations = [0]

            def one(name: str, seed: int, prompts: list[str]) -> list[Reply]:
                """One conversation of ``prompts`` in variant ``name``: its replies, turn by turn."""
                settings = replace(settings_of[name], seed=seed)
                conversations[0] += 1
                replies: list[Reply] = []
                if name in WINDOW_VARIANTS:
                    page.new_chat()
                    page.set_chat_settings(settings)
                    for turn, prompt in enumerate(prompts):
                        replies.append(window_reply(prompt, turn))
                    return replies
                system = [Message("system", settings.system_prompt)] if settings.system_prompt.strip() else []
                history: list[Message] = []
                for turn, prompt in enumerate(prompts):
                    if name == "generate":  # the prompt alone, as `generate` runs it
                        reply, _text = headless_reply(settings, [*system, Message("user", prompt)], None, turn)
                    else:  # the window's conversation, kept by the engine under its own id as the window's is
                        history.append(Message("user", prompt))
                        reply, text = headless_reply(settings, [*system, *history],
                                                     f"bench-window-{os.getpid()}-{conversations[0]}", turn)
                        history.append(Message("assistant", text))
                    replies.append(reply)
                return replies

            def prompts_of(round_: int) -> list[str]:
                return [PROMPTS[(round_ + turn) % len(PROMPTS)] for turn in range(turns)]

            for name in VARIANTS:
                say(f"warm-up: {name}")
                for _ in range(warmup):
                    one(name, 0, prompts_of(0)[:1])
            for round_ in range(samples):
                order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
                for name in order:
                    for reply in one(name, round_ + 1, prompts_of(round_)):
                        results[name].replies.append(reply)
                        say(f"round {round_ + 1}/{samples} {name}, turn {reply.turn + 1}: {reply.tokens} tokens, "
                            f"{reply.tps:.1f} tok/s (engine {reply.engine_tps or 0:.1f})"
                            + (f", GUI CPU {reply.cpu_seconds / max(reply.tokens, 1) * 1000:.2f} ms/token"
                               if reply.cpu_seconds is not None else "")
                            + (f", worker CPU {reply.worker_cpu_seconds / max(reply.tokens, 1) * 1000:.2f} ms/token"
                               if reply.worker_cpu_seconds is not None else ""))
        finally:
            headless.close()
            window.bridge.close()
            window.hide()
            window.deleteLater()
            app.processEvents()
            history.close()

    return WindowBenchResult(model_name, f"{config.mode}, {describe_depth(config)}", config.n_threads, max_tokens,
                             samples, warmup, RENDER_INTERVAL_MS, turns, results, load_start, load_average(),
                             device_description(), _commit())
