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
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from app.engine.chat_template import Message, render
from app.engine.config import ChatOptions
from app.engine.stats import decode_tps
from app.remote_servers import RemoteError, RemoteServer, check_url, origin_of

ServerKind = Literal["llama-server", "openai"]
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # a long prompt on a busy server may take minutes before its first token
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
        measured = self.timings.get("predicted_per_second")
        if isinstance(measured, int | float) and measured > 0:
            return float(measured)
        if self.first is None or self.last is None:
            return 0.0
        return decode_tps(self.generated, self.last - self.first)

    @property
    def decode_seconds(self) -> float:
        """The server's generation time when it reports it, else first to last streamed token."""
        measured = self.timings.get("predicted_ms")
        if isinstance(measured, int | float) and measured > 0:
            return float(measured) / 1000.0
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    @property
    def rolling_tps(self) -> float:
        if len(self._recent) < 2 or self._recent[-1] <= self._recent[0]:
            return self.decode_tps
        return decode_tps(len(self._recent), self._recent[-1] - self._recent[0])

    def to_dict(self) -> dict[str, Any]:
        """The local engine's stats keys; what a client cannot know is None (tokens per pass, draft timing)."""
        ttft = self.first - self.started if self.first is not None else None
        prompt_tps: float | None = None
        measured = self.timings.get("prompt_per_second")
        if isinstance(measured, int | float) and measured > 0:
            prompt_tps = float(measured)
        elif self.prompt_tokens and ttft:
            prompt_tps = self.prompt_tokens / ttft
        drafted = self.timings.get("draft_n")
        accepted = int(self.timings.get("draft_n_accepted") or 0)
        has_drafts = isinstance(drafted, int) and drafted > 0
        return {
            "prompt_tokens": int(self.timings.get("prompt_n") or self.prompt_tokens),
            "prompt_tps": prompt_tps,
            "time_to_first_token": ttft,
            "generated": int(self.timings.get("predicted_n") or self.generated),
            "decode_tps": self.decode_tps,
            "decode_seconds": self.decode_seconds,
            "rolling_tps": self.rolling_tps,
            "drafted": drafted if has_drafts else 0,
            "accepted": accepted if has_drafts else 0,
            "proposed": drafted if has_drafts else 0,
            "acceptance": accepted / drafted if has_drafts and isinstance(drafted, int) else None,
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
        }


