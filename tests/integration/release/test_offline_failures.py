"""Offline failures are fast and in words, from one place (issue 36 item 8; issue 37 item 9).

Real servers on 127.0.0.1 and real failures: a closed port (refused), a name under ``.invalid`` (RFC 2606: the
resolver answers "no such name" at once, checked below), a 503 then a 200, a reset mid-body, a server that
answers nothing and one that drips a byte every 2 s. Checked: a name that does not resolve and a refused
connection are never retried (the whole fetch ends in well under 3 s with the default backoff), every endpoint
tried is named, a retry says "retrying in N s" with no frozen ETA, small files stop at their total deadline in
words, and a killed run's ``feed-<pid>/`` goes on the next run. No exception class or errno reaches the words.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.backend import feed
from app.cli import main
from app.core import net_failures
from app.core.errors import DownloadError
from app.machines.remote_client import RemoteClient
from app.machines.remote_servers import RemoteServer
from app.release import fetcher, updates
from app.release.fetcher import FetchControl, FetchEvent, FileRequest, NetworkDownloadError, fetch_files, pid_folder
from app.release.hub_hash import HubOrigin, hub_file_info
from app.release.updates import UpdateSource, check_for_update
from tests.helpers.release_server import Fault, ReleaseServer

NAME = "feed.json"
DATA = b'{"x": 1}' * 4096
BIG = bytes(range(256)) * 4096  # 1 MiB
NOWHERE = "fastmtp-no-such-host.invalid"
TECHNICAL = ("ConnectError", "Errno", "RemoteProtocolError", "ReadTimeout", "peer closed", "gaierror",
             "Name or service not known", "Traceback")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(fetcher.DEADLINE_ENV, raising=False)


@pytest.fixture
def server() -> Iterator[ReleaseServer]:
    with ReleaseServer({NAME: DATA, NAME + ".sig": b"x" * 64, "model.gguf": BIG}) as srv:
        yield srv


def closed_port() -> int:
    """A port nothing listens on: bound, then closed (the kernel answers a connect with RST)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def in_words(text: str) -> None:
    for technical in TECHNICAL:
        assert technical not in text, text


def fail(requests: list[FileRequest], tmp_path: Path, **kwargs: object) -> tuple[NetworkDownloadError, float,
                                                                               list[FetchEvent]]:
    events: list[FetchEvent] = []
    started = time.monotonic()
    with pytest.raises(NetworkDownloadError) as caught:
        fetch_files(requests, tmp_path / "staging", on_event=events.append, **kwargs)  # type: ignore[arg-type]
    return caught.value, time.monotonic() - started, events


# ----------------------------------------------------------------------------- the one place


def test_the_resolver_here_fails_fast_for_invalid_names() -> None:
    """The premise of the tests below: ``.invalid`` never resolves, and says so at once (no network needed)."""
    started = time.monotonic()
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(NOWHERE, 80)
    assert time.monotonic() - started < 2.0


def test_real_transport_errors_get_their_kind_and_words() -> None:
    port = closed_port()
    with pytest.raises(httpx.ConnectError) as refused:
        httpx.get(f"http://127.0.0.1:{port}/x", timeout=5)
    with pytest.raises(httpx.ConnectError) as unknown:
        httpx.get(f"http://{NOWHERE}/x", timeout=5)
    first = net_failures.describe(refused.value, f"http://127.0.0.1:{port}/x", role="mirror")
    second = net_failures.describe(unknown.value, f"https://{NOWHERE}/x")
    assert (first.kind, first.retryable, second.kind, second.retryable) == (
        "connection-refused", False, "name-not-resolved", False)
    text = net_failures.joined([first, second, first])  # each endpoint said once
    assert text == (f"The mirror 127.0.0.1:{port} refused the connection (nothing listens at that address and "
                    f"port); the name {NOWHERE} could not be found (DNS): no internet connection, or a wrong "
                    "address.")
    assert "Errno" in first.detail  # the technical words are kept, for a tooltip or a log
    mirror_name = net_failures.describe(unknown.value, f"https://{NOWHERE}/x", role="mirror")
    assert mirror_name.clause().startswith(f"the mirror's name {NOWHERE} could not be found (DNS)")
    assert "offline" in net_failures.advice([second]) and "running" in net_failures.advice([first])
    assert net_failures.from_status(503, "http://h:1/x").retryable
    assert net_failures.from_status(429, "http://h/x").clause() == "h is busy: too many requests (HTTP 429)"
    assert not net_failures.from_status(404, "http://h/x").retryable


