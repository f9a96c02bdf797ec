"""The lazy GGUF header reader: the same facts as the ``gguf`` package's GGUFReader on files our writers made,
array values on demand, hostile headers refused in words, and the per-file cache of headers and reports."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, LlamaFileType

from app.core.errors import GGUFError
from app.gguftools.d2t import read_header
from app.gguftools.demo_model import DemoModel, read_demo_table
from app.gguftools.header import ArrayRef, clear_caches, gguf_header, read_gguf_header
from app.gguftools.inspect import inspect_gguf, report_from_header
from app.gguftools.qwen35 import Qwen35Shape, constant, neutral_plans, write_qwen35
from app.gguftools.reader import HEADER_KEYS, open_gguf
from app.gguftools.sidecar import build_sidecar, read_d2t_ids
from app.gguftools.tokenizer import Tokenizer, TokenType
from app.gguftools.writer import KVItem, TensorPlan, kv_array, kv_bool, kv_f32, kv_str, kv_u32, write_gguf
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

SHAPE = Qwen35Shape(
    n_embd=64, n_ff=64, n_head=2, n_head_kv=1, head_dim=32, n_trunk=4,
    ssm_state=16, ssm_groups=2, ssm_dt_rank=4, n_vocab=500, context_length=512,
)  # fmt: skip
EXTRA = [  # every value type the writer has, as scalars and arrays
    KVItem("test.i8", -5, GGUFValueType.INT8), KVItem("test.u16", 65535, GGUFValueType.UINT16),
    KVItem("test.i64", -(2**40), GGUFValueType.INT64), KVItem("test.u64", 2**63 + 7, GGUFValueType.UINT64),
    KVItem("test.f64", 0.1, GGUFValueType.FLOAT64), kv_f32("test.f32", 1.5), kv_bool("test.bool", True),
    kv_str("test.unicode", "Grüße, 你好 🙂"), kv_str("test.empty", ""),
    kv_array("test.floats", [0.5, -2.25, 3.0], GGUFValueType.FLOAT32),
    kv_array("test.bools", [True, False, True], GGUFValueType.BOOL),
    kv_array("test.i64s", [-1, 2**40], GGUFValueType.INT64),
    kv_array("test.strings", ["", "é", "two words"], GGUFValueType.STRING),
]  # fmt: skip


def tokenizer(n_vocab: int = 500) -> Tokenizer:
    types = [int(TokenType.NORMAL)] * (n_vocab - 1) + [int(TokenType.CONTROL)]
    return Tokenizer(
        model="gpt2", pre="qwen35", tokens=tuple(f"t{i}" for i in range(n_vocab)), token_types=tuple(types),
        merges=("t 1", "t1 0", "é ü"), eos_id=n_vocab - 1, pad_id=None, bos_id=None, add_bos=False,
        chat_template="{{ messages }}",
    )  # fmt: skip


@pytest.fixture(scope="module")
def files(module_tmp: ModuleFolders) -> dict[str, Path]:
    root = module_tmp.mktemp("header")
    head = np.random.default_rng(0).standard_normal((SHAPE.n_vocab, SHAPE.n_embd)).astype(np.float16)
    output = TensorPlan("output.weight", GGMLQuantizationType.F16, (64, 500), constant(head))
    plans = neutral_plans(SHAPE, overrides={"output.weight": output})
    target = write_qwen35(root / "target.gguf", SHAPE, tokenizer().to_kv(), plans,
                          file_type=LlamaFileType.MOSTLY_F16, extra_kv=EXTRA)
    return {
        "target": target,
        "full": Path(build_sidecar(target, root / "full.gguf", full=True).path),
        "d2t": Path(build_sidecar(target, root / "d2t.gguf", vocab_size=100).path),
    }


@pytest.fixture(scope="module")
def demo(default_demo: DemoCopies, module_tmp: ModuleFolders) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("header-demo"))


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    clear_caches()
    yield
    clear_caches()


def assert_same_as_gguf_reader(path: Path) -> None:
    reader = open_gguf(path)  # the package's own parse (through a faster byte-fetch helper)
    header = read_gguf_header(path)
    assert (header.version, header.tensor_count, header.kv_count) == (
        reader.fields["GGUF.version"].contents(), reader.fields["GGUF.tensor_count"].contents(),
        reader.fields["GGUF.kv_count"].contents())  # fmt: skip
    fields = {k: f for k, f in reader.fields.items() if k not in HEADER_KEYS}
    assert list(header.fields) == list(fields)  # the same keys in file order
    for key, field in fields.items():
        ours = header.fields[key]
        assert ours.type == field.types[0], key
        if field.types[0] == GGUFValueType.ARRAY:
            ref = ours.value
            assert isinstance(ref, ArrayRef), key  # left in the file, not read
            assert (ref.item_type, ref.count) == (field.types[-1], len(field.data)), key
            assert header.array_length(key) == len(field.data)
            assert header.read_array(key) == field.contents(), key
        else:
            assert header.value(key) == field.contents(), key
            assert header.array_length(key) is None
        assert header.contents(key) == field.contents(), key
    assert (header.alignment, header.data_offset) == (reader.alignment, reader.data_offset)
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    for ours, theirs in zip(header.tensors, reader.tensors, strict=True):
        assert ours.type == theirs.tensor_type and ours.type_name == theirs.tensor_type.name
        assert ours.shape == tuple(int(d) for d in theirs.shape)
        assert (ours.n_elements, ours.n_bytes, ours.data_offset) == (
            theirs.n_elements, theirs.n_bytes, theirs.data_offset)  # fmt: skip
        assert ours.offset == ours.data_offset - header.data_offset
        assert header.tensor(ours.name) is ours


@pytest.mark.parametrize("name", ["target", "full", "d2t"])
def test_same_facts_as_gguf_reader(files: dict[str, Path], name: str) -> None:
    assert_same_as_gguf_reader(files[name])


def test_same_facts_as_gguf_reader_on_the_demo_model(demo: DemoModel) -> None:
    """The real 248,320-token Qwen vocabulary and its merges, written by our demo writer."""
    assert_same_as_gguf_reader(demo.target)
    assert read_gguf_header(demo.target).array_length("tokenizer.ggml.tokens") == 248320


def test_values_are_read_on_demand(files: dict[str, Path]) -> None:
    header = read_gguf_header(files["target"])
    assert isinstance(header.value("tokenizer.ggml.tokens"), ArrayRef)
    tokens = header.read_array("tokenizer.ggml.tokens")
    assert len(tokens) == 500 and tokens[:3] == ["t0", "t1", "t2"] and tokens[-1] == "t499"
    assert header.read_array("tokenizer.ggml.merges") == ["t 1", "t1 0", "é ü"]
    assert header.read_array("tokenizer.ggml.token_type") == [int(TokenType.NORMAL)] * 499 + [int(TokenType.CONTROL)]
    assert header.read_array("test.floats") == [0.5, -2.25, 3.0]
    assert header.read_array("test.bools") == [True, False, True]
    assert header.value("test.u64") == 2**63 + 7 and header.value("test.unicode") == "Grüße, 你好 🙂"
    assert header.value("test.f64") == 0.1 and header.value("test.bool") is True
    assert header.architecture == "qwen35" and header.value("no.such.key") is None
    with pytest.raises(GGUFError, match=r"has no array 'test\.f32'"):
        header.read_array("test.f32")
    gguf = {t.name: t for t in open_gguf(files["target"]).tensors}
    assert np.array_equal(header.read_tensor("output.weight"), np.asarray(gguf["output.weight"].data))
    side = read_gguf_header(files["d2t"])
    d2t = side.read_tensor("d2t")
    theirs = np.asarray({t.name: t for t in open_gguf(files["d2t"]).tensors}["d2t"].data)
    assert d2t.dtype == np.int64 and d2t.shape == (100,) and np.array_equal(d2t, theirs)
    assert np.array_equal(read_d2t_ids(files["d2t"]), theirs)
    assert read_d2t_ids(files["full"]) is None
    with pytest.raises(GGUFError, match="has no tensor 'nope'"):
        side.read_tensor("nope")


def test_a_file_changed_after_its_header_was_read_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "t.gguf"
    shutil.copyfile(files["target"], path)
    header = read_gguf_header(path)
    with path.open("ab") as f:
        f.write(b"\0" * 64)
    with pytest.raises(GGUFError, match="changed while it was being read"):
        header.read_array("tokenizer.ggml.tokens")


def test_d2t_header_and_demo_table_come_from_the_lazy_reader(files: dict[str, Path], demo: DemoModel) -> None:
    side = read_header(files["d2t"])
    assert side.n_vocab == 500 and side.d2t is not None and side.output is not None
    assert side.d2t.shape == (100,) and side.output.shape == (64, 100)
    tensor = read_gguf_header(files["d2t"]).tensor("d2t")
    assert tensor is not None and side.d2t.offset == tensor.data_offset
    assert read_demo_table(demo.target) == read_demo_table(open_gguf(demo.target))  # lazy == GGUFReader's
    assert read_demo_table(files["target"]) is None


# ----------------------------------------------------------------------------- hostile headers


def key_offsets(path: Path) -> dict[str, int]:
    """Where each KV pair starts (GGUFReader knows)."""
    return {k: f.offset for k, f in GGUFReader(path).fields.items() if k not in HEADER_KEYS}


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def refused(tmp_path: Path, data: bytes, words: str) -> GGUFError:
    """``data`` as a file is refused with a GGUFError whose message says ``words`` (and what to do)."""
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError) as err:
        read_gguf_header(path)
    assert words in err.value.message and err.value.advice
    with pytest.raises(GGUFError) as again:
        inspect_gguf(path)
    assert words in again.value.message
    return err.value


def test_cut_anywhere_in_the_header_is_damaged_or_incomplete(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["target"].read_bytes()
    header_end = read_gguf_header(files["target"]).data_offset
    cuts = sorted({*range(0, header_end, max(1, header_end // 400)), *range(header_end - 40, header_end + 40),
                   len(data) // 2, len(data) - 1})
    for cut in cuts:
        path = tmp_path / f"cut-{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(GGUFError) as err:
            read_gguf_header(path)
        if cut < 4:
            assert "is not a GGUF model file" in err.value.message
        else:  # inside the header: "damaged or incomplete: ...", past it: "incomplete: ... its tensors need"
            assert "incomplete" in err.value.message, (cut, err.value.message)
            assert "again" in err.value.advice
        path.unlink()


def test_a_string_length_of_2_to_the_63_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["target"].read_bytes()
    err = refused(tmp_path, patched(data, 24, "<Q", 2**63),
                  "the name of metadata pair 0 claims 9,223,372,036,854,775,808 bytes")
    assert "left in the file" in err.message
    at = key_offsets(files["target"])["tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 4 + 4 + 8
    refused(tmp_path, patched(data, at + 8 * 0, "<Q", 2**63), "strings of the array 'tokenizer.ggml.tokens' run past")
    at = key_offsets(files["target"])["general.architecture"] + 8 + len("general.architecture") + 4
    refused(tmp_path, patched(data, at, "<Q", 2**64 - 1), "the value of 'general.architecture' claims")


def test_counts_larger_than_the_file_can_hold_are_refused(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["target"].read_bytes()
    refused(tmp_path, patched(data, 16, "<Q", 10**12), "claims 1,000,000,000,000 metadata pairs, more than a file")
    refused(tmp_path, patched(data, 8, "<Q", 2**64 - 1), "tensors, more than a file of")
    at = key_offsets(files["target"])["tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 4 + 4
    refused(tmp_path, patched(data, at, "<Q", 2**62),
            "the array 'tokenizer.ggml.tokens' claims 4,611,686,018,427,387,904 items")
    at = key_offsets(files["target"])["tokenizer.ggml.token_type"] + 8 + len("tokenizer.ggml.token_type") + 4 + 4
    refused(tmp_path, patched(data, at, "<Q", 2**61), "the array 'tokenizer.ggml.token_type' claims")


def test_unknown_types_and_bad_layouts_are_refused(files: dict[str, Path], tmp_path: Path) -> None:
    data = files["target"].read_bytes()
    offsets = key_offsets(files["target"])
    arch_type = offsets["general.architecture"] + 8 + len("general.architecture")
    refused(tmp_path, patched(data, arch_type, "<I", 99), "'general.architecture' has the unknown type 99")
    items = offsets["tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 4
    refused(tmp_path, patched(data, items, "<I", 13), "items of the unknown type 13")
    refused(tmp_path, patched(data, 4, "<I", 1), "GGUF version 1; FastMTP Chat reads versions 2 and 3")
    refused(tmp_path, patched(data, 4, ">I", 3), "big-endian")
    first = read_gguf_header(files["target"]).tensors[0]
    tensor_infos = _tensor_info_offset(files["target"])
    n_dims_at = tensor_infos + 8 + len(first.name)
    refused(tmp_path, patched(data, n_dims_at, "<I", 2**31), f"'{first.name}' claims 2,147,483,648 dimensions")
    type_at = n_dims_at + 4 + 8 * len(first.shape)
    refused(tmp_path, patched(data, type_at, "<I", 200), f"'{first.name}' has the type 200")
    dim_at = n_dims_at + 4
    refused(tmp_path, patched(data, dim_at, "<Q", 2**40), "bytes but its tensors need")
    key_at = offsets["general.architecture"] + 8
    refused(tmp_path, data[:key_at] + b"\xff" + data[key_at + 1:], "is not UTF-8 text")


def _tensor_info_offset(path: Path) -> int:
    """Where the tensor infos start: just after the last KV pair."""
    reader = GGUFReader(path)
    return int(reader.tensors[0].field.offset)


def test_an_alignment_that_is_not_a_power_of_two_is_refused(tmp_path: Path) -> None:
    plan = TensorPlan("x", GGMLQuantizationType.F32, (4,), constant(np.zeros(4, np.float32)))
    path = write_gguf(tmp_path / "a.gguf", "llama", [kv_u32("general.alignment", 48)], [plan])
    with pytest.raises(GGUFError, match=r"general\.alignment is 48"):
        read_gguf_header(path)


@pytest.mark.parametrize("content", [b"", b"GGU", b"PK\x03\x04" + b"\0" * 100, b"hello\n" * 20],
                         ids=["empty", "short", "zip", "text"])
def test_non_gguf_files_are_refused(tmp_path: Path, content: bytes) -> None:
    refused(tmp_path, content, "is not a GGUF model file")


def test_a_folder_a_pipe_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    with pytest.raises(GGUFError, match="is a folder, not a GGUF model file"):
        inspect_gguf(folder)
    if hasattr(os, "mkfifo"):
        pipe = tmp_path / "pipe.gguf"
        os.mkfifo(pipe)
        with pytest.raises(GGUFError, match="not a regular file"):  # and never opened: that would block
            inspect_gguf(pipe)
    with pytest.raises(GGUFError, match="does not exist"):
        read_header(tmp_path / "nope.gguf")


@contextmanager
def unprivileged() -> Iterator[None]:
    """Root reads any file: drop to nobody's effective uid for the block (restored after)."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_an_unreadable_file_is_refused(files: dict[str, Path]) -> None:
    folder = Path(tempfile.mkdtemp())  # not under pytest's 0700 folder: nobody must reach the file itself
    try:
        folder.chmod(0o755)
        path = folder / "locked.gguf"
        shutil.copyfile(files["target"], path)
        path.chmod(0)
        with unprivileged(), pytest.raises(GGUFError, match="cannot be read: Permission denied") as err:
            inspect_gguf(path)
        assert "permission" in err.value.advice
    finally:
        shutil.rmtree(folder)


