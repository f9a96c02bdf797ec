"""A remote server as the chat's engine: the same events as the local worker (``loaded``, ``token``, ``done``,
``error``), streamed over HTTP, so the HUD, the history and the export work unchanged.

Two ways to ask, chosen when connecting (``load``):
- a **llama-server** (``GET /props`` answers with its build): the prompt is rendered here with the model's own
  chat template (from ``/props``), exactly as the local engine renders it, and streamed from ``/completion`` with
  the token ids; its final ``timings`` carry the server's prompt and decode speed and, with a draft model, how
  many tokens were drafted (``draft_n``) and accepted (``draft_n_accepted``);
- any other **OpenAI-compatible** server (vLLM, …): ``/v1/chat/completions`` with ``stream: true`` and the usage
  counts at the end (and llama-server's ``timings`` when they come along).

What the HUD can show: time to first token and decode speed measured from the stream (the network included),
prompt speed from the server's timings or the prompt size over the time to first token, acceptance only where
the server reports drafts. It cannot show tokens per target pass (no server reports passes), and the reply is not
tinted token by token (``provenance`` is ``remote``: the stream does not say which tokens were drafted).

A connection that drops mid-reply ends with an ``error`` event (``RemoteConnectionLost``) that carries the text
streamed so far and ``retryable``; the API key is sent only to the server's own origin, redirects are not followed.

Everything the server sends is read through ``app.core.bounded_http``: ``/props`` and ``/v1/models`` answers up to
2 MiB, an error page's first 64 KiB, a reply line up to 2 MiB and the reply within a deadline that grows with
``max_tokens``; Stop shuts the connection at once. Each chunk is checked against the shape the client expects (a
wrong one ends the reply with a ``RemoteError`` that names the server, the text so far kept); a reply longer than
``max_tokens`` allows is stopped; a timing that is not a finite number is dropped, so the stats the HUD and the
history get hold no inf or NaN.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from app.core import net_failures
from app.core.bounded_http import (
    KIB,
    MIB,
    BoundedRead,
    ReadCancelled,
    ReadLimitError,
    TooDeep,
    deadline_in,
    finite,
    loads,
)
from app.core.errors import FastMTPError
from app.engine.chat_template import Message, render
from app.engine.config import ChatOptions
from app.engine.stats import decode_tps
from app.machines.remote_servers import RemoteError, RemoteServer, check_url, origin_of

ServerKind = Literal["llama-server", "openai"]
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # a long prompt on a busy server may take minutes before its first token
MAX_ANSWER = 2 * MIB  # /props (its chat template) and /v1/models: a few KiB to about 1 MiB
MAX_ERROR_BODY = 64 * KIB  # an error page is read this far, for its words
MAX_LINE = 2 * MIB  # one streamed line: llama-server's last chunk repeats the prompt (256k tokens: about 1 MiB)
ANSWER_DEADLINE_S = 120.0  # /props, /v1/models
SECONDS_PER_TOKEN = 2.0  # a reply's deadline: READ_TIMEOUT_S, then at least half a token per second
TOKEN_MARGIN = 256  # tokens a server may send beyond max_tokens (a speculative round, the end marker)
# a reply with no cap of its own (``max_tokens`` 0: until the model stops or the server's context is full) is still
# bounded: no context a server holds is longer
UNCAPPED_REPLY_TOKENS = 262_144
BYTES_PER_TOKEN = 1024  # text a token may carry (the longest vocabulary entries are far shorter)
NO_TINT_REASON = "Tokens are not tinted: a remote server does not say which ones were drafted."
_STOP_REASONS = {"eos": "eos", "limit": "length", "word": "stop", "length": "length", "stop": "eos"}


@dataclass
class RemoteStats:
    """The reply's figures as far as a client can see them: the stream's timing plus the server's own report."""

    server: str
    started: float = field(default_factory=time.perf_counter)
    first: float | None = None
    last: float | None = None
    generated: int = 0
    prompt_tokens: int = 0
    timings: dict[str, Any] = field(default_factory=dict)
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=32), repr=False)

    def record(self, tokens: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last = now
        self.generated += tokens
        self._recent.extend([now] * tokens)

    @property
    def decode_tps(self) -> float:
        """llama-server's ``predicted_per_second`` when it reports it: the same definition as ours (the tokens
        after the first over the time from the first to the last, on the server's clock); else
        ``stats.decode_tps`` of the stream as it arrived (the network included)."""
        measured = finite(self.timings.get("predicted_per_second"))
        if measured is not None and measured > 0:
            return measured
        if self.first is None or self.last is None:
            return 0.0
        return decode_tps(self.generated, self.last - self.first)

    @property
    def decode_seconds(self) -> float:
        """The server's generation time when it reports it, else first to last streamed token."""
        measured = finite(self.timings.get("predicted_ms"))
        if measured is not None and measured > 0:
            return measured / 1000.0
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    @property
    def rolling_tps(self) -> float:
        if len(self._recent) < 2 or self._recent[-1] <= self._recent[0]:
            return self.decode_tps
        return decode_tps(len(self._recent), self._recent[-1] - self._recent[0])

    def to_dict(self) -> dict[str, Any]:
        """The local engine's stats keys; what a client cannot know is None (tokens per pass, draft timing).
        Every number is finite: the timings were cleaned on arrival, and :func:`_finite` is the last guard."""
        ttft = self.first - self.started if self.first is not None else None
        prompt_tps: float | None = None
        measured = finite(self.timings.get("prompt_per_second"))
        prompt_tokens = _count(self.timings.get("prompt_n")) or self.prompt_tokens
        if measured is not None and measured > 0:
            prompt_tps = measured
        elif prompt_tokens and ttft:
            prompt_tps = prompt_tokens / ttft
        drafted = _count(self.timings.get("draft_n")) or 0
        accepted = _count(self.timings.get("draft_n_accepted"))
        has_drafts = drafted > 0 and accepted is not None and accepted <= drafted
        accepted = accepted if has_drafts and accepted is not None else 0
        clean: dict[str, Any] = _finite({
            "prompt_tokens": prompt_tokens,
            "prompt_tps": prompt_tps,
            "time_to_first_token": ttft,
            "generated": _count(self.timings.get("predicted_n")) or self.generated,
            "decode_tps": self.decode_tps,
            "decode_seconds": self.decode_seconds,
            "rolling_tps": self.rolling_tps,
            "drafted": drafted if has_drafts else 0,
            "accepted": accepted if has_drafts else 0,
            "proposed": drafted if has_drafts else 0,
            # a server counts drafts made, not which it tested: its share under its own name (``acceptance_words``)
            "acceptance": None,
            "accepted_of_drafted": accepted / drafted if has_drafts else None,
            "acceptance_by_position": [],
            "tokens_per_pass": None,
            "target_passes": 0,
            "depth": 0,
            "verify_ms_per_round": None,
            "draft_ms_per_round": None,
            "draft_ms_per_step": None,
            "python_ms_per_round": None,
            "draft_time_share": None,
            "remote": self.server,
            "timings_from": "llama-server" if self.timings else None,
            "server_timings": dict(self.timings),
        })
        return clean


@dataclass
class _Reply:
    """What the stream brought so far (kept by the reader thread, read on cancel)."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    pieces: int = 0
    stop_reason: str = ""
    finished: bool = False
    reasoning_open: bool = False
    max_tokens: int = 0  # the most tokens (or pieces) the server may send: max_tokens and a margin


class RemoteClient:
    """The remote twin of ``EngineClient``: ``load`` connects, ``generate`` streams, ``cancel``, ``restart``, ``close``.

    ``config`` is the ``RemoteServer``. The key (from the keyring unless given) goes only to the server's origin.
    """

    def __init__(self, server: RemoteServer, api_key: str | None = None, *, use_keyring: bool = True,
                 read_timeout: float = READ_TIMEOUT_S) -> None:
        self.server = server
        self._key = api_key if api_key is not None else (server.api_key() if use_keyring else None)
        self._http = httpx.Client(verify=server.verify_tls, trust_env=False, follow_redirects=False,
                                  timeout=httpx.Timeout(read_timeout, connect=CONNECT_TIMEOUT_S))
        self.kind: ServerKind | None = None
        self.model = server.model
        self.template: str | None = None
        self.props: dict[str, Any] = {}
        self._cancel = threading.Event()
        self._events: queue.Queue[dict[str, Any]] | None = None
        self._reader: BoundedRead | None = None
        self.last_crash: dict[str, Any] | None = None

    @property
    def config(self) -> RemoteServer:
        return self.server

    # ------------------------------------------------------------------ HTTP

    def _url(self, path: str) -> str:
        return self.server.url + path

    def _headers(self, url: str) -> dict[str, str]:
        """The API key, only for the server's own origin (scheme, host and port)."""
        if self._key and origin_of(url) == self.server.origin:
            return {"Authorization": f"Bearer {self._key}"}
        return {}

    def _request(self, method: str, path: str) -> _Answer:
        """One short answer (``/props``, ``/v1/models``): at most 2 MiB (an error page: its first 64 KiB), within
        ANSWER_DEADLINE_S."""
        url = self._url(path)
        reader = BoundedRead(f"{self.server.name}'s answer to {path}", max_body=MAX_ANSWER,
                             deadline_at=deadline_in(ANSWER_DEADLINE_S), advice=self._check_address())
        try:
            try:
                with self._http.stream(method, url, headers=self._headers(url),
                                       extensions=reader.extensions) as response:
                    if response.status_code >= 300:
                        reader.max_body = MAX_ERROR_BODY
                        return _Answer(response.status_code, response.headers, reader.body(response, truncate=True))
                    return _Answer(response.status_code, response.headers, reader.body(response))
            except httpx.HTTPError as exc:
                reader.explain(exc)
                raise _unreachable(self.server, exc) from None
        except ReadLimitError as exc:
            raise RemoteError(exc.message, exc.advice) from None
        finally:
            reader.finish()

    def _check_address(self) -> str:
        return (f"Check that {self.server.url} is a llama-server or an OpenAI-compatible server "
                f"(`python -m app remote add {self.server.name} URL`); nothing was used.")

    def _refused(self, response: _Answer) -> RemoteError | None:
        """The server's refusal in words (a missing or wrong key, a redirect, an error status), or None."""
        name = self.server.name
        if response.status_code in (401, 403):
            if self._key:
                return RemoteError(f"{name} refused the API key (HTTP {response.status_code}).",
                                   f"Check the key and store it again: `python -m app remote add {name} "
                                   f"{self.server.url} --api-key-stdin` (or in the window's Remote server… dialog).")
            return RemoteError(f"{name} needs an API key (HTTP {response.status_code}).",
                               f"Store its key: `python -m app remote add {name} {self.server.url} --api-key-stdin`.")
        if response.is_redirect:
            target = response.headers.get("location", "another address")
            return RemoteError(f"{name} redirects to {target}; redirects are not followed (the key would go along).",
                               "Add the address it redirects to as the server's URL, if you trust it.")
        if response.status_code >= 400:
            return RemoteError(f"{name} answered HTTP {response.status_code}: {_error_text(response)}",
                               "Check the server's log; the model name may be wrong (`remote add --model`).")
        return None

    # ------------------------------------------------------------------ connect

    def load(self, _config: object = None) -> dict[str, Any]:
        """Connect: check the URL rule, find out what the server is and which model it serves. Returns a ``loaded``
        event (with ``warning`` and ``no_tint_reason``) or an ``error`` event."""
        try:
            return self._connect()
        except RemoteError as exc:
            return {"kind": "error", **exc.to_dict(), "log_tail": []}

    def _connect(self) -> dict[str, Any]:
        check_url(self.server.url, self.server.verify_tls)
        props = self._request("GET", "/props")
        refused = self._refused(props) if props.status_code != 404 else None
        if refused is not None:
            raise refused
        try:
            data = loads(props.body) if props.status_code == 200 else None
        except TooDeep:
            raise RemoteError(f"{self.server.name}'s answer to /props is not JSON (nested deeper than any answer "
                              "should be).", self._check_address()) from None
        except ValueError:
            data = None  # not a llama-server: ask the OpenAI way
        if isinstance(data, dict) and ("default_generation_settings" in data or "build_info" in data):
            self.kind, self.props = "llama-server", data
            template = data.get("chat_template")
            self.template = template if isinstance(template, str) and template else None
            alias = data.get("model_alias") or data.get("model_path") or ""
            self.model = self.model or (alias.rsplit("/", 1)[-1][:200] if isinstance(alias, str) else "")
        else:
            self.kind = "openai"
            models = self._request("GET", "/v1/models")
            refused = self._refused(models)
            if refused is not None:
                raise refused
            listed = _json(models)
            entries = listed.get("data") if isinstance(listed, dict) else None
            ids = [m["id"][:200] for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str)] \
                if isinstance(entries, list) else []
            if not self.model:
                if not ids:
                    raise RemoteError(f"{self.server.name} lists no model at /v1/models.",
                                      "Name the model: `python -m app remote add NAME URL --model MODEL`.")
                self.model = ids[0]
        return {"kind": "loaded", "mode": "remote", "server": self.server.name, "server_kind": self.kind,
                "model": self.model, "warning": self.server.warning(), "no_tint_reason": NO_TINT_REASON,
                "drafting": _drafting_of(self.props)}

    def restart(self) -> dict[str, Any] | None:
        """Connect again (after a dropped connection or a server restart)."""
        self.last_crash = None
        return self.load()

    # ------------------------------------------------------------------ replies

    def generate(self, messages: list[Message], options: ChatOptions) -> Iterator[dict[str, Any]]:
        """Send the request now; the iterator streams ``token`` events, the last is ``done`` or ``error``."""
        if self.kind is None:
            loaded = self.load()
            if loaded["kind"] == "error":
                return iter([loaded])
        self._cancel = cancel = threading.Event()
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._events = events
        allowed = (options.max_tokens if options.max_tokens > 0 else UNCAPPED_REPLY_TOKENS) + TOKEN_MARGIN
        self._reader = reader = BoundedRead(
            f"{self.server.name}'s reply", max_body=MAX_LINE + allowed * 16 * KIB, max_line=MAX_LINE,
            deadline_at=deadline_in(READ_TIMEOUT_S + SECONDS_PER_TOKEN * allowed),
            advice="The text so far is kept. " + self._check_address())
        reply, stats = _Reply(max_tokens=allowed), RemoteStats(self.server.name)
        threading.Thread(target=self._stream, args=(messages, options, events, cancel, reader, reply, stats),
                         daemon=True).start()
        return self._drain(events, reply, stats)

    def _drain(self, events: queue.Queue[dict[str, Any]], reply: _Reply,
               stats: RemoteStats) -> Iterator[dict[str, Any]]:
        while True:
            event = events.get()
            if event["kind"] == "_cancelled":  # answer at once; the connection is shut already
                event = self._done(reply, stats, "cancelled")
            yield event
            if event["kind"] in ("done", "error"):
                return

    def cancel(self) -> None:
        """Stop the reply under way: it ends with ``done`` (stop reason ``cancelled``) and the text so far; the
        connection is shut now (the reader thread, blocked in a read or not, ends at once)."""
        self._cancel.set()
        if self._reader is not None:
            self._reader.cancel()
        if self._events is not None:
            self._events.put({"kind": "_cancelled"})

    def _stream(self, messages: list[Message], options: ChatOptions, events: queue.Queue[dict[str, Any]],
                cancel: threading.Event, reader: BoundedRead, reply: _Reply, stats: RemoteStats) -> None:
        """The reader thread: one streaming request, each chunk turned into events."""
        try:
            path, body = self._request_body(messages, options)
            url = self._url(path)
            stats.started = time.perf_counter()
            try:
                with self._http.stream("POST", url, json=body, headers=self._headers(url),
                                       extensions=reader.extensions) as response:
                    if response.status_code != 200:
                        reader.max_body = MAX_ERROR_BODY
                        answer = _Answer(response.status_code, response.headers, reader.body(response, truncate=True))
                        refused = self._refused(answer)
                        raise refused or RemoteError(f"{self.server.name} answered HTTP {response.status_code}.")
                    for data in _sse(reader.lines(response), self._bad_chunk):
                        if cancel.is_set():
                            return
                        for event in self._chunk(data, reply, stats):
                            events.put(event)
                        if reply.finished:
                            break
            except httpx.HTTPError as exc:
                reader.explain(exc)  # our own cancel or deadline shut the socket: say that, not "dropped"
                raise
            if cancel.is_set():
                return
            if not reply.finished:
                raise httpx.RemoteProtocolError("the stream ended before the reply's last chunk")
            events.put(self._done(reply, stats, reply.stop_reason or "eos"))
        except ReadCancelled:
            return
        except ReadLimitError as exc:
            if not cancel.is_set():
                events.put(self._failure(RemoteError(exc.message, exc.advice), reply, stats))
        except (httpx.HTTPError, RemoteError) as exc:
            if not cancel.is_set():
                events.put(self._failure(exc, reply, stats))
        except Exception as exc:  # report, never leave the caller waiting on an empty queue
            if not cancel.is_set():
                events.put({"kind": "error", **_in_words(exc, self.server.name), "log_tail": [], "text": reply.text,
                            "partial": bool(reply.text)})
        finally:
            reader.finish()

    def _request_body(self, messages: list[Message], options: ChatOptions) -> tuple[str, dict[str, Any]]:
        sampling = options.sampling
        if self.kind == "llama-server":
            prompt = render(self.template, messages, thinking=options.thinking)
            body: dict[str, Any] = {
                "stream": True, "prompt": prompt, "n_predict": options.max_tokens if options.max_tokens > 0 else -1,
                "return_tokens": True,
                "temperature": sampling.temperature, "seed": sampling.seed, "top_p": sampling.top_p,
                # greedy: the one best token, as the local engine's greedy sampler
                "top_k": 1 if sampling.temperature <= 0 else sampling.top_k, "min_p": sampling.min_p,
                "repeat_penalty": sampling.repeat_penalty, "repeat_last_n": sampling.repeat_last_n,
                "cache_prompt": True}
            if options.stop:
                body["stop"] = list(options.stop)
            return "/completion", body
        # the OpenAI API knows temperature, top_p and seed; top_k, min_p and repetition_penalty are vLLM's (and
        # llama-server's) extensions, sent only when they change something (temperature 0 is greedy already)
        body = {"stream": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed,
                "model": self.model, "messages": [m.to_dict() for m in messages],
                "stream_options": {"include_usage": True},
                "chat_template_kwargs": {"enable_thinking": options.thinking}}
        if options.max_tokens > 0:  # none: until the model stops or the server's context is full
            body["max_tokens"] = options.max_tokens
        if sampling.temperature > 0:
            body.update(top_k=sampling.top_k, min_p=sampling.min_p)
        if sampling.repeat_penalty != 1.0:
            body["repetition_penalty"] = sampling.repeat_penalty
        if options.stop:
            body["stop"] = list(options.stop)
        return "/v1/chat/completions", body

    def _bad_chunk(self, detail: str) -> RemoteError:
        """A chunk that is not what the server's kind sends: the reply ends, the text so far is kept."""
        kind = "llama-server" if self.kind == "llama-server" else "streaming OpenAI-compatible server"
        return RemoteError(f"{self.server.name} sent a reply chunk that is not what a {kind} sends: {detail}.",
                           "The text so far is kept. " + self._check_address())

    def _chunk(self, data: dict[str, Any], reply: _Reply, stats: RemoteStats) -> list[dict[str, Any]]:
        """Events for one streamed JSON chunk (``/completion`` or a chat-completion chunk), its shape checked."""
        error = data.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            raise RemoteError(f"{self.server.name} stopped the reply: {str(message)[:300]}",
                              "The text so far is kept; see the server's log.")
        timings = self._field(data, "timings", dict, "an object")
        if timings is not None:
            stats.timings = _clean_timings(timings)
        usage = self._field(data, "usage", dict, "an object")
        if usage is not None:
            stats.prompt_tokens = self._figure(usage, "prompt_tokens") or stats.prompt_tokens
            completion = self._figure(usage, "completion_tokens")
            if not stats.timings and completion:
                stats.generated = completion
        pieces: list[tuple[str, list[int]]] = []
        if "choices" in data:  # OpenAI chat-completion chunk
            choices = self._field(data, "choices", list, "a list") or []
            for choice in choices:
                if not isinstance(choice, dict):
                    raise self._bad_chunk(f"a choice is {_kind(choice)}, not an object")
                delta = self._field(choice, "delta", dict, "an object") or {}
                reasoning = self._field(delta, "reasoning_content", str, "a string") \
                    or self._field(delta, "reasoning", str, "a string")
                if reasoning:  # a server that splits the thinking off: give it back its tags, as the model wrote it
                    pieces.append(((("<think>\n" if not reply.reasoning_open else "") + reasoning), []))
                    reply.reasoning_open = True
                content = self._field(delta, "content", str, "a string")
                if content:
                    if reply.reasoning_open:
                        content, reply.reasoning_open = "\n</think>\n\n" + content, False
                    pieces.append((content, []))
                finish = self._field(choice, "finish_reason", str, "a string")
                if finish:
                    reply.stop_reason = _STOP_REASONS.get(finish, finish[:40])
            if not choices and reply.stop_reason:  # the usage chunk after the last choice
                reply.finished = True
        else:  # llama-server /completion chunk
            stats.prompt_tokens = self._figure(data, "tokens_evaluated") or stats.prompt_tokens
            tokens = self._field(data, "tokens", list, "a list of token ids") or []
            if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 1 << 31 for t in tokens):
                raise self._bad_chunk("'tokens' holds something other than token ids")
            content = self._field(data, "content", str, "a string")
            if content or tokens:
                pieces.append((content or "", tokens))
            stop_type = self._field(data, "stop_type", str, "a string")
            if data.get("stop"):
                reply.finished = True
                reply.stop_reason = _STOP_REASONS.get(stop_type or "eos", "eos")
        events = []
        for piece, tokens in pieces:
            stats.record(max(len(tokens), 1))
            reply.text += piece
            reply.tokens += tokens
            reply.pieces += 1
            if max(reply.pieces, len(reply.tokens)) > reply.max_tokens \
                    or len(reply.text) > reply.max_tokens * BYTES_PER_TOKEN:
                raise RemoteError(f"{self.server.name} sent more than the {reply.max_tokens - TOKEN_MARGIN} tokens "
                                  "asked for; the reply was stopped there.",
                                  "The text so far is kept. " + self._check_address())
            events.append({"kind": "token", "token": tokens[-1] if tokens else None, "tokens": tokens,
                           "piece": piece, "provenance": "remote", "stats": stats.to_dict()})
        return events

    def _field(self, data: dict[str, Any], key: str, kind: type, words: str) -> Any:
        """``data[key]`` when it is of ``kind``, None when absent or null; a chunk of the wrong shape otherwise."""
        value = data.get(key)
        if value is None or isinstance(value, kind):
            return value
        raise self._bad_chunk(f"'{key}' is {_kind(value)}, not {words}")

    def _figure(self, data: dict[str, Any], key: str) -> int | None:
        """A count the HUD shows (``prompt_tokens``, ``tokens_evaluated``): a number that is not a count (NaN,
        inf, negative) is dropped like a timing; anything but a number is a wrong shape."""
        value = data.get(key)
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            return _count(value)
        raise self._bad_chunk(f"'{key}' is {_kind(value)}, not a count")

    def _done(self, reply: _Reply, stats: RemoteStats, stop_reason: str) -> dict[str, Any]:
        text = reply.text
        if reply.reasoning_open:
            text += "\n</think>\n"
        return {"kind": "done", "tokens": list(reply.tokens), "provenance": ["remote"] * len(reply.tokens),
                "text": _strip_special(text), "stop_reason": stop_reason, "stats": stats.to_dict()}

    def _failure(self, exc: Exception, reply: _Reply, stats: RemoteStats) -> dict[str, Any]:
        """An ``error`` event that keeps the text so far; a dropped connection says so and can be retried."""
        name = self.server.name
        if isinstance(exc, RemoteError):
            return {"kind": "error", **exc.to_dict(), "log_tail": [], "text": reply.text, "partial": bool(reply.text),
                    "retryable": False, "stats": stats.to_dict()}
        if reply.pieces == 0 and isinstance(exc, httpx.ConnectError):
            error = _unreachable(self.server, exc)
            return {"kind": "error", **error.to_dict(), "log_tail": [], "text": "", "partial": False,
                    "retryable": True, "stats": stats.to_dict()}
        so_far = f" after {stats.generated} tokens" if reply.pieces else " before the first token"
        if isinstance(exc, httpx.TimeoutException):
            what = f"{name} sent nothing for {READ_TIMEOUT_S:.0f} s{so_far}."
        else:  # why, in words from the one place ("HOST closed the connection …"), never the exception's class
            what = f"The connection to {name} dropped{so_far}: {net_failures.describe(exc, self.server.url).clause()}."
        return {"kind": "error", "error": "RemoteConnectionLost", "message": what,
                "advice": ("The text written so far is kept. Retry to ask again (the reply starts over); if it fails "
                           "again, check that the server is still running and reachable."),
                "log_tail": [], "text": reply.text, "partial": bool(reply.text), "retryable": True,
                "stats": stats.to_dict()}

    def close(self) -> None:
        self.cancel()
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Answer:
    """A short answer read in full within its bounds (an error page: its first 64 KiB)."""

    status_code: int
    headers: httpx.Headers
    body: bytes

    @property
    def is_redirect(self) -> bool:
        return self.status_code in (301, 302, 303, 307, 308) and "location" in self.headers


