"""Benchmark: the window's decode speed beside the headless engine's (``python -m app bench window``).

Four variants on the same model pair and engine configuration, each reply a fresh conversation with the same
prompt and seed within a round:

- ``window_chat``: a reply streamed through the real window (``MainWindow``'s chat page, its engine bridge,
  transcript, HUD and history) at the chat's default sampling (``CHAT_SAMPLING``, a fixed seed per round);
- ``window_greedy``: the same at temperature 0;
- ``headless_greedy``: the engine client alone (its own worker process, no GUI), greedy;
- ``headless_chat``: the engine client alone at the chat's default sampling.

After one warm-up reply of each, the rounds alternate the variants (A/B/C/D, then B/C/D/A, ...: each variant
takes every place in the order alike, so a burst of load from elsewhere hits them all). Decode tok/s =
(tokens - 1) / (time of the last token - time of the first), timed where the tokens arrive: on the GUI thread
when the window's chat page receives them (a batch's tokens share its arrival time), in the caller's loop for the
headless client. Reported per variant: the median, min and max over the samples, the engine's own figure
(``stats.decode_tps``, measured in the worker), and for the window the process CPU seconds per token (this
process is the GUI process: the GUI thread, the engine bridge's threads; the worker is its own process).
The headline ratio is window at the chat's sampling over headless greedy: what the person sees against what the
engine can do.

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

from app.engine.config import CHAT_SAMPLING, EngineConfig, SamplingParams
from app.engine.stats import describe_depth, describe_sampling

VARIANTS = ("window_chat", "window_greedy", "headless_greedy", "headless_chat")
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
    def cpu_ms_per_token(self) -> list[float]:
        return [r.cpu_seconds / r.tokens * 1000 for r in self.replies if r.cpu_seconds is not None and r.tokens]

    def to_dict(self) -> dict[str, Any]:
        engine = [r.engine_tps for r in self.replies if r.engine_tps is not None]
        data: dict[str, Any] = {
            "where": self.where, "sampling": self.sampling, "samples": len(self.replies),
            "tps": [round(r.tps, 3) for r in self.replies], **self._spread([r.tps for r in self.replies]),
            "engine_tps": [round(t, 3) for t in engine],
            "engine_tps_median": round(statistics.median(engine), 3) if engine else None,
            "tokens": [r.tokens for r in self.replies],
        }
        if self.where == "window":
            cpu = self.cpu_ms_per_token
            data["gui_cpu_ms_per_token"] = [round(c, 3) for c in cpu]
            data["gui_cpu_ms_per_token_median"] = round(statistics.median(cpu), 3) if cpu else None
            data["gui_cpu_seconds"] = [round(r.cpu_seconds, 3) for r in self.replies if r.cpu_seconds is not None]
            data["batches"] = [r.batches for r in self.replies]
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
    variants: dict[str, VariantResult]
    load_start: float | None
    load_end: float | None
    device: str = ""
    commit: str = ""

    def ratio(self, a: str, b: str) -> float | None:
        ma, mb = self.variants[a].median_tps, self.variants[b].median_tps
        return round(ma / mb, 3) if ma is not None and mb else None

    def to_dict(self) -> dict[str, Any]:
        loads = [r.load for v in self.variants.values() for r in v.replies if r.load is not None]
        window_cpu = {name: v.to_dict()["gui_cpu_ms_per_token_median"] for name, v in self.variants.items()
                      if v.where == "window"}
        return {
            "model": self.model, "mode": self.mode, "threads": self.threads, "max_tokens": self.max_tokens,
            "samples": self.samples, "warmup": self.warmup, "frame_interval_ms": self.frame_interval_ms,
            "chat_sampling": describe_sampling(CHAT_SAMPLING),
            "variants": {name: v.to_dict() for name, v in self.variants.items()},
            "ratio_window_chat_to_headless_greedy": self.ratio("window_chat", "headless_greedy"),
            "ratio_window_greedy_to_headless_greedy": self.ratio("window_greedy", "headless_greedy"),
            "ratio_window_chat_to_headless_chat": self.ratio("window_chat", "headless_chat"),
            "gui_cpu_ms_per_token": window_cpu,
            "load_average": {"start": _round(self.load_start), "end": _round(self.load_end),
                             "median": round(statistics.median(loads), 2) if loads else None},
            "device": self.device, "commit": self.commit,
        }

    def markdown(self) -> str:
        rows = ["| where | sampling | decode tok/s, median (min-max) | engine's own tok/s | GUI CPU ms/token |",
                "|---|---|---:|---:|---:|"]
        for v in self.variants.values():
            d = v.to_dict()
            spread = f"{d['median']:.1f} ({d['min']:.1f}-{d['max']:.1f})" if d["median"] is not None else "—"
            engine = f"{d['engine_tps_median']:.1f}" if d["engine_tps_median"] is not None else "—"
            cpu = d.get("gui_cpu_ms_per_token_median")
            rows.append(f"| {v.where} | {v.sampling} | {spread} | {engine} | "
                        f"{f'{cpu:.2f}' if cpu is not None else '—'} |")
        data = self.to_dict()
        load = data["load_average"]

        def fmt(x: float | None) -> str:
            return f"{x:.2f}x" if x is not None else "—"

        return ("\n".join(rows) + "\n\n"
                f"**window ({data['chat_sampling']}) / headless (greedy): "
                f"{fmt(data['ratio_window_chat_to_headless_greedy'])}** · window greedy / headless greedy: "
                f"{fmt(data['ratio_window_greedy_to_headless_greedy'])} · window / headless at "
                f"{data['chat_sampling']}: {fmt(data['ratio_window_chat_to_headless_chat'])}\n\n"
                f"{self.model}, {self.mode}, {self.max_tokens} tokens a reply, {self.samples} interleaved samples "
                f"per variant after {self.warmup} warm-up each, threads {self.threads or 'default'}, frames at most "
                f"every {self.frame_interval_ms} ms; load average {load['start']} at the start, {load['end']} at "
                f"the end (median {load['median']}); commit {self.commit or '?'}.\n")


def _round(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


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


def run(config: EngineConfig, model_name: str, max_tokens: int = 256, samples: int = 3, warmup: int = 1,
        log: Callable[[str], None] | None = None) -> WindowBenchResult:
    """Measure the four variants (see the module's docstring) on ``config``."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.bench.report import device_description
    from app.chats.history import HistoryStore
    from app.core.errors import EngineError
    from app.engine.chat_template import Message
    from app.engine.client import EngineClient
    from app.engine.verdict import load_average
    from app.gui.chat.chat_view import RENDER_INTERVAL_MS
    from app.gui.main import MainWindow
    from app.settings.app_settings import Settings
    from app.settings.chat_settings import ChatSettings

    say = log or (lambda _line: None)
    app = QApplication.instance() or QApplication([])
    assert isinstance(app, QApplication)
    chat = ChatSettings(max_tokens=max_tokens, seed_mode="fixed")
    greedy = replace(chat, temperature=0.0)
    settings_of = {"window_chat": chat, "window_greedy": greedy, "headless_greedy": greedy, "headless_chat": chat}
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

            def window_reply(settings: ChatSettings, prompt: str) -> Reply:
                arrivals.clear()
                counts.clear()
                done.clear()
                page.new_chat()
                page.set_chat_settings(settings)
                app.processEvents()
                cpu = time.process_time()
                page.send(prompt)
                wait("streaming a reply")
                cpu = time.process_time() - cpu
                tokens, tps = _decode_tps(arrivals, counts)
                stats = done[-1].get("stats") or {}
                return Reply(tokens, tps, stats.get("decode_tps"), cpu, len(arrivals), load_average())

            def headless_reply(settings: ChatSettings, prompt: str) -> Reply:
                messages = [Message("system", settings.system_prompt), Message("user", prompt)]
                times: list[float] = []
                last: dict[str, Any] = {}
                for event in headless.generate(messages, settings.options()):
                    if event["kind"] == "token":
                        times.append(time.perf_counter())
                    last = event
                if last.get("kind") != "done":
                    raise EngineError(f"The headless engine failed: {last.get('message', '')}",
                                      str(last.get("advice", "")))
                tokens, tps = _decode_tps(times, [1] * len(times))
                return Reply(tokens, tps, (last.get("stats") or {}).get("decode_tps"), load=load_average())

            def one(name: str, seed: int, prompt: str) -> Reply:
                settings = replace(settings_of[name], seed=seed)
                return (window_reply if name.startswith("window") else headless_reply)(settings, prompt)

            for name in VARIANTS:
                say(f"warm-up: {name}")
                for _ in range(warmup):
                    one(name, 0, PROMPTS[0])
            for round_ in range(samples):
                order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
                prompt, seed = PROMPTS[round_ % len(PROMPTS)], round_ + 1
                for name in order:
                    reply = one(name, seed, prompt)
                    results[name].replies.append(reply)
                    say(f"round {round_ + 1}/{samples} {name}: {reply.tokens} tokens, {reply.tps:.1f} tok/s"
                        + (f", GUI CPU {reply.cpu_seconds / max(reply.tokens, 1) * 1000:.2f} ms/token"
                           if reply.cpu_seconds is not None else ""))
        finally:
            headless.close()
            window.bridge.close()
            window.hide()
            window.deleteLater()
            app.processEvents()
            history.close()

    return WindowBenchResult(model_name, f"{config.mode}, {describe_depth(config)}", config.n_threads, max_tokens,
                             samples, warmup, RENDER_INTERVAL_MS, results, load_start, load_average(),
                             device_description(), _commit())
