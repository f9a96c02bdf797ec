"""The 27b demo model through the real patched CPU backend, at its real width and vocabulary (5120, 248320).

Written with 4 trunk layers instead of 64 (three gated-delta-net layers and one full-attention layer, all
zero): every other tensor, type and the table are the full-size file's, so what holds here holds there.
The files take about 8 GB and are deleted when the module ends (``module_tmp``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.gguftools.builtin_demo import d2t_ids, table_agreement, table_prompt
from app.gguftools.demo_model import DemoModel, write_demo_model
from app.gguftools.inspect import inspect_gguf
from app.native import draft_probe
from app.native.handles import Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

N_TRUNK = 4
ACCEPTANCE = 0.8
POSITIONS = 160  # teacher-forced positions after the prompt


@pytest.fixture(scope="module")
def demo27(module_tmp: ModuleFolders, qwen_vocab_path: Path) -> DemoModel:
    return write_demo_model(module_tmp.mktemp("demo27b"), qwen_vocab_path, "27b", acceptance=ACCEPTANCE, seed=5,
                            n_trunk=N_TRUNK)


@pytest.fixture(scope="module")
def runs(demo27: DemoModel) -> dict[str, Any]:
    """Greedy decoding token by token, and the three draft heads teacher-forced along the table."""
    assert demo27.table is not None
    prompt = table_prompt(demo27)
    chat = [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198]  # <|im_start|>user\nhi<|im_end|>\n...assistant\n
    sequence = prompt + demo27.table.continuation(prompt[-1], POSITIONS)
    with Model(demo27.target, load_mtp=True) as target:
        return {
            "prompt": prompt,
            "greedy": draft_probe.greedy(target, prompt, 24),
            "chat": draft_probe.greedy(target, chat, 8),
            "sequence": sequence,
            "embedded": draft_probe.probe(target, sequence),
            "full": draft_probe.probe(target, sequence, demo27.sidecar_full),
            "d2t": draft_probe.probe(target, sequence, demo27.sidecar_d2t),
        }


def test_files_have_the_real_width_vocabulary_and_types(demo27: DemoModel) -> None:
    target, full, d2t = (inspect_gguf(p) for p in (demo27.target, demo27.sidecar_full, demo27.sidecar_d2t))
    assert [r.kind for r in (target, full, d2t)] == ["target", "mtp_sidecar_full", "mtp_sidecar_d2t"]
    assert {(r.n_embd, r.vocab_size) for r in (target, full, d2t)} == {(5120, 248320)}
    assert (target.trunk_layers, target.nextn_layers) == (N_TRUNK, 1)
    assert set(target.tensor_types) == {"F32", "Q4_K", "Q6_K"} and target.tensor_types["Q6_K"] == 1
    assert full.output_shape == [5120, 248320] and d2t.output_shape == [5120, 32768] and d2t.d2t_unique


def test_greedy_decoding_follows_the_table(demo27: DemoModel, runs: dict[str, Any]) -> None:
    assert demo27.table is not None
    assert table_agreement(demo27, runs["prompt"][-1], runs["greedy"]) >= 0.9
    assert runs["chat"] == demo27.table.continuation(198, 8)  # a chat prompt leads into the table
    sequence, start = runs["sequence"], len(runs["prompt"])
    expected = [demo27.table.successor(t) for t in sequence]
    assert np.mean(np.array(runs["embedded"].target_next[start:]) == np.array(expected[start:])) >= 0.99


@pytest.mark.parametrize("head", ["embedded", "full", "d2t"])
def test_drafts_are_accepted_at_the_requested_rate_with_real_rejections(
    demo27: DemoModel, runs: dict[str, Any], head: str
) -> None:
    table, start = demo27.table, len(runs["prompt"])
    assert table is not None
    probe: draft_probe.DraftProbe = runs[head]
    acceptance = probe.acceptance(start)
    assert abs(acceptance - ACCEPTANCE) <= 0.08, acceptance
    assert (1.0 - acceptance) * POSITIONS >= 10  # rejections, not ties broken our way
    drafted = [table.draft_successor(t) for t in runs["sequence"][start:]]
    assert np.mean(np.array(probe.draft_next[start:]) == np.array(drafted)) >= 0.99


def test_d2t_drafts_are_the_full_sidecars_at_the_d2t_ids(demo27: DemoModel, runs: dict[str, Any]) -> None:
    assert demo27.table is not None
    ids = d2t_ids(demo27.sidecar_d2t)
    assert len(ids) == 32768 and set(demo27.table.cycle) <= set(ids.tolist())
    full, d2t = runs["full"], runs["d2t"]
    np.testing.assert_allclose(d2t.draft_logits[:, ids], full.draft_logits[:, ids], rtol=1e-5, atol=1e-4)
    outside = np.ones(d2t.draft_logits.shape[1], dtype=bool)
    outside[ids] = False
    assert np.isneginf(d2t.draft_logits[:, outside]).all()
    assert d2t.draft_next == full.draft_next
