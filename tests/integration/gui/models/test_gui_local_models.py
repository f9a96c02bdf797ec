"""Your own models and your own numbers in the window, against the real core: GGUF files written by our writer
(the demo model), the real patched CPU backend (the sidecar and benchmark child processes, the chat's engine), a
real HTTP server on 127.0.0.1 answering the hub's tree API, real widgets offscreen.

Adding a file through the real (Qt) file dialog and by a real drop event, the scan finding a file planted in a
fake LM Studio folder, the three verification states (and a hub-hash mismatch refused), a sidecar made in the
window and then drafting in a chat, a cancelled sidecar leaving nothing, and the Benchmark page's matrix with
its table, chart, exports and cancel."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt loads: no display needed

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from app.backend.registry import BackendManifest
from app.chats.history import HistoryStore
from app.core.errors import JobCancelled
from app.engine.modes import MODES
from app.gguftools.demo_model import DemoModel
from app.gguftools.inspect import inspect_gguf
from app.gui.main import MainWindow
from app.gui.models.local_models_panel import A_STATE
from app.models import local_models
from app.release.publish import keygen
from app.settings.app_settings import Settings
from tests.helpers.demo_copies import DemoCopies
from tests.helpers.demo_release import MODEL, SIDECAR, install_release
from tests.helpers.module_folders import ModuleFolders
from tests.helpers.release_server import ReleaseServer
from tests.helpers.waits import HANG_MS

WAIT_MS = HANG_MS  # a hang guard: every wait ends as soon as its condition holds (tests/helpers/waits.py)
REPO, OTHER_REPO = "someone/Qwen3.8-MTP-GGUF", "someone/Qwen3.8-MTP-GGUF-changed"
REVISION = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def places(module_tmp: ModuleFolders) -> Iterator[Path]:
    """This module's own config (the registry, trusted keys), HOME and Hugging Face cache."""
    root = module_tmp.mktemp("gui-local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FASTMTP_CONFIG_DIR", str(root / "config"))
        patch.setenv("HOME", str(root / "home"))
        patch.setenv("HF_HUB_CACHE", str(root / "hf-hub"))
        patch.delenv("HF_HOME", raising=False)
        patch.delenv("HF_TOKEN", raising=False)
        (root / "home").mkdir()
        yield root


@pytest.fixture(scope="module")
def demo(module_tmp: ModuleFolders, default_demo: DemoCopies) -> DemoModel:
    return default_demo.copy_to(module_tmp.mktemp("gui-local-demo"))


@pytest.fixture(scope="module")
def window(qapp: QApplication, request: pytest.FixtureRequest, patched_backend: BackendManifest, places: Path,
           demo: DemoModel) -> Iterator[MainWindow]:
    history = HistoryStore(places / "history.sqlite3")
    win = MainWindow(history=history, settings=Settings(models_dir=str(places / "models"), first_run_done=True))
    win.resize(1280, 800)
    win.show()
    QtBot(request).waitUntil(lambda: not win.model_selector.listing_models, timeout=WAIT_MS)
    yield win
    win.close()
    history.close()