def _sse(lines: Iterable[str], bad_chunk: Any) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent-event stream (``data: {...}``; ``[DONE]`` ends it); a data line that is not
    a JSON object raises ``bad_chunk(detail)``."""
    for line in lines:
        if line.startswith("error:"):
            payload = line[len("error:"):].strip()
            yield {"error": _loads(payload) or payload}
            continue
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return
        if not payload:
            continue
        try:
            data = loads(payload)
        except ValueError:
            raise bad_chunk(f"a chunk is not JSON ({payload[:60]!r}…)") from None
        if not isinstance(data, dict):
            raise bad_chunk(f"a chunk is {_kind(data)}, not an object")
        yield data


def _kind(value: object) -> str:
    """A JSON value's kind in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _count(value: object) -> int | None:
    """A finite, non-negative number as a whole count (below 2**53); else None."""
    number = finite(value)
    return int(number) if number is not None and 0 <= number < 2 ** 53 else None


def _clean_timings(timings: dict[str, Any]) -> dict[str, float | int]:
    """The server's timings that are finite, non-negative numbers; the rest is dropped, never shown."""
    clean: dict[str, float | int] = {}
    for key, value in list(timings.items())[:64]:
        number = finite(value)
        if isinstance(key, str) and number is not None and number >= 0:
            clean[key[:64]] = value if isinstance(value, int) and abs(value) < 2 ** 53 else number
    return clean


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (the HUD formats what it gets)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _loads(text: str) -> Any:
    try:
        return loads(text)
    except ValueError:
        return None


