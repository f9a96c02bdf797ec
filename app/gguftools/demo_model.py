"""The built-in demo model: a real-format qwen35 target whose greedy output follows a token table.

The table is a cycle ``f`` over distinct tokens of the Qwen vocabulary. With zero trunk matrices the hidden
state is the (normalised) embedding of the current token, and the LM-head row of ``f(t)`` is a scaled copy
of ``t``'s embedding, so greedy decoding emits ``t, f(t), f(f(t)), ...``. Every other token (chat markup,
newline, anything a user types) is embedded like the *entry* token, so any chat prompt leads into the table.

Two languages: ``english`` (the chat demo) is :data:`DEMO_PASSAGE` followed by ``<|im_end|>`` as the entry,
so every chat reply is the passage and then stops; its tokens must all differ, since the next token depends
on the current one alone. ``words`` (benchmarks, the self-test) is a random cycle over a few thousand word
tokens that never stops.

The MTP block predicts ``f(input token)`` (``eh_proj = [I | 0]``, zero attention and FFN). Its own
``nextn.embed_tokens`` swaps the embedding of a ``1 - acceptance`` fraction of the words for another
word's, so the draft proposes a wrong successor there: the acceptance rate is a dial.

The table and its language are stored as KV under ``fastmtp.demo.*`` (see :class:`DemoTable`). ``tiny`` and
``small`` are F16 throughout: their target is little more than its 248320-row LM head, so the d2t draft head
costs 13% of a target pass, six times the real model's share, and on the ``tiny`` drafting loses.

``scaled`` (the built-in chat demo) has the real model's proportions, scaled down: a twentieth of its width
(n_embd 256, n_ff 3.5x, attention and gated-delta-net widths in proportion), 30 trunk layers and a d2t draft
vocabulary of 4096 rows (:data:`DRAFT_VOCAB`; the table's words all fit). Counted in multiply-accumulates per
token, its d2t draft (MTP block, ``eh_proj``, trimmed head) costs 2.3% of a target pass, as Qwen3.8-27B's with
its 32768-row sidecar does (2.3%), so drafting pays on it for the same reason. What does not match: the real
vocabulary on a 256-wide model makes the LM head 69% of the target's pass (5% on the real model), so the
full-vocabulary sidecar costs 70% of a target pass (6.6% on the real model) and a verify pass of k+1 rows costs
relatively more than on the real model. Its trunk and head are Q8_0, whose CPU kernels take a few rows at a
time for little more than one, as a GPU runs the real Q4_K model (F16 made a 4-token verify pass cost 3.3
one-token passes on one thread and drafting lose; Q8_0 2.3); the embeddings are Q4_K. The zero trunk and
the head's zero rows are holes of a sparse file, so it is written as fast as the ``tiny`` and takes about 330 MB
on disk.

``27b`` has the real model's shapes (n_embd 5120, 64 trunk layers, vocab 248320) and a
Q4_K_M-style typing, so loading and decoding it costs about what the real Q4_K model costs: every trunk
and MTP-block matrix is Q4_K (all zero), ``token_embd``, ``nextn.embed_tokens`` and ``nextn.eh_proj`` are
Q4_K and ``output`` is Q6_K, quantized here (:func:`quantize_q4_k`, :func:`quantize_q6_k`); only the
table's rows carry data (the embedding's other rows repeat the entry word's), so writing skips the zero
blocks (holes) and gathers a few thousand pre-quantized rows. It differs from the real release in its values
(zero trunk, so the work is real but the arithmetic is trivial), in the extra ``nextn.embed_tokens``
(0.7 GB, the acceptance dial), and in keeping every trunk matrix Q4_K where a llama.cpp Q4_K_M file
makes some ``attn_v``/``ffn_down`` Q6_K. ``n_trunk`` writes it shallower (the tests); nothing else changes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, LlamaFileType

from app.core import defaults
from app.core.errors import GGUFError
from app.gguftools.bpe import encode_ascii
from app.gguftools.counts import TokenCounts
from app.gguftools.header import gguf_header
from app.gguftools.qwen35 import QWEN35_27B, Qwen35Shape, neutral_plans, write_qwen35
from app.gguftools.reader import field_value
from app.gguftools.sidecar import SidecarSource, build_sidecar
from app.gguftools.tokenizer import Tokenizer, TokenType, load_tokenizer
from app.gguftools.writer import (
    ChunkSource,
    KVItem,
    TensorPlan,
    kv_array,
    kv_f32,
    kv_str,
    kv_u32,
)

Size = Literal["tiny", "small", "scaled", "27b"]
SIZES: tuple[Size, ...] = ("tiny", "small", "scaled", "27b")
Language = Literal["english", "words"]
LANGUAGES: tuple[Language, ...] = ("english", "words")
KEY = "fastmtp.demo."
FORMAT_VERSION = 2  # 2: fastmtp.demo.language
END_OF_TURN = "<|im_end|>"  # ChatML's end of turn: the chat template of the Qwen vocabulary (and our fallback)
# What the English demo says to any prompt. Every token must differ from every other (see the module doc);
# tests/integration/models/test_demo_english.py checks that and the reply through the engine.
DEMO_PASSAGE = (
    "Hello there - I am FastMTP Chat, an app that runs Qwen models on your own computer. Here's my trick: a "
    "small draft head guesses several next tokens at once (its d2t sidecar keeps only common words so each "
    "guess is cheap). Then the big target model checks them all in one pass and accepts every word it agrees "
    "with; replies arrive faster yet stay exactly what plain decoding would give!"
)
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
    # the real model's proportions, scaled down (see the module doc): a twentieth of its width, a trunk deep
    # enough that the d2t draft head costs what it costs next to the 27B's 64 layers
    "scaled": Qwen35Shape(
        n_embd=256,
        n_ff=896,
        n_head=4,
        n_head_kv=1,
        head_dim=64,
        n_trunk=30,
        ssm_state=64,
        ssm_groups=2,
        ssm_dt_rank=4,
        context_length=8192,
    ),
    "27b": QWEN35_27B,
}
TABLE_WORDS: dict[str, int] = {"tiny": 2000, "small": 4000, "scaled": 3000, "27b": 4000}
# the d2t sidecar's draft vocabulary where it is not the release's 32768: the scaled demo's covers its table
DRAFT_VOCAB: dict[str, int] = {"scaled": 4096}
_WORD = re.compile(r"\u0120[A-Za-z]{3,}")
_CHUNK_ROWS = 8192
QK_K = 256  # values per Q4_K / Q6_K block


@dataclass(frozen=True)
class DemoTypes:
    """Tensor types of a demo size: the zero matrices, the embedding-like rows (token_embd, nextn.embed_tokens,
    nextn.eh_proj) and the LM head; norms and ``ssm_conv1d`` are always F32."""

    matrix: GGMLQuantizationType
    embedding: GGMLQuantizationType
    head: GGMLQuantizationType
    file_type: LlamaFileType


_F16 = GGMLQuantizationType.F16
_Q4_K_M = DemoTypes(
    GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, LlamaFileType.MOSTLY_Q4_K_M
)
DEMO_TYPES: dict[str, DemoTypes] = {
    "tiny": DemoTypes(_F16, _F16, _F16, LlamaFileType.MOSTLY_F16),
    "small": DemoTypes(_F16, _F16, _F16, LlamaFileType.MOSTLY_F16),
    # Q8_0 trunk and head (holes and a few thousand rows on disk): of the types a CPU multiplies, Q8_0 comes
    # nearest the way a GPU runs the real Q4_K model, where a verify pass of a few rows costs little more than one
    # row. ggml's int8 kernels take 2-5 rows at a time for not much more than one (this 256-wide head on an AMD
    # EPYC, one thread: 4 rows 1.8x one row, F16 3.6x, Q4_K and Q6_K 3.9x: those multiply row by row), so a
    # 4-token verify pass costs 2.3 one-token passes where F16 cost 3.3 and drafting lost to plain decoding on
    # one thread. The embeddings (looked up, not multiplied) are Q4_K to keep the files small
    "scaled": DemoTypes(GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q8_0,
                        LlamaFileType.MOSTLY_Q8_0),
    "27b": _Q4_K_M,
}


@dataclass(frozen=True)
class DemoTable:
    """The demo language: ``successor(cycle[i]) == cycle[i + 1]`` (wrapping round).

    Any token outside the cycle is followed by ``successor(entry)``. For a word in ``wrong`` the draft
    head sees ``wrong[word]`` instead and proposes ``successor(wrong[word])``, which the target rejects.
    In ``english`` the entry is the end-of-turn token and the rest of the cycle is the passage.
    """

    cycle: tuple[int, ...] = field(repr=False)
    entry: int
    wrong: dict[int, int] = field(repr=False)
    language: Language = "words"
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
            kv_str(KEY + "language", self.language),
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
    """The files :func:`write_demo_model` wrote, and the table they follow (None only when read back from an
    older file that has none)."""

    target: Path
    sidecar_full: Path
    sidecar_d2t: Path
    size: str
    shape: Qwen35Shape
    table: DemoTable | None


def read_demo_table(source: str | os.PathLike[str] | GGUFReader) -> DemoTable | None:
    """The demo table stored in a demo target or sidecar, or None when the file has none (a path is read through
    the lazy header reader: the vocabulary is not decoded)."""
    value: Callable[[str], Any] = (partial(field_value, source) if isinstance(source, GGUFReader)
                                   else gguf_header(source).contents)
    cycle = value(KEY + "cycle")
    if not cycle:
        return None
    wrong = value(KEY + "wrong") or []
    wrong_as = value(KEY + "wrong_as") or []
    language = value(KEY + "language") or "words"  # files before FORMAT_VERSION 2 were all words
    if language not in LANGUAGES:
        raise GGUFError(f"The demo table's language {language!r} is unknown.", "Write the demo model again.")
    return DemoTable(tuple(cycle), int(value(KEY + "entry")), dict(zip(wrong, wrong_as, strict=True)), language)


def write_demo_model(
    out_dir: str | os.PathLike[str],
    vocab_path: str | os.PathLike[str],
    size: Size = "tiny",
    acceptance: float = 0.9,
    seed: int = 0,
    *,
    language: Language = "words",
    draft_vocab: int | None = None,
    n_trunk: int | None = None,
) -> DemoModel:
    """Write ``target.gguf``, ``sidecar-full.gguf`` and ``sidecar-d2t.gguf`` into ``out_dir``.

    ``language`` picks the table: ``english`` replies with :data:`DEMO_PASSAGE` and stops (the chat demo),
    ``words`` runs on forever (benchmarks and the self-test need long generations). ``n_trunk`` overrides
    the size's trunk depth (the tests write the ``27b`` with a few layers); every other shape, type and the
    table stay the size's own. ``draft_vocab`` is the d2t sidecar's draft vocabulary (default: the size's
    :data:`DRAFT_VOCAB`, else the release's 32768).

    Raises:
        GGUFError: bad arguments, an unreadable vocabulary file, or a failed write.
    """
    if size not in DEMO_SHAPES:
        raise GGUFError(f"Unknown demo model size {size!r}.", f"Choose one of {', '.join(SIZES)}.")
    if not 0.0 <= acceptance <= 1.0:
        raise GGUFError(f"Acceptance {acceptance} is not a fraction.", "Choose a value between 0 and 1.")
    if language not in LANGUAGES:
        raise GGUFError(f"Unknown demo language {language!r}.", "Choose english or words.")
    shape = demo_shape(size, n_trunk)
    tokenizer = load_tokenizer(vocab_path).padded(shape.n_vocab)
    out = Path(out_dir)
    target = out / "target.gguf"
    if language == "english":
        table = make_passage_table(tokenizer, DEMO_PASSAGE, acceptance, seed)
    else:
        table = make_table(tokenizer, TABLE_WORDS[size], acceptance, seed)
    kv: list[KVItem] = [
        kv_u32(KEY + "version", FORMAT_VERSION),
        kv_str(KEY + "size", size),
        kv_u32(KEY + "seed", seed),
        kv_f32(KEY + "acceptance", acceptance),
        *table.to_kv(),
    ]
    plans = demo_target_plans(size, table, seed, n_trunk=n_trunk)
    write_qwen35(
        target,
        shape,
        tokenizer.to_kv(),
        plans,
        file_type=DEMO_TYPES[size].file_type,
        name=f"FastMTP demo {size}",
        extra_kv=kv,
    )

    source = SidecarSource(target)
    counts = TokenCounts.from_token_ids(table.cycle)  # every table word is in the d2t draft vocabulary
    full = build_sidecar(source, out / "sidecar-full.gguf", full=True)
    n_draft = draft_vocab if draft_vocab is not None else DRAFT_VOCAB.get(size, defaults.DRAFT_VOCAB)
    d2t = build_sidecar(source, out / "sidecar-d2t.gguf", vocab_size=min(n_draft, shape.n_vocab), counts=counts)
    return DemoModel(target, Path(full.path), Path(d2t.path), size, shape, table)


def demo_shape(size: Size, n_trunk: int | None = None) -> Qwen35Shape:
    """The shape of a demo size, with ``n_trunk`` trunk layers instead of its own when given."""
    shape = DEMO_SHAPES[size]
    if n_trunk is None or n_trunk == shape.n_trunk:
        return shape
    if n_trunk < 1:
        raise GGUFError(f"A model needs at least one trunk layer, not {n_trunk}.", "Choose n_trunk >= 1.")
    return replace(shape, n_trunk=n_trunk)


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
    return DemoTable(tuple(cycle), cycle[0], _wrong_drafts(cycle, acceptance, rng))


def make_passage_table(tokenizer: Tokenizer, passage: str, acceptance: float, seed: int) -> DemoTable:
    """The ``english`` table: ``passage``'s tokens after the end-of-turn token, which is the entry.

    Any prompt ends in chat markup outside the table, so the reply starts at the passage's first token, and
    the token after its last is the end of turn, so the reply stops there.

    Raises:
        GGUFError: the vocabulary has no end-of-turn token, or a passage token repeats or is the end of turn.
    """
    end = tokenizer.token_id(END_OF_TURN)
    if end is None:
        raise GGUFError(f"The vocabulary has no {END_OF_TURN} token to end the demo's reply.",
                        "Use the Qwen vocabulary file (ggml-vocab-qwen35.gguf).")
    tokens = encode_ascii(tokenizer, passage)
    repeated = sorted({tokenizer.tokens[t] for t in tokens if tokens.count(t) > 1 or t == end})
    if repeated:
        raise GGUFError(f"The demo passage repeats the tokens {repeated}: the next token would be ambiguous.",
                        "Reword the passage so that every token occurs once.")
    cycle = [end, *tokens]
    return DemoTable(tuple(cycle), end, _wrong_drafts(cycle, acceptance, np.random.default_rng(seed)), "english")


def _wrong_drafts(cycle: list[int], acceptance: float, rng: np.random.Generator) -> dict[int, int]:
    """A ``1 - acceptance`` share of the cycle (never the entry, ``cycle[0]``) drafted as another token."""
    n = len(cycle)
    n_wrong = min(round((1.0 - acceptance) * n), n - 1)  # the entry always drafts right
    wrong_pos = rng.choice(np.arange(1, n), size=n_wrong, replace=False) if n_wrong else np.array([], int)
    shifts = rng.integers(1, n, size=n_wrong)
    return {cycle[int(p)]: cycle[(int(p) + int(s)) % n] for p, s in zip(wrong_pos, shifts, strict=True)}


def demo_target_plans(size: Size, table: DemoTable, seed: int = 0, *, n_trunk: int | None = None) -> list[TensorPlan]:
    """The tensors of the demo target (data is produced only when written)."""
    return _table_plans(demo_shape(size, n_trunk), DEMO_TYPES[size], table, seed)


# --- the table-driven weights -----------------------------------------------------------------------


def _table_plans(shape: Qwen35Shape, types: DemoTypes, table: DemoTable, seed: int) -> list[TensorPlan]:
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

    # Only n distinct rows (plus the zero row) exist: encode each once, then gather them while writing.
    emb_rows = encode_rows(emb, types.embedding)
    head_rows = encode_rows(emb * np.float32(LOGIT_SCALE / E), types.head)
    del emb

    mtp = f"blk.{shape.mtp_layer}.nextn."
    overrides = {
        "token_embd.weight": TensorPlan(
            "token_embd.weight", types.embedding, (E, V), _gather_rows(emb_rows, embed_src)
        ),
        "output.weight": TensorPlan("output.weight", types.head, (E, V), _gather_rows(head_rows, head_src)),
        # [I | 0]: the MTP block keeps the token part of [embedding, hidden] and drops the hidden part
        mtp + "eh_proj.weight": TensorPlan(
            mtp + "eh_proj.weight", types.embedding, (2 * E, E), _identity_rows(E, 2 * E, types.embedding)
        ),
    }
    if table.wrong:
        name = mtp + "embed_tokens.weight"
        overrides[name] = TensorPlan(name, types.embedding, (E, V), _gather_rows(emb_rows, draft_src))
    return neutral_plans(shape, types.matrix, embed_tokens=bool(table.wrong), overrides=overrides)


def _gather_rows(rows: npt.NDArray[Any], src: npt.NDArray[np.int64]) -> ChunkSource:
    """Encoded rows ``rows[src[i]]`` (zero where ``src[i] < 0``), produced chunk by chunk."""

    def chunks() -> Iterator[npt.NDArray[Any]]:
        padded = np.vstack([rows, np.zeros((1, rows.shape[1]), dtype=rows.dtype)])  # zero bytes: zero values
        for start in range(0, src.size, _CHUNK_ROWS):
            yield padded[src[start : start + _CHUNK_ROWS]]  # -1 picks the zero row

    return chunks


def _identity_rows(n_rows: int, n_cols: int, ggml_type: GGMLQuantizationType) -> ChunkSource:
    """The rows of ``eye(n_rows, n_cols)``, encoded as ``ggml_type`` chunk by chunk."""
    step = max(1, (1 << 24) // (4 * n_cols))

    def chunks() -> Iterator[npt.NDArray[Any]]:
        for start in range(0, n_rows, step):
            yield encode_rows(np.eye(min(step, n_rows - start), n_cols, start, dtype=np.float32), ggml_type)

    return chunks


# --- row encoders: F16, and Q4_K / Q6_K / Q8_0 written here (the gguf package only dequantizes these) ------


def encode_rows(rows: npt.NDArray[np.float32], ggml_type: GGMLQuantizationType) -> npt.NDArray[Any]:
    """``rows`` (n, row length) as the raw data of ``ggml_type``: float16 values or uint8 block bytes."""
    if ggml_type == GGMLQuantizationType.F16:
        return rows.astype(np.float16)
    if ggml_type == GGMLQuantizationType.F32:
        return rows.astype(np.float32)
    encoder = _ENCODERS.get(ggml_type)
    if encoder is None:
        raise GGUFError(f"The demo model cannot write {ggml_type.name} rows.", "This is a bug.")
    if rows.shape[-1] % QK_K:
        raise GGUFError(f"Rows of {rows.shape[-1]} values are not whole {ggml_type.name} blocks.", "This is a bug.")
    n = rows.shape[0]
    out = [encoder(rows[i : i + 1024].reshape(-1, QK_K).astype(np.float32)) for i in range(0, n, 1024)]
    return np.concatenate(out).reshape(n, -1) if out else np.zeros((0, 0), np.uint8)


def _f16(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float16]:
    return x.astype(np.float16)


def _quantize(x: npt.NDArray[np.float32], scale: npt.NDArray[np.float32], lo: int, hi: int) -> npt.NDArray[np.int32]:
    """``round(x / scale)`` clipped to ``[lo, hi]``, 0 where ``scale`` is 0."""
    safe = np.where(scale > 0, scale, 1.0)
    q = np.rint(x / safe)
    return np.clip(np.where(scale > 0, q, 0), lo, hi).astype(np.int32)


def quantize_q4_k(blocks: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """Q4_K blocks (144 bytes each) of ``blocks`` (n, 256): ``d*sc*q - dmin*m`` per 32-value sub-block.

    Layout (ggml ``block_q4_K``): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit
    quants (sub-blocks 2i and 2i+1 share 32 bytes: low and high nibble). Min/max per sub-block, not
    llama.cpp's search for the best scale: plenty for the demo's rows.
    """
    n = blocks.shape[0]
    x = blocks.reshape(n, 8, 32)
    lo = np.minimum(x.min(axis=2), 0.0)
    hi = np.maximum(x.max(axis=2), 0.0)
    scale, mins = (hi - lo) / 15.0, -lo
    d = _f16(scale.max(axis=1) / 63.0)
    dmin = _f16(mins.max(axis=1) / 63.0)
    sc = _quantize(scale, d.astype(np.float32)[:, None], 0, 63)
    m = _quantize(mins, dmin.astype(np.float32)[:, None], 0, 63)
    step = (d.astype(np.float32)[:, None] * sc)[:, :, None]
    offset = (dmin.astype(np.float32)[:, None] * m)[:, :, None]
    q = _quantize(x + offset, np.broadcast_to(step, x.shape), 0, 15).astype(np.uint8)

    out = np.empty((n, 144), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(n, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
    sc8, m8 = sc.astype(np.uint8), m.astype(np.uint8)
    out[:, 4:8] = (sc8[:, :4] & 63) | ((sc8[:, 4:] >> 4) << 6)
    out[:, 8:12] = (m8[:, :4] & 63) | ((m8[:, 4:] >> 4) << 6)
    out[:, 12:16] = (sc8[:, 4:] & 15) | ((m8[:, 4:] & 15) << 4)
    pairs = q.reshape(n, 4, 2, 32)
    out[:, 16:] = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    return out


def quantize_q6_k(blocks: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """Q6_K blocks (210 bytes each) of ``blocks`` (n, 256): ``d*sc*(q - 32)`` per 16-value sub-block.

    Layout (ggml ``block_q6_K``): 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8 scales, f16 d.
    In each half of 128 values, value ``l + 32*g`` (g = 0..3) keeps its low bits in byte ``l`` (g even) or
    ``32 + l`` (g odd), low nibble for g < 2, high nibble otherwise, and its high bits at bit ``2g`` of
    byte ``l`` of the half's 32 high-bit bytes.
    """
    n = blocks.shape[0]
    x = blocks.reshape(n, 16, 16)
    scale = np.abs(x).max(axis=2) / 31.0
    d = _f16(scale.max(axis=1) / 127.0)
    sc = _quantize(scale, d.astype(np.float32)[:, None], 0, 127)
    step = (d.astype(np.float32)[:, None] * sc)[:, :, None]
    q = (_quantize(x, np.broadcast_to(step, x.shape), -32, 31) + 32).astype(np.uint8).reshape(n, 2, 4, 32)

    out = np.empty((n, 210), dtype=np.uint8)
    low, high = q & 15, q >> 4
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
    out[:, :128] = ql.reshape(n, 128)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    out[:, 128:192] = qh.reshape(n, 64)
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = d.view(np.uint8).reshape(n, 2)
    return out


def quantize_q8_0(blocks: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """Q8_0 blocks of ``blocks`` (n, 256), 8 per row (34 bytes each): f16 d, then 32 int8 ``round(x / d)``."""
    n = blocks.shape[0]
    x = blocks.reshape(n * 8, 32)
    d = _f16(np.abs(x).max(axis=1) / 127.0)
    q = _quantize(x, np.broadcast_to(d.astype(np.float32)[:, None], x.shape), -127, 127).astype(np.int8)
    out = np.empty((n * 8, 34), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(n * 8, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(n, 8 * 34)


_ENCODERS: dict[GGMLQuantizationType, Callable[[npt.NDArray[np.float32]], npt.NDArray[np.uint8]]] = {
    GGMLQuantizationType.Q8_0: quantize_q8_0,
    GGMLQuantizationType.Q4_K: quantize_q4_k,
    GGMLQuantizationType.Q6_K: quantize_q6_k,
}
