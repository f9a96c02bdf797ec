"""The one bounded reader (app/core/bounded_http.py) against real servers on 127.0.0.1: the hub's endless listing read
by ``verify FILE`` stays under its memory cap (measured in a child), a trickling answer ends at its total deadline
(a silent socket too, not one read timeout after another), a small gzip answer that would expand to a GiB is cut
at the cap in bounded steps, and a cancel from another thread ends a read blocked on a silent server at once."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.bounded_http import BoundedRead, ReadCancelled, TooDeep, TooLarge, TooSlow, deadline_in, finite, loads
from tests.helpers import peak_rss
from tests.helpers.release_server import Fault, ReleaseServer

REPO = "org/model-GGUF"


def test_the_hubs_endless_listing_is_cut_at_its_cap_within_the_memory_cap(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    env = {**os.environ, "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring", "HF_TOKEN": ""}
    listing = json.dumps([{"path": "model.gguf", "lfs": {"oid": hashlib.sha256(b"x").hexdigest(), "size": 64}}])
    with ReleaseServer({f"api/models/{REPO}/tree/main": listing.encode()}) as hub:
        args = ["verify", str(model), "--repo", REPO, "--endpoint", f"http://127.0.0.1:{hub.port}"]
        baseline = peak_rss.run(args, env=env, as_limit_mib=1024, timeout=300)
        hub.set_fault(f"api/models/{REPO}/tree/main", Fault(endless=True))
        endless = peak_rss.run(args, env=env, as_limit_mib=1024, timeout=300)
    assert baseline.returncode == 4 and "hub hash DIFFERS" in baseline.stdout, baseline.stderr
    assert endless.returncode == 4 and "Traceback" not in endless.stderr, endless.stderr
    assert "The hub's listing at http://127.0.0.1:" in endless.stderr and "is larger than 8 MiB" in endless.stderr
    assert 0 < endless.peak_mib < baseline.peak_mib + 100, (endless.peak_mib, baseline.peak_mib)


def _get(url: str, reader: BoundedRead, **read: bool) -> bytes:
    with httpx.Client(timeout=httpx.Timeout(30.0)) as client, \
            client.stream("GET", url, extensions=reader.extensions) as response:
        return reader.body(response, **read)


def test_a_trickling_answer_ends_at_its_total_deadline() -> None:
    with ReleaseServer({"feed.json": b"x" * 200_000}) as server:
        server.set_fault("feed.json", Fault(trickle_after=0, trickle_piece=100, trickle_delay=0.05))
        reader = BoundedRead("The feed", max_body=1 << 20, deadline_at=deadline_in(1.0))
        started = time.monotonic()
        with pytest.raises(TooSlow, match="The feed did not arrive in time"):
            _get(server.url("feed.json"), reader)
    assert time.monotonic() - started < 10  # not the 200 s the trickle would take, nor a 30 s read timeout


def test_a_silent_server_ends_at_the_deadline_not_after_the_read_timeout() -> None:
    with ReleaseServer({"feed.json": b"{}"}) as server:
        server.set_fault("feed.json", Fault(stall_after=0))
        reader = BoundedRead("The feed", max_body=1 << 20, deadline_at=deadline_in(1.0))
        started = time.monotonic()
        with pytest.raises(TooSlow):
            _get(server.url("feed.json"), reader)
    assert time.monotonic() - started < 10  # the read timeout is 30 s


@pytest.fixture
def gzip_bomb() -> Iterator[str]:
    """A raw HTTP server whose answer is 1 GiB of zeros gzip-compressed to about 1 MiB."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    body = b"".join(squeeze.compress(block) for _ in range(1024)) + squeeze.flush()
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
                with contextlib.suppress(OSError):  # the reader hangs up at its cap
                    conn.sendall(body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/bomb"
    done.set()
    listener.close()
    thread.join(timeout=5)


def test_a_compressed_answer_is_decoded_in_bounded_steps_and_cut_at_the_cap(gzip_bomb: str) -> None:
    reader = BoundedRead("The bomb", max_body=4 << 20, deadline_at=deadline_in(60))
    with pytest.raises(TooLarge, match="The bomb is larger than 4 MiB"):
        _get(gzip_bomb, reader)
    truncated = _get(gzip_bomb, BoundedRead("The bomb", max_body=4 << 20), truncate=True)
    assert truncated == bytes(4 << 20)


def test_cancel_from_another_thread_ends_a_read_blocked_on_a_silent_server() -> None:
    with ReleaseServer({"feed.json": b"{}"}) as server:
        asked = threading.Event()
        server.set_fault("feed.json", Fault(stall_after=0, hook=asked.set))
        reader = BoundedRead("The feed", max_body=1 << 20)
        outcome: list[BaseException] = []

        def read() -> None:
            try:
                _get(server.url("feed.json"), reader)
            except BaseException as exc:  # the test reports what the reader raised
                outcome.append(exc)

        thread = threading.Thread(target=read)
        thread.start()
        assert asked.wait(10)  # the request has reached the server: the reader waits in recv
        reader.cancel()
        thread.join(timeout=10)
    assert not thread.is_alive() and len(outcome) == 1 and isinstance(outcome[0], ReadCancelled)


def test_json_from_outside_never_raises_recursion_error_and_numbers_are_checked() -> None:
    with pytest.raises(TooDeep):
        loads(b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(ValueError):
        loads(b"{")
    assert [finite(v) for v in loads(b"[1, 2.5, Infinity, -Infinity, NaN, 1e999, true, \"3\", null]")] == \
        [1.0, 2.5, None, None, None, None, None, None, None]
    assert finite(10 ** 400) is None