def _link(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        os.link(source, target)
    return target


def _wait_idle(qtbot: QtBot, win: MainWindow) -> None:
    qtbot.waitUntil(lambda: win.models_page.local.idle, timeout=WAIT_MS)


def _hf_file(demo: DemoModel, places: Path, repo: str) -> Path:
    sha = hashlib.sha256(demo.target.read_bytes()).hexdigest()
    folder = places / "hf-hub" / f"models--{repo.replace('/', '--')}"
    blob = _link(demo.target, folder / "blobs" / sha)
    snapshot = folder / "snapshots" / REVISION / "model-Q4_K_M.gguf"
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def _tree(name: str, sha256: str, size: int) -> bytes:
    return json.dumps([{"type": "file", "oid": "a" * 40, "size": 134, "path": name,
                        "lfs": {"oid": sha256, "size": size, "pointerSize": 134}}]).encode()


def _selector_item(win: MainWindow, key: Path) -> tuple[str, bool]:
    box = win.model_selector.model_box
    row = box.findData(str(key))
    assert row >= 0, [box.itemData(i) for i in range(box.count())]
    item = box.model().item(row)  # type: ignore[attr-defined]
    return box.itemText(row), bool(item.isEnabled())


def test_a_model_file_added_through_the_file_dialog_is_listed_and_offered(
        qtbot: QtBot, window: MainWindow, demo: DemoModel, places: Path) -> None:
    mine = _link(demo.target, places / "home" / "models" / "Qwen3.8-tiny-Q8_0.gguf")
    panel = window.models_page.local
    window.show_page("Models")
    qtbot.mouseClick(panel.add_button, Qt.MouseButton.LeftButton)
    dialog = panel.file_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.selectFile(str(mine))
    dialog.accept()
    _wait_idle(qtbot, window)
    model = panel.model(mine)
    assert model is not None and model.copied_from == "" and model.facts.mtp_head
    assert panel.state_of(mine) == "unverified local file"
    assert "Added Qwen3.8-tiny-Q8_0.gguf (used where it is, nothing copied)" in panel.status.text()
    qtbot.waitUntil(lambda: window.model_selector.model_box.findData(str(mine)) >= 0, timeout=WAIT_MS)
    text, enabled = _selector_item(window, mine)
    assert enabled and "Q8_0" in text and "unverified local file" in text


def test_a_gguf_dropped_on_the_window_is_added(qtbot: QtBot, window: MainWindow, demo: DemoModel,
                                               places: Path) -> None:
    dropped = _link(demo.target, places / "home" / "dropped" / "Dropped-Q6_K.gguf")
    window.show_page("Chat")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(dropped))])
    enter = QDragEnterEvent(QPoint(300, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(300, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, drop)
    assert drop.isAccepted() and window.current_page() == "Models"
    _wait_idle(qtbot, window)
    assert window.models_page.local.model(dropped) is not None
    text_only = QMimeData()
    text_only.setText("not a file")
    ignored = QDragEnterEvent(QPoint(300, 300), Qt.DropAction.CopyAction, text_only, Qt.MouseButton.LeftButton,
                              Qt.KeyboardModifier.NoModifier)
    ignored.ignore()
    QApplication.sendEvent(window, ignored)
    assert not ignored.isAccepted()


def test_a_gguf_dropped_on_the_message_box_is_added_not_pasted(qtbot: QtBot, window: MainWindow, demo: DemoModel,
                                                              places: Path) -> None:
    dropped = _link(demo.target, places / "home" / "dropped" / "Onto-The-Composer-Q4_K_M.gguf")
    window.show_page("Chat")
    composer = window.chat_page.chat.input
    composer.setPlainText("a draft message")
    target = composer.viewport()  # where Qt delivers drops on a text box
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(dropped))])
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, drop)
    assert drop.isAccepted() and window.current_page() == "Models"
    assert composer.toPlainText() == "a draft message"  # not the file's address pasted in
    _wait_idle(qtbot, window)
    assert window.models_page.local.model(dropped) is not None

    window.show_page("Chat")
    text = QMimeData()
    text.setText(" and more")
    QApplication.sendEvent(target, QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, text,
                                                   Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))
    text_drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, text, Qt.MouseButton.LeftButton,
                           Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, text_drop)
    assert " and more" in composer.toPlainText() and window.current_page() == "Chat"  # text drops still paste


