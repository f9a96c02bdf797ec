"""Issue 37 item 6: GGUF headers are bounded by what a real header holds, not by the file's size (a sparse file
makes size free). Real sparse files (``truncate``: no disk used), the real CLI in-process, and headers of our own
writer mutated at random (hypothesis): every one reads or is refused in words, quickly."""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.core.errors import GGUFError
from app.gguftools.header import clear_caches, read_gguf_header
from app.gguftools.inspect import inspect_gguf
from app.gguftools.writer import TensorPlan, kv_array, kv_str, kv_u32, plan_array, write_gguf
from tests.helpers.cli_in_process import run_cli
from tests.helpers.module_folders import ModuleFolders

GIB = 1 << 30

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a failure is reported as found: no minutes of shrinking


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))
    clear_caches()
    yield
    clear_caches()


def sparse(path: Path, head: bytes, size: int) -> Path:
    """``head`` then holes up to ``size`` bytes (the disk holds only ``head``)."""
    path.write_bytes(head)
    os.truncate(path, size)
    return path


def first_key_claims(n: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", n)


def value_claims(n: int, key: bytes = b"general.name") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, n)


def nested_arrays(count: int) -> bytes:
    key = b"x.nested"
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 9, count)




def small_gguf(path: Path, *, d2t: list[int] | None = None, vocab: int = 8) -> Path:
    plans: list[TensorPlan] = [plan_array("output.weight", np.zeros((len(d2t) if d2t else vocab, 4), np.float32))]
    if d2t is not None:
        plans.append(plan_array("d2t", np.array(d2t, dtype=np.int64), GGMLQuantizationType.I64))
    kv = [kv_u32("qwen35.nextn_predict_layers", 1), kv_str("tokenizer.chat_template", "{{ messages }}"),
          kv_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(vocab)], GGUFValueType.STRING)]
    return write_gguf(path, "qwen35", kv, plans)


@pytest.mark.parametrize(("name", "head"), [
    ("key", first_key_claims(3 * GIB)), ("value", value_claims(3 * GIB)),
    ("template", value_claims(3 * GIB, b"tokenizer.chat_template")),
    ("nested", nested_arrays((2 * GIB) // 12)), ("nested-many", nested_arrays(10_000_000)),
])
def test_a_sparse_file_claiming_gigabytes_is_refused_in_words_at_once(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       name: str, head: bytes) -> None:
    path = sparse(tmp_path / f"{name}.gguf", head, 3 * GIB + 4096)
    started = time.monotonic()
    code, text = run_cli(capsys, "gguf", "inspect", str(path))
    assert code == 1 and "is damaged or incomplete" in text and "Traceback" not in text, text
    assert "any real GGUF file" in text or "real files" in text or "any real model" in text, text
    code, text = run_cli(capsys, "models", "add", str(path))
    assert code == 1 and "is damaged or incomplete" in text and "Traceback" not in text, text
    assert time.monotonic() - started < 5


def test_a_nested_array_file_is_answered_quickly(tmp_path: Path) -> None:
    """Arrays of empty arrays, as many as the cap allows: read in well under the 120 s the issue measured."""
    path = sparse(tmp_path / "nested.gguf", nested_arrays(60_000), 2 * GIB)
    started = time.monotonic()
    header = read_gguf_header(path)
    assert header.array_length("x.nested") == 60_000 and time.monotonic() - started < 5
    path = sparse(tmp_path / "deep.gguf", nested_arrays(70_000), 2 * GIB)
    with pytest.raises(GGUFError, match="arrays inside arrays"):
        read_gguf_header(path)


def test_models_scan_skips_a_hostile_file_with_a_note_and_goes_on(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    sparse(folder / "a-hostile.gguf", first_key_claims(3 * GIB), 3 * GIB + 4096)
    small_gguf(folder / "b-good.gguf")
    code, text = run_cli(capsys, "models", "scan", "--dir", str(folder), "--only-dirs", "--json")
    assert code == 0, text
    found = {Path(item["path"]).name: item for item in json.loads(text)}
    assert "damaged" in found["a-hostile.gguf"]["error"] and found["b-good.gguf"]["facts"] is not None


def test_gguf_inspect_exits_1_on_d2t_ids_outside_the_vocabulary(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    good = small_gguf(tmp_path / "good.gguf", d2t=[0, 3, 5])
    code, text = run_cli(capsys, "gguf", "inspect", str(good))
    assert code == 0 and "problem" not in text, text
    bad = small_gguf(tmp_path / "bad.gguf", d2t=[0, 3, 13])
    code, text = run_cli(capsys, "gguf", "inspect", str(bad))
    assert code == 1 and "draft row 2 to token 13, outside its vocabulary of 8 tokens" in text, text
    code, text = run_cli(capsys, "gguf", "inspect", str(bad), "--json")
    assert code == 1 and "outside its vocabulary" in json.loads(text)["problem"]
    repeated = small_gguf(tmp_path / "twice.gguf", d2t=[1, 1, 2])
    assert inspect_gguf(repeated).problem == "its d2t map sends two draft rows to the same token"


def test_models_add_of_a_folder_or_a_pipe_says_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    code, text = run_cli(capsys, "models", "add", str(folder))
    assert code == 1 and "is a folder, not a model file" in text, text
    pipe = tmp_path / "pipe.gguf"
    os.mkfifo(pipe)
    code, text = run_cli(capsys, "models", "add", str(pipe))
    assert code == 1 and "is a pipe (FIFO), not a model file" in text, text
    code, text = run_cli(capsys, "models", "add", str(tmp_path / "missing.gguf"))
    assert code == 1 and "There is no file" in text, text


EXTREMES = st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, 3 * GIB, 1 << 20, (1 << 20) + 1, 12, 13, 9, 8])


@pytest.fixture(scope="module")
def sample(module_tmp: ModuleFolders) -> bytes:
    return small_gguf(module_tmp.mktemp("gguf") / "sample.gguf", d2t=[0, 1, 2, 3]).read_bytes()


@settings(max_examples=150, derandomize=True, deadline=None, phases=NO_SHRINK,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 600), st.sampled_from(["<B", "<I", "<Q"]), EXTREMES), min_size=1,
                max_size=4), st.sampled_from([0, 64 << 20, 3 * GIB]))
