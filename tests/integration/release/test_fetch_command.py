"""``python -m app fetch`` end to end against a real server on 127.0.0.1, plus the token, fit and mirror commands.

The release is made and signed in the test; the app runs as a child process exactly as a user runs it,
with its folders (and XDG folders) pointed into the test's temporary directory.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest
from keyring.backends import fail
from keyrings.alt.file import PlaintextKeyring

from app.cli import main
from app.core import secrets
from app.models.installed import default_destination
from app.release.catalog import Endpoint, load_catalog, repo_slug
from app.release.download import FetchPlan, fetch_release, token_hosts
from app.release.fetcher import DownloadCancelled, FetchControl, FetchEvent
from app.release.install import Installed
from app.release.publish import KeyPair, keygen, sign_release
from tests.helpers.file_keyring import plaintext_keyring
from tests.helpers.release_server import Fault, ReleaseServer

CATALOG = load_catalog()
INTEG = CATALOG.integrity
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PAYLOAD = {MODEL: os.urandom(300_000), SIDECAR: os.urandom(50_000), INTEG.patch: b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"}
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A child environment whose every app and XDG folder is inside the test's temporary directory."""
    env = dict(os.environ)
    for name in ("data", "config", "cache"):
        env[f"XDG_{name.upper()}_HOME"] = str(tmp_path / f"xdg-{name}")
    env["FASTMTP_DATA_DIR"] = str(tmp_path / "data")
    env["FASTMTP_CONFIG_DIR"] = str(tmp_path / "config")
    env.pop("HF_TOKEN", None)
    return env


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


def signed_release(folder: Path, key: KeyPair, version: str = "1") -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in PAYLOAD.items():
        (folder / name).write_bytes(data)
    sign_release(folder, key.private, version=version)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def server(tmp_path: Path, key: KeyPair) -> Iterator[ReleaseServer]:
    with ReleaseServer(signed_release(tmp_path / "release", key)) as srv:
        yield srv


def run_app(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=REPO_ROOT, env=env, text=True,
                          capture_output=True, timeout=60, input=stdin,
                          stdin=subprocess.DEVNULL if stdin is None else None)


def fetch(env: dict[str, str], server: ReleaseServer, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    proc = run_app(env, "fetch", "--base-url", server.url(""), "--json", *extra)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, lines


def models(env: dict[str, str]) -> list[Path]:
    root = Path(env["FASTMTP_DATA_DIR"]) / "models"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_fetch_installs_verified_files(env: dict[str, str], server: ReleaseServer, key: KeyPair) -> None:
    env["HF_TOKEN"] = "hf_never_sent_to_a_mirror"
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint)
    assert code == 0, lines
    result = lines[-1]
    assert result["kind"] == "result" and result["fingerprint"] == key.fingerprint
    dest = Path(env["FASTMTP_DATA_DIR"]) / "models" / repo_slug(CATALOG.repo)
    assert Path(result["folder"]) == dest
    for name, data in PAYLOAD.items():
        assert (dest / name).read_bytes() == data
    assert (dest / INTEG.manifest).is_file()
    assert all("authorization" not in r.headers for r in server.requests)
    staged = Path(env["FASTMTP_DATA_DIR"]) / "downloads" / repo_slug(CATALOG.repo) / "files"
    assert not any(staged.glob("*.gguf"))  # moved, not copied
    again = run_app(env, "verify", str(dest), "--json")  # the key is pinned now
    assert again.returncode == 0, again.stdout


def test_fetch_to_a_chosen_folder(env: dict[str, str], server: ReleaseServer, key: KeyPair, tmp_path: Path) -> None:
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint, "--dest", str(tmp_path / "mine"))
    assert code == 0, lines
    assert (tmp_path / "mine" / MODEL).read_bytes() == PAYLOAD[MODEL]
    assert models(env) == []


def test_wrong_signature_served_exits_4_with_nothing_installed(env: dict[str, str], server: ReleaseServer,
                                                               key: KeyPair) -> None:
    sig_name = INTEG.manifest + ".sig"
    good = server._entries[sig_name].data
    assert good is not None
    server.put(sig_name, bytes([good[0] ^ 0xFF]) + good[1:])
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint)
    assert code == 4
    assert f"signature of {INTEG.manifest} does not verify" in lines[-1]["message"]
    assert models(env) == [] and server.gets(MODEL) == []  # no gigabytes fetched for an unsigned release