def test_the_scan_finds_a_file_planted_in_lm_studio_and_adds_it(qtbot: QtBot, window: MainWindow, demo: DemoModel,
                                                               places: Path) -> None:
    planted = _link(demo.target, places / "home" / ".lmstudio" / "models" / "pub" / "Qwen3.8-GGUF" /
                    "Qwen3.8-Q4_K_M.gguf")
    sidecar = _link(demo.sidecar_d2t, places / "home" / "Downloads" / "Qwen3.8-FastMTP-32K.gguf")
    panel = window.models_page.local
    qtbot.mouseClick(panel.scan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel.scanning, timeout=WAIT_MS)
    row = panel.found_row(planted)
    assert row["where"] == "LM Studio" and row["facts"].startswith("qwen35 · Q4_K_M") and "MTP head" in row["facts"]
    assert row["usable"].startswith("yes — Usable") and row["action"] == "Add"
    side = panel.found_row(sidecar)
    assert side["usable"].startswith("no — A trimmed (d2t) FastMTP draft sidecar") and side["action"] == "Add"
    assert "Found" in panel.scan_label.text()
    panel.add_path(planted)
    _wait_idle(qtbot, window)
    assert panel.found_row(planted)["action"] == "Added"
    model = panel.model(planted)
    assert model is not None and model.origin is not None and model.origin.repo == "pub/Qwen3.8-GGUF"


def test_the_three_verification_states_and_a_refused_mismatch(qtbot: QtBot, window: MainWindow, demo: DemoModel,
                                                              places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    panel = window.models_page.local
    key = keygen(places / "keys")
    # signed, verified with the key (which pins it for this module's config) and installed, as `fetch` does
    release = install_release(places / "work", key, places / "models", {MODEL: demo.target, SIDECAR: demo.sidecar_d2t})
    signed, loose = release.folder / MODEL, _link(demo.target, places / "loose" / "loose.gguf")
    good, bad = _hf_file(demo, places, REPO), _hf_file(demo, places, OTHER_REPO)
    size, sha = good.stat().st_size, hashlib.sha256(good.read_bytes()).hexdigest()
    listing = {f"api/models/{REPO}/tree/{REVISION}": _tree(good.name, sha, size),
               f"api/models/{OTHER_REPO}/tree/{REVISION}": _tree(bad.name, "d" * 64, size)}
    for path in (signed, loose, good, bad):
        panel.add_path(path)
        _wait_idle(qtbot, window)
    assert panel.state_of(signed) == "publisher-signed"
    assert panel.state_of(loose) == panel.state_of(good) == "unverified local file"
    with ReleaseServer(listing) as hub:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.port}")
        panel.check_with_hub(good)
        _wait_idle(qtbot, window)
        assert panel.state_of(good) == "hub hash matches"
        panel.check_with_hub(bad)
        _wait_idle(qtbot, window)
    assert panel.state_of(bad) == "hub hash DIFFERS (refused)"
    assert "not the hub's file" in panel.status.text()
    badge = panel.added_table.cellWidget(panel.models.index(panel.model(good)), A_STATE)  # type: ignore[arg-type]
    assert isinstance(badge, QLabel) and "not who made it" in badge.toolTip()
    selector = window.model_selector
    qtbot.waitUntil(lambda: selector.model_box.findData(str(bad)) >= 0 and not selector.listing_models, timeout=WAIT_MS)
    for path, words, offered in ((signed, "publisher-signed", True), (good, "hub hash matches", True),
                                 (loose, "unverified local file", True), (bad, "hub hash DIFFERS", False)):
        text, enabled = _selector_item(window, path)
        assert words in text and enabled == offered, (path, text)
    assert "signed" not in _selector_item(window, good)[0]


def _make_dialog(qtbot: QtBot, window: MainWindow, target: Path) -> Any:
    panel = window.models_page.local
    dialog = panel.make_sidecar(target)
    assert dialog is not None and dialog.isVisible()
    dialog.vocab.setCurrentIndex(dialog.vocab.findData(16384))
    for name, box in dialog.prompt_boxes.items():
        box.setChecked(name == "document")
    return dialog


def test_a_cancelled_sidecar_leaves_no_file(qtbot: QtBot, window: MainWindow, demo: DemoModel, places: Path) -> None:
    target = _link(demo.target, places / "home" / "cancel" / "Cancel-Q8_0.gguf")
    window.models_page.local.add_path(target)
    _wait_idle(qtbot, window)
    dialog = _make_dialog(qtbot, window, target)
    out = dialog.out
    qtbot.mouseClick(dialog.make_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool({"slicing", "writing", "checking"} & set(dialog.steps_seen)), timeout=WAIT_MS)
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=WAIT_MS)
    assert isinstance(dialog.last_error, JobCancelled) and dialog.step_label.text().startswith("Cancelled")
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    assert window.models_page.local.model(target).sidecar_d2t is None  # type: ignore[union-attr]
    dialog.reject()


