"""A remote server as the chat's engine: our real llama-server with the demo model, and a real fault-injecting
chat server on 127.0.0.1 (dropped connections, stalls, refusals, redirects), with a real file-backed keyring."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyrings.alt.file import PlaintextKeyring

from app.backend.builder import BuildOptions
from app.engine.chat_template import Message
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.engine.session import ChatSession
from app.gguftools.demo_model import DemoModel
from app.machines.remote_client import NO_TINT_REASON, RemoteClient
from app.machines.remote_servers import (
    RemoteError,
    RemoteServer,
    add_server,
    check_url,
    get_server,
    load_servers,
    remove_server,
)
from app.machines.upstream_server import UpstreamServer, build_server, free_port
from tests.helpers.chat_server import TIMINGS, WORDS, ChatFault, ChatServer
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.file_keyring import child_keyring_env, plaintext_keyring
from tests.helpers.module_folders import ModuleFolders

MESSAGES = [Message("user", "Hello there")]
OPTIONS = ChatOptions(max_tokens=40, sampling=SamplingParams(temperature=0.0))


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PlaintextKeyring]:
    """A real file-backed keyring and a config folder of the test's own, restored afterwards."""
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    with plaintext_keyring(tmp_path / "keyring.cfg") as backend:
        yield backend


@pytest.fixture(scope="module")
def server_binary() -> Path:
    return build_server(BuildOptions(flavor="cpu"))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("remote-demo"))


def _reply(client: RemoteClient, messages: list[Message] = MESSAGES,
           options: ChatOptions = OPTIONS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = list(client.generate(messages, options))
    return events[:-1], events[-1]


# ----------------------------------------------------------------------------- our real llama-server


@pytest.mark.usefixtures("patched_backend")
def test_a_reply_through_our_llama_server_equals_the_local_engines_and_reads_its_timings(
        server_binary: Path, demo: DemoModel) -> None:
    session = ChatSession(EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, n_ctx=1024))
    try:
        local, local_text = session.reply(MESSAGES, OPTIONS)
    finally:
        session.close()
    with UpstreamServer(server_binary, demo.target, draft=demo.sidecar_d2t, draft_depth=3, ctx_size=1024, threads=2,
                        api_key="the-key") as server, \
            RemoteClient(RemoteServer("peer", server.url), api_key="the-key") as client:
        loaded = client.load()
        assert loaded["kind"] == "loaded" and loaded["server_kind"] == "llama-server"
        assert loaded["no_tint_reason"] == NO_TINT_REASON
        tokens, done = _reply(client)
    assert done["kind"] == "done"
    assert done["tokens"] == local.tokens  # greedy: token for token
    assert done["text"] == local_text
    assert "".join(t["piece"] for t in tokens) == done["text"]
    assert {t["provenance"] for t in tokens} == {"remote"}  # not tinted: the stream does not say what was drafted
    stats, timings = done["stats"], done["stats"]["server_timings"]
    assert stats["timings_from"] == "llama-server" and timings["draft_n"] > 0
    assert stats["drafted"] == timings["draft_n"] and stats["accepted"] == timings["draft_n_accepted"]
    # a server's count is of drafts made, shown under that name, never as our per-tested acceptance
    assert stats["acceptance"] is None
    assert stats["accepted_of_drafted"] == timings["draft_n_accepted"] / timings["draft_n"]
    assert stats["decode_tps"] == timings["predicted_per_second"]
    assert stats["time_to_first_token"] > 0 and stats["tokens_per_pass"] is None


@pytest.mark.usefixtures("patched_backend")
def test_a_wrong_or_missing_api_key_is_refused_in_words(server_binary: Path, demo: DemoModel) -> None:
    with UpstreamServer(server_binary, demo.target, ctx_size=512, threads=2, api_key="the-key") as server:
        with RemoteClient(RemoteServer("peer", server.url), api_key="not-the-key") as client:
            wrong = client.load()
        with RemoteClient(RemoteServer("peer", server.url), use_keyring=False) as client:
            missing = client.load()
    assert wrong["kind"] == "error" and wrong["message"] == "peer refused the API key (HTTP 401)."
    assert "remote add peer" in wrong["advice"]
    assert missing["kind"] == "error" and missing["message"] == "peer needs an API key (HTTP 401)."


