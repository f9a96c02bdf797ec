"""The fetcher against a hostile server on 127.0.0.1: every fault ends verified, or in a clear error with nothing
unverified at the final name."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.core.errors import DiskSpaceError, DownloadError, VerificationError
from app.release import part_state
from app.release.fetcher import DownloadCancelled, FetchControl, FetchEvent, FileRequest, fetch_files
from tests.helpers.release_server import Fault, ReleaseServer

REPO = Path(__file__).resolve().parents[3]
NAME = "model.gguf"
DATA = bytes(range(256)) * 4096 + os.urandom(1000)  # 1 MiB and a bit: many network pieces
FAST = {"backoff_base": 0.01, "stall_timeout": 2.0, "connect_timeout": 2.0}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def request(server: ReleaseServer, data: bytes = DATA, *, name: str = NAME, size: bool = True,
            digest: bool = True) -> FileRequest:
    return FileRequest(name, [server.url(name)], len(data) if size else None, sha(data) if digest else None)


@pytest.fixture
def server() -> Iterator[ReleaseServer]:
    with ReleaseServer({NAME: DATA}) as srv:
        yield srv


def assert_nothing_unverified(staging: Path) -> None:
    assert not (staging / NAME).exists()
    assert not (staging / f"{NAME}.part").exists()


def ranges(server: ReleaseServer) -> list[str | None]:
    return [r.headers.get("range") for r in server.gets(NAME)]


def resumed_at(value: str | None, most: int) -> bool:
    """A ``Range: bytes=N-`` with 0 < N <= most (a reset loses what was in flight, so N is not exact)."""
    return value is not None and value.startswith("bytes=") and 0 < int(value[6:].rstrip("-")) <= most


# ---------------------------------------------------------------------------------------------- happy paths


def test_a_file_arrives_verified_with_events_and_no_leftovers(server: ReleaseServer, tmp_path: Path) -> None:
    events: list[FetchEvent] = []
    result = fetch_files([request(server)], tmp_path, on_event=events.append, **FAST)
    fetched = result[NAME]
    assert fetched.path == tmp_path / NAME and fetched.path.read_bytes() == DATA
    assert (fetched.size, fetched.sha256) == (len(DATA), sha(DATA))
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]
    kinds = [e.kind for e in events if e.file == NAME]
    assert kinds[0] == "start" and kinds[-1] == "done"
    assert events[-1].file == "" and events[-1].kind == "done" and events[-1].total_done == len(DATA)
    json.loads(events[0].to_json())


def test_a_reset_mid_file_resumes_with_a_range_request(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(reset_after=300_000))
    events: list[FetchEvent] = []
    fetch_files([request(server)], tmp_path, on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    first, second = ranges(server)
    assert first is None and resumed_at(second, 300_000)
    assert any(e.kind == "retry" for e in events)


def test_a_slow_trickle_still_completes_with_progress(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(trickle_after=len(DATA) - 256 * 1024, trickle_piece=8192, trickle_delay=0.01))
    events: list[FetchEvent] = []
    fetch_files([request(server)], tmp_path, on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    assert len(server.gets(NAME)) == 1
    assert sum(e.kind == "progress" and e.file == NAME for e in events) >= 2


def test_a_stall_is_detected_and_retried_from_where_it_stopped(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(stall_after=200_000))
    events: list[FetchEvent] = []
    fetch_files([request(server)], tmp_path, on_event=events.append, **{**FAST, "stall_timeout": 0.3})
    assert (tmp_path / NAME).read_bytes() == DATA
    assert ranges(server)[1] == "bytes=200000-"
    assert any(e.kind == "retry" and "stopped sending (timed out: no data for 0.3 s)" in e.message for e in events)


def test_server_errors_are_retried_with_backoff_then_succeed(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(status=500, times=3))
    events: list[FetchEvent] = []
    fetch_files([request(server)], tmp_path, on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    assert len(server.gets(NAME)) == 4
    host = f"127.0.0.1:{server.port}"
    assert [e.message.split(";")[0] for e in events if e.kind == "retry"] == [
        f"{host} had a server error (HTTP 500)"] * 3


def test_a_server_that_keeps_failing_gives_a_network_error(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(status=503, times=100))
    with pytest.raises(DownloadError) as caught:
        fetch_files([request(server)], tmp_path, retries=2, **FAST)
    assert caught.value.exit_code == 3
    assert NAME in caught.value.message and server.url(NAME) in caught.value.message
    assert f"127.0.0.1:{server.port} had a server error (HTTP 503) (still after 2 retries)" in caught.value.message
    assert len(server.gets(NAME)) == 3
    assert not (tmp_path / NAME).exists()


def test_not_found_fails_fast_naming_file_and_url(server: ReleaseServer, tmp_path: Path) -> None:
    with pytest.raises(DownloadError) as caught:
        fetch_files([FileRequest("missing.gguf", [server.url("missing.gguf")])], tmp_path, **FAST)
    assert "missing.gguf" in caught.value.message and server.url("missing.gguf") in caught.value.message
    assert "not found (HTTP 404)" in caught.value.message
    assert len([r for r in server.requests if r.path == "/missing.gguf"]) == 1
    assert not (tmp_path / "missing.gguf").exists()


@pytest.mark.parametrize("status", [401, 403])
def test_access_denied_fails_fast_and_points_at_the_hub_token(server: ReleaseServer, tmp_path: Path,
                                                              status: int) -> None:
    server.set_fault(NAME, Fault(status=status, times=10))
    with pytest.raises(DownloadError) as caught:
        fetch_files([request(server)], tmp_path, **FAST)
    assert f"HTTP {status}" in caught.value.message and "token" in caught.value.advice
    assert len(server.gets(NAME)) == 1
    assert_nothing_unverified(tmp_path)


def test_the_next_mirror_is_used_when_the_first_has_no_file(server: ReleaseServer, tmp_path: Path) -> None:
    events: list[FetchEvent] = []
    req = FileRequest(NAME, [server.url("elsewhere/" + NAME), server.url(NAME)], len(DATA), sha(DATA))
    fetch_files([req], tmp_path, on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    assert any("trying the next mirror" in e.message for e in events)


# ---------------------------------------------------------------------------------------------- restarts


def test_a_wrong_416_restarts_from_zero(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(reset_after=300_000))
    server.set_fault(NAME, Fault(bad_416=True))
    fetch_files([request(server)], tmp_path, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    first, second, third = ranges(server)
    assert first is None and resumed_at(second, 300_000) and third is None


def test_a_server_ignoring_range_restarts_from_zero_on_the_same_body(server: ReleaseServer,
                                                                     tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(reset_after=300_000))
    server.set_fault(NAME, Fault(ignore_range=True))
    events: list[FetchEvent] = []
    fetch_files([request(server)], tmp_path, on_event=events.append, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    first, second = ranges(server)
    assert first is None and resumed_at(second, 300_000)
    assert any("ignored Range" in e.message for e in events)


@pytest.mark.parametrize("honours_if_range", [True, False])
def test_a_file_changed_between_attempts_restarts_from_zero(server: ReleaseServer, tmp_path: Path,
                                                            honours_if_range: bool) -> None:
    new = bytes(reversed(DATA))  # same size, new ETag and Last-Modified
    server.set_fault(NAME, Fault(reset_after=300_000, replace_with=new))
    if not honours_if_range:
        server.set_fault(NAME, Fault(ignore_if_range=True))
    fetch_files([request(server, digest=False)], tmp_path, **FAST)
    assert (tmp_path / NAME).read_bytes() == new
    gets = server.gets(NAME)
    assert gets[1].headers.get("if-range") == f'"{sha(DATA)[:24]}"'
    assert gets[-1].headers.get("range") is None or honours_if_range


# ---------------------------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("hop", ["other host name", "other port"])
def test_redirects_are_followed_but_the_token_stays_with_its_host(server: ReleaseServer, tmp_path: Path,
                                                                  hop: str) -> None:
    with ReleaseServer({NAME: DATA}) as cdn:
        target = server.url(NAME, host="localhost") if hop == "other host name" else cdn.url(NAME)
        server.set_fault(NAME, Fault(redirect_to=target))
        fetch_files([request(server)], tmp_path, token="hf_secret", **FAST)
        assert (tmp_path / NAME).read_bytes() == DATA
        sent = server.gets(NAME) + cdn.gets(NAME)
    assert sent[0].headers.get("authorization") == "Bearer hf_secret"
    assert len(sent) == 2 and "authorization" not in sent[1].headers
    assert sent[1].headers["host"] != sent[0].headers["host"]


# ---------------------------------------------------------------------------------------------- bad bytes


@pytest.mark.parametrize("fault", [Fault(tamper_at=123_457), Fault(corrupt=True)], ids=["one byte", "same size"])
def test_wrong_bytes_fail_the_hash_and_are_deleted(server: ReleaseServer, tmp_path: Path, fault: Fault) -> None:
    server.set_fault(NAME, fault)
    with pytest.raises(VerificationError) as caught:
        fetch_files([request(server)], tmp_path, **FAST)
    message = caught.value.message
    assert caught.value.exit_code == 4 and NAME in message and sha(DATA) in message and "got " in message
    assert_nothing_unverified(tmp_path)


@pytest.mark.parametrize("declared", [True, False], ids=["announced", "close-delimited"])
def test_a_longer_body_is_cut_off_and_reported(server: ReleaseServer, tmp_path: Path, declared: bool) -> None:
    server.set_fault(NAME, Fault(extra_bytes=5000, declare_length=declared))
    with pytest.raises(VerificationError) as caught:
        fetch_files([request(server)], tmp_path, **FAST)
    assert NAME in caught.value.message and str(len(DATA)) in caught.value.message
    assert ("announces" if declared else "more than the expected") in caught.value.message
    assert_nothing_unverified(tmp_path)


CAP = 256 * 1024


def capped(server: ReleaseServer, name: str = NAME) -> FileRequest:
    """A file of unknown size and hash with a cap, as the integrity files are fetched."""
    return FileRequest(name, [server.url(name)], max_size=CAP)


@pytest.mark.parametrize("fault", [
    Fault(endless=True),  # close-delimited and endless
    Fault(extra_bytes=CAP),  # larger than the cap, with an honest Content-Length
    Fault(endless=True, claim_length=1 << 40),  # a huge Content-Length, and a body to match
], ids=["endless", "honest length", "huge length"])
def test_a_capped_file_larger_than_its_cap_is_refused_and_deleted(server: ReleaseServer, tmp_path: Path,
                                                                  fault: Fault) -> None:
    server.set_fault(NAME, fault)
    with pytest.raises(VerificationError) as caught:
        fetch_files([capped(server)], tmp_path, **FAST)
    message = caught.value.message
    assert caught.value.exit_code == 4 and NAME in message and "too large" in message and "256 KiB" in message
    assert ("announces" in message) == (fault.claim_length is not None or not fault.endless)
    assert list(tmp_path.iterdir()) == [] and len(server.gets(NAME)) == 1  # no part, no state, no retry


def test_a_capped_file_never_reads_past_a_content_length_that_lies_low(server: ReleaseServer,
                                                                       tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(endless=True, claim_length=10_000))
    fetched = fetch_files([capped(server)], tmp_path, **FAST)[NAME]
    assert fetched.size == 10_000 and fetched.path.read_bytes() == DATA[:10_000]
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_a_capped_file_within_its_cap_arrives(server: ReleaseServer, tmp_path: Path) -> None:
    small = DATA[:CAP]
    server.put(NAME, small)
    assert fetch_files([capped(server)], tmp_path, **FAST)[NAME].path.read_bytes() == small


def test_only_http_urls_are_fetched(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"local file")
    with pytest.raises(DownloadError) as caught:
        fetch_files([FileRequest(NAME, [secret.as_uri()])], tmp_path / "staging", **FAST)
    assert "not an http(s) URL" in caught.value.message and not (tmp_path / "staging" / NAME).exists()


def test_path_traversal_names_are_refused_before_any_request(server: ReleaseServer, tmp_path: Path) -> None:
    for bad in ("../evil.gguf", "/etc/passwd", "C:evil", "a/b.gguf", ".."):
        with pytest.raises(VerificationError, match="not a plain file name"):
            fetch_files([FileRequest(bad, [server.url(NAME)])], tmp_path / "staging", **FAST)
    assert server.requests == []


def test_an_untrusted_tls_certificate_is_refused(tmp_path: Path) -> None:
    import ssl

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with ReleaseServer({NAME: DATA}, tls=context) as tls_server, pytest.raises(DownloadError) as caught:
        fetch_files([request(tls_server)], tmp_path / "staging", **FAST)
    assert "certificate" in caught.value.message and "gave up" not in caught.value.message
    assert not (tmp_path / "staging" / NAME).exists()


# ---------------------------------------------------------------------------------------------- crash and resume


def test_a_fetch_killed_with_sigkill_resumes_to_an_identical_verified_file(server: ReleaseServer,
                                                                           tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(trickle_after=256 * 1024, trickle_piece=4096, trickle_delay=0.01))
    script = ("import sys; from pathlib import Path; from app.release.fetcher import FileRequest, fetch_files; "
              "fetch_files([FileRequest(sys.argv[1], [sys.argv[2]], int(sys.argv[3]), sys.argv[4])], Path(sys.argv[5]),"
              " on_event=lambda e: print(e.to_json(), flush=True))")
    child = subprocess.Popen([sys.executable, "-c", script, NAME, server.url(NAME), str(len(DATA)), sha(DATA),
                              str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:  # the child tells us when it has bytes on disk: no sleeping
        event = json.loads(line)
        if event["kind"] == "progress" and event["file"] == NAME and event["bytes_done"] >= 256 * 1024:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    part = tmp_path / f"{NAME}.part"
    kept = part.stat().st_size
    assert 256 * 1024 <= kept < len(DATA) and not (tmp_path / NAME).exists()
    assert part_state.load(part_state.state_path(part)) is not None

    fetched = fetch_files([request(server)], tmp_path, **FAST)[NAME]
    assert fetched.path.read_bytes() == DATA and fetched.sha256 == sha(DATA)
    last = server.gets(NAME)[-1]
    assert last.headers["range"] == f"bytes={kept}-" and "if-range" in last.headers
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_pause_holds_the_download_and_resume_continues_it(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(trickle_after=128 * 1024, trickle_piece=4096, trickle_delay=0.01))
    control = FetchControl()
    paused = threading.Event()
    events: list[FetchEvent] = []

    def on_event(event: FetchEvent) -> None:
        events.append(event)
        if event.kind == "progress" and event.file == NAME and not paused.is_set():
            control.pause()
        if event.kind == "paused":
            paused.set()

    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(
        fetch_files([request(server)], tmp_path, on_event=on_event, control=control, **FAST)))
    worker.start()
    assert paused.wait(10)
    assert worker.is_alive() and len(server.gets(NAME)) == 1
    control.resume()
    worker.join(20)
    assert results and (tmp_path / NAME).read_bytes() == DATA
    assert [e.kind for e in events if e.kind in ("paused", "resumed")] == ["paused", "resumed"]
    first, second = ranges(server)
    assert first is None and resumed_at(second, len(DATA))


def test_cancel_keeps_the_part_and_a_later_run_resumes_it(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(trickle_after=128 * 1024, trickle_piece=4096, trickle_delay=0.01))
    control = FetchControl()

    def on_event(event: FetchEvent) -> None:
        if event.kind == "progress" and event.file == NAME:
            control.cancel()

    with pytest.raises(DownloadCancelled) as caught:
        fetch_files([request(server)], tmp_path, on_event=on_event, control=control, **FAST)
    assert "cancelled" in caught.value.message and caught.value.exit_code == 3
    kept = (tmp_path / f"{NAME}.part").stat().st_size
    assert kept > 0 and not (tmp_path / NAME).exists()
    fetch_files([request(server)], tmp_path, **FAST)
    assert (tmp_path / NAME).read_bytes() == DATA
    assert ranges(server)[-1] == f"bytes={kept}-"


def control_when_asked(server: ReleaseServer, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` from another thread as soon as the server has received the request for NAME."""
    def run() -> None:
        deadline = time.monotonic() + 20
        while not server.gets(NAME) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the request is in; the client now waits for an answer that does not come
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_cancel_while_the_server_never_answers_ends_at_once(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(silent=True))
    control = FetchControl()
    control_when_asked(server, control.cancel)
    started = time.monotonic()
    with pytest.raises(DownloadCancelled):
        fetch_files([request(server)], tmp_path, control=control, **{**FAST, "stall_timeout": 30.0})
    assert time.monotonic() - started < 10  # not the 30 s stall timeout
    assert len(server.gets(NAME)) == 1 and not (tmp_path / NAME).exists()


