"""The built-in demo model: a real-format qwen35 target whose greedy output follows a word table.

The language is a random cycle ``f`` over a few thousand real word tokens of the Qwen vocabulary. With
zero trunk matrices the hidden state is the (normalised) embedding of the current token, and the LM-head
row of ``f(t)`` is a scaled copy of ``t``'s embedding, so greedy decoding emits ``t, f(t), f(f(t)), ...``.
Every other token (chat markup, newline, end-of-text, anything a user types) is embedded like the
*entry* word, so any chat prompt leads into the table.

The MTP block predicts ``f(input token)`` (``eh_proj = [I | 0]``, zero attention and FFN). Its own
``nextn.embed_tokens`` swaps the embedding of a ``1 - acceptance`` fraction of the words for another
word's, so the draft proposes a wrong successor there: the acceptance rate is a dial.

The table is stored as KV under ``fastmtp.demo.*`` (see :class:`DemoTable`). The ``27b`` size has the
real model's shapes, constant Q4_K weights and no table: it exists to time loading and decoding.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, LlamaFileType

from app.errors import GGUFError
from app.gguftools.counts import TokenCounts
from app.gguftools.qwen35 import QWEN35_27B, Qwen35Shape, constant, neutral_plans, write_qwen35
from app.gguftools.reader import field_value, open_gguf
from app.gguftools.sidecar import DEFAULT_DRAFT_VOCAB, SidecarSource, build_sidecar
from app.gguftools.tokenizer import Tokenizer, TokenType, load_tokenizer
from app.gguftools.writer import (
    ChunkSource,
    KVItem,
    TensorPlan,
    kv_array,
    kv_f32,
    kv_str,
    kv_u32,
    repeat_bytes,
    row_bytes,
)

Size = Literal["tiny", "small", "27b"]
KEY = "fastmtp.demo."
LOGIT_SCALE = 16.0  # the top logit of the table's successor, about

DEMO_SHAPES: dict[str, Qwen35Shape] = {
    "tiny": Qwen35Shape(
        n_embd=64,
        n_ff=128,
        n_head=2,
        n_head_kv=1,
        head_dim=64,
        n_trunk=4,
        ssm_state=16,
        ssm_groups=2,
        ssm_dt_rank=4,
        context_length=8192,
    ),
    "small": Qwen35Shape(
        n_embd=1024,
        n_ff=2816,
        n_head=8,
        n_head_kv=2,
        head_dim=128,
        n_trunk=8,
        ssm_state=128,
        ssm_groups=4,
        ssm_dt_rank=8,
        context_length=8192,
    ),
    "27b": QWEN35_27B,
}
TABLE_WORDS: dict[str, int] = {"tiny": 2000, "small": 4000}
_WORD = re.compile(r"\u0120[A-Za-z]{3,}")
_CHUNK_ROWS = 8192


@dataclass(frozen=True)
class DemoTable:
    """The demo language: ``successor(cycle[i]) == cycle[i + 1]`` (wrapping round).

    Any token outside the cycle is followed by ``successor(entry)``. For a word in ``wrong`` the draft
    head sees ``wrong[word]`` instead and proposes ``successor(wrong[word])``, which the target rejects.
    """

    cycle: tuple[int, ...] = field(repr=False)
    entry: int
    wrong: dict[int, int] = field(repr=False)
    _pos: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pos", {t: i for i, t in enumerate(self.cycle)})

    def successor(self, token: int) -> int:
        i = self._pos.get(token, self._pos[self.entry])
        return self.cycle[(i + 1) % len(self.cycle)]

    def draft_successor(self, token: int) -> int:
        return self.successor(self.wrong.get(token, token))

    def continuation(self, start: int, n: int) -> list[int]:
        """The ``n`` tokens greedy decoding emits after ``start``."""
        out: list[int] = []
        token = start
        for _ in range(n):
            token = self.successor(token)
            out.append(token)
        return out

    @property
    def acceptance(self) -> float:
        """Fraction of table words whose draft successor is right."""
        return 1.0 - len(self.wrong) / len(self.cycle)

    def to_kv(self) -> list[KVItem]:
        items = [
            kv_array(KEY + "cycle", self.cycle, GGUFValueType.INT32),
            kv_u32(KEY + "entry", self.entry),
        ]
        if self.wrong:
            words = sorted(self.wrong)
            items.append(kv_array(KEY + "wrong", words, GGUFValueType.INT32))
            items.append(kv_array(KEY + "wrong_as", [self.wrong[w] for w in words], GGUFValueType.INT32))
        return items


@dataclass(frozen=True)
class DemoModel:
    """The files :func:`write_demo_model` wrote, and the table they follow (None for ``27b``)."""

    target: Path
    sidecar_full: Path
    sidecar_d2t: Path
    size: str
    shape: Qwen35Shape
    table: DemoTable | None


def read_demo_table(source: str | os.PathLike[str] | GGUFReader) -> DemoTable | None:
    """The demo table stored in a demo target or sidecar, or None when the file has none."""
    reader = source if isinstance(source, GGUFReader) else open_gguf(source)
    cycle = field_value(reader, KEY + "cycle")
    if not cycle:
        return None
    wrong = field_value(reader, KEY + "wrong") or []
    wrong_as = field_value(reader, KEY + "wrong_as") or []
    return DemoTable(tuple(cycle), int(field_value(reader, KEY + "entry")), dict(zip(wrong, wrong_as, strict=True)))


def write_demo_model(
    out_dir: str | os.PathLike[str],
    vocab_path: str | os.PathLike[str],
    size: Size = "tiny",
    acceptance: float = 0.9,
    seed: int = 0,
    *,
    draft_vocab: int = DEFAULT_DRAFT_VOCAB,
) -> DemoModel:
    """Write ``target.gguf``, ``sidecar-full.gguf`` and ``sidecar-d2t.gguf`` into ``out_dir``.

    Raises:
        GGUFError: bad arguments, an unreadable vocabulary file, or a failed write.
    """
    if size not in DEMO_SHAPES:
        raise GGUFError(f"Unknown demo model size {size!r}.", "Choose tiny, small or 27b.")
    if not 0.0 <= acceptance <= 1.0:
        raise GGUFError(f"Acceptance {acceptance} is not a fraction.", "Choose a value between 0 and 1.")
    shape = DEMO_SHAPES[size]
    tokenizer = load_tokenizer(vocab_path).padded(shape.n_vocab)
    out = Path(out_dir)
    target = out / "target.gguf"
    kv: list[KVItem] = [kv_u32(KEY + "version", 1), kv_str(KEY + "size", size), kv_u32(KEY + "seed", seed)]

    table: DemoTable | None = None
    if size == "27b":
        plans = demo_target_plans(size, seed=seed)
        file_type = LlamaFileType.MOSTLY_Q4_K_M
    else:
        table = make_table(tokenizer, TABLE_WORDS[size], acceptance, seed)
        kv += [kv_f32(KEY + "acceptance", acceptance), *table.to_kv()]
        plans = demo_target_plans(size, table, seed)
        file_type = LlamaFileType.MOSTLY_F16
    write_qwen35(target, shape, tokenizer.to_kv(), plans, file_type=file_type, name=f"FastMTP demo {size}", extra_kv=kv)

    source = SidecarSource(target)
    counts = TokenCounts.from_token_ids(table.cycle) if table else None
    full = build_sidecar(source, out / "sidecar-full.gguf", full=True)
    d2t = build_sidecar(source, out / "sidecar-d2t.gguf", vocab_size=min(draft_vocab, shape.n_vocab), counts=counts)
    return DemoModel(target, Path(full.path), Path(d2t.path), size, shape, table)


def make_table(tokenizer: Tokenizer, n_words: int, acceptance: float, seed: int) -> DemoTable:
    """A random cycle over ``n_words`` word tokens (a space and 3+ ASCII letters) and its wrong-draft set."""
    normal = int(TokenType.NORMAL)
    words = [
        i
        for i, (text, kind) in enumerate(zip(tokenizer.tokens, tokenizer.token_types, strict=True))
        if kind == normal and _WORD.fullmatch(text)
    ]
    if len(words) < n_words:
        raise GGUFError(
            f"The vocabulary has only {len(words)} word tokens, the demo needs {n_words}.",
            "Use the Qwen vocabulary file (ggml-vocab-qwen35.gguf).",
        )
    rng = np.random.default_rng(seed)
    cycle = [int(t) for t in rng.permutation(rng.choice(np.array(words), size=n_words, replace=False))]
    n_wrong = round((1.0 - acceptance) * n_words)
    n_wrong = min(n_wrong, n_words - 1)  # the entry word always drafts right
    wrong_pos = rng.choice(np.arange(1, n_words), size=n_wrong, replace=False) if n_wrong else np.array([], int)
    shifts = rng.integers(1, n_words, size=n_wrong)
    wrong = {cycle[int(p)]: cycle[(int(p) + int(s)) % n_words] for p, s in zip(wrong_pos, shifts, strict=True)}
    return DemoTable(tuple(cycle), cycle[0], wrong)


def demo_target_plans(size: Size, table: DemoTable | None = None, seed: int = 0) -> list[TensorPlan]:
    """The tensors of the demo target (data is produced only when written); ``table`` for tiny/small."""
    shape = DEMO_SHAPES[size]
    if size == "27b":
        return _constant_plans(shape, seed)
    if table is None:
        raise GGUFError(f"The {size} demo model needs its word table.", "This is a bug.")
    return _table_plans(shape, table, seed)


# --- tiny / small: the table-driven weights ---------------------------------------------------------


def _table_plans(shape: Qwen35Shape, table: DemoTable, seed: int) -> list[TensorPlan]:
    E, V = shape.n_embd, shape.n_vocab
    n = len(table.cycle)
    rng = np.random.default_rng(seed + 1)
    emb = rng.standard_normal((n, E)).astype(np.float32)
    cycle = np.array(table.cycle, dtype=np.int64)
    pos = {t: i for i, t in enumerate(table.cycle)}

    embed_src = np.zeros(V, dtype=np.int64)  # every token is embedded as the entry word (position 0) ...
    embed_src[cycle] = np.arange(n)  # ... except the table words themselves
    draft_src = embed_src.copy()
    for word, seen_as in table.wrong.items():
        draft_src[word] = pos[seen_as]
    head_src = np.full(V, -1, dtype=np.int64)  # LM-head row of f(t) holds t's embedding
    head_src[np.roll(cycle, -1)] = np.arange(n)
    head = emb * np.float32(LOGIT_SCALE / E)

    f16 = GGMLQuantizationType.F16
    mtp = f"blk.{shape.mtp_layer}.nextn."
    overrides = {
        "token_embd.weight": TensorPlan("token_embd.weight", f16, (E, V), _gather_rows(emb, embed_src)),
        "output.weight": TensorPlan("output.weight", f16, (E, V), _gather_rows(head, head_src)),
        # [I | 0]: the MTP block keeps the token part of [embedding, hidden] and drops the hidden part
        mtp + "eh_proj.weight": TensorPlan(
            mtp + "eh_proj.weight", f16, (2 * E, E), constant(np.eye(E, 2 * E, dtype=np.float16))
        ),
    }
    if table.wrong:
        name = mtp + "embed_tokens.weight"
        overrides[name] = TensorPlan(name, f16, (E, V), _gather_rows(emb, draft_src))
    return neutral_plans(shape, f16, embed_tokens=bool(table.wrong), overrides=overrides)


def _gather_rows(rows: npt.NDArray[np.float32], src: npt.NDArray[np.int64]) -> ChunkSource:
    """F16 rows ``rows[src[i]]`` (zero where ``src[i] < 0``), produced chunk by chunk."""

    def chunks() -> Iterator[npt.NDArray[Any]]:
        padded = np.vstack([rows, np.zeros((1, rows.shape[1]), dtype=rows.dtype)]).astype(np.float16)
        for start in range(0, src.size, _CHUNK_ROWS):
            yield padded[src[start : start + _CHUNK_ROWS]]  # -1 picks the zero row

    return chunks


# --- 27b: real shapes, constant Q4_K weights --------------------------------------------------------


def q4_k_block(rng: np.random.Generator, d: float = 0.003) -> bytes:
    """One valid Q4_K block (144 bytes) of zero-mean values ``d * (q - 7.5)``.

    Layout: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins (all set to 1), 128 bytes of 4-bit quants.
    """
    header = np.array([d, 7.5 * d], dtype=np.float16).tobytes()
    scales = bytes([1] * 8 + [0x11] * 4)
    quants = rng.integers(0, 256, size=128, dtype=np.uint8).tobytes()
    return header + scales + quants


def _constant_plans(shape: Qwen35Shape, seed: int) -> list[TensorPlan]:
    rng = np.random.default_rng(seed)
    pool = [q4_k_block(rng) for _ in range(16)]

    def fill(_name: str, wtype: GGMLQuantizationType, ne: tuple[int, ...]) -> ChunkSource:
        n_blocks = row_bytes(wtype, ne[0]) // len(pool[0])
        row = b"".join(pool[(i * 7) % len(pool)] for i in range(n_blocks))
        n_rows = int(np.prod(ne[1:], dtype=np.int64))
        return lambda: repeat_bytes(row, len(row) * n_rows)

    return neutral_plans(shape, GGMLQuantizationType.Q4_K, matrix_fill=fill)
