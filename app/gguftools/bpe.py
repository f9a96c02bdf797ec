"""Byte-level BPE encoding of plain ASCII text with a GGUF tokenizer's merges, in pure Python.

The English demo model needs the token ids of its passage when it is written, before any backend
exists (the self-test and the first run write demo models first). ASCII-only keeps the pre-tokenizer
exact without the ``regex`` module: ``\\p{L}`` is ``[A-Za-z]``, ``\\p{N}`` is ``[0-9]`` and ``\\p{M}`` is
empty there. The tests check the result against llama.cpp's own tokenizer.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import pairwise

from app.core.errors import GGUFError
from app.gguftools.tokenizer import Tokenizer

# llama.cpp's qwen2 / qwen35 pre-tokenizer (src/llama-vocab.cpp), restricted to ASCII
_PRE = re.compile(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PRE_TYPES = ("qwen2", "qwen35")


def _byte_char(b: int) -> str:
    """GPT-2's printable stand-in for byte ``b`` (ASCII bytes only: space is ``Ġ``, newline ``Ċ``)."""
    if 33 <= b <= 126:
        return chr(b)
    return chr(256 + sum(1 for c in range(b) if not 33 <= c <= 126))


def encode_ascii(tokenizer: Tokenizer, text: str) -> list[int]:
    """The token ids llama.cpp's tokenizer gives ``text`` (no special tokens parsed, no BOS).

    Raises:
        GGUFError: ``text`` is not ASCII, or the tokenizer is not a qwen2/qwen35 byte-level BPE.
    """
    if not text.isascii():
        raise GGUFError("The BPE encoder here handles ASCII text only.", "This is a bug in the demo passage.")
    if tokenizer.model != "gpt2" or tokenizer.pre not in _PRE_TYPES:
        raise GGUFError(f"No pure-Python encoder for the {tokenizer.model}/{tokenizer.pre} tokenizer.",
                        "Use the Qwen vocabulary file (ggml-vocab-qwen35.gguf).")
    ranks, ids = _tables(tokenizer)
    out: list[int] = []
    for piece in _PRE.findall(text):
        for symbol in _merge("".join(_byte_char(b) for b in piece.encode("ascii")), ranks):
            out.append(ids[symbol])
    return out


def _merge(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """Apply the merges to one pre-token, lowest rank first, as BPE does."""
    symbols = list(word)
    while len(symbols) > 1:
        ranked = [(r, i) for i, pair in enumerate(pairwise(symbols)) if (r := ranks.get(pair)) is not None]
        if not ranked:
            break
        _, i = min(ranked)
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
    return symbols


@lru_cache(maxsize=2)
def _tables(tokenizer: Tokenizer) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    ranks: dict[tuple[str, str], int] = {}
    for rank, merge in enumerate(tokenizer.merges):
        left, _, right = merge.partition(" ")
        ranks.setdefault((left, right), rank)
    ids: dict[str, int] = {}
    for i, token in enumerate(tokenizer.tokens):
        ids.setdefault(token, i)
    return ranks, ids
