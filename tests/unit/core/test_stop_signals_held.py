"""A stop signal that comes while a child server starts waits until its handle is kept (``stop_signals_held``).

Found under load: ``serve`` stopped by SIGTERM the moment its llama-server existed ended cleanly and left that
server running, because the stop was raised inside ``subprocess.Popen`` before it returned the child's handle.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import pytest

from app.core import processes


class _Stop(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


@pytest.fixture
def raising_handlers() -> object:
    previous = {sig: signal.signal(sig, _stop) for sig in processes.STOP_SIGNALS}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("raising_handlers")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_the_block_is_delivered_after_it(sig: signal.Signals) -> None:
    kept: list[str] = []
    with pytest.raises(_Stop) as stopped, processes.stop_signals_held():
        os.kill(os.getpid(), sig)
        kept.append("the child's handle")  # without the hold the stop is raised before this line
    assert kept == ["the child's handle"] and stopped.value.args == (sig,)
    assert all(signal.getsignal(s) is _stop for s in processes.STOP_SIGNALS)  # the handlers are back


@pytest.mark.usefixtures("raising_handlers")
def test_without_the_hold_the_stop_cuts_the_block_short() -> None:
    """The check above can fail: the same signal outside the hold stops the block at once."""
    kept: list[str] = []
    with pytest.raises(_Stop):
        os.kill(os.getpid(), signal.SIGTERM)
        kept.append("the child's handle")
    assert kept == []


@pytest.mark.usefixtures("raising_handlers")
def test_a_block_without_a_stop_changes_nothing() -> None:
    with processes.stop_signals_held():
        value = 1
    assert value == 1 and signal.getsignal(signal.SIGTERM) is _stop


def test_outside_the_main_thread_it_holds_nothing() -> None:
    """Only the main thread may set handlers: a worker thread's start (the window's) goes through untouched."""
    errors: list[BaseException] = []

    def start() -> None:
        try:
            with processes.stop_signals_held():
                pass
        except BaseException as error:  # reported to the test's thread
            errors.append(error)

    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    assert errors == []
