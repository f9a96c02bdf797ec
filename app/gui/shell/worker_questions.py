"""Asking the user from a worker thread: the one relay every page uses (the publisher key's trust question, the
"download this much?" question).

The worker hands the question to the GUI thread through its op's ``report`` and waits on the question's
``answered`` event; the page opens a dialog and sets the answer. ``release`` ends every wait at once, unanswered
(a Cancel, or the page going away: nobody is left to answer), and a question asked after it is not shown at all, so
a worker never waits for a dialog that cannot come. What an unanswered question means is the asker's: both
questions default to "no".
"""

from __future__ import annotations

import threading
from typing import Protocol, TypeVar

from app.gui.shell.ops import Report


class Question(Protocol):
    """A question for the user: the worker waits on ``answered``; its answer is in the question's own fields."""

    answered: threading.Event


Q = TypeVar("Q", bound=Question)


class WorkerQuestions:
    """The questions one job's worker asks, so that a Cancel or the page's end can release them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: list[Question] = []
        self._released = False

    def ask(self, question: Q, report: Report) -> Q:
        """On the worker thread: show ``question`` on the GUI thread (``report``) and wait for its answer, or for
        ``release``. Returns the question, answered or not."""
        with self._lock:
            if self._released:
                question.answered.set()
                return question
            self._asked.append(question)
        report(question)
        question.answered.wait()
        return question

    def release(self) -> None:
        """From any thread: every wait ends now, and later questions are not asked (Cancel, the page is gone)."""
        with self._lock:
            self._released = True
            asked = list(self._asked)
        for question in asked:
            question.answered.set()

    @property
    def released(self) -> bool:
        return self._released
