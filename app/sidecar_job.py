"""Make a FastMTP sidecar for your own model, with progress and cancel, then measure it against the embedded head.

The steps a user sees: *tokenizing* the corpus with the model's own tokenizer, *counting* the tokens,
*slicing* the LM-head rows of the chosen draft vocabulary (while they are written) and *writing* the rest,
then *checking*: the target greedily continues a prompt, and the new sidecar's head and the model's
embedded MTP head each predict the next token along that text (teacher-forced, ``draft_probe``); the share
they get right is their one-token acceptance.

The corpus is any mix of the built-in prompt sets (``resources/prompts``), the user's own chats (the
history's user and assistant messages) and text files. Cancelling, from any step, leaves no file behind:
the sidecar is written to ``<out>.partial`` and renamed only when complete.

This module tokenizes and probes through the native backend, so the window runs it in a child process
(``python -m app sidecar make --json``, see ``app.child_job``): a native failure cannot take the window down.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.errors import FastMTPError, SidecarError
from app.resources import resources_dir

Step = Literal["tokenizing", "counting", "slicing", "writing", "checking"]
STEPS: tuple[Step, ...] = ("tokenizing", "counting", "slicing", "writing", "checking")
VOCAB_SIZES = (16384, 32768, 65536)
CHECK_TOKENS = 48
_MAX_FILE_BYTES = 64 << 20  # a corpus file larger than this is read in part: counts settle long before


class JobCancelled(FastMTPError):
    """The user stopped the job; nothing was kept (CLI exit code 130)."""

    exit_code = 130


@dataclass(frozen=True)
class Progress:
    """One progress report: the step, how far it is (``done`` of ``total`` units) and a sentence.

    The rows of the draft vocabulary are sliced while the file is written (the LM head sits between the
    embedding and the MTP block), so *slicing* and *writing* count the bytes of the same file."""

    step: Step
    done: int
    total: int
    message: str

    @property
    def fraction(self) -> float:
        """Of the whole job: each step has its share (writing the rows is most of it)."""
        shares = {"tokenizing": (0.0, 0.2), "counting": (0.2, 0.05), "slicing": (0.25, 0.55),
                  "writing": (0.25, 0.55), "checking": (0.8, 0.2)}  # slicing and writing: bytes of one file
        start, share = shares[self.step]
        return start + share * (self.done / self.total if self.total else 1.0)

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), kind="progress", fraction=round(self.fraction, 4))


OnProgress = Callable[[Progress], None]


@dataclass(frozen=True)
class Corpus:
    """Where the draft vocabulary's token frequencies come from."""

    prompt_sets: tuple[str, ...] = ()
    history: bool = False
    files: tuple[Path, ...] = ()

    def describe(self) -> str:
        parts = [f"the {name} prompts" for name in self.prompt_sets]
        if self.history:
            parts.append("your chat history")
        parts += [Path(f).name for f in self.files]
        return ", ".join(parts) or "no corpus (the lowest token ids)"


@dataclass(frozen=True)
class SidecarCheck:
    """Measured one-token acceptance along the target's own greedy text: the new sidecar vs the embedded head."""

    positions: int
    sidecar_acceptance: float
    embedded_acceptance: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SidecarMade:
    """The result: the sidecar written and, when checked, its measured acceptance."""

    path: str
    target: str
    vocab_size: int
    corpus: str
    corpus_tokens: int
    report: dict[str, Any]
    check: SidecarCheck | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), check=self.check.to_dict() if self.check else None)


