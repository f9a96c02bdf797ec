"""The window's side of Auto drafting (the decisions are ``app.engine.auto_mode``'s, Qt-free).

With "Auto (measured)" chosen in the model selector, a load takes up the record of the chosen model on this
backend and machine (``AutoMemory``, in the depth-memory folder) and loads the mode it asks for; each finished
reply is fed back (``observe``) and the record saved; before the next message is sent, the chat page asks
``switch`` whether Auto wants that reply from another mode, and if so loads it first (the message waits, as
during any load). Regenerating or editing a reply uses the mode loaded, and such a reply is not counted when it
is not the one Auto asked for. The HUD's "auto" line says which mode Auto uses and by how much it won, or how far
the measuring is.
"""

from __future__ import annotations

import logging
from typing import Any

from app.core import paths
from app.engine.auto_mode import AutoDrafting, AutoKey, AutoMemory, auto_key
from app.engine.config import EngineConfig
from app.engine.verdict import Verdict, condition_for, load_average
from app.gui.chat.chat_page import ChatPage
from app.gui.models.model_selector import ModelSelector
from app.gui.shell.engine_bridge import EngineBridge

log = logging.getLogger(__name__)


class AutoDraftingView:
    """Wires Auto drafting into the window: ``config()`` for a load in Auto, ``stop()`` for any other load."""

    def __init__(self, selector: ModelSelector, chat_page: ChatPage, bridge: EngineBridge) -> None:
        self.selector, self.chat_page, self.bridge = selector, chat_page, bridge
        self.auto: AutoDrafting | None = None  # the record of the model loaded in Auto, None in any other mode
        self._key: AutoKey | None = None
        self._choices: dict[str, str] = {}  # Auto's mode names -> the selector's keys, for the chosen model
        chat_page.switch_before_send = self.switch
        bridge.done.connect(self.observe)

    @property
    def memory(self) -> AutoMemory:
        return AutoMemory(paths.depth_memory_dir())

    def config(self) -> EngineConfig | None:
        """Take up the chosen model's record and give the configuration of the mode it asks for now (None while
        there is no model)."""
        from app.backend.registry import active

        files, plain = self.selector.model_files(), self.selector.config_for("off")
        if files is None or plain is None:
            return None
        self._choices = self.selector.auto_choices()
        manifest = active()
        try:
            key = auto_key(files[0], files[1] if "d2t" in self._choices else None,
                           manifest.id if manifest is not None else "no backend", plain.n_threads,
                           plain.n_gpu_layers, plain.rpc)
        except OSError as exc:  # a file went away: the load says so in words
            log.warning("Auto drafting cannot key %s: %s", files[0], exc)
            self.stop()
            return plain
        if self.auto is None or key != self._key:
            # a model just chosen: the window does not wait a second for a new record's load (its first save notes
            # a 0.1 s reading; a record stale through it is measured again once, then notes a 1 s one)
            self.auto, self._key = self.memory.recall(key, tuple(self._choices), hold_new=False), key
        self.show()
        return self.mode_config(self.auto.next_mode())

    def mode_config(self, mode: str) -> EngineConfig | None:
        """How Auto loads one of its modes: with adaptive depth, remembered between loads."""
        key = self._choices.get(mode)
        return self.selector.config_for(key, auto=key != "off") if key is not None else None

    def stop(self) -> None:
        """Another mode (or a remote server) was chosen: Auto has no say."""
        self.auto = self._key = None
        hud = self.chat_page.chat.hud
        hud.set_auto(None)
        hud.verdict_source = None
        hud.refresh_verdict()

    def show(self) -> None:
        """Auto's line on the HUD, and the HUD's verdict from the same replies Auto decides from."""
        hud = self.chat_page.chat.hud
        hud.set_auto(self.auto.status() if self.auto is not None else None)
        hud.verdict_source = self.verdict if self.auto is not None else None
        hud.refresh_verdict()

    def verdict(self, config: EngineConfig) -> Verdict | None:
        """The verdict Auto holds for the mode of ``config`` against drafting off: the one it decided with, or its
        measuring so far (None: not one of Auto's modes, or off itself)."""
        auto = self.auto
        mode = next((m for m in self._choices if m != "off" and self.mode_config(m) == config), None)
        if auto is None or mode is None:
            return None
        decided = auto.verdicts.get(mode)
        if decided is not None and decided.a == "off":
            return decided
        return auto.comparisons().get(mode)

    def switch(self) -> EngineConfig | None:
        """Before a message is sent: the configuration Auto wants for this reply, when another is loaded."""
        if self.auto is None or self.bridge.remote is not None:
            return None
        wanted = self.mode_config(self.auto.next_mode())
        return wanted if wanted is not None and wanted != self.bridge.config else None

    def observe(self, event: dict[str, Any]) -> None:
        """A finished reply: counted when it came from the mode Auto asked for; the record is saved."""
        auto, config = self.auto, self.bridge.config
        stats = event.get("stats") or {}
        tps, sampling = stats.get("decode_tps"), stats.get("sampling")
        if auto is None or self._key is None or config is None or not isinstance(tps, int | float) or not sampling:
            return
        mode = auto.next_mode()
        if config != self.mode_config(mode):
            return  # a reply of another mode (regenerated before a switch): not what Auto asked for
        if auto.observe(mode, condition_for(config, str(sampling), mode), float(tps), int(stats.get("generated") or 0),
                        load_average()):
            try:
                self.memory.remember(self._key, auto)
            except OSError as exc:  # a full disk, a read-only folder: only the next start's head start is lost
                log.warning("Auto drafting's record could not be saved: %s", exc)
        self.show()
