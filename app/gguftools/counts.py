"""Token frequency counts: the evidence a draft vocabulary is chosen from."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from app.errors import SidecarError
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
            partial.write_text(json.dumps(body, indent=0), encoding="utf-8")
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


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"token {dup} is listed twice")
    return dict(pairs)