@dataclass
class _Reply:
    """What the stream brought so far (kept by the reader thread, read on cancel)."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    pieces: int = 0
    stop_reason: str = ""
    finished: bool = False
    reasoning_open: bool = False


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

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = self._url(path)
        try:
            return self._http.request(method, url, headers=self._headers(url), **kwargs)
        except httpx.HTTPError as exc:
            raise _unreachable(self.server, exc) from None

    def _refused(self, response: httpx.Response) -> RemoteError | None:
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
        data = _json(props) if props.status_code == 200 else None
        if isinstance(data, dict) and ("default_generation_settings" in data or "build_info" in data):
            self.kind, self.props = "llama-server", data
            template = data.get("chat_template")
            self.template = template if isinstance(template, str) and template else None
            alias = data.get("model_alias") or data.get("model_path") or ""
            self.model = self.model or str(alias).rsplit("/", 1)[-1]
        else:
            self.kind = "openai"
            models = self._request("GET", "/v1/models")
            refused = self._refused(models)
            if refused is not None:
                raise refused
            listed = _json(models)
            ids = [str(m.get("id")) for m in (listed or {}).get("data", []) if isinstance(m, dict)] \
                if isinstance(listed, dict) else []
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
        reply, stats = _Reply(), RemoteStats(self.server.name)
        threading.Thread(target=self._stream, args=(messages, options, events, cancel, reply, stats),
                         daemon=True).start()
        return self._drain(events, reply, stats)

    def _drain(self, events: queue.Queue[dict[str, Any]], reply: _Reply,
               stats: RemoteStats) -> Iterator[dict[str, Any]]:
        while True:
            event = events.get()
            if event["kind"] == "_cancelled":  # answer at once; the reader closes the connection on its next chunk
                event = self._done(reply, stats, "cancelled")
            yield event
            if event["kind"] in ("done", "error"):
                return

    def cancel(self) -> None:
        """Stop the reply under way: it ends with ``done`` (stop reason ``cancelled``) and the text so far."""
        self._cancel.set()
        if self._events is not None:
            self._events.put({"kind": "_cancelled"})

    def _stream(self, messages: list[Message], options: ChatOptions, events: queue.Queue[dict[str, Any]],
                cancel: threading.Event, reply: _Reply, stats: RemoteStats) -> None:
        """The reader thread: one streaming request, each chunk turned into events."""
        try:
            path, body = self._request_body(messages, options)
            url = self._url(path)
            stats.started = time.perf_counter()
            with self._http.stream("POST", url, json=body, headers=self._headers(url)) as response:
                if response.status_code != 200:
                    response.read()
                    refused = self._refused(response)
                    raise refused or RemoteError(f"{self.server.name} answered HTTP {response.status_code}.")
                for data in _sse(response):
                    if cancel.is_set():
                        return
                    for event in self._chunk(data, reply, stats):
                        events.put(event)
                    if reply.finished:
                        break
            if cancel.is_set():
                return
            if not reply.finished:
                raise httpx.RemoteProtocolError("the stream ended before the reply's last chunk")
            events.put(self._done(reply, stats, reply.stop_reason or "eos"))
        except (httpx.HTTPError, RemoteError) as exc:
            if not cancel.is_set():
                events.put(self._failure(exc, reply, stats))
        except Exception as exc:  # report, never leave the caller waiting on an empty queue
            if not cancel.is_set():
                events.put({"kind": "error", "error": type(exc).__name__, "message": str(exc), "advice": "",
                            "log_tail": [], "text": reply.text, "partial": bool(reply.text)})

    def _request_body(self, messages: list[Message], options: ChatOptions) -> tuple[str, dict[str, Any]]:
        sampling = options.sampling
        if self.kind == "llama-server":
            prompt = render(self.template, messages, thinking=options.thinking)
            body: dict[str, Any] = {
                "stream": True, "prompt": prompt, "n_predict": options.max_tokens, "return_tokens": True,
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
                "model": self.model, "messages": [m.to_dict() for m in messages], "max_tokens": options.max_tokens,
                "stream_options": {"include_usage": True},
                "chat_template_kwargs": {"enable_thinking": options.thinking}}
        if sampling.temperature > 0:
            body.update(top_k=sampling.top_k, min_p=sampling.min_p)
        if sampling.repeat_penalty != 1.0:
            body["repetition_penalty"] = sampling.repeat_penalty
        if options.stop:
            body["stop"] = list(options.stop)
        return "/v1/chat/completions", body

    def _chunk(self, data: dict[str, Any], reply: _Reply, stats: RemoteStats) -> list[dict[str, Any]]:
        """Events for one streamed JSON chunk (``/completion`` or a chat-completion chunk)."""
        error = data.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            raise RemoteError(f"{self.server.name} stopped the reply: {message}",
                              "The text so far is kept; see the server's log.")
        if isinstance(data.get("timings"), dict):
            stats.timings = dict(data["timings"])
        if isinstance(data.get("usage"), dict):
            usage = data["usage"]
            stats.prompt_tokens = int(usage.get("prompt_tokens") or stats.prompt_tokens)
            if not stats.timings and usage.get("completion_tokens"):
                stats.generated = int(usage["completion_tokens"])
        pieces: list[tuple[str, list[int]]] = []
        if "choices" in data:  # OpenAI chat-completion chunk
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if reasoning:  # a server that splits the thinking off: give it back its tags, as the model wrote it
                    pieces.append(((("<think>\n" if not reply.reasoning_open else "") + str(reasoning)), []))
                    reply.reasoning_open = True
                content = delta.get("content")
                if content:
                    if reply.reasoning_open:
                        content, reply.reasoning_open = "\n</think>\n\n" + str(content), False
                    pieces.append((str(content), []))
                if choice.get("finish_reason"):
                    reply.stop_reason = _STOP_REASONS.get(str(choice["finish_reason"]), str(choice["finish_reason"]))
            if not data.get("choices") and reply.stop_reason:  # the usage chunk after the last choice
                reply.finished = True
        else:  # llama-server /completion chunk
            stats.prompt_tokens = int(data.get("tokens_evaluated") or stats.prompt_tokens)
            tokens = [int(t) for t in data.get("tokens") or []]
            if data.get("content") or tokens:
                pieces.append((str(data.get("content") or ""), tokens))
            if data.get("stop"):
                reply.finished = True
                reply.stop_reason = _STOP_REASONS.get(str(data.get("stop_type", "eos")), "eos")
        events = []
        for piece, tokens in pieces:
            stats.record(max(len(tokens), 1))
            reply.text += piece
            reply.tokens += tokens
            reply.pieces += 1
            events.append({"kind": "token", "token": tokens[-1] if tokens else None, "tokens": tokens,
                           "piece": piece, "provenance": "remote", "stats": stats.to_dict()})
        return events

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
        if isinstance(exc, httpx.TimeoutException):
            what = f"{name} sent nothing for {READ_TIMEOUT_S:.0f} s"
        else:
            what = f"The connection to {name} dropped"
        so_far = f" after {stats.generated} tokens" if reply.pieces else " before the first token"
        return {"kind": "error", "error": "RemoteConnectionLost",
                "message": f"{what}{so_far}: the server stopped answering mid-reply ({type(exc).__name__}).",
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


def _sse(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent-event stream (``data: {...}``; ``[DONE]`` ends it)."""
    for line in response.iter_lines():
        if line.startswith("error:"):
            payload = line[len("error:"):].strip()
            yield {"error": _loads(payload) or payload}
            continue
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return
        data = _loads(payload)
        if isinstance(data, dict):
            yield data


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _error_text(response: httpx.Response) -> str:
    data = _json(response)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
    return response.text[:300]


def _unreachable(server: RemoteServer, exc: Exception) -> RemoteError:
    from app.remote_servers import RemoteNetworkError

    if isinstance(exc, httpx.ConnectError) and "CERTIFICATE" in str(exc).upper():
        return RemoteError(f"The certificate of {server.host} could not be verified ({exc}).",
                           "Fix the server's certificate; only if you know why it fails, add the server again with "
                           "--no-verify-tls.")
    return RemoteNetworkError(f"{server.name} ({server.url}) cannot be reached: {type(exc).__name__}.",
                              "Check that the server is running and the address and port are right.")


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
