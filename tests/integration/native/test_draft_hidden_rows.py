"""A draft context hands back the MTP hidden row of every token of a pass, by batch index: a draft pass of
[held..., pending] asks for the last row's logits only, and the next draft step needs the last row's hidden state
(masked, llama.cpp copied the pass's first rows instead: its MTP graph keeps h_nextn for every row)."""

from __future__ import annotations

import numpy as np
import pytest

from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.native.handles import Context, Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

PROMPT = [int(t) for t in 1000 + np.arange(12) * 7]


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("draft-rows-demo"), size="tiny", acceptance=0.9, seed=4,
                             language="words")


def test_a_draft_pass_hands_back_every_rows_hidden_state(demo: DemoModel) -> None:
    with Model(demo.target) as target, Model(demo.sidecar_d2t, load_mtp=True) as draft, \
            Context(target, n_ctx=64, n_batch=16, n_threads=1, n_rs_seq=2, nextn_outputs=True) as tctx:
        tctx.decode(PROMPT, 0, logits="last")
        hidden = tctx.nextn_rows(len(PROMPT))
        with Context(draft, n_ctx=64, n_batch=16, n_threads=1, draft_for=tctx) as dctx:
            dctx.decode(PROMPT, 0, hidden=hidden, logits="last")
            rows = [dctx.nextn_hidden(i) for i in range(len(PROMPT))]
            np.testing.assert_array_equal(dctx.nextn_hidden(-1), rows[-1])
            assert all(row.shape == (target.n_embd,) and np.isfinite(row).all() for row in rows)
            with pytest.raises(ValueError):
                dctx.nextn_hidden(len(PROMPT))
            logits = dctx.logits(-1)
        # the last row is the one a pass of the last token alone gives (the same logits too)
        with Context(draft, n_ctx=64, n_batch=16, n_threads=1, draft_for=tctx) as alone:
            alone.decode(PROMPT[:-1], 0, hidden=hidden[:-1], logits="none")
            alone.decode(PROMPT[-1:], len(PROMPT) - 1, hidden=hidden[-1:], logits="last")
            np.testing.assert_allclose(alone.nextn_hidden(-1), rows[-1], atol=1e-4)
            np.testing.assert_allclose(alone.logits(-1), logits, atol=1e-3)