def test_pause_while_the_server_never_answers_holds_then_resumes(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault(NAME, Fault(silent=True))
    control = FetchControl()
    events: list[FetchEvent] = []
    control_when_asked(server, control.pause)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(fetch_files(
        [request(server)], tmp_path, control=control, on_event=events.append, **{**FAST, "stall_timeout": 30.0})))
    worker.start()
    deadline = time.monotonic() + 10
    while not any(e.kind == "paused" for e in events) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert worker.is_alive() and len(server.gets(NAME)) == 1  # paused: no new request while paused
    control.resume()
    worker.join(20)
    assert results and (tmp_path / NAME).read_bytes() == DATA


def test_several_files_download_at_once_with_total_progress(tmp_path: Path) -> None:
    files = {f"part-{i}.gguf": os.urandom(300_000 + i) for i in range(3)}
    together = threading.Barrier(3, timeout=10)  # the server lets no body out until all three asked
    events: list[FetchEvent] = []
    with ReleaseServer(files) as srv:
        for name in files:
            srv.set_fault(name, Fault(hook=together.wait))
        requests = [FileRequest(n, [srv.url(n)], len(d), sha(d)) for n, d in files.items()]
        result = fetch_files(requests, tmp_path, max_workers=3, on_event=events.append, **FAST)
    assert not together.broken
    assert {n: f.path.read_bytes() for n, f in result.items()} == files
    total = sum(len(d) for d in files.values())
    batch = [e for e in events if e.file == ""]
    assert batch and all(e.total_bytes == total for e in batch)
    assert batch[-1].kind == "done" and batch[-1].total_done == total
    assert {e.file for e in events if e.kind == "done"} == {*files, ""}