def test_random_damage_never_escapes_as_another_error(files: dict[str, Path], tmp_path: Path) -> None:
    """Seeded byte damage all over the header: a GGUFError or a readable file, never a crash or MemoryError."""
    data = files["d2t"].read_bytes()
    header_end = read_gguf_header(files["d2t"]).data_offset
    rng = np.random.default_rng(26)
    path = tmp_path / "fuzz.gguf"
    outcomes = {"refused": 0, "read": 0}
    for _ in range(400):
        damaged = bytearray(data)
        at = int(rng.integers(4, header_end - 8))
        damaged[at : at + 8] = rng.choice([b"\xff" * 8, b"\0" * 8, rng.bytes(8)])
        path.write_bytes(bytes(damaged))
        try:
            report_from_header(read_gguf_header(path))
            outcomes["read"] += 1
        except GGUFError as exc:
            assert exc.message and exc.advice
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["read"] > 10, outcomes  # damage reached the parser; some harmless


# ----------------------------------------------------------------------------- the cache


def rewrite(path: Path, block_count: int, extra: str = "") -> None:
    """The same small file with another block_count (same size), or an extra KV pair (bigger)."""
    kv = [kv_u32("llama.block_count", block_count), *([kv_str("general.name", extra)] if extra else [])]
    plan = TensorPlan("token_embd.weight", GGMLQuantizationType.F32, (4, 8), constant(np.zeros((8, 4), np.float32)))
    write_gguf(path, "llama", kv, [plan])


