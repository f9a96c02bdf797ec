"""A real HTTP chat server on 127.0.0.1 that speaks llama-server's or an OpenAI server's streaming API, with
faults on demand: drop the connection mid-reply, stall, answer an error status or redirect.

The remote engine must be proven against a real socket: a dropped chunked stream and a stalled server only show
their teeth on a real connection. ``requests`` records what every client sent (to assert on ``Authorization``).

    with ChatServer("llama-server", api_key="k") as server:
        server.queue_fault(ChatFault(drop_after=3))
        ...
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WORDS = ["Hello", " from", " the", " fake", " server", ",", " one", " word", " at", " a", " time", "."]
TIMINGS = {"prompt_n": 7, "prompt_ms": 20.0, "prompt_per_second": 350.0, "predicted_n": len(WORDS),
           "predicted_ms": 240.0, "predicted_per_second": 50.0, "draft_n": 10, "draft_n_accepted": 7}


@dataclass
class ChatFault:
    """How the next streaming reply misbehaves."""

    drop_after: int | None = None  # send this many token chunks, then drop the connection mid-stream
    stall_after: int | None = None  # send this many token chunks, then go silent until ``release()``
    status: int | None = None  # answer this status with an error body
    redirect_to: str | None = None  # answer 302 with this Location
    endless_line: bool = False  # after the first chunk, one ``data:`` line that never ends (until the client hangs up)
    open_line: bool = False  # after the first chunk, the start of a ``data:`` line, then silence until a hang-up
    endless_body: bool = False  # with ``status``: an error body that never ends
    hold_after: int | None = None  # send this many token chunks, then wait for the client to hang up
    chunks: list[Any] | None = None  # send these ``data:`` payloads (objects, or raw JSON bytes with Infinity)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None


@dataclass
class ChatServer:
    kind: Literal["llama-server", "openai"] = "llama-server"
    api_key: str | None = None
    words: list[str] = field(default_factory=lambda: list(WORDS))
    reasoning: list[str] = field(default_factory=list)  # OpenAI kind: streamed as reasoning_content first
    tls: ssl.SSLContext | None = None  # serve HTTPS with this context
    endless_props: bool = False  # GET /props answers 200 with a JSON body that never ends
    props_body: bytes | None = None  # GET /props answers 200 with these bytes

    def __post_init__(self) -> None:
        self.requests: list[Seen] = []
        self.faults: list[ChatFault] = []
        self.released = threading.Event()
        self.flooding = threading.Event()  # an endless answer has started
        self.disconnected = threading.Event()  # the client hung up on an endless or held answer
        self.lock = threading.Lock()
        self._httpd = _Quiet(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        if self.tls is not None:
            self._httpd.socket = self.tls.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def queue_fault(self, fault: ChatFault) -> None:
        with self.lock:
            self.faults.append(fault)

    def release(self) -> None:
        self.released.set()

    def seen(self, path: str) -> list[Seen]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self.released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None) -> None:
        self.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        return Handler


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Clients that hang up are what the tests provoke: no tracebacks."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: ChatServer

    def log_message(self, *_args: Any) -> None:
        pass

    def _record(self, body: dict[str, Any] | None = None) -> None:
        owner = self.server_owner
        with owner.lock:
            owner.requests.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                       body))

    def _authorized(self) -> bool:
        key = self.server_owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._json(401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
        return False

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(data).encode(), headers)

    def _raw(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._record()
        owner = self.server_owner
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/props" and owner.kind == "llama-server" and owner.endless_props:
            self._endless(200, b'{"default_generation_settings": {"params": {}}, "chat_template": "', b"x")
        elif self.path == "/props" and owner.props_body is not None:
            self._raw(200, owner.props_body)
        elif self.path == "/props" and owner.kind == "llama-server":
            if self._authorized():
                self._json(200, {"default_generation_settings": {"params": {}}, "chat_template": CHATML,
                                 "model_path": "/models/fake-model.gguf", "build_info": "fake"})
        elif self.path == "/v1/models":
            if self._authorized():
                self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self._record(body)
        owner = self.server_owner
        if self.path not in ("/completion", "/v1/chat/completions"):
            self._json(404, {"error": {"code": 404, "message": "File Not Found"}})
            return
        if not self._authorized():
            return
        with owner.lock:
            fault = owner.faults.pop(0) if owner.faults else ChatFault()
        if fault.status is not None and fault.endless_body:
            self._endless(fault.status, b'{"error": {"message": "', b"no ")
            return
        if fault.status is not None:
            self._json(fault.status, {"error": {"code": fault.status, "message": "the fake server says no"}})
            return
        if fault.redirect_to is not None:
            self._json(302, {}, {"Location": fault.redirect_to})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = self._completion_chunks() if self.path == "/completion" else self._chat_chunks()
        if fault.chunks is not None:
            chunks = list(fault.chunks)
        if fault.endless_line:
            self._event(chunks[0])
            self._flood(b'data: {"content": "', b"x" * 65536)  # a chunk of the stream, then one endless line
            return
        if fault.open_line:
            self._event(chunks[0])
            head = b'data: {"content": "' + b"x" * 65536  # far below the line cap: only a Stop can end this
            self.wfile.write(f"{len(head):x}\r\n".encode() + head + b"\r\n")
            self._hold()
            return
        for sent, data in enumerate(chunks):
            if fault.drop_after is not None and sent == fault.drop_after:
                self.connection.shutdown(socket.SHUT_RDWR)  # mid-stream: no terminating chunk
                self.close_connection = True
                return
            if fault.hold_after is not None and sent == fault.hold_after:
                self._hold()
                return
            if fault.stall_after is not None and sent == fault.stall_after:
                owner.released.wait()
                self.close_connection = True
                return
            self._event(data)
        self.wfile.write(b"0\r\n\r\n")

    def _endless(self, status: int, head: bytes, piece: bytes) -> None:
        """A JSON body that never ends (chunked), until the client hangs up."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._flood(head, piece * (65536 // len(piece)))

    def _flood(self, head: bytes, piece: bytes) -> None:
        """Send ``head``, then ``piece`` for ever, as HTTP chunks; the client hanging up ends it."""
        owner = self.server_owner
        chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        self.close_connection = True
        try:
            self.wfile.write(f"{len(head):x}\r\n".encode() + head + b"\r\n")
            owner.flooding.set()
            while not owner.released.is_set():
                self.wfile.write(chunk)
        except OSError:
            owner.disconnected.set()

    def _hold(self) -> None:
        """Send nothing more and wait until the client hangs up (its end of the socket closes)."""
        owner = self.server_owner
        self.close_connection = True
        self.wfile.flush()
        owner.flooding.set()
        self.connection.settimeout(60)
        try:
            while self.connection.recv(4096):
                pass
        except OSError:
            return
        owner.disconnected.set()

    def _event(self, data: Any) -> None:
        payload = b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _completion_chunks(self) -> list[Any]:
        words = self.server_owner.words
        chunks: list[Any] = [{"content": w, "tokens": [100 + i], "stop": False, "tokens_evaluated": 7}
                             for i, w in enumerate(words)]
        chunks.append({"content": "", "tokens": [], "stop": True, "stop_type": "eos", "timings": TIMINGS,
                       "tokens_predicted": len(words), "tokens_evaluated": 7})
        return chunks

    def _chat_chunks(self) -> list[Any]:
        owner = self.server_owner
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake-model"}
        chunks: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"reasoning_content": w}}]}
                             for w in owner.reasoning]
        chunks += [{**base, "choices": [{"index": 0, "delta": {"content": w}}]} for w in owner.words]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        chunks.append({**base, "choices": [], "usage": {"prompt_tokens": 9,
                                                        "completion_tokens": len(owner.words) + len(owner.reasoning),
                                                        "total_tokens": 9 + len(owner.words) + len(owner.reasoning)}})
        chunks.append(b"[DONE]")
        return chunks