def _json(response: _Answer) -> Any:
    try:
        return loads(response.body)
    except ValueError:
        return None


def _error_text(response: _Answer) -> str:
    data = _json(response)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
    return response.body[:300].decode("utf-8", errors="replace")


def _unreachable(server: RemoteServer, exc: Exception) -> RemoteError:
    from app.machines.remote_servers import RemoteNetworkError

    failure = net_failures.describe(exc, server.url, seconds=READ_TIMEOUT_S)  # in words, from the one place
    if failure.kind == "tls-certificate" or (isinstance(exc, httpx.ConnectError) and "CERTIFICATE" in str(exc).upper()):
        return RemoteError(f"The certificate of {server.host} could not be verified.",
                           "Fix the server's certificate; only if you know why it fails, add the server again with "
                           "--no-verify-tls.")
    return RemoteNetworkError(f"{server.name} ({server.url}) cannot be reached: "
                              f"{net_failures.lower_first(failure.sentence())}",
                              net_failures.advice([failure]))


def _drafting_of(props: dict[str, Any]) -> str | None:
    """What a llama-server says about its drafting (``speculative.n_max`` of its default settings), or None."""
    settings = props.get("default_generation_settings")
    params = settings.get("params") if isinstance(settings, dict) else None
    if not isinstance(params, dict):
        return None
    n_max = params.get("speculative.n_max")
    return f"drafts up to {n_max}" if isinstance(n_max, int) and n_max > 0 else None


def _strip_special(text: str) -> str:
    """The reply as the local engine's ``text``: no end-of-turn marker."""
    for marker in ("<|im_end|>", "<|endoftext|>"):
        text = text.replace(marker, "")
    return text


def _in_words(exc: Exception, name: str) -> dict[str, str]:
    """An unexpected failure of a reply as an error event's fields, in words (never a bare "error: ")."""
    if isinstance(exc, FastMTPError):
        return exc.to_dict()
    detail = " ".join(str(exc).split())[:300]
    return {"error": type(exc).__name__,
            "message": f"Asking {name} for a reply failed: {detail or type(exc).__name__}.",
            "advice": "Try again; if it fails again, check the chat's settings and the server."}
