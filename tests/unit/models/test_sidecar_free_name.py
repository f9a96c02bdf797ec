"""``sidecar make`` never stops at "already exists" with nowhere to go (issue 36 item 7): the default name, or the
first free one beside it; a taken ``--out`` is refused with a free name to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.errors import SidecarError
from app.models.sidecar_job import Corpus, free_name, free_out, make_sidecar


def test_the_first_free_name_beside_the_taken_ones(tmp_path: Path) -> None:
    target = tmp_path / "Mine.gguf"
    assert free_out(target, 32768) == tmp_path / "Mine-FastMTP-32K.gguf"
    (tmp_path / "Mine-FastMTP-32K.gguf").write_bytes(b"x")
    (tmp_path / "Mine-FastMTP-32K-2.gguf.partial").write_bytes(b"x")  # a build under way holds -2
    assert free_out(target, 32768) == tmp_path / "Mine-FastMTP-32K-3.gguf"
    assert free_name(tmp_path / "other.gguf") == tmp_path / "other.gguf"


def test_a_taken_out_is_refused_with_a_free_name_to_use(tmp_path: Path) -> None:
    taken = tmp_path / "Mine-FastMTP-32K.gguf"
    taken.write_bytes(b"x")
    with pytest.raises(SidecarError) as caught:
        make_sidecar(tmp_path / "Mine.gguf", taken, 32768, Corpus())
    assert "already exists" in caught.value.message and "Mine-FastMTP-32K-2.gguf" in caught.value.advice
    assert taken.read_bytes() == b"x"
