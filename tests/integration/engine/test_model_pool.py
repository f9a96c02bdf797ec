"""A drafting-mode switch reloads only what changed: the engine process keeps the target (and its sidecar) loaded
between loads, and a reply after a switch is the reply of a fresh load."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.engine.chat_template import Message
from app.engine.client import EngineClient
from app.engine.config import ChatOptions, EngineConfig, Mode, SamplingParams
from app.engine.model_pool import ModelPool, target_slot
from app.gguftools.builtin_demo import ensure_demo_model
from app.gguftools.demo_model import DemoModel
from tests.helpers.module_folders import ModuleFolders

pytestmark = pytest.mark.usefixtures("patched_backend")

HELLO = [Message("system", "You are a demo."), Message("user", "Hello there, who are you?")]
OPTIONS = ChatOptions(max_tokens=32, sampling=SamplingParams(temperature=0.8, seed=3))


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders) -> DemoModel:
    return ensure_demo_model(module_tmp.mktemp("pool-demo"), size="tiny", acceptance=0.8, seed=12)


def _config(demo: DemoModel, mode: Mode, target: Path | None = None) -> EngineConfig:
    return EngineConfig(target or demo.target, mode=mode, draft=demo.sidecar_d2t if mode == "sidecar" else None,
                        n_ctx=1024)


def _tokens(client: EngineClient) -> list[int]:
    done = list(client.generate(HELLO, OPTIONS))[-1]
    assert done["kind"] == "done", done
    return list(done["tokens"])


def test_switching_modes_loads_only_what_changed_and_replies_as_a_fresh_load(demo: DemoModel) -> None:
    fresh: dict[Mode, list[int]] = {}
    for mode in ("off", "sidecar", "embedded"):
        with EngineClient() as client:
            assert client.load(_config(demo, mode))["kind"] == "loaded"
            fresh[mode] = _tokens(client)
    with EngineClient() as client:
        loaded = []
        for mode in ("off", "sidecar", "embedded", "off", "sidecar", "embedded"):
            event = client.load(_config(demo, mode))
            assert event["kind"] == "loaded", event
            loaded.append(event["models_loaded"])
            assert _tokens(client) == fresh[mode], mode
    # the target (with its MTP layers, though drafting is off), the sidecar, then nothing at all
    assert loaded == [1, 1, 0, 0, 0, 0]


def test_a_changed_file_or_another_target_is_loaded_again(demo: DemoModel, tmp_path: Path) -> None:
    copy = tmp_path / "target.gguf"
    shutil.copyfile(demo.target, copy)
    with EngineClient() as client:
        assert client.load(_config(demo, "off", copy))["models_loaded"] == 1
        assert client.load(_config(demo, "off", copy))["models_loaded"] == 0
        stat = copy.stat()
        os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the same name, another file for all we know
        assert client.load(_config(demo, "off", copy))["models_loaded"] == 1
        assert client.load(_config(demo, "off"))["models_loaded"] == 1  # another target
        assert client.load(_config(demo, "off", copy))["models_loaded"] == 1  # the first was freed with the switch


def test_the_pool_frees_another_targets_models_before_a_load(demo: DemoModel) -> None:
    pool = ModelPool()
    try:
        first = target_slot(_config(demo, "sidecar"))
        pool.retain(first)
        target = pool.get(demo.target, n_gpu_layers=0, load_mtp=False)
        sidecar = pool.get(demo.sidecar_d2t, n_gpu_layers=0, load_mtp=True)
        assert pool.get(demo.target, n_gpu_layers=0, load_mtp=False) is target
        pool.retain(first)  # the same target: everything stays
        assert pool.get(demo.sidecar_d2t, n_gpu_layers=0, load_mtp=True) is sidecar and pool.loads == 2
        with_mtp = pool.get(demo.target, n_gpu_layers=0, load_mtp=True)  # the embedded head needs its layers
        assert with_mtp is not target and with_mtp.load_mtp and pool.loads == 3
        with pytest.raises(ValueError, match="closed"):
            target.ptr  # noqa: B018 - freed, not leaked
        assert pool.get(demo.target, n_gpu_layers=0, load_mtp=False) is with_mtp  # serves plain decoding too
        pool.retain(target_slot(_config(demo, "off", demo.sidecar_full)))
        for model in (with_mtp, sidecar):
            with pytest.raises(ValueError, match="closed"):
                model.ptr  # noqa: B018
    finally:
        pool.close()
