"""The context sized to the machine against the real patched backend (issue 34): the built-in demo loads with
Auto's context (its small trained 8,192 at most).

(A context too large for the machine is not made here on purpose: on the CPU llama.cpp sizes its cell tables by
the context before it allocates the cache, so a terabyte-sized context is an out-of-memory kill, not an error in
words. That is why a value that does not fit is warned about before the load, with the arithmetic.)"""

from __future__ import annotations

import pytest

from app.gguftools.demo_model import DemoModel
from app.models.context_size import FLOOR, check_context, resolve_context
from app.native.handles import Context, Model
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("ctx-native-demo"))


def test_the_demo_loads_with_autos_context(demo: DemoModel) -> None:
    auto = resolve_context(0, demo.target, demo.sidecar_d2t)
    fit = check_context(0, demo.target, demo.sidecar_d2t)
    assert fit is not None and fit.fits and auto == fit.tokens and FLOOR <= auto <= 8192
    with Model(demo.target) as model, Context(model, n_ctx=auto, n_batch=8) as ctx:
        assert model.lib.llama_n_ctx(ctx.ptr) == auto
        ctx.decode([1000, 1001, 1002], 0, logits="none")