def test_tampered_model_file_exits_4_with_nothing_installed(env: dict[str, str], server: ReleaseServer,
                                                            key: KeyPair) -> None:
    server.set_fault(MODEL, Fault(tamper_at=1234, times=10))
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint)
    assert code == 4, lines
    assert MODEL in lines[-1]["message"] and "sha256" in lines[-1]["message"]
    assert models(env) == []


def test_untrusted_key_without_a_terminal_exits_4(env: dict[str, str], server: ReleaseServer, key: KeyPair) -> None:
    code, lines = fetch(env, server)
    assert code == 4
    assert key.fingerprint in lines[-1]["advice"] and models(env) == []


def test_swapped_key_after_trust_is_a_hard_stop(env: dict[str, str], server: ReleaseServer, key: KeyPair,
                                                tmp_path: Path) -> None:
    assert fetch(env, server, "--trust-fingerprint", key.fingerprint)[0] == 0
    attacker = keygen(tmp_path / "attacker")
    with ReleaseServer(signed_release(tmp_path / "forged", attacker, version="2")) as evil:
        code, lines = fetch(env, evil)
    assert code == 4 and "PUBLISHER KEY HAS CHANGED" in lines[-1]["message"]


def test_missing_model_on_the_mirror_exits_3(env: dict[str, str], server: ReleaseServer, key: KeyPair) -> None:
    server.set_fault(MODEL, Fault(status=404, times=100))
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint)
    assert code == 3, lines
    assert models(env) == []


def test_bad_usage_exits_2(env: dict[str, str]) -> None:
    assert run_app(env, "fetch", "--endpoint", "https://a.example", "--base-url", "https://b.example").returncode == 2
    assert run_app(env, "fetch", "--quant", "Q9_X", "--base-url", "http://127.0.0.1:9/").returncode == 2


def test_the_hub_token_may_go_to_the_hub_only(tmp_path: Path) -> None:
    hub = Endpoint("hf", "https://huggingface.co")
    mirror = Endpoint("hf", "https://mirror.example")
    assert token_hosts(FetchPlan("Q4_K_P", CATALOG.repo, "main", [mirror, hub], tmp_path)) == ["huggingface.co"]
    assert token_hosts(FetchPlan("Q4_K_P", CATALOG.repo, "main", [mirror], tmp_path)) == []


# ----------------------------------------------------------------------------- hostile integrity files, cancel, signals


def downloads(env: dict[str, str]) -> Path:
    return Path(env["FASTMTP_DATA_DIR"]) / "downloads" / repo_slug(CATALOG.repo)


def parts(env: dict[str, str], where: str = "") -> list[Path]:
    """``.part`` files (and their state files) under the downloads folder, or one of its subfolders."""
    root = downloads(env) / where
    return sorted(p for p in root.rglob("*.part*")) if root.exists() else []


SIG = INTEG.manifest + ".sig"


@pytest.mark.parametrize(("name", "fault", "says"), [
    (INTEG.manifest, Fault(endless=True), "too large"),  # close-delimited, never ends
    (INTEG.checksums, Fault(extra_bytes=2 << 20), "announces 2097"),  # 2 MiB more, with an honest Content-Length
    (SIG, Fault(endless=True, claim_length=1 << 40), "announces 1099511627776"),  # a huge Content-Length
    (INTEG.public_key, Fault(endless=True), "too large"),
    (INTEG.provenance, Fault(endless=True, claim_length=100), "does not verify"),  # a length that lies low
], ids=["endless manifest", "large SHA256SUMS", "huge length signature", "endless key", "lying length"])
def test_hostile_integrity_files_exit_4_and_leave_nothing(env: dict[str, str], server: ReleaseServer, key: KeyPair,
                                                          name: str, fault: Fault, says: str) -> None:
    server.set_fault(name, fault)
    started = time.monotonic()
    code, lines = fetch(env, server, "--trust-fingerprint", key.fingerprint)
    assert time.monotonic() - started < 30
    assert code == 4, lines
    error = lines[-1]
    assert name in error["message"] and says in error["message"], error
    if fault.claim_length != 100:
        assert "1 MiB" in error["message"] or "1.0 MiB" in error["message"]
    assert parts(env) == [] and models(env) == [] and server.gets(MODEL) == []


def plan_for(server: ReleaseServer, key: KeyPair) -> FetchPlan:
    return FetchPlan("Q4_K_P", CATALOG.repo, "main", [Endpoint("plain", server.url("").rstrip("/"))],
                     default_destination(CATALOG.repo), trust_fingerprint=key.fingerprint)