# ----------------------------------------------------------------------------- no retries where they cannot help


def test_a_refused_connection_fails_at_once_without_retries(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/model.gguf"
    error, elapsed, events = fail([FileRequest("model.gguf", [url], len(BIG))], tmp_path)  # default backoff
    assert elapsed < 3.0, elapsed
    assert not [e for e in events if e.kind == "retry"]
    assert error.cause == "connection-refused" and error.exit_code == 3
    assert error.message.splitlines()[0].endswith("refused the connection (nothing listens at that address and "
                                                  "port).")
    assert url in error.message  # the terminal names what was tried
    in_words(error.message + error.advice)
    assert "ConnectError" in error.detail and "not retried" in error.detail


def test_an_unresolvable_name_fails_at_once_without_retries(tmp_path: Path) -> None:
    error, elapsed, events = fail([FileRequest("model.gguf", [f"https://{NOWHERE}/model.gguf"], len(BIG))], tmp_path)
    assert elapsed < 3.0, elapsed
    assert not [e for e in events if e.kind == "retry"]
    assert error.cause == "name-not-resolved"
    assert f"the name {NOWHERE} could not be found (DNS)" in error.message
    assert "offline" in error.advice and "resume" not in error.advice  # nothing kept, nothing to resume
    in_words(error.message + error.advice)


def test_a_dead_mirror_and_an_unreachable_hub_are_both_named(tmp_path: Path) -> None:
    mirror = f"http://127.0.0.1:{closed_port()}/model.gguf"
    hub = f"https://{NOWHERE}/repo/resolve/main/model.gguf"
    error, elapsed, events = fail([FileRequest("model.gguf", [mirror, hub], len(BIG))], tmp_path,
                                  token_hosts=[NOWHERE])
    assert elapsed < 3.0, elapsed
    assert [f.kind for f in error.failures] == ["connection-refused", "name-not-resolved"]
    first_line = error.message.splitlines()[0]
    assert "the mirror 127.0.0.1:" in first_line and "refused the connection" in first_line
    assert f"the name {NOWHERE} could not be found (DNS)" in first_line  # the hub is not left out
    assert [e.message for e in events if e.kind == "retry"] == [
        f"The mirror 127.0.0.1:{mirror.split(':')[2].split('/')[0]} refused the connection (nothing listens at that "
        "address and port); trying the next mirror"]
    in_words(error.message)


# ----------------------------------------------------------------------------- retries where they help


def test_a_503_then_200_is_one_retry_that_says_when(server: ReleaseServer, tmp_path: Path) -> None:
    server.set_fault("model.gguf", Fault(status=503))
    events: list[FetchEvent] = []
    fetch_files([FileRequest("model.gguf", [server.url("model.gguf")], len(BIG))], tmp_path, on_event=events.append,
                backoff_base=0.2)
    assert (tmp_path / "model.gguf").read_bytes() == BIG
    retries = [e for e in events if e.kind == "retry"]
    assert len(retries) == 1 and len(server.gets("model.gguf")) == 2
    assert retries[0].message.startswith(f"127.0.0.1:{server.port} had a server error (HTTP 503); retrying in 0.")
    assert retries[0].message.endswith(" s (retry 1 of 4)")
    assert retries[0].retry_in_s is not None and 0.2 <= retries[0].retry_in_s <= 0.3


def test_a_reset_mid_body_is_retried_and_the_eta_is_cleared_while_waiting(server: ReleaseServer,
                                                                         tmp_path: Path) -> None:
    server.set_fault("model.gguf", Fault(reset_after=700_000, trickle_after=100_000, trickle_piece=16_384,
                                         trickle_delay=0.02))
    events: list[FetchEvent] = []
    fetch_files([FileRequest("model.gguf", [server.url("model.gguf")], len(BIG))], tmp_path, on_event=events.append,
                backoff_base=0.05)
    assert (tmp_path / "model.gguf").read_bytes() == BIG
    at = next(i for i, e in enumerate(events) if e.kind == "retry")
    before = [e for e in events[:at] if e.kind == "progress" and e.file]
    assert before and before[-1].eta_s is not None  # an ETA was shown while bytes came
    retry = events[at]
    assert "closed the connection" in retry.message and "retrying in" in retry.message
    assert retry.eta_s is None and retry.speed_bps == 0  # not frozen at its last value while waiting
    batch = events[at + 1]
    assert batch.file == "" and batch.kind == "progress" and batch.eta_s is None
    in_words(retry.message)


# ----------------------------------------------------------------------------- the total deadline of small files


@pytest.mark.parametrize("fault", [Fault(trickle_after=0, trickle_piece=1, trickle_delay=2.0, times=5),
                                   Fault(silent=True, times=5)], ids=["a-byte-every-2-s", "never-answers"])
def test_a_small_file_stops_at_its_total_deadline_in_words(server: ReleaseServer, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, fault: Fault) -> None:
    monkeypatch.setenv(fetcher.DEADLINE_ENV, "1.5")
    server.set_fault(NAME, fault)
    error, elapsed, events = fail([FileRequest(NAME, [server.url(NAME)], max_size=1 << 20)], tmp_path)
    assert 1.4 <= elapsed < 4.0, elapsed
    assert error.cause == "too-slow" and error.exit_code == 3
    assert error.message.splitlines()[0] == (f"Could not download {NAME}: 127.0.0.1:{server.port} was too slow: the "
                                             "answer did not arrive within its 1.5 s deadline.")
    assert not [e for e in events if e.kind == "retry"]
    assert [e.error_kind for e in events if e.kind == "error"] == ["download-network"]  # the row is marked
    assert len(server.gets(NAME)) == 1


def test_the_deadline_setting_takes_only_sane_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, expected in (("2.5", 2.5), ("0", 30.0), ("nan", 30.0), ("1e999", 30.0), ("x", 30.0), ("", 30.0)):
        monkeypatch.setenv(fetcher.DEADLINE_ENV, text)
        assert fetcher.small_file_deadline() == expected, text


def test_the_update_check_stops_at_its_deadline_in_words(server: ReleaseServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetcher.DEADLINE_ENV, "1.5")
    server.set_fault(NAME, Fault(trickle_after=0, trickle_piece=1, trickle_delay=2.0))
    started = time.monotonic()
    result = check_for_update("0.1.0", source=UpdateSource(url=server.url(NAME), repo="fastmtp/app"), remember=False)
    assert time.monotonic() - started < 4.0
    assert result.status == "unreachable"
    assert "was too slow: the answer did not arrive within its 1.5 s deadline" in result.summary()
    in_words(result.summary() + result.advice)


def test_the_backend_feed_stops_at_its_deadline_and_leaves_no_folder(server: ReleaseServer,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv(fetcher.DEADLINE_ENV, "1.5")
    server.set_fault(NAME, Fault(trickle_after=0, trickle_piece=1, trickle_delay=2.0))
    started = time.monotonic()
    with pytest.raises(DownloadError) as caught:
        feed.read_feed(server.url(NAME))
    assert time.monotonic() - started < 4.0
    assert "was too slow" in caught.value.message
    in_words(str(caught.value))
    assert not list((tmp_path / "data" / "downloads" / "backends").glob("feed-*"))


# ----------------------------------------------------------------------------- a killed run's folder


def test_folders_of_runs_that_are_gone_are_removed_on_the_next_run(tmp_path: Path) -> None:
    parent = tmp_path / "backends"
    parent.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = parent / f"feed-{int(gone.stdout)}"  # a real process that ended: its pid is free
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "feed.json").write_bytes(b"{}")
    huge = parent / "feed-99999999999999999999"  # no process can have it; never a crash
    huge.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    link = parent / "feed-4194305"  # above Linux's highest pid: a link planted where a folder would be
    link.symlink_to(outside, target_is_directory=True)
    other = parent / "feed-notes"  # not a name we give: left alone
    other.mkdir()
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        running = parent / f"feed-{alive.pid}"  # another run, still going: its folder stays
        running.mkdir()
        ours = pid_folder(parent, "feed")
        assert ours == parent / f"feed-{os.getpid()}"
        assert sorted(p.name for p in parent.iterdir()) == sorted(["feed-notes", running.name])
    finally:
        assert alive.stdin is not None
        alive.stdin.close()
        alive.wait(timeout=30)
    assert (outside / "keep.txt").read_text() == "mine"  # the link went, not what it pointed at


def test_read_feed_removes_a_killed_runs_folder(tmp_path: Path) -> None:
    parent = tmp_path / "data" / "downloads" / "backends"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = parent / f"feed-{int(gone.stdout)}"
    stale.mkdir(parents=True)
    (stale / "feed.json.part").write_bytes(b"x" * 100)
    with pytest.raises(DownloadError):
        feed.read_feed(f"http://127.0.0.1:{closed_port()}/feed.json")
    assert not list(parent.glob("feed-*"))


# ----------------------------------------------------------------------------- everywhere a person reads


def test_the_remote_server_banner_says_refused_in_words() -> None:
    with RemoteClient(RemoteServer("box", f"http://127.0.0.1:{closed_port()}")) as client:
        loaded = client.load()
    assert loaded["kind"] == "error" and "refused the connection" in loaded["message"]
    in_words(loaded["message"] + loaded["advice"])


def test_the_update_check_offline_is_words_and_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.monotonic()
    result = check_for_update("0.1.0", source=UpdateSource(url=f"https://{NOWHERE}/app-feed.json",
                                                           repo="fastmtp/app"), remember=False)
    assert time.monotonic() - started < 3.0
    assert result.summary().startswith(f"Could not reach the update server: the name {NOWHERE} could not be found")
    in_words(result.summary() + result.advice)
    assert updates.DEFAULT_TIMEOUT * 3 >= fetcher.SMALL_FILE_DEADLINE_S  # the 30 s deadline is what bounds it


@pytest.mark.parametrize("argv", [
    ["fetch", "--base-url", "http://127.0.0.1:{port}/", "--dest", "{tmp}/models"],
    ["fetch", "--endpoint", f"https://{NOWHERE}", "--dest", "{tmp}/models"],
    ["backend", "install", "--feed", "http://127.0.0.1:{port}/backend-feed.json"],
    ["backend", "install", "--feed", f"https://{NOWHERE}/backend-feed.json"],
    ["update", "check", "--url", "http://127.0.0.1:{port}/app-feed.json"],
], ids=["fetch-refused", "fetch-dns", "feed-refused", "feed-dns", "update-refused"])
def test_the_terminal_says_it_in_words_quickly(argv: list[str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    args = [a.format(port=port, tmp=tmp_path) for a in argv]
    started = time.monotonic()
    code = main(args)
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 3, err
    assert elapsed < 5.0, elapsed
    assert "refused the connection" in err or "could not be found (DNS)" in err, err
    in_words(err)


# ----------------------------------------------------------------------------- a resolver that never answers


def test_a_lookup_that_never_ends_is_given_up_in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreachable resolver holds getaddrinfo for 20 s and more, beyond any HTTP timeout: the lookup is asked
    in a thread of its own and given up after the connect timeout. The stuck lookup is a real blocking call here
    (it waits on an event the test sets at the end), since no resolver can be made unreachable from a test."""
    release = threading.Event()
    asked: list[str] = []

    def stuck(host: str, _port: int) -> object:
        asked.append(host)
        release.wait(30)
        return []

    try:
        started = time.monotonic()
        with pytest.raises(socket.gaierror) as caught:
            net_failures.resolve_within("https://hub.example/x", 0.3, lookup=stuck)
        assert 0.3 <= time.monotonic() - started < 2.0 and asked == ["hub.example"]
        failure = net_failures.describe(caught.value, "https://hub.example/x")
        assert failure.kind == "name-not-resolved" and not failure.retryable
        net_failures.resolve_within("http://127.0.0.1:1/x", 0.3, lookup=stuck)  # an address: nothing to look up
        with pytest.raises(socket.gaierror):
            net_failures.resolve_within(f"https://{NOWHERE}/x", 5.0)  # the real resolver: not found, at once
        monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
        net_failures.resolve_within("https://hub.example/x", 0.3, lookup=stuck)  # the proxy resolves it
        assert asked == ["hub.example"]
    finally:
        release.set()


def test_time_paused_by_the_user_does_not_count_against_the_deadline(server: ReleaseServer, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetcher.DEADLINE_ENV, "0.5")
    control = FetchControl()
    control.pause()  # paused before it starts: nothing is requested while paused
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(fetch_files([FileRequest(NAME, [server.url(NAME)], max_size=1 << 20)], tmp_path,
                                       control=control))
        except Exception as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=1.5)  # three deadlines' worth of pause
    assert worker.is_alive() and not outcome  # still waiting, not "too slow"
    control.resume()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert isinstance(outcome[0], dict) and (tmp_path / NAME).read_bytes() == DATA


def test_the_hub_hash_check_offline_is_words() -> None:
    origin = HubOrigin("fastmtp/model", "main", "model.gguf")
    for endpoint, words in ((f"http://127.0.0.1:{closed_port()}", "refused the connection"),
                            (f"https://{NOWHERE}", f"the name {NOWHERE} could not be found (DNS)")):
        with pytest.raises(DownloadError) as caught:
            hub_file_info(origin, endpoint=endpoint, timeout=5)
        assert caught.value.message.startswith("The hub could not be read: ") and words in caught.value.message
        in_words(str(caught.value))