# ----------------------------------------------------------------------------- the fault-injecting server


def test_a_dropped_connection_keeps_the_text_says_so_and_a_retry_works() -> None:
    with ChatServer("llama-server") as server, RemoteClient(RemoteServer("box", server.url)) as client:
        server.queue_fault(ChatFault(drop_after=4))
        tokens, failed = _reply(client)
        assert [t["piece"] for t in tokens] == WORDS[:4]
        assert failed["kind"] == "error" and failed["error"] == "RemoteConnectionLost"
        assert failed["text"] == "".join(WORDS[:4]) and failed["partial"] and failed["retryable"]
        assert failed["message"].startswith("The connection to box dropped after 4 tokens")
        assert "text written so far is kept" in failed["advice"] and "Retry" in failed["advice"]
        _, again = _reply(client)  # the retry: the same request, now answered in full
    assert again["kind"] == "done" and again["text"] == "".join(WORDS)
    assert again["stop_reason"] == "eos"
    assert again["stats"]["accepted_of_drafted"] == TIMINGS["draft_n_accepted"] / TIMINGS["draft_n"]
    assert len(server.seen("/completion")) == 2


def test_a_server_that_is_not_there_is_reported_as_unreachable() -> None:
    with RemoteClient(RemoteServer("box", f"http://127.0.0.1:{free_port()}")) as client:
        loaded = client.load()
        _, failed = _reply(client)  # generate connects first, and says the same
    assert loaded["kind"] == "error" and loaded["error"] == "RemoteNetworkError"
    assert loaded["message"].startswith("box (http://127.0.0.1:") and "cannot be reached" in loaded["message"]
    assert failed["message"] == loaded["message"]


def test_stop_answers_at_once_even_when_the_server_stalls() -> None:
    with ChatServer("llama-server") as server, RemoteClient(RemoteServer("box", server.url)) as client:
        server.queue_fault(ChatFault(stall_after=3))
        stream = client.generate(MESSAGES, OPTIONS)
        pieces = [next(stream)["piece"] for _ in range(3)]
        client.cancel()  # the server sends nothing more: the reply still ends now, with what it said
        done = next(stream)
    assert pieces == WORDS[:3]
    assert done["kind"] == "done" and done["stop_reason"] == "cancelled" and done["text"] == "".join(WORDS[:3])


def test_an_openai_server_streams_with_usage_thinking_tags_and_no_acceptance() -> None:
    with ChatServer("openai", reasoning=["Let", " me", " think"]) as server, \
            RemoteClient(RemoteServer("vllm", server.url)) as client:
        loaded = client.load()
        _, done = _reply(client, options=ChatOptions(max_tokens=40, thinking=False))
    assert loaded["server_kind"] == "openai" and loaded["model"] == "fake-model"
    assert done["text"] == "<think>\nLet me think\n</think>\n\n" + "".join(WORDS)
    assert done["stats"]["generated"] == len(WORDS) + 3 and done["stats"]["prompt_tokens"] == 9
    assert done["stats"]["acceptance"] is None and done["stats"]["accepted_of_drafted"] is None
    assert done["stats"]["timings_from"] is None
    assert done["stats"]["time_to_first_token"] > 0
    body = server.seen("/v1/chat/completions")[0].body
    assert body is not None and body["model"] == "fake-model" and body["stream"] is True
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["temperature"] == 0.0
    assert "top_k" not in body and "repetition_penalty" not in body  # vLLM's extensions, only when they matter


def test_an_error_status_mid_session_is_worded_and_not_a_drop() -> None:
    with ChatServer("llama-server") as server, RemoteClient(RemoteServer("box", server.url)) as client:
        server.queue_fault(ChatFault(status=500))
        _, failed = _reply(client)
    assert failed["kind"] == "error" and not failed["retryable"]
    assert failed["message"] == "box answered HTTP 500: the fake server says no"


