"""llama.cpp's own llama-server, built from the same patched tree, agrees with our engine token for token.

This is the article's usage (``--spec-type draft-mtp --spec-draft-model <d2t sidecar>``): it proves the
sidecar and the patch work outside our loop, and that our draft counts mean what upstream's mean.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.builder import BuildOptions, build_dir_of, plan_build
from app.backend.registry import BackendManifest, backend_dir
from app.core.errors import EngineError
from app.engine.config import EngineConfig, Mode
from app.engine.speculative import SpeculativeDecoder
from app.gguftools.builtin_demo import ensure_demo_model, table_prompt
from app.gguftools.demo_model import DemoModel
from app.machines.upstream_server import UpstreamServer, build_server
from tests.helpers.module_folders import ModuleFolders

N_TOKENS = 96


@pytest.fixture(scope="module")
def server_binary() -> Path:
    """Built once from the patched vendored tree and cached; later runs are a ninja no-op."""
    return build_server(BuildOptions(flavor="cpu"))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("upstream-demo"), size="tiny", acceptance=0.8, seed=9)


def _ours(demo: DemoModel, prompt: list[int], mode: Mode, draft: Path | None, draft_depth: int = 3) -> tuple[list[int],
                                                                                                       int, int]:
    decoder = SpeculativeDecoder(EngineConfig(demo.target, mode=mode, draft=draft, draft_depth=draft_depth, n_ctx=1024))
    try:
        reply = decoder.generate(prompt, N_TOKENS)
    finally:
        decoder.close()
    return reply.tokens, reply.stats.proposed, reply.stats.accepted


@pytest.mark.usefixtures("patched_backend")
def test_llama_server_with_the_d2t_sidecar_matches_our_engine(server_binary: Path, demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    plain, _, _ = _ours(demo, prompt, "off", None)
    ours, proposed, accepted = _ours(demo, prompt, "sidecar", demo.sidecar_d2t)
    assert ours == plain  # lossless in our loop

    with UpstreamServer(server_binary, demo.target, draft=demo.sidecar_d2t, draft_depth=3, ctx_size=1024,
                        threads=2) as server:
        upstream = server.complete(prompt, N_TOKENS)
        again = server.complete(prompt, N_TOKENS)
    assert upstream.tokens == ours, "llama-server's temp-0 completion differs from our engine's"
    assert again.tokens == ours  # no state leaks between requests on the server either

    # upstream counts every drafted token (draft_n) and the accepted ones; so do ``proposed`` / ``accepted``
    assert upstream.drafted > 0, f"llama-server did not draft at all: {upstream.timings}"
    ours_rate = accepted / proposed
    upstream_rate = upstream.accepted / upstream.drafted
    assert abs(ours_rate - upstream_rate) <= 0.05, (ours_rate, upstream_rate, upstream.timings)
    assert abs(proposed - upstream.drafted) <= 0.1 * upstream.drafted, (proposed, upstream.timings)


@pytest.mark.usefixtures("patched_backend")
def test_llama_server_without_a_draft_matches_plain_decoding(server_binary: Path, demo: DemoModel) -> None:
    prompt = table_prompt(demo)
    plain, _, _ = _ours(demo, prompt, "off", None)
    with UpstreamServer(server_binary, demo.target, ctx_size=1024, threads=2) as server:
        completion = server.complete(prompt, N_TOKENS)
    assert completion.tokens == plain
    assert completion.drafted == 0


def test_a_server_that_cannot_start_is_reported_with_its_log(server_binary: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"GGUF but not really")
    with pytest.raises(EngineError) as caught:
        UpstreamServer(server_binary, bogus).start()
    message = caught.value.message
    assert "llama-server exited" in message and "not-a-model.gguf" in message  # which model it could not start with
    # its own log lines, or, when it ended before its logging thread wrote them (llama.cpp does not wait for that
    # thread at exit: an empty log under load), a sentence saying so and where its log is
    assert "Last lines:\n" in message or ("wrote no log lines" in message and "llama-server-" in message), message


def test_the_upstream_build_is_cached(server_binary: Path) -> None:
    build_server(BuildOptions(flavor="cpu"))  # catches up on anything another test touched in the shared tree
    events: list[str] = []
    again = build_server(BuildOptions(flavor="cpu"), on_event=lambda e: events.append(e.message))
    assert again == server_binary
    assert not any("Configuring" in m or "-G Ninja" in m for m in events)  # no second configure
    assert not any("Building CXX" in m for m in events)  # nothing recompiled


def test_the_server_shares_the_backends_build_tree_and_libraries(server_binary: Path,
                                                                   patched_backend: BackendManifest) -> None:
    """One compile of ggml: the server is a target of the backend's own tree and links its shared libllama."""
    build_dir = build_dir_of(plan_build(BuildOptions(flavor="cpu")))
    assert patched_backend.id == build_dir.name
    assert server_binary.parent == build_dir / "bin"
    linked = subprocess.run(["ldd", str(server_binary)], capture_output=True, text=True, check=True).stdout
    libllama = [line for line in linked.splitlines() if "libllama.so" in line]
    assert libllama, f"llama-server is not linked to the shared libllama:\n{linked}"
    assert str(build_dir / "bin") in libllama[0], libllama[0]
    # the backend installed from the same tree carries the very same library file
    installed = backend_dir(patched_backend.id) / "llama_cpp" / "lib" / "libllama.so"
    assert installed.read_bytes() == (build_dir / "bin" / "libllama.so").read_bytes()


