"""Plain decoding pays for no drafting: a target context without MTP hidden rows computes its last layer's FFN for
the rows with logits only (a drafting target's for every row, which the draft needs), and reads the same logits."""

from __future__ import annotations

import ctypes
from types import ModuleType

import numpy as np
import pytest

from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.gguftools.inspect import inspect_gguf
from app.native.handles import Context, Model, ggml_base
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

PROMPT = [int(t) for t in 1000 + np.arange(24) * 7]


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("rows-demo"), size="tiny", acceptance=0.9, seed=4, language="words")


class _RowCounter:
    """Rows (ne[1]) of named graph nodes, read through the scheduler's eval callback."""

    def __init__(self, lib: ModuleType, names: set[str]) -> None:
        base = ggml_base(lib)
        get_name = base.ggml_get_name
        nrows = base.ggml_nrows
        nrows.argtypes = [ctypes.c_void_p]
        nrows.restype = ctypes.c_int64
        self.rows: dict[str, int] = {}

        def on_node(tensor: int, ask: bool, _user: object) -> bool:
            name = (get_name(tensor) or b"").decode()
            if ask:
                return name in names
            self.rows[name] = int(nrows(tensor))
            return True

        self.callback = lib.ggml_backend_sched_eval_callback(on_node)


def _prompt_pass(model: Model, *, nextn: bool, node: str) -> tuple[int, np.ndarray]:
    counter = _RowCounter(model.lib, {node})
    with Context(model, n_ctx=64, n_batch=32, n_threads=1, n_rs_seq=2 if nextn else 0, nextn_outputs=nextn,
                 timer=counter) as ctx:
        ctx.decode(PROMPT, 0, logits="last")
        return counter.rows[node], ctx.logits(-1)


def test_plain_prompt_pass_runs_the_last_ffn_for_the_logits_row_only(demo: DemoModel) -> None:
    last = inspect_gguf(demo.target).trunk_layers - 1
    node = f"ffn_out-{last}"
    with Model(demo.target) as model:
        plain_rows, plain_logits = _prompt_pass(model, nextn=False, node=node)
        drafting_rows, drafting_logits = _prompt_pass(model, nextn=True, node=node)
    assert plain_rows == 1
    assert drafting_rows == len(PROMPT)  # the draft reads every row's hidden state
    np.testing.assert_array_equal(plain_logits, drafting_logits)
