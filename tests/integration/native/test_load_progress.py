"""A model load reports its progress: the fractions llama.cpp passes rise to 1.0, and False from the callback stops
the load in words (a load the person can watch, and cancel)."""

from __future__ import annotations

import pytest

from app.core.errors import ModelLoadError
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from app.native.handles import Model
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("progress-demo"), size="tiny", acceptance=0.9, seed=5)


def test_the_load_reports_rising_fractions_ending_at_one(demo: DemoModel) -> None:
    seen: list[float] = []
    with Model(demo.target, on_progress=seen.append) as model:
        assert model.n_vocab > 0
    assert seen, "no progress was reported"
    assert seen == sorted(seen)
    assert all(0.0 <= f <= 1.0 for f in seen)
    assert seen[-1] == pytest.approx(1.0)


def test_the_sidecar_load_reports_progress_too(demo: DemoModel) -> None:
    seen: list[float] = []
    with Model(demo.sidecar_d2t, load_mtp=True, on_progress=seen.append):
        pass
    assert seen and seen[-1] == pytest.approx(1.0)


def test_false_from_the_callback_stops_the_load(demo: DemoModel) -> None:
    with pytest.raises(ModelLoadError, match="stopped"):
        Model(demo.target, on_progress=lambda _fraction: False)


def test_a_failing_callback_does_not_fail_the_load(demo: DemoModel) -> None:
    def broken(_fraction: float) -> None:
        raise RuntimeError("a bug in a progress display")

    with Model(demo.target, on_progress=broken) as model:
        assert model.n_vocab > 0