def test_backend_server_command_reports_the_binary(server_binary: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "backend", "server", "--json"], capture_output=True,
                          text=True, check=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"kind": "result", "llama_server": str(server_binary)}


@pytest.mark.usefixtures("patched_backend")
def test_bench_spec_runs_ours_and_llama_server_side_by_side(server_binary: Path, tmp_path: Path) -> None:
    """A one-run, one-depth smoke run of the benchmark command: every row measured, files written."""
    done = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--size", "tiny", "--runs", "1",
                           "--tokens", "12", "--modes", "off,d2t", "--depths", "2", "--adaptive-max", "3",
                           "--threads", "1",
                           "--out", str(tmp_path), "--json"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    # llama-server's variants run beside ours, prompt by prompt, not in blocks of their own (the machine drifts more
    # between blocks than the engines differ)
    assert "run 1/1: 5 variants side by side, prompt by prompt" in done.stderr, done.stderr[-2000:]
    result = json.loads(done.stdout)
    rows = {(r["variant"], r["prompt_set"]): r for r in result["rows"]}
    variants = {"off", "d2t sidecar k=2", "d2t sidecar adaptive k<=3", "llama-server off",
                "llama-server d2t sidecar k=2"}
    assert {v for v, _ in rows} == variants and {p for _, p in rows} == {"document", "reasoning"}
    assert all(r["decode_tps_median"] > 0 for r in rows.values())
    ours = rows[("d2t sidecar k=2", "document")]
    assert ours["vs_upstream"] is not None and ours["bound"] is not None and ours["python_ms_per_round"] > 0
    assert rows[("llama-server d2t sidecar k=2", "document")]["drafted"] > 0
    # acceptance set side by side in one definition, accepted of drafts made: llama-server does not say which of its
    # drafts it tested, so the per-tested rate (ours, the bound's ``a``) is not made up for it
    upstream = rows[("llama-server d2t sidecar k=2", "document")]
    assert upstream["acceptance"] is None and upstream["accepted_of_drafted"] is not None
    assert ours["accepted_of_drafted"] == pytest.approx(ours["accepted"] / ours["drafted"], abs=1e-3)
    assert abs(ours["accepted_of_drafted"] - upstream["accepted_of_drafted"]) <= 0.1, (ours, upstream)
    assert ours["acceptance"] >= ours["accepted_of_drafted"]  # of fewer drafts: those up to the first mismatch
    # adaptive is set against llama-server's fastest fixed depth (here the only one, k=2)
    adaptive = rows[("d2t sidecar adaptive k<=3", "document")]
    peer = rows[("llama-server d2t sidecar k=2", "document")]
    assert adaptive["vs_upstream"] == pytest.approx(adaptive["decode_tps_median"] / peer["decode_tps_median"], rel=0.02)
    assert {p.name for p in tmp_path.iterdir()} >= {"spec.json", "spec.md", "spec.png"}