def test_mutated_headers_read_or_are_refused_in_words(tmp_path: Path, sample: bytes,
                                                     edits: list[tuple[int, str, int]], holes: int) -> None:
    data = bytearray(sample)
    for offset, fmt, value in edits:
        width = struct.calcsize(fmt)
        if offset + width <= len(data):
            struct.pack_into(fmt, data, offset, value % (1 << (8 * width)))
    path = tmp_path / "mutant.gguf"
    path.write_bytes(bytes(data))
    if holes:
        os.truncate(path, len(data) + holes)  # a sparse tail: size is free, claims must still be bounded
    clear_caches()
    started = time.monotonic()
    try:
        report = inspect_gguf(path)
    except GGUFError as exc:
        assert exc.message and exc.advice and "Traceback" not in exc.message
    else:
        assert report.n_tensors >= 0
    assert time.monotonic() - started < 5


def test_the_full_reader_refuses_a_hostile_header_in_words_before_the_gguf_package_reads_it(tmp_path: Path) -> None:
    from app.gguftools.reader import open_gguf

    path = sparse(tmp_path / "nested.gguf", nested_arrays((2 * GIB) // 13), 2 * GIB)
    started = time.monotonic()
    with pytest.raises(GGUFError, match=r"is damaged or incomplete: the array 'x\.nested' claims"):
        open_gguf(path)
    assert time.monotonic() - started < 5


def test_a_d2t_map_claiming_millions_of_rows_is_refused_unread(tmp_path: Path) -> None:
    """Both tensors' shapes patched to 9,000,000 rows in a sparse file big enough for them: refused by the claim."""
    from app.core.errors import SidecarError
    from app.gguftools.d2t import check_d2t

    data = bytearray(small_gguf(tmp_path / "side.gguf", d2t=[0, 1, 2]).read_bytes())
    rows = 9_000_000
    d2t_at = data.index(struct.pack("<Q", 3) + b"d2t") + 8 + 3 + 4
    struct.pack_into("<Q", data, d2t_at, rows)
    head_at = data.index(struct.pack("<Q", len("output.weight")) + b"output.weight") + 8 + len("output.weight") + 4
    struct.pack_into("<Q", data, head_at + 8, rows)
    path = sparse(tmp_path / "claims.gguf", bytes(data), 64 * rows)
    clear_caches()
    with pytest.raises((SidecarError, GGUFError), match="9,000,000"):
        check_d2t(path)
    with pytest.raises(GGUFError, match="d2t map claims 72,000,000 bytes"):
        inspect_gguf(path)