def test_a_sidecar_made_in_the_window_drafts_in_a_chat(qtbot: QtBot, window: MainWindow, demo: DemoModel,
                                                       places: Path) -> None:
    target = _link(demo.target, places / "home" / "make" / "Mine-Q8_0.gguf")
    panel = window.models_page.local
    panel.add_path(target)
    _wait_idle(qtbot, window)
    dialog = _make_dialog(qtbot, window, target)
    qtbot.mouseClick(dialog.make_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=WAIT_MS)
    assert dialog.last_error is None, dialog.result_label.toPlainText()
    assert dialog.steps_seen[0] == "tokenizing" and "checking" in dialog.steps_seen
    made = Path(dialog.outcome["path"])
    assert inspect_gguf(made).kind == "mtp_sidecar_d2t" and inspect_gguf(made).d2t_length == 16384
    check = dialog.outcome["check"]
    assert f"this sidecar {check['sidecar_acceptance']:.1%}" in dialog.result_label.toPlainText()
    assert "the embedded MTP head" in dialog.result_label.toPlainText()
    assert panel.model(target).sidecar_d2t == made  # type: ignore[union-attr]
    dialog.accept()

    selector = window.model_selector
    qtbot.waitUntil(lambda: selector.model_box.findData(str(target)) >= 0 and not selector.listing_models,
                    timeout=WAIT_MS)
    window.show_page("Chat")
    window.model_selector.mode_box.setCurrentIndex(window.model_selector.mode_box.findData("sidecar-d2t"))
    window.model_selector.model_box.setCurrentIndex(window.model_selector.model_box.findData(str(target)))
    qtbot.waitUntil(lambda: window.chat_page.ready and not window.bridge.busy, timeout=WAIT_MS)
    config = window.bridge.config
    assert config is not None and config.target == target and config.draft == made and config.mode == "sidecar"
    done: list[dict[str, Any]] = []
    window.bridge.done.connect(done.append)
    window.chat_page.chat.input.setPlainText("Hello, my own model!")
    qtbot.keyClick(window.chat_page.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT_MS)
    stats = done[0]["stats"]
    assert done[0]["text"].strip() and stats["drafted"] > 0 and stats["accepted"] > 0
    assert "draft" in done[0]["provenance"]
    assert window.model_selector.bench_model() is not None and window.model_selector.bench_model().d2t == made  # type: ignore[union-attr]


def test_a_worse_sidecar_is_kept_beside_the_good_one_until_the_user_chooses_it(
        qtbot: QtBot, window: MainWindow, demo: DemoModel, places: Path) -> None:
    """Issue 29 item 4: a model that drafts with its d2t sidecar is not advised to make one; a new sidecar that
    measures worse along the same text does not become its d2t mode (the dialog says why) unless "Use it anyway"."""
    folder = places / "home" / "keep"
    target = _link(demo.target, folder / "Keep-Q8_0.gguf")
    good = _link(demo.sidecar_d2t, folder / "Keep-FastMTP-d2t.gguf")
    panel = window.models_page.local
    panel.add_path(target)
    _wait_idle(qtbot, window)
    assert panel.model(target).sidecar_d2t == good  # type: ignore[union-attr]
    assert "make a FastMTP sidecar" not in panel.status.text() and "Keep-FastMTP-d2t.gguf" in panel.status.text()
    junk = folder / "junk.txt"
    junk.write_text("zzqx 7741 ##@@ qqq " * 400)  # a corpus unlike anything the model writes: a worse sidecar
    dialog = _make_dialog(qtbot, window, target)
    for box in dialog.prompt_boxes.values():
        box.setChecked(False)
    dialog.files.addItem(str(junk))
    qtbot.mouseClick(dialog.make_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=WAIT_MS)
    assert dialog.last_error is None, dialog.result_label.toPlainText()
    made = Path(dialog.outcome["path"])
    check = dialog.outcome["check"]
    assert check["sidecar_acceptance"] < check["current_acceptance"]
    assert "Keep-FastMTP-d2t.gguf stays" in dialog.result_label.toPlainText()
    assert f"{check['current_acceptance']:.1%}" in dialog.result_label.toPlainText()
    assert panel.model(target).sidecar_d2t == good and made.is_file()  # type: ignore[union-attr]
    assert dialog.use_anyway_button.isVisible()
    qtbot.mouseClick(dialog.use_anyway_button, Qt.MouseButton.LeftButton)
    assert panel.model(target).sidecar_d2t == made  # type: ignore[union-attr]
    assert not dialog.use_anyway_button.isVisible() and "As you chose" in dialog.result_label.toPlainText()
    dialog.accept()