@pytest.fixture
def api_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The in-process API uses the same isolated folders as the child processes."""
    for name in ("FASTMTP_DATA_DIR", "FASTMTP_CONFIG_DIR"):
        monkeypatch.setenv(name, env[name])
    return env


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class Background:
    """``fetch_release`` in a thread, with its events and its end (the result or the error)."""

    def __init__(self, plan: FetchPlan, control: FetchControl) -> None:
        self.events: list[FetchEvent] = []
        self.result: Installed | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(plan, control), daemon=True)
        self.thread.start()

    def _run(self, plan: FetchPlan, control: FetchControl) -> None:
        try:
            self.result = fetch_release(plan, on_event=self.events.append, control=control)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float) -> float:
        started = time.monotonic()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "fetch_release did not return"
        return time.monotonic() - started


INTEGRITY_STALLS = {"silent": Fault(silent=True), "stalled mid-body": Fault(endless=True, stall_after=100_000)}


@pytest.mark.parametrize("stall", list(INTEGRITY_STALLS), ids=list(INTEGRITY_STALLS))
def test_cancel_in_the_integrity_phase_stops_at_once_and_keeps_no_part(api_env: dict[str, str],
                                                                      server: ReleaseServer, key: KeyPair,
                                                                      stall: str) -> None:
    server.set_fault(INTEG.manifest, INTEGRITY_STALLS[stall])
    control = FetchControl()
    run = Background(plan_for(server, key), control)
    wait_for(lambda: bool(server.gets(INTEG.manifest)))
    if stall != "silent":
        wait_for(lambda: bool(parts(api_env, "integrity")))  # a partial integrity file is on disk
    control.cancel()
    assert run.join(10) < 5  # not the 30 s stall timeout
    assert isinstance(run.error, DownloadCancelled), run.error
    assert "integrity files" in run.error.message and "no partial file" in run.error.message
    assert parts(api_env) == [] and not (downloads(api_env) / "integrity").exists()
    assert models(api_env) == [] and server.gets(MODEL) == []


def test_pause_in_the_integrity_phase_holds_then_resume_installs(api_env: dict[str, str], server: ReleaseServer,
                                                                 key: KeyPair) -> None:
    server.set_fault(INTEG.manifest, Fault(silent=True))
    control = FetchControl()
    run = Background(plan_for(server, key), control)
    wait_for(lambda: bool(server.gets(INTEG.manifest)))
    control.pause()
    wait_for(lambda: any(e.kind == "paused" for e in run.events))  # the caller hears of it (the GUI's label)
    time.sleep(0.3)
    assert run.thread.is_alive() and len(server.gets(INTEG.manifest)) == 1 and server.gets(MODEL) == []
    control.resume()
    run.join(30)
    assert run.error is None and run.result is not None
    assert (run.result.folder / MODEL).read_bytes() == PAYLOAD[MODEL]
    assert len(server.gets(INTEG.manifest)) == 2  # asked again after the pause shut the silent connection
    assert all(not e.file.startswith(INTEG.manifest) for e in run.events)  # integrity files get no rows


def test_cancel_in_the_model_phase_keeps_the_model_part_only(api_env: dict[str, str], server: ReleaseServer,
                                                             key: KeyPair) -> None:
    server.set_fault(MODEL, Fault(trickle_after=32_768, trickle_piece=1024, trickle_delay=0.05))
    control = FetchControl()
    run = Background(plan_for(server, key), control)
    wait_for(lambda: any(e.kind == "progress" and e.file == MODEL for e in run.events))
    control.cancel()
    assert run.join(10) < 5
    assert isinstance(run.error, DownloadCancelled), run.error
    kept = {p.name: p for p in parts(api_env) if p.name.endswith(".part")}
    assert MODEL + ".part" in kept and kept[MODEL + ".part"].stat().st_size > 0  # kept to resume from
    # the sidecar downloads beside the model: on a busy machine the cancel may find it under way too
    assert set(kept) <= {name + ".part" for name in PAYLOAD}
    assert models(api_env) == []


def test_pause_in_the_model_phase_then_resume_installs(api_env: dict[str, str], server: ReleaseServer,
                                                       key: KeyPair) -> None:
    server.set_fault(MODEL, Fault(trickle_after=32_768, trickle_piece=4096, trickle_delay=0.02))
    control = FetchControl()
    run = Background(plan_for(server, key), control)
    wait_for(lambda: any(e.kind == "progress" and e.file == MODEL for e in run.events))
    control.pause()
    wait_for(lambda: any(e.kind == "paused" for e in run.events))
    assert run.thread.is_alive()
    control.resume()
    run.join(30)
    assert run.error is None and run.result is not None
    assert (run.result.folder / MODEL).read_bytes() == PAYLOAD[MODEL]
    assert server.gets(MODEL)[-1].headers.get("range", "bytes=0-") != "bytes=0-"  # resumed, not restarted


PHASES = {"integrity, silent server": (INTEG.manifest, Fault(silent=True)),
          "integrity, stalled body": (INTEG.manifest, Fault(endless=True, stall_after=100_000)),
          "model files": (MODEL, Fault(trickle_after=32_768, trickle_piece=1024, trickle_delay=0.05))}


@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 1)], ids=["INT", "TERM"])
@pytest.mark.parametrize("phase", list(PHASES))
def test_a_signal_stops_fetch_in_every_phase(env: dict[str, str], server: ReleaseServer, key: KeyPair,
                                             tmp_path: Path, phase: str, signum: int, exit_code: int) -> None:
    name, fault = PHASES[phase]
    server.set_fault(name, fault)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        child = subprocess.Popen([sys.executable, "-m", "app", "fetch", "--base-url", server.url(""),
                                  "--trust-fingerprint", key.fingerprint], cwd=REPO_ROOT, env=env,
                                 stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
        try:
            folder = "files" if name == MODEL else "integrity"
            if phase.endswith("silent server"):
                wait_for(lambda: bool(server.gets(name)))
                time.sleep(0.3)  # the request is in; the child waits for an answer that never comes
            else:
                wait_for(lambda: any(p.name == name + ".part" and p.stat().st_size > 0 for p in parts(env, folder)))
            child.send_signal(signum)
            started = time.monotonic()
            code = child.wait(timeout=15)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert time.monotonic() - started < 10
    message = err.read_text()
    assert code == exit_code, message  # an exit code, never death by the signal
    assert f"Interrupted by {signal.Signals(signum).name}" in message and "cancelled" in message, message
    assert parts(env, "integrity") == [] and models(env) == []
    if name == MODEL:
        assert (downloads(env) / "files" / (MODEL + ".part")).stat().st_size > 0  # kept to resume
    else:
        assert server.gets(MODEL) == []


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_sigint_at_the_trust_question_stops_at_once(env: dict[str, str], server: ReleaseServer, key: KeyPair,
                                                    tmp_path: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    with (tmp_path / "stdout").open("w") as stdout:
        child = subprocess.Popen([sys.executable, "-m", "app", "fetch", "--base-url", server.url("")], cwd=REPO_ROOT,
                                 env=env, stdin=follower, stdout=stdout, stderr=follower)
    os.close(follower)
    seen = b""
    try:
        while b"Compare this fingerprint" not in seen:  # the terminal asks whether to trust the key
            assert select.select([leader], [], [], 30)[0], seen
            chunk = os.read(leader, 4096)
            assert chunk, seen
            seen += chunk
        time.sleep(0.3)  # nobody answers (the question itself goes to stdout, a file here)
        child.send_signal(signal.SIGINT)
        code = child.wait(timeout=15)
        with contextlib.suppress(OSError):  # the child's last words; EIO once it is gone
            seen += os.read(leader, 65536)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(leader)
    assert code == 130, seen
    assert b"Interrupted by SIGINT" in seen
    assert not (Path(env["FASTMTP_CONFIG_DIR"]) / "trusted-keys.json").exists() and models(env) == []
    assert server.gets(MODEL) == []


def test_trust_add_reads_a_bounded_amount(env: dict[str, str]) -> None:
    started = time.monotonic()
    proc = run_app(env, "trust", "add", "/dev/zero")
    assert time.monotonic() - started < 30
    assert proc.returncode == 4, proc.stderr
    assert "/dev/zero" in proc.stderr and "larger than 1 MiB" in proc.stderr
    assert not (Path(env["FASTMTP_CONFIG_DIR"]) / "trusted-keys.json").exists()


@pytest.mark.parametrize("bad", ["file:///etc/passwd", "ftp://mirror.example/rel", "https://"])
def test_a_hand_edited_mirror_list_is_checked_on_load(env: dict[str, str], bad: str) -> None:
    config = Path(env["FASTMTP_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "endpoints.json").write_text(json.dumps({"endpoints": [
        {"kind": "plain", "url": "https://good.example/rel"}, {"kind": "plain", "url": bad}]}))
    for args in (("fetch",), ("fetch", "--json"), ("mirror", "list")):
        proc = run_app(env, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        said = proc.stdout + proc.stderr
        assert repr(bad) in said and "endpoints.json" in said and "not an http(s) URL" in said
    assert run_app(env, "mirror", "remove", bad).returncode == 0
    listed = run_app(env, "mirror", "list", "--json")
    assert listed.returncode == 0
    assert [e["url"] for e in json.loads(listed.stdout)] == ["https://good.example/rel", "https://huggingface.co"]


# ----------------------------------------------------------------------------- token


@pytest.fixture
def file_keyring(tmp_path: Path) -> Iterator[PlaintextKeyring]:
    """A real file-backed keyring in the test's folder, restored afterwards."""
    with plaintext_keyring(tmp_path / "keyring.cfg") as backend:
        yield backend


