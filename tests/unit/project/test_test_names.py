"""Every test module's file name is unique across tests/: the folders have no ``__init__.py``, so pytest imports
test modules by their base name, and two of one name stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def test_no_two_test_modules_share_a_file_name() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
