"""Bad and wrong d2t sidecars (issue 12): refused in words before any native load and by the patched loader
itself, a crashed worker names llama.cpp's assert and does not loop, a sidecar from another model is called out.

Every file here is real: the demo model's d2t sidecar rewritten by our GGUF writer with one thing changed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import numpy as np
import numpy.typing as npt
import pytest
from gguf import ReaderTensor
from pytestqt.qtbot import QtBot

from app.backend.registry import BackendManifest, backend_dir
from app.core.errors import SidecarError
from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, SamplingParams
from app.gguftools.builtin_demo import d2t_ids, ensure_demo_model
from app.gguftools.d2t import check_d2t
from app.gguftools.demo_model import DemoModel
from app.gguftools.inspect import inspect_gguf
from app.gguftools.reader import architecture, open_gguf
from app.gguftools.sidecar import check_pair
from app.gguftools.writer import KVItem, TensorPlan, kv_from_reader, kv_u32, plan_array, write_gguf
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

N_VOCAB = 248320  # the demo model carries the real Qwen vocabulary
HELLO = [Message("user", "Hello there, who are you?")]
OPTIONS = ChatOptions(max_tokens=24, sampling=SamplingParams(temperature=0.0))
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("d2t-demo"), size="tiny", acceptance=0.9, seed=4)


@pytest.fixture(scope="module")
def other(module_tmp: ModuleFolders) -> DemoModel:
    """Another model with the very same shapes (its own word table): its sidecar loads with ``demo``. Not
    English: every English demo says the same passage, so its sidecar would draft right."""
    return ensure_demo_model(module_tmp.mktemp("d2t-other"), size="tiny", acceptance=0.9, seed=5,
                             language="words")


def rewrite_sidecar(src: Path, out: Path, *, d2t: npt.NDArray[Any] | None = None,
                    kv: tuple[KVItem, ...] = ()) -> Path:
    """``src`` written again by our writer, with its d2t tensor and/or some KV pairs replaced."""
    reader = open_gguf(src)
    replaced = {item.key for item in kv}
    items = [*kv_from_reader(reader, skip=lambda key: key in replaced), *kv]
    plans = [plan_array("d2t", d2t) if t.name == "d2t" and d2t is not None else _copied(t) for t in reader.tensors]
    return write_gguf(out, architecture(reader), items, plans)


def _copied(tensor: ReaderTensor) -> TensorPlan:
    return TensorPlan(tensor.name, tensor.tensor_type, tuple(int(d) for d in tensor.shape),
                      lambda: (np.asarray(tensor.data),))


def _with(i: int, value: int | None = None, *, copy_of: int = 0) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[Any]]:
    """Set id ``i`` to ``value``, or to the id at ``copy_of`` (a repeat)."""
    def change(ids: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        ids = ids.copy()
        ids[i] = ids[copy_of] if value is None else value
        return ids
    return change


# case: (the change to the good ids, what the pre-check says, what the patched loader logs)
BAD: dict[str, tuple[Callable[[npt.NDArray[np.int64]], npt.NDArray[Any]], list[str], list[str]]] = {
    "id_is_n_vocab": (_with(5, N_VOCAB), ["maps draft row 5 to token 248320", "vocabulary of 248320 tokens"],
                      ["FastMTP d2t[5] = 248320 is outside the vocabulary [0, 248320)"]),
    "id_300000": (_with(9, 300_000), ["maps draft row 9 to token 300000"],
                  ["FastMTP d2t[9] = 300000 is outside the vocabulary"]),
    "id_2_pow_40": (_with(11, 2**40), ["maps draft row 11 to token 1099511627776"],
                    ["FastMTP d2t[11] = 1099511627776 is outside the vocabulary"]),
    "id_negative": (_with(13, -1), ["maps draft row 13 to token -1"],
                    ["FastMTP d2t[13] = -1 is outside the vocabulary"]),
    "duplicate": (_with(7, copy_of=3), ["maps draft rows 3 and 7 to the same token"],
                  ["FastMTP d2t[7] =", "is a repeated id"]),
    "i32": (lambda ids: ids.astype(np.int32), ["stores its d2t map as I32", "I64"],
            ["FastMTP d2t must be 1-D I64", "got i32"]),
    "two_d": (lambda ids: ids.reshape(2, -1), ["shape [16384, 2]", "must be 1-D"],
              ["tensor 'd2t' has wrong shape"]),
    "count": (lambda ids: ids[:-1], ["maps 32767 draft rows", "has 32768 rows"],
              ["tensor 'output.weight' has wrong shape"]),
}


@pytest.fixture(scope="module")
def bad(demo: DemoModel, module_tmp: ModuleFolders) -> dict[str, Path]:
    folder = module_tmp.mktemp("bad-d2t")
    ids = d2t_ids(demo.sidecar_d2t)
    return {case: rewrite_sidecar(demo.sidecar_d2t, folder / f"{case}.gguf", d2t=change(ids))
            for case, (change, _said, _logged) in BAD.items()}


@pytest.fixture(scope="module")
def crashy(demo: DemoModel, module_tmp: ModuleFolders) -> Path:
    """A sidecar that passes every check but aborts llama.cpp while loading (a GGML_ASSERT on its hparams):
    a stand-in for any native crash a pair can cause."""
    return rewrite_sidecar(demo.sidecar_d2t, module_tmp.mktemp("crashy") / "crashy-d2t.gguf",
                           kv=(kv_u32("qwen35.nextn_predict_layers", 5),))  # == block_count


def _sidecar(demo: DemoModel, draft: Path) -> EngineConfig:
    return EngineConfig(demo.target, mode="sidecar", draft=draft, draft_depth=3, n_ctx=1024)


def _app(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True,
                          env=dict(os.environ), check=False, timeout=600)


# ---------------------------------------------------------------------------------------- the pre-check


@pytest.mark.parametrize("case", list(BAD))
def test_the_pre_check_names_the_file_the_first_bad_id_and_its_position(case: str, demo: DemoModel,
                                                                        bad: dict[str, Path]) -> None:
    from app.native.handles import Model

    path = bad[case]
    said = BAD[case][1]
    with pytest.raises(SidecarError) as direct:
        check_d2t(path)
    with pytest.raises(SidecarError) as paired:  # the engine's and `sidecar check`'s pair check
        check_pair(inspect_gguf(demo.target), inspect_gguf(path))
    with pytest.raises(SidecarError) as loading:  # every native sidecar load checks first
        Model(path, load_mtp=True)
    for caught in (direct, paired, loading):
        assert str(path) in caught.value.message
        assert all(words in caught.value.message for words in said), caught.value.message
        assert "sidecar build" in caught.value.advice and "drafting off" in caught.value.advice


def test_good_sidecars_pass_the_pre_check(demo: DemoModel) -> None:
    assert check_d2t(demo.sidecar_d2t) == 32768
    assert check_d2t(demo.sidecar_d2t, N_VOCAB) == 32768
    assert check_d2t(demo.sidecar_full) is None and check_d2t(demo.target) is None
    with pytest.raises(SidecarError, match="outside the target's vocabulary of 1000 tokens"):
        check_d2t(demo.sidecar_d2t, 1000)  # a target with a smaller vocabulary


# ---------------------------------------------------------------------------------------- the patched loader

_RAW_LOAD = """
import json, sys
from pathlib import Path
from app.native.handles import LOG, explain_load_failure, llama
lib = llama()
params = lib.llama_model_default_params()
params.load_mtp = True
mark = LOG.mark()
model = lib.llama_model_load_from_file(sys.argv[1].encode(), params)  # no Python pre-check on this path
lines = LOG.since(mark)
error = explain_load_failure(Path(sys.argv[1]), lines)
print(json.dumps({"loaded": bool(model), "lines": lines, "error": type(error).__name__, "message": error.message}))
"""


@pytest.mark.parametrize("case", list(BAD))
def test_the_patched_loader_refuses_a_bad_d2t_itself_without_aborting(case: str, bad: dict[str, Path],
                                                                      patched_backend: BackendManifest) -> None:
    env = dict(os.environ, FASTMTP_BACKEND_DIR=str(backend_dir(patched_backend.id)))
    proc = subprocess.run([sys.executable, "-c", _RAW_LOAD, str(bad[case])], capture_output=True, text=True,
                          env=env, check=False, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # no SIGABRT (-6 / 134)
    result = json.loads(proc.stdout)
    assert not result["loaded"]
    log = "\n".join(result["lines"])
    assert all(words in log for words in BAD[case][2]), log[-3000:]
    if "FastMTP d2t" in BAD[case][2][0]:  # the loader's own refusal becomes a sidecar error in words
        assert result["error"] == "SidecarError" and str(bad[case]) in result["message"]


def test_the_patched_loader_refuses_a_d2t_sidecar_without_output_weight(demo: DemoModel, tmp_path: Path,
                                                                        patched_backend: BackendManifest) -> None:
    reader = open_gguf(demo.sidecar_d2t)
    headless = write_gguf(tmp_path / "no-output.gguf", architecture(reader), kv_from_reader(reader),
                          [_copied(t) for t in reader.tensors if t.name != "output.weight"])
    with pytest.raises(SidecarError, match="no 2-D LM head"):
        check_d2t(headless)
    env = dict(os.environ, FASTMTP_BACKEND_DIR=str(backend_dir(patched_backend.id)))
    proc = subprocess.run([sys.executable, "-c", _RAW_LOAD, str(headless)], capture_output=True, text=True,
                          env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert not result["loaded"] and result["error"] == "SidecarError"
    assert "FastMTP d2t draft-vocab trim requires output.weight" in result["message"]


# ---------------------------------------------------------------------------------------- every command

_COMMANDS: dict[str, tuple[str, Callable[[DemoModel, Path], list[str]], str]] = {
    # command: (bad case, arguments, stdin)
    "sidecar check": ("id_is_n_vocab", lambda d, b: ["sidecar", "check", "--target", str(d.target), "--draft", str(b)],
                      ""),
    "chat": ("duplicate", lambda d, b: ["chat", "--model", str(d.target), "--draft", str(b), "--mtp", "sidecar",
                                        "--no-status"], "Hello\n/quit\n"),
    "bench ops": ("id_negative", lambda d, b: ["bench", "ops", "--model", str(d.target), "--draft", str(b),
                                               "--runs", "1", "--prompt-tokens", "16"], ""),
    "bench draft-head": ("count", lambda d, b: ["bench", "draft-head", "--target", str(d.target), "--full",
                                                str(d.sidecar_full), "--d2t", str(b), "--runs", "1"], ""),
    "bench spec": ("id_2_pow_40", lambda d, b: ["bench", "spec", "--target", str(d.target), "--full",
                                                str(d.sidecar_full), "--d2t", str(b), "--no-upstream", "--runs", "1",
                                                "--tokens", "4", "--depths", "1", "--adaptive-max", "0"], ""),
    "bench lossless": ("i32", lambda d, b: ["bench", "lossless", "--target", str(d.target), "--full",
                                            str(d.sidecar_full), "--d2t", str(b), "--tokens", "4"], ""),
}


def _assert_refused(proc: subprocess.CompletedProcess[str], path: Path, said: list[str]) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])  # not a signal, not a crash
    out = proc.stdout + proc.stderr
    assert str(path) in out and all(words in out for words in said), out[-3000:]
    assert "Traceback" not in out


@pytest.mark.parametrize("case", list(BAD))
def test_generate_refuses_each_bad_d2t_sidecar_with_exit_1(case: str, demo: DemoModel, bad: dict[str, Path]) -> None:
    proc = _app("generate", "--model", str(demo.target), "--draft", str(bad[case]), "--mtp", "sidecar",
                "--prompt", "Hello", "--max-tokens", "4")
    _assert_refused(proc, bad[case], BAD[case][1])


@pytest.mark.parametrize("command", list(_COMMANDS))
def test_every_other_command_refuses_a_bad_d2t_sidecar_with_exit_1(command: str, demo: DemoModel,
                                                                   bad: dict[str, Path]) -> None:
    case, arguments, stdin = _COMMANDS[command]
    _assert_refused(_app(*arguments(demo, bad[case]), stdin=stdin), bad[case], BAD[case][1])


def test_llama_server_is_not_started_with_a_bad_d2t_sidecar(demo: DemoModel, bad: dict[str, Path]) -> None:
    from app.machines.upstream_server import UpstreamServer

    server = UpstreamServer(Path("/nonexistent/llama-server"), demo.target, bad["duplicate"])
    try:
        with pytest.raises(SidecarError, match="to the same token"):
            server.start()
        assert server.proc is None
    finally:
        server.client.close()


def test_the_window_shows_a_bad_d2t_pair_in_words(qtbot: QtBot, demo: DemoModel, bad: dict[str, Path],
                                                  tmp_path: Path) -> None:
    from app.chats.history import HistoryStore
    from app.gui.main import MainWindow

    win = MainWindow(history=HistoryStore(tmp_path / "history.sqlite3"))
    try:
        win.show()
        qtbot.waitUntil(lambda: not win.bridge.busy, timeout=WAIT_MS)
        win.chat_page.load(_sidecar(demo, bad["id_300000"]))
        qtbot.waitUntil(win.chat_page.banner.isVisible, timeout=WAIT_MS)
        shown = win.chat_page.banner.text.text()
        assert str(bad["id_300000"]) in shown
        assert "maps draft row 9 to token 300000" in shown and "sidecar build" in shown
        assert not win.chat_page.ready and not win.chat_page.banner.restart_button.isVisible()
    finally:
        win.close()
        win.history.close()


# ---------------------------------------------------------------------------------------- crashes


def test_a_native_abort_while_loading_is_named_kept_in_the_log_and_restarts_without_the_sidecar(
        demo: DemoModel, crashy: Path) -> None:
    with EngineClient() as client:
        crashed = client.load(_sidecar(demo, crashy))
        assert crashed["kind"] == "error" and crashed["error"] == "WorkerCrashed", crashed
        assert crashed["exit_code"] == -signal.SIGABRT and crashed["during"] == "load"
        native = crashed["native_error"]
        assert native is not None and "GGML_ASSERT(hparams.n_layer_nextn < hparams.n_layer_all" in native
        assert "SIGABRT" in crashed["message"] and native in crashed["message"]
        # the tail ends at llama.cpp's own words: no debugger attached, no backtrace after them
        assert crashed["log_tail"][-1].strip() == native
        assert not any(word in line for line in crashed["log_tail"] for word in ("gdb", "[New LWP", "#0 "))
        assert "crashy-d2t.gguf" in crashed["advice"] and "without it" in crashed["advice"]

        loaded = client.restart()
        assert loaded is not None and loaded["kind"] == "loaded" and loaded["mode"] == "off"
        assert "crashy-d2t.gguf" in loaded["notice"] and "GGML_ASSERT" in loaded["notice"]
        assert "drafting is off" in loaded["notice"] and "sidecar check" in loaded["notice"]
        assert client.config is not None and client.config.mode == "off" and client.config.draft is None
        # the crashed run's log is kept beside the new one
        assert native in client.previous_log_path.read_text()
        assert native not in client.log_path.read_text()
        done = list(client.generate(HELLO, OPTIONS))[-1]
        assert done["kind"] == "done" and set(done["provenance"]) == {"target"}


def _crash_with_a_reply_taken(client: EngineClient) -> dict[str, Any]:
    """Freeze the worker, hand it a reply request, then kill it: it dies with the request taken, before it
    answers anything (a crash in the reply's first pass, deterministically); the crash event."""
    assert client.pid is not None
    os.kill(client.pid, signal.SIGSTOP)
    replies = client.generate(HELLO, OPTIONS)  # sent now, into the pipe of the frozen worker
    os.kill(client.pid, signal.SIGKILL)
    events = list(replies)
    assert len(events) == 1
    return events[0]


def test_a_crash_in_the_first_drafting_pass_drops_the_sidecar_but_a_later_one_does_not(demo: DemoModel) -> None:
    with EngineClient() as client:
        assert client.load(_sidecar(demo, demo.sidecar_d2t))["kind"] == "loaded"
        crash = _crash_with_a_reply_taken(client)
        assert crash["error"] == "WorkerCrashed" and crash["during"] == "first_pass", crash
        assert "SIGKILL" in crash["message"] and "without it" in crash["advice"]
        loaded = client.restart()
        assert loaded is not None and loaded["mode"] == "off" and "first drafting pass" in loaded["notice"]

        # a pair that has drafted: a later crash restarts the same pair
        assert client.load(_sidecar(demo, demo.sidecar_d2t))["kind"] == "loaded"
        assert list(client.generate(HELLO, OPTIONS))[-1]["kind"] == "done"
        crash = _crash_with_a_reply_taken(client)
        assert crash["error"] == "WorkerCrashed" and crash["during"] == "reply"
        assert "without it" not in crash["advice"]
        again = client.restart()
        assert again is not None and again["kind"] == "loaded" and again["mode"] == "sidecar"
        assert not again.get("notice")


def test_chat_restarts_once_without_a_crashing_sidecar_and_goes_on(demo: DemoModel, crashy: Path) -> None:
    proc = _app("chat", "--model", str(demo.target), "--draft", str(crashy), "--mtp", "sidecar", "--no-status",
                "--max-tokens", "8", stdin="Hello\n/quit\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("SIGABRT") == 1 and proc.stderr.count("note: The engine crashed while loading") == 1
    assert "GGML_ASSERT" in proc.stderr and "FastMTP chat (off)" in proc.stderr
    assert proc.stdout.count("assistant> ") == 1 and len(proc.stdout.split("assistant> ")[1].strip()) > 0


# ---------------------------------------------------------------------------------------- a pair from another model


def test_a_sidecar_from_another_model_is_called_out_loudly(demo: DemoModel, other: DemoModel) -> None:
    from app.engine.breakeven import drafting_warning

    proc = _app("generate", "--json", "--model", str(demo.target), "--draft", str(other.sidecar_d2t),
                "--mtp", "sidecar", "--prompt", "Hello there", "--max-tokens", "48")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    stats = result["stats"]
    assert stats["drafted"] >= 16 and stats["acceptance"] <= 0.05  # llama.cpp loads it; nothing is accepted
    warning = result["warning"]
    assert warning is not None and "another model" in warning and other.sidecar_d2t.name in warning
    assert f"warning: {warning}" in proc.stderr
    # the window's drafting banner (the one for below-break-even drafting) says the same
    config = _sidecar(demo, other.sidecar_d2t)
    assert drafting_warning(config, stats) == warning
    early = {**stats, "drafted": 8, "accepted": 0, "acceptance": 0.0, "generated": 9}
    assert drafting_warning(config, early) is None  # not after a few rounds only

    right = json.loads(_app("generate", "--json", "--model", str(demo.target), "--draft", str(demo.sidecar_d2t),
                            "--mtp", "sidecar", "--prompt", "Hello there", "--max-tokens", "48").stdout)
    assert right["warning"] is None and right["stats"]["acceptance"] > 0.5
    assert drafting_warning(config, right["stats"]) is None


def test_the_terminal_chat_says_what_the_windows_banner_says(demo: DemoModel, other: DemoModel) -> None:
    from app.engine.breakeven import reply_warning

    proc = _app("chat", "--model", str(demo.target), "--draft", str(other.sidecar_d2t), "--mtp", "sidecar",
                "--no-status", "--temp", "0", "--max-tokens", "48", stdin="Hello there\nAnd again\n/quit\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1  # said once per chat, not after every reply
    assert "another model" in warnings[0] and other.sidecar_d2t.name in warnings[0]
    config = _sidecar(demo, other.sidecar_d2t)
    generated = json.loads(_app("generate", "--json", "--model", str(demo.target), "--draft",
                                str(other.sidecar_d2t), "--mtp", "sidecar", "--prompt", "Hello there",
                                "--max-tokens", "48").stdout)
    assert warnings[0] == f"warning: {reply_warning(config, generated['stats'])}"