def test_token_set_status_clear_never_print_the_token(file_keyring: PlaintextKeyring, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    token = "hf_SECRETtoken1234567890"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    assert main(["token", "set"]) == 0
    assert main(["token", "status", "--json"]) == 0
    out = capsys.readouterr()
    assert token not in out.out + out.err
    assert json.loads(out.out.split("\n", 1)[1])["source"] == "keyring"
    assert secrets.get_token() == token
    assert keyring.get_password(secrets.SERVICE, secrets.USERNAME) == token  # really in the keyring backend
    assert main(["token", "clear"]) == 0
    assert secrets.get_token() is None and secrets.status().source is None


def test_hf_token_env_wins(file_keyring: PlaintextKeyring, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets.set_token("hf_stored")
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert secrets.get_token() == "hf_env" and secrets.status().source == "env"


def test_no_keyring_backend_points_at_hf_token(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hf_abc\n"))
        assert main(["token", "set"]) == 1
        err = capsys.readouterr().err
        assert "No keyring backend" in err and "HF_TOKEN" in err and "hf_abc" not in err
    finally:
        keyring.set_keyring(previous)


def test_token_cli_in_a_child_process_with_a_file_keyring(env: dict[str, str], tmp_path: Path) -> None:
    env["PYTHON_KEYRING_BACKEND"] = "keyrings.alt.file.PlaintextKeyring"
    token = "hf_childSECRET987"
    stored = run_app(env, "token", "set", stdin=token + "\n")
    assert stored.returncode == 0, stored.stderr
    status = run_app(env, "token", "status", "--json")
    assert json.loads(status.stdout)["source"] == "keyring"
    assert token not in stored.stdout + stored.stderr + status.stdout + status.stderr
    assert any((tmp_path / "xdg-data").rglob("keyring_pass.cfg"))  # XDG_DATA_HOME isolated the keyring file


# ----------------------------------------------------------------------------- fit and mirrors


def test_fit_recommends_the_largest_that_fits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--vram-gib", "24", "--context", "32768", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recommended"] == "Q5_K_P"
    assert report["kv_bytes_per_token"] == (64 // 4 + 1) * 2 * 4 * 256 * 2
    assert all(q["fits"] == (q["total_bytes"] <= report["vram_bytes"]) for q in report["quants"])
    assert main(["fit", "--vram-gib", "8"]) == 0
    text = capsys.readouterr().out
    assert "None fits" in text and "KV per token" in text


def test_mirror_add_list_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["mirror", "add", "--plain", "https://m.example/rel/"]) == 0
    assert main(["mirror", "list", "--json"]) == 0
    capsys.readouterr()
    assert main(["mirror", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["url"] for e in listed] == ["https://m.example/rel", "https://huggingface.co"]
    assert main(["mirror", "remove", "https://m.example/rel"]) == 0
    assert main(["mirror", "add", "--hf", "ftp://x"]) == 2


def test_xdg_folders_alone_isolate_a_run(env: dict[str, str], key: KeyPair, tmp_path: Path) -> None:
    del env["FASTMTP_DATA_DIR"], env["FASTMTP_CONFIG_DIR"]
    env.pop("FASTMTP_CACHE_DIR", None)
    proc = run_app(env, "trust", "add", str(key.public))
    assert proc.returncode == 0, proc.stderr
    assert key.fingerprint in proc.stdout
    assert (tmp_path / "xdg-config" / "fastmtp-chat" / "trusted-keys.json").is_file()