# ---------------------------------------------------------------------------------------------- disk space


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 2 MiB tmpfs where we may mount one (root on Linux), else None."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True) \
        if sys.platform == "linux" and os.geteuid() == 0 else None
    if done is None or done.returncode != 0:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_too_little_space_is_refused_before_the_first_byte(small_disk: Path | None, tmp_path: Path) -> None:
    big = os.urandom(3 * 1024 * 1024)
    with ReleaseServer({NAME: big}) as srv:
        staging = small_disk or tmp_path / "staging"
        size = len(big) if small_disk else 1 << 60  # no small disk here: an impossible size trips the check
        with pytest.raises(DiskSpaceError) as caught:
            fetch_files([FileRequest(NAME, [srv.url(NAME)], size)], staging, **FAST)
        assert srv.requests == []
    assert "needs" in caught.value.message and "free" in caught.value.message
    assert not (staging / NAME).exists()


def test_a_disk_filling_up_mid_write_keeps_the_part(small_disk: Path | None) -> None:
    if small_disk is None:
        pytest.skip("cannot mount a small tmpfs here (needs root on Linux)")
    big = os.urandom(3 * 1024 * 1024)
    with ReleaseServer({NAME: big}) as srv, pytest.raises(DiskSpaceError) as caught:
        fetch_files([FileRequest(NAME, [srv.url(NAME)])], small_disk, **FAST)  # size unknown: no pre-check
    assert "full" in caught.value.message and NAME in caught.value.message
    assert (small_disk / f"{NAME}.part").stat().st_size > 0
    assert not (small_disk / NAME).exists()
