"""A load in the engine process can be watched: ``EngineClient.load(config, on_event=...)`` sees ``load_progress``
events for the target and the sidecar, rising to 1.0, before ``loaded``, and ``load`` still returns ``loaded``."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.client import EngineClient
from app.engine.config import EngineConfig
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("progress-events-demo"), size="tiny", acceptance=0.9, seed=8)


def test_load_progress_events_come_before_loaded(demo: DemoModel) -> None:
    config = EngineConfig(demo.target, mode="sidecar", draft=demo.sidecar_d2t, draft_depth=3, n_ctx=1024)
    events: list[dict[str, Any]] = []
    with EngineClient() as client:
        last = client.load(config, on_event=events.append)
        assert last["kind"] == "loaded", last
        assert events[-1] == last  # on_event saw the final event too; load returns the same as before
        progress = [e for e in events[:-1] if e["kind"] == "load_progress"]
        assert [e["kind"] for e in events[:-1]] == ["load_progress"] * len(progress)
        for name in (demo.target.name, demo.sidecar_d2t.name):
            fractions = [e["fraction"] for e in progress if e["file"] == name]
            assert fractions, f"no progress for {name}"
            assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)

        # the same pair again: the pool keeps both models, nothing is read, so no progress; load() without
        # on_event is as before
        again: list[dict[str, Any]] = []
        assert client.load(config, on_event=again.append)["kind"] == "loaded"
        assert [e["kind"] for e in again] == ["loaded"]
        assert client.load(config)["kind"] == "loaded"