def test_bench_spec_time_limit_keeps_what_it_measured(patched_backend: BackendManifest, tmp_path: Path) -> None:
    """A zero time limit: the first variant still runs (something to report), nothing after it starts."""
    done = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--size", "tiny", "--runs", "2",
                           "--tokens", "8", "--modes", "off,d2t", "--depths", "2", "--no-upstream",
                           "--time-limit", "0", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["cut_short"] is True and result["runs"] == 1
    assert {r["variant"] for r in result["rows"]} == {"off"}
    assert "time limit of 0 s reached" in done.stderr


def test_a_server_that_ends_before_writing_its_log_is_reported_in_words(tmp_path: Path) -> None:
    """llama-server's log is written by a thread it does not wait for at exit, so one that fails at once can leave
    an empty log: the error says that, names the model and where the log is, instead of an empty "Last lines"."""
    silent = tmp_path / "llama-server"
    silent.write_text("#!/bin/sh\nexit 1\n")  # a server that fails before a line of its log is written
    silent.chmod(0o755)
    with pytest.raises(EngineError) as caught:
        UpstreamServer(silent, tmp_path / "model.gguf").start()
    message = caught.value.message
    assert "exited with code 1" in message and "model.gguf" in message, message
    assert "wrote no log lines" in message and "Last lines" not in message, message


@pytest.mark.usefixtures("patched_backend")
def test_pass_cost_sets_both_engines_cpu_and_wall_time_a_token_side_by_side(server_binary: Path,
                                                                         demo: DemoModel) -> None:
    """``pass_cost tokens``: ours and llama-server in turn on one prompt, CPU and wall milliseconds a token each."""
    import re

    from app.bench.pass_cost import tokens

    line = tokens(demo.target.parent, "d2t", runs=2, n_tokens=16, threads=1)
    found = re.fullmatch(r"d2t, 1 thread\(s\): CPU ms per token, ours ([\d.]+) \(.*\), llama-server ([\d.]+) \(.*\); "
                         r"ours / llama-server ([\d.]+); wall ms per token, ours ([\d.]+), llama-server ([\d.]+); "
                         r"ours / llama-server ([\d.]+)", line)
    assert found, line
    cpu_ours, cpu_theirs, cpu_ratio, wall_ours, wall_theirs, wall_ratio = map(float, found.groups())
    assert min(cpu_ours, cpu_theirs, wall_ours, wall_theirs) > 0
    assert cpu_ratio == pytest.approx(cpu_ours / cpu_theirs, abs=2e-3)
    assert wall_ratio == pytest.approx(wall_ours / wall_theirs, abs=2e-3)


@pytest.mark.usefixtures("patched_backend")
def test_bench_spec_decodes_both_engines_deep_into_an_earlier_conversation(server_binary: Path,
                                                                           tmp_path: Path) -> None:
    """``--context``: every prompt after 2,100 tokens of an earlier chat, more than the 2,048-token context a run
    without one makes, so both engines must be made with room for it (llama-server refuses a prompt longer than its
    context) and keep it between prompts."""
    done = subprocess.run([sys.executable, "-m", "app", "bench", "spec", "--size", "tiny", "--runs", "1",
                           "--tokens", "12", "--modes", "off,d2t", "--depths", "2", "--adaptive-max", "0",
                           "--threads", "1", "--context", "2100", "--out", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["context"] == 2100
    rows = {(r["variant"], r["prompt_set"]): r for r in result["rows"]}
    assert {v for v, _ in rows} == {"off", "d2t sidecar k=2", "llama-server off", "llama-server d2t sidecar k=2"}
    assert all(r["decode_tps_median"] > 0 for r in rows.values())
    assert rows[("d2t sidecar k=2", "reasoning")]["vs_upstream"] is not None
    assert "after 2,100 tokens of an earlier conversation" in (tmp_path / "spec.md").read_text()