# ----------------------------------------------------------------------------- the key goes only to its host


def test_the_api_key_goes_only_to_its_own_host(file_keyring: PlaintextKeyring) -> None:
    with ChatServer("llama-server", api_key="key-for-a") as a, ChatServer("llama-server") as b:
        add_server("a", a.url, api_key="key-for-a")
        add_server("b", b.url)
        for name in ("a", "b"):
            with RemoteClient(get_server(name)) as client:
                assert client.load()["kind"] == "loaded"
                assert _reply(client)[1]["kind"] == "done"
        assert {r.headers.get("authorization") for r in a.requests} == {"Bearer key-for-a"}
        assert all("authorization" not in r.headers for r in b.requests)

        # a redirect from a to b is not followed: b never sees a request carrying a's key
        before = len(b.requests)
        a.queue_fault(ChatFault(redirect_to=b.url + "/completion"))
        with RemoteClient(get_server("a")) as client:
            _, failed = _reply(client)
        assert failed["kind"] == "error" and "redirects are not followed" in failed["message"]
        assert len(b.requests) == before

        # pointing the name at another host leaves the key behind
        add_server("a", b.url)
        assert get_server("a").api_key() is None
        with RemoteClient(get_server("a")) as client:
            assert client.load()["kind"] == "loaded"
        assert all("authorization" not in r.headers for r in b.requests)
    assert "key-for-a" not in Path(os.environ["FASTMTP_CONFIG_DIR"], "remote-servers.json").read_text()


def test_servers_are_kept_without_their_keys_and_removed_with_them(file_keyring: PlaintextKeyring) -> None:
    server, warning = add_server("gpu-box", "http://192.168.1.20:8080/v1/", api_key="sk-123", model="qwen")
    assert server.url == "http://192.168.1.20:8080" and server.model == "qwen"
    assert warning is not None and "not encrypted" in warning
    assert [s.name for s in load_servers()] == ["gpu-box"] and get_server("gpu-box").api_key() == "sk-123"
    assert remove_server("gpu-box") and not remove_server("gpu-box")
    assert load_servers() == [] and file_keyring.get_password("fastmtp-chat", server.key_name) is None
    with pytest.raises(RemoteError, match="cannot be a server name"):
        add_server("no spaces please", "http://127.0.0.1:1")


def test_tls_is_verified_by_default_and_an_unchecked_certificate_is_warned(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with ChatServer("llama-server", api_key="tls-key", tls=context) as server:
        with RemoteClient(RemoteServer("self-signed", server.url), api_key="tls-key") as client:
            refused = client.load()
        assert server.requests == []  # the handshake failed: no request, so no key, ever reached it
        with RemoteClient(RemoteServer("self-signed", server.url, verify_tls=False), api_key="tls-key") as client:
            loaded = client.load()
            done = list(client.generate(MESSAGES, OPTIONS))[-1]
    assert refused["kind"] == "error" and "certificate of 127.0.0.1 could not be verified" in refused["message"]
    assert loaded["kind"] == "loaded" and "is not checked" in loaded["warning"]
    assert done["kind"] == "done" and done["text"] == "".join(WORDS)


# ----------------------------------------------------------------------------- the plain-HTTP rule


@pytest.mark.parametrize("url", ["http://8.8.8.8:8080", "http://1.1.1.1", "http://[2001:4860:4860::8888]:80"])
def test_plain_http_to_a_public_address_is_refused(url: str) -> None:
    with pytest.raises(RemoteError) as caught:
        check_url(url)
    assert "unencrypted" in caught.value.message and "https://" in caught.value.advice


@pytest.mark.parametrize(("url", "words"), [("http://127.0.0.1:8080", "nothing leaves it"),
                                            ("http://localhost:8080", "nothing leaves it"),
                                            ("http://192.168.1.20:8080", "not encrypted"),
                                            ("http://10.0.0.5", "not encrypted"),
                                            ("http://100.101.102.103:8080", "not encrypted"),
                                            ("http://[fd00::5]:8080", "not encrypted")])
def test_plain_http_on_loopback_and_private_networks_is_allowed_with_a_warning(url: str, words: str) -> None:
    _, warning = check_url(url)
    assert warning is not None and words in warning


def test_https_is_allowed_anywhere_and_an_unchecked_certificate_is_warned() -> None:
    assert check_url("https://8.8.8.8:8443/v1") == ("https://8.8.8.8:8443", None)
    _, warning = check_url("https://8.8.8.8:8443", verify_tls=False)
    assert warning is not None and "certificate of 8.8.8.8 is not checked" in warning
    with pytest.raises(RemoteError, match="user name or password"):
        check_url("https://me:secret@8.8.8.8")
    with pytest.raises(RemoteError, match="not a server address"):
        check_url("192.168.1.2:8080")


# ----------------------------------------------------------------------------- the commands


def _cli(args: list[str], tmp_path: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **child_keyring_env(tmp_path)}
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=120)