class Control:
    """Cancel from another thread (or a signal handler); the job checks it between chunks."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise JobCancelled("Stopped: no sidecar was written.", "Start it again when you want one.")


def prompt_sets() -> list[str]:
    """The built-in prompt sets (``resources/prompts/*.txt``)."""
    return sorted(p.stem for p in (resources_dir() / "prompts").glob("*.txt"))


def prompt_texts(name: str) -> list[str]:
    """The prompts of one set (``---`` separates them, ``#`` lines are comments).

    Raises:
        SidecarError: there is no such set.
    """
    path = resources_dir() / "prompts" / f"{name}.txt"
    if not path.is_file():
        raise SidecarError(f"There is no built-in prompt set called {name!r}.",
                           f"Choose one of: {', '.join(prompt_sets())}.")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return [p.strip() for p in "\n".join(lines).split("\n---\n") if p.strip()]


def history_texts(path: Path | None = None) -> list[str]:
    """Every user and assistant message of the saved chats (the user's own kind of text)."""
    from app.history import HistoryStore

    store = HistoryStore(path)
    try:
        return [m.content for c in store.conversations() for m in store.messages(c.id)
                if m.role in ("user", "assistant") and m.content.strip()]
    finally:
        store.close()


def corpus_texts(corpus: Corpus, history_path: Path | None = None) -> list[str]:
    """The corpus as texts, in order: prompt sets, chat history, files.

    Raises:
        SidecarError: a prompt set or a file cannot be read.
    """
    texts: list[str] = []
    for name in corpus.prompt_sets:
        texts += prompt_texts(name)
    if corpus.history:
        texts += history_texts(history_path)
    for file in corpus.files:
        try:
            with Path(file).open("rb") as handle:
                texts.append(handle.read(_MAX_FILE_BYTES).decode("utf-8", errors="replace"))
        except OSError as exc:
            raise SidecarError(f"The corpus file {file} cannot be read: {exc.strerror or exc}.",
                               "Choose a readable text file.") from None
    return texts


def default_out(target: Path, vocab_size: int) -> Path:
    """``<target stem>-FastMTP-<n>K.gguf`` beside the target (the release's naming)."""
    return target.with_name(f"{target.stem}-FastMTP-{vocab_size // 1024}K.gguf")


def make_sidecar(target: Path, out: Path, vocab_size: int = 32768, corpus: Corpus = Corpus(), *,
                 check: bool = True, on_progress: OnProgress = lambda _p: None, control: Control | None = None,
                 history_path: Path | None = None, n_threads: int | None = None) -> SidecarMade:
    """Build a d2t sidecar of ``vocab_size`` draft tokens chosen by ``corpus``, then (``check``) measure it.

    Raises:
        JobCancelled: ``control`` was cancelled; no file was left at ``out`` or ``out.partial``.
        SidecarError, GGUFError: the target cannot give a sidecar, or a file cannot be read or written.
        ModelLoadError, BackendError: the backend cannot tokenize or load the pair for the check.
    """
    from app.gguftools.counts import TokenCounts
    from app.gguftools.sidecar import SidecarSource, build_sidecar

    control = control or Control()
    target, out = Path(target), Path(out)
    if out.exists():
        raise SidecarError(f"{out} already exists.", "Choose another file name, or remove the old sidecar first.")
    source = SidecarSource(target)  # refuses a non-qwen35 or MTP-less target before any work
    texts = corpus_texts(corpus, history_path)
    counts = None
    total_tokens = 0
    if texts:
        ids = _tokenize_all(target, texts, on_progress, control)
        total_tokens = len(ids)
        on_progress(Progress("counting", 0, 1, f"Counting {total_tokens:,} tokens"))
        counts = TokenCounts.from_token_ids(ids)
        control.check()
        on_progress(Progress("counting", 1, 1, f"{len(counts):,} distinct tokens in the corpus"))
    head_name = "output.weight"

    def written(tensor: str, done: int, total: int) -> None:
        control.check()
        step: Step = "slicing" if tensor == head_name else "writing"
        what = (f"Slicing the LM-head rows of {vocab_size:,} draft tokens" if step == "slicing"
                else f"Writing {tensor}")
        on_progress(Progress(step, done, total, what))

    report = build_sidecar(source, out, vocab_size=vocab_size, counts=counts, on_write=written)
    warnings = []
    if counts is not None and len(counts) < vocab_size:
        warnings.append(f"The corpus has only {len(counts):,} distinct tokens; the other "
                        f"{vocab_size - len(counts):,} draft tokens are the lowest token ids. A larger corpus picks "
                        "them better.")
    result_check = None
    if check:
        try:
            result_check = check_sidecar(target, out, on_progress=on_progress, control=control, n_threads=n_threads)
        except JobCancelled:
            out.unlink(missing_ok=True)  # cancel means nothing is kept, also once the file was complete
            raise
    return SidecarMade(path=str(out), target=str(target), vocab_size=report.n_draft, corpus=corpus.describe(),
                       corpus_tokens=total_tokens, report=report.to_dict(), check=result_check, warnings=warnings)


def _tokenize_all(target: Path, texts: list[str], on_progress: OnProgress, control: Control) -> list[int]:
    from app.native.handles import Model

    ids: list[int] = []
    with Model(target, vocab_only=True) as model:
        for index, text in enumerate(texts):
            control.check()
            on_progress(Progress("tokenizing", index, len(texts), f"Tokenizing text {index + 1} of {len(texts)}"))
            ids += model.tokenize(text, add_special=False, parse_special=False)
    on_progress(Progress("tokenizing", len(texts), len(texts), f"Tokenized {len(texts)} texts"))
    return ids


def check_sidecar(target: Path, sidecar: Path, *, n_new: int = CHECK_TOKENS, on_progress: OnProgress = lambda _p: None,
                  control: Control | None = None, n_threads: int | None = None) -> SidecarCheck:
    """One-token acceptance of ``sidecar`` and of the target's embedded head along the target's greedy reply to
    a built-in prompt (the demo model's own table for the demo model).

    Raises:
        SidecarError: the sidecar does not fit the target.
        JobCancelled: ``control`` was cancelled.
    """
    from app.gguftools.demo_model import read_demo_table
    from app.gguftools.inspect import inspect_gguf
    from app.gguftools.sidecar import check_pair
    from app.native import draft_probe
    from app.native.handles import Model

    control = control or Control()
    check_pair(inspect_gguf(target), inspect_gguf(sidecar))
    on_progress(Progress("checking", 0, 3, "Loading the model with its embedded MTP head"))
    with Model(target, load_mtp=True) as model:
        control.check()
        table = read_demo_table(target)
        if table is not None:
            prompt = list(table.cycle[:8])
        else:
            text = prompt_texts(prompt_sets()[0])[0] if prompt_sets() else "Write a short essay about rivers."
            prompt = model.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", parse_special=True)
        on_progress(Progress("checking", 1, 3, f"The model writes {n_new} tokens to measure along"))
        generated = draft_probe.greedy(model, prompt, n_new, n_threads)
        control.check()
        sequence = prompt + generated
        on_progress(Progress("checking", 2, 3, "Measuring the new sidecar and the embedded head"))
        sidecar_rate = draft_probe.probe(model, sequence, sidecar, n_threads).acceptance(len(prompt))
        control.check()
        embedded_rate = draft_probe.probe(model, sequence, None, n_threads).acceptance(len(prompt))
    on_progress(Progress("checking", 3, 3, "Checked"))
    return SidecarCheck(positions=len(generated), sidecar_acceptance=round(sidecar_rate, 4),
                        embedded_acceptance=round(embedded_rate, 4))
