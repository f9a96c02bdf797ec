"""A signed file's bytes as one JSON object, or in words why they are not one: the feed and the backend manifests
read theirs the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def load_object(data: bytes, bad: Callable[[str], Exception]) -> dict[str, Any]:
    """The JSON object in ``data`` (UTF-8, a BOM allowed); else ``bad(what is wrong)`` is raised."""
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise bad("its JSON is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise bad(f"a JSON {type(obj).__name__}, expected an object")
    return obj
