"""Token frequency counts: the evidence a draft vocabulary is chosen from, and the pieces a corpus is counted in.

A corpus is tokenized piece by piece (:func:`text_pieces`), so counting it needs memory for one piece, not for
the corpus. The pieces give exactly the tokens of the whole text: a piece ends only where the Qwen pre-tokenizer
(the ``qwen2``/``qwen35`` pre-tokenizer regex of llama.cpp's llama-vocab.cpp) always splits, whatever follows,
and BPE never merges across its splits:

- after an ASCII digit (``\\p{N}`` is a pre-token of one character, and nothing else holds a digit);
- after ``\\n`` when a printable ASCII character (not a space) follows: no pre-token holds a line break followed by
  anything but more whitespace;
- before a single space between two printable ASCII characters: the space starts the next pre-token, and the one
  before it ends with a character whose pre-token does not look ahead.

Each of these leaves an ASCII byte at the end of the piece, so decoding the pieces as UTF-8 (with replacement)
gives the text of decoding the whole. A stretch of ``most`` bytes with none of them (a wall of CJK text without
spaces or digits) is cut at a character boundary instead, and said so (``forced``): the tokens around such a cut
may differ from the whole text's by a token or two.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import safe_paths
from app.core.errors import SidecarError
from app.gguftools.tokenizer import Tokenize

FORMAT = "fastmtp-token-counts"
VERSION = 1


class TokenCounts:
    """How often each token id occurred; immutable once built."""

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        clean: dict[int, int] = {}
        for token, n in (counts or {}).items():
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise SidecarError(f"Token counts contain an invalid token id {token!r}.", _REBUILD)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise SidecarError(f"Token {token} has an invalid count {n!r}.", _REBUILD)
            if n:
                clean[token] = n
        self._counts = clean

    @classmethod
    def from_token_ids(cls, ids: Iterable[int]) -> TokenCounts:
        return cls(Counter(int(i) for i in ids))

    @classmethod
    def from_texts(cls, texts: Iterable[str], tokenize: Tokenize) -> TokenCounts:
        """Count the tokens of a text corpus with the target model's tokenizer."""
        counter: Counter[int] = Counter()
        for text in texts:
            counter.update(tokenize(text))
        return cls(counter)

    def merge(self, other: TokenCounts) -> TokenCounts:
        """Counts of both corpora together (summed)."""
        total = Counter(self._counts)
        total.update(other._counts)
        return TokenCounts(total)

    def as_dict(self) -> dict[int, int]:
        return dict(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __getitem__(self, token: int) -> int:
        return self._counts.get(token, 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenCounts) and self._counts == other._counts

    def __hash__(self) -> int:
        return hash(frozenset(self._counts.items()))

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def max_id(self) -> int:
        return max(self._counts, default=-1)

    def ranked(self) -> list[int]:
        """Token ids, most frequent first; ties broken by the lower id."""
        return sorted(self._counts, key=lambda t: (-self._counts[t], t))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write as JSON (atomically)."""
        out = Path(path)
        partial = out.with_name(out.name + ".partial")
        body = {
            "format": FORMAT,
            "version": VERSION,
            "counts": {str(t): n for t, n in sorted(self._counts.items())},
        }
        try:
            with safe_paths.open_new(partial, "partial token-count file") as handle:  # never through a link
                handle.write(json.dumps(body, indent=0).encode("utf-8"))
            os.replace(partial, out)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise SidecarError(f"Could not save token counts to {out}: {exc}.", "Check disk space.") from exc
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenCounts:
        """Read counts written by :meth:`save`.

        Raises:
            SidecarError: the file is missing, not counts JSON, or lists a token twice or a bad id.
        """
        p = Path(path)
        try:
            body = json.loads(p.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicate_keys)
        except OSError as exc:
            raise SidecarError(f"Cannot read token counts {p}: {exc}.", "Check the path.") from exc
        except ValueError as exc:
            raise SidecarError(f"{p.name} is not a valid token counts file: {exc}.", _REBUILD) from exc
        if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("counts"), dict):
            raise SidecarError(f"{p.name} is not a FastMTP token counts file.", _REBUILD)
        counts: dict[int, int] = {}
        for key, n in body["counts"].items():
            try:
                token = int(key)
            except ValueError:
                raise SidecarError(f"{p.name} names a token {key!r} that is not a number.", _REBUILD) from None
            if token in counts:
                raise SidecarError(f"{p.name} lists token {token} twice.", _REBUILD)
            counts[token] = n
        return cls(counts)


_REBUILD = "Count the corpus again to rebuild the token counts file."

# ----------------------------------------------------------------------------- pieces of a corpus

PIECE_BYTES = 1 << 20  # a piece's usual size: about a second of tokenizing on a busy core, a few MB of memory
MAX_PIECE_BYTES = 4 << 20  # a piece never grows beyond this, boundary or not
_SEARCH = 64 << 10  # the tail of a piece where the last boundary is looked for first
_BOUNDARY = re.compile(rb"(?<=[0-9])|(?<=\n)(?=[\x21-\x7e])|(?<=[\x21-\x7e])(?= [\x21-\x7e])")


@dataclass(frozen=True)
class Piece:
    """Bytes of a text to tokenize on their own; ``forced``: it ends where no boundary was proven."""

    data: bytes
    forced: bool = False


def text_pieces(blocks: Iterable[bytes], *, target: int = PIECE_BYTES, most: int = MAX_PIECE_BYTES) -> Iterator[Piece]:
    """One text, given as consecutive ``blocks`` of bytes, in pieces of about ``target`` bytes (at most ``most``)
    that tokenize to the tokens of the whole text (see the module's doc). The pieces join to the input."""
    most = max(most, target)
    buffer = bytearray()
    for block in blocks:
        buffer += block
        while len(buffer) >= target:
            cut = _last_boundary(buffer, target) or _first_boundary(buffer, target, most)
            forced = False
            if cut is None:
                if len(buffer) <= most:
                    break  # read on: a boundary may come before ``most`` (and the byte after it says where to cut)
                cut, forced = _character_boundary(buffer, most), True
            yield Piece(bytes(buffer[:cut]), forced)
            del buffer[:cut]
    if buffer:
        yield Piece(bytes(buffer))


def _last_boundary(buffer: bytearray, end: int) -> int | None:
    """The last boundary in ``(0, end]``: in the last 64 KiB first (any prose has one), else anywhere before."""
    for start in (max(1, end - _SEARCH), 1):
        found = None
        for match in _BOUNDARY.finditer(buffer, start, min(len(buffer), end + 2)):
            if match.start() > end:
                break
            found = match.start()
        if found:
            return found
        if start == 1:
            break
    return None


def _first_boundary(buffer: bytearray, start: int, most: int) -> int | None:
    match = _BOUNDARY.search(buffer, start, min(len(buffer), most + 2))
    return match.start() if match is not None and 0 < match.start() <= most else None


def _character_boundary(buffer: bytearray, end: int) -> int:
    """The last position at or before ``end`` that starts a UTF-8 character (not a continuation byte)."""
    cut = end
    while cut > end - 4 and cut > 1 and 0x80 <= buffer[cut] < 0xC0:
        cut -= 1
    return cut


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"token {dup} is listed twice")
    return dict(pairs)
