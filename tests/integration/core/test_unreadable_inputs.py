"""Inputs that once ended in a traceback now end in a message and the documented exit code (README: 1 a job failed,
4 verification): a hub answer nested 200,000 deep, a model file the user may not read, and a history export that
is a device, a pipe, or far too large.

An unreadable file is made unreadable for real: the command runs in a child without the capabilities that let root
read anything (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH are dropped from its bounding set before exec, so the kernel
checks the mode bits for it as for any user), and the file is mode 000 or sits in a folder of mode 000.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.file_keyring import child_keyring_env
from tests.helpers.release_server import ReleaseServer

REPO, REVISION = "org/model-GGUF", "main"
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_root_reading() -> None:
    """In the child, before exec: root keeps its uid but loses the right to read what the mode bits refuse."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _cli(args: list[str], tmp_path: Path, *, unprivileged: bool = False,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **child_keyring_env(tmp_path), "HF_TOKEN": ""}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, preexec_fn=_drop_root_reading if unprivileged else None)


def _message_not_traceback(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stderr.startswith("error: ") and "what to do: " in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def _tree(name: str, data: bytes) -> bytes:
    return json.dumps([{"type": "file", "oid": "a" * 40, "size": 134, "path": name,
                        "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}}]
                      ).encode()


# ----------------------------------------------------------------------------- a hub answer nested too deep


def test_a_hub_answer_nested_200000_deep_is_a_verification_message(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    deep = b"[" * 200_000 + b"]" * 200_000
    with ReleaseServer({f"api/models/{REPO}/tree/{REVISION}": deep}) as hub:
        done = _cli(["verify", str(model), "--repo", REPO, "--endpoint", f"http://127.0.0.1:{hub.port}"], tmp_path)
    _message_not_traceback(done, 4, "is not JSON", "nested deeper than any answer should be")


# ----------------------------------------------------------------------------- a model file nobody may read


@pytest.fixture(params=["file-mode-000", "folder-mode-000"])
def unreadable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, bytes]:
    folder = tmp_path / "models"
    folder.mkdir()
    data = b"GGUF" + bytes(60)
    model = folder / "model.gguf"
    model.write_bytes(data)
    locked = model if request.param == "file-mode-000" else folder
    locked.chmod(0)
    request.addfinalizer(lambda: locked.chmod(0o755))
    return model, data


def test_models_add_of_an_unreadable_file_is_a_message(unreadable: tuple[Path, bytes], tmp_path: Path) -> None:
    model, _ = unreadable
    done = _cli(["models", "add", str(model)], tmp_path, unprivileged=True)
    _message_not_traceback(done, 1, str(model), "ermission denied")


def test_gguf_inspect_of_an_unreadable_file_is_a_message(unreadable: tuple[Path, bytes], tmp_path: Path) -> None:
    model, _ = unreadable
    done = _cli(["gguf", "inspect", str(model)], tmp_path, unprivileged=True)
    _message_not_traceback(done, 1, "model.gguf", "ermission denied")


def test_verify_of_an_unreadable_file_is_a_message(unreadable: tuple[Path, bytes], tmp_path: Path) -> None:
    model, data = unreadable
    with ReleaseServer({f"api/models/{REPO}/tree/{REVISION}": _tree(model.name, data)}) as hub:
        done = _cli(["verify", str(model), "--repo", REPO, "--endpoint", f"http://127.0.0.1:{hub.port}"], tmp_path,
                    unprivileged=True)
    _message_not_traceback(done, 1, str(model), "ermission denied")


# ----------------------------------------------------------------------------- history import of what is no export


def test_history_import_of_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    done = _cli(["history", "import", "/dev/zero"], tmp_path)
    _message_not_traceback(done, 1, "/dev/zero is not a regular file")


def test_history_import_of_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "export.json"
    os.mkfifo(fifo)
    done = _cli(["history", "import", str(fifo)], tmp_path, timeout=60)
    _message_not_traceback(done, 1, f"{fifo} is not a regular file")


def test_history_import_of_a_file_larger_than_any_export_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(300 << 20)  # sparse: no disk used, and nothing of it is read
    done = _cli(["history", "import", str(huge)], tmp_path)
    _message_not_traceback(done, 1, f"{huge} is larger than 256 MiB")