def set_mtime(path: Path, seconds_ago: int) -> None:
    """An explicit mtime well in the past: fresh files are never cached (file-system tick granularity)."""
    ns = (os.stat(path).st_atime_ns // 10**9 - seconds_ago) * 10**9
    os.utime(path, ns=(ns, ns))


def test_an_unchanged_file_is_served_from_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    rewrite(path, 2)
    set_mtime(path, 100)
    first = inspect_gguf(path)
    assert first.block_count == 2 and inspect_gguf(path) is first
    assert gguf_header(path) is gguf_header(path)
    stamp = os.stat(path)
    rewrite(path, 3)  # new bytes, same size, the old mtime put back: its ctime still moved (issue 37): read again
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert os.stat(path).st_size == stamp.st_size and os.stat(path).st_mtime_ns == stamp.st_mtime_ns
    again = inspect_gguf(path)
    assert again is not first and again.block_count == 3
    assert inspect_gguf(path) is again  # unchanged since: from the cache
    assert inspect_gguf(tmp_path / "." / "m.gguf").block_count == 3  # another spelling of the path: the same entry
    assert inspect_gguf(tmp_path / "." / "m.gguf").path == str(tmp_path / "." / "m.gguf")
    clear_caches()
    assert inspect_gguf(path).block_count == 3


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    rewrite(path, 2)
    set_mtime(path, 100)
    assert inspect_gguf(path).block_count == 2
    size = path.stat().st_size
    rewrite(path, 3)  # same size, another mtime
    set_mtime(path, 50)
    assert path.stat().st_size == size
    assert inspect_gguf(path).block_count == 3
    assert read_gguf_header(path).value("llama.block_count") == gguf_header(path).value("llama.block_count") == 3
    rewrite(path, 4, extra="bigger")  # another size
    set_mtime(path, 50)
    assert path.stat().st_size != size
    report = inspect_gguf(path)
    assert report.block_count == 4 and report.file_size == path.stat().st_size


def test_a_file_written_this_moment_is_not_cached(tmp_path: Path) -> None:
    """Two same-size writes within one mtime tick look alike: a fresh file is read every time."""
    path = tmp_path / "m.gguf"
    rewrite(path, 2)
    assert inspect_gguf(path).block_count == 2
    stamp = os.stat(path)
    rewrite(path, 3)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same tick
    assert inspect_gguf(path).block_count == 3


def test_errors_are_not_cached(files: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "late.gguf"
    data = files["target"].read_bytes()
    path.write_bytes(data[:100])
    set_mtime(path, 100)
    with pytest.raises(GGUFError, match="damaged or incomplete"):
        inspect_gguf(path)
    path.write_bytes(data)  # the copy finished
    set_mtime(path, 100)
    assert inspect_gguf(path).kind == "target"
    assert read_header(path).n_vocab == 500


# ----------------------------------------------------------------------------- the benchmark