def test_remote_commands_add_list_test_generate_and_remove(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    with ChatServer("llama-server", api_key="sk-cli") as server:
        added = _cli(["remote", "add", "box", server.url, "--api-key-stdin", "--json"], tmp_path, "sk-cli\n")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["has_key"] is True and "sk-cli" not in added.stdout
        listed = json.loads(_cli(["remote", "list", "--json"], tmp_path).stdout)
        assert [s["name"] for s in listed] == ["box"]
        tested = _cli(["remote", "test", "box", "--json"], tmp_path)
        assert tested.returncode == 0, tested.stderr
        assert json.loads(tested.stdout)["server_kind"] == "llama-server"
        generated = _cli(["generate", "--remote", "box", "--prompt", "Hi", "--json"], tmp_path)
        assert generated.returncode == 0, generated.stderr
        result = json.loads(generated.stdout)
        assert result["text"] == "".join(WORDS) and result["stats"]["accepted_of_drafted"] == 0.7
        server.queue_fault(ChatFault(drop_after=2))
        dropped = _cli(["generate", "--remote", "box", "--prompt", "Hi"], tmp_path)
        assert dropped.returncode == 3  # the network's exit code
        assert dropped.stdout == "".join(WORDS[:2]) and "dropped after 2 tokens" in dropped.stderr
        chat = _cli(["chat", "--remote", "box"], tmp_path, "Hi\n/quit\n")
        assert chat.returncode == 0 and "".join(WORDS) in chat.stdout and "not tinted" in chat.stderr
    assert _cli(["remote", "remove", "box"], tmp_path).returncode == 0
    refused = _cli(["remote", "add", "pub", "http://8.8.8.8:8080"], tmp_path)
    assert refused.returncode == 1 and "unencrypted" in refused.stderr


@pytest.mark.usefixtures("patched_backend")
def test_bench_spec_reports_a_remote_server_beside_the_local_rows(tmp_path: Path) -> None:
    with ChatServer("llama-server") as server:
        done = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--size", "tiny", "--runs", "1",
                               "--tokens", "8", "--modes", "off", "--depths", "2", "--adaptive-max", "0",
                               "--no-upstream", "--threads", "1", "--remote", server.url, "--out", str(tmp_path),
                               "--json"], capture_output=True, text=True, timeout=600)
        asked = server.seen("/completion")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {(r["variant"], r["prompt_set"]): r for r in json.loads(done.stdout)["rows"]}
    label = f"remote 127.0.0.1-{server.port}"
    assert set(rows) == {(v, p) for v in ("off", label) for p in ("document", "reasoning")}
    remote = rows[(label, "document")]
    assert remote["engine"] == "remote" and remote["vs_off"] is None
    # the one definition on the server's clock: the tokens after the first over its generation time
    assert remote["decode_tps_median"] == pytest.approx((TIMINGS["predicted_n"] - 1) / TIMINGS["predicted_ms"] * 1000,
                                                        abs=0.01)  # rounded to 2 digits
    assert remote["acceptance"] is None and remote["accepted_of_drafted"] == pytest.approx(0.7)
    assert asked and all(r.body is not None and r.body["n_predict"] == 8 for r in asked)
    assert label in (tmp_path / "spec.md").read_text()
