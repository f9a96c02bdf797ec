"""The Qwen tokenizer as GGUF metadata: read it from a vocab GGUF, pad it to the model's vocabulary.

There is no pure-Python BPE here: counting a text corpus takes a :data:`Tokenize` callable, which the
app backs with the real llama.cpp tokenizer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import IntEnum
from functools import lru_cache
from pathlib import Path

from gguf import GGUFReader, GGUFValueType

from app.core.errors import GGUFError
from app.gguftools.reader import field_value, open_gguf
from app.gguftools.writer import KVItem, kv_array, kv_bool, kv_str, kv_u32

Tokenize = Callable[[str], list[int]]
"""Text to token ids, e.g. backed by llama.cpp's tokenizer of the target model."""

NEWLINE = "\u010a"  # byte-level BPE spelling of "\n" ("Ċ")
THINK_TOKENS = ("<think>", "</think>")


class TokenType(IntEnum):
    """llama.cpp's ``tokenizer.ggml.token_type`` values."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


@dataclass(frozen=True)
class Tokenizer:
    """Everything llama.cpp reads under ``tokenizer.*`` for a gpt2-style (byte-level BPE) vocabulary."""

    model: str
    pre: str
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    eos_id: int
    pad_id: int | None
    bos_id: int | None
    add_bos: bool
    chat_template: str

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def padded(self, n_vocab: int) -> Tokenizer:
        """This vocabulary padded to ``n_vocab`` with UNUSED tokens named ``<|pad_ID|>``."""
        if n_vocab < self.n_vocab:
            raise GGUFError(
                f"Cannot pad a {self.n_vocab}-token vocabulary down to {n_vocab} tokens.",
                "Use a model vocabulary size at least as large as the tokenizer's.",
            )
        extra = range(self.n_vocab, n_vocab)
        return replace(
            self,
            tokens=self.tokens + tuple(f"<|pad_{i}|>" for i in extra),
            token_types=self.token_types + (int(TokenType.UNUSED),) * len(extra),
        )

    def token_id(self, text: str) -> int | None:
        try:
            return self.tokens.index(text)
        except ValueError:
            return None

    def special_ids(self) -> list[int]:
        """Tokens a chat needs to run and stop: CONTROL tokens, eos, ``<think>``/``</think>``, newline."""
        ids = {i for i, t in enumerate(self.token_types) if t == TokenType.CONTROL}
        ids.add(self.eos_id)
        for text in (*THINK_TOKENS, NEWLINE):
            found = self.token_id(text)
            if found is not None:
                ids.add(found)
        return sorted(ids)

    def to_kv(self) -> list[KVItem]:
        items = [
            kv_str("tokenizer.ggml.model", self.model),
            kv_str("tokenizer.ggml.pre", self.pre),
            kv_array("tokenizer.ggml.tokens", self.tokens, GGUFValueType.STRING),
            kv_array("tokenizer.ggml.token_type", self.token_types, GGUFValueType.INT32),
            kv_array("tokenizer.ggml.merges", self.merges, GGUFValueType.STRING),
            kv_u32("tokenizer.ggml.eos_token_id", self.eos_id),
        ]
        if self.pad_id is not None:
            items.append(kv_u32("tokenizer.ggml.padding_token_id", self.pad_id))
        if self.bos_id is not None:
            items.append(kv_u32("tokenizer.ggml.bos_token_id", self.bos_id))
        items.append(kv_bool("tokenizer.ggml.add_bos_token", self.add_bos))
        if self.chat_template:
            items.append(kv_str("tokenizer.chat_template", self.chat_template))
        return items


def tokenizer_from_reader(reader: GGUFReader, source: str = "the model") -> Tokenizer:
    """The tokenizer stored in an open GGUF file.

    Raises:
        GGUFError: the file carries no gpt2-style tokenizer.
    """
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    model = field_value(reader, "tokenizer.ggml.model")
    eos = field_value(reader, "tokenizer.ggml.eos_token_id")
    if not tokens or model != "gpt2" or eos is None:
        raise GGUFError(
            f"{source} has no usable tokenizer (need a gpt2-style vocabulary with an end-of-text token).",
            "Use the Qwen vocabulary file or a Qwen3.8 (qwen35 architecture) model.",
        )
    types = field_value(reader, "tokenizer.ggml.token_type") or [int(TokenType.NORMAL)] * len(tokens)
    add_bos = field_value(reader, "tokenizer.ggml.add_bos_token")
    return Tokenizer(
        model=model,
        pre=field_value(reader, "tokenizer.ggml.pre") or "default",
        tokens=tuple(tokens),
        token_types=tuple(int(t) for t in types),
        merges=tuple(field_value(reader, "tokenizer.ggml.merges") or ()),
        eos_id=int(eos),
        pad_id=_opt_int(field_value(reader, "tokenizer.ggml.padding_token_id")),
        bos_id=_opt_int(field_value(reader, "tokenizer.ggml.bos_token_id")),
        add_bos=bool(add_bos) if add_bos is not None else False,
        chat_template=field_value(reader, "tokenizer.chat_template") or "",
    )


def _opt_int(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def load_tokenizer(vocab_path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of a vocab (or model) GGUF; cached per file version, reading takes seconds."""
    path = Path(vocab_path).resolve()
    if not path.is_file():
        raise GGUFError(f"The vocabulary file {path} does not exist.", "Check the path to ggml-vocab-qwen35.gguf.")
    stat = path.stat()
    return _load_cached(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)
def _load_cached(path: str, _mtime_ns: int, _size: int) -> Tokenizer:
    return tokenizer_from_reader(open_gguf(path), Path(path).name)