def test_the_benchmark_page_runs_a_tiny_matrix_exports_it_and_cancels(qtbot: QtBot, window: MainWindow,
                                                                      demo: DemoModel, places: Path) -> None:
    window.loading.use_demo(demo)
    qtbot.waitUntil(lambda: window.chat_page.ready and not window.bridge.busy, timeout=WAIT_MS)
    window.show_page("Benchmark")
    page = window.bench_page
    assert page.model is not None and page.model.target == demo.target and page.model.d2t == demo.sidecar_d2t
    for mode, box in page.mode_boxes.items():
        box.setChecked(mode in ("off", "embedded", "d2t"))
    for depth, box in page.depth_boxes.items():
        box.setChecked(depth in (1, 2))
    page.tokens.setValue(8)
    assert page.runs.value() == 3  # interleaved runs: a verdict against off needs 3
    page.runs.setValue(1)  # quick: one run gives ratios, no verdict
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.running, timeout=WAIT_MS)
    assert page.last_error is None, page.status.text()
    assert page.progress_seen >= 5 and page.bar.value() == 1000
    rows = page.table_rows()
    assert [r["variant"] for r in rows] == ["off", "embedded k=1", "embedded k=2", "d2t sidecar k=1",
                                            "d2t sidecar k=2"]
    assert all(float(r["tok/s"]) > 0 for r in rows) and rows[0]["vs off"] == "–"
    assert all(r["vs off"].endswith("x? needs 4 more runs") for r in rows[1:])  # one run a side: 2 more each
    assert rows[-1]["acceptance"].endswith("%") and rows[-1]["tokens / pass"] != "–"
    assert set(page.chart.series) == {"off", "embedded", "d2t"}
    assert [d for d, _ in page.chart.series["d2t"]] == [1, 2]
    image = page.chart.grab().toImage()
    drawn = {image.pixelColor(x, y).name() for x in range(0, image.width(), 2) for y in range(image.height())}
    assert {MODES["d2t"].colour, MODES["embedded"].colour, MODES["off"].colour} <= drawn  # a line per mode
    exported = {kind: page.export(kind, places / f"bench.{kind}") for kind in ("json", "markdown", "png")}
    assert json.loads(exported["json"].read_text())["rows"][0]["variant"] == "off"
    assert "| d2t sidecar k=2 |" in exported["markdown"].read_text()
    assert exported["png"].read_bytes()[:4] == b"\x89PNG"

    for depth, box in page.depth_boxes.items():
        box.setChecked(depth <= 4)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.progress_seen >= 2, timeout=WAIT_MS)
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.running, timeout=WAIT_MS)
    assert isinstance(page.last_error, JobCancelled) and page.status.text().startswith("Cancelled")
    assert page.run_button.isEnabled()


def test_local_models_listing_is_the_registry(window: MainWindow) -> None:
    shown = [m.path for m in window.models_page.local.models]
    assert shown == [m.path for m in local_models.load_registry()]
