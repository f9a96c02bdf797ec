"""Make a FastMTP sidecar for your own model, with progress and cancel, then measure it against the embedded head.

The steps a user sees: *tokenizing* the corpus with the model's own tokenizer, *counting* the tokens,
*slicing* the LM-head rows of the chosen draft vocabulary (while they are written) and *writing* the rest,
then *checking*: the target greedily continues a prompt, and the new sidecar's head and the model's
embedded MTP head each predict the next token along that text (teacher-forced, ``draft_probe``); the share
they get right is their one-token acceptance.

The corpus is any mix of the built-in prompt sets (``resources/prompts``), the user's own chats (the
history's user and assistant messages) and text files (the first 64 MiB of each). It is tokenized in pieces of
about 1 MiB (``app.gguftools.counts.text_pieces``, cut only where the tokenizer splits anyway, so the counts are
those of each text whole) and counted as it goes: memory holds one piece, whatever the corpus's size. A corpus file
that is not a regular file (a FIFO, a device, a folder) is refused before anything is loaded. Cancelling (Ctrl-C,
SIGTERM, the window), from any step, takes effect at the next piece or tensor and leaves no file behind: the
sidecar is written to ``<out>.partial`` and renamed only when complete.

This module tokenizes and probes through the native backend, so the window runs it in a child process
(``python -m app sidecar make --json``, see ``app.core.child_job``): a native failure cannot take the window down.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from app.core import defaults
from app.core.errors import JobCancelled, SidecarError
from app.core.resources import resources_dir
from app.core.units import format_bytes
from app.engine.chat_template import Message, render

if TYPE_CHECKING:
    from app.gguftools.counts import TokenCounts
    from app.gguftools.tokenizer import Tokenize
    from app.native.draft_probe import DraftProbe

Step = Literal["tokenizing", "counting", "slicing", "writing", "checking"]
STEPS: tuple[Step, ...] = ("tokenizing", "counting", "slicing", "writing", "checking")
VOCAB_SIZES = defaults.DRAFT_VOCAB_SIZES
CHECK_TOKENS = 256  # positions the check measures along: enough that a few lucky tokens do not decide (issue 36 item 7)
MIN_DECIDING_POSITIONS = 200  # fewer measured positions never replace the current sidecar
MIN_GAIN = 0.01  # and the new one must be at least this much better (one-token acceptance) ...
# ... and its extra right guesses must stand out of the noise: (new_only - current_only) >= Z * sqrt(new_only +
# current_only), a sign test on the positions where exactly one of the two was right (about 98% one-sided at 2.0)
SIGN_Z = 2.0
_MAX_FILE_BYTES = 64 << 20  # a corpus file larger than this is read in part: counts settle long before
_READ_BYTES = 1 << 20  # a corpus file is read in blocks of this size


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
    current_acceptance: float | None = None  # the model's d2t sidecar until now, on the same text (when it had one)
    new_only: int | None = None  # positions the new sidecar got right and the current one missed
    current_only: int | None = None  # positions the current sidecar got right and the new one missed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clearly_better(check: SidecarCheck) -> bool:
    """Whether the new sidecar measured clearly better than the current one: on at least
    :data:`MIN_DECIDING_POSITIONS` positions, by at least :data:`MIN_GAIN`, and (when the paired counts are known)
    with more extra right guesses than chance gives. A tie never is."""
    if check.current_acceptance is None or check.positions < MIN_DECIDING_POSITIONS:
        return False
    if check.sidecar_acceptance - check.current_acceptance < MIN_GAIN:
        return False
    if check.new_only is None or check.current_only is None:
        return True
    gain = check.new_only - check.current_only
    return gain > 0 and gain >= SIGN_Z * (check.new_only + check.current_only) ** 0.5


def replaces_current(check: SidecarCheck | None, current: Path | None, new: Path) -> tuple[bool, str]:
    """Whether the new sidecar becomes the model's d2t drafting mode, and why (issue 29 item 4, issue 36 item 7): it
    does when the model had none, or when it measured clearly better than the current one along the same text
    (:func:`clearly_better`: a check large enough to mean something, never a tie); otherwise the new sidecar is kept
    beside the current one, which stays the d2t mode. The sentence gives both figures and the size of the check."""
    if current is None:
        return True, f"{new.name} is this model's FastMTP d2t drafting mode."
    if check is None or check.current_acceptance is None:
        return False, (f"{current.name} stays this model's d2t drafting mode: {new.name} was not measured against "
                       "it. It is kept beside it; attach it to use it anyway.")
    figures = (f"{new.name} {check.sidecar_acceptance:.1%} one-token acceptance, {current.name} "
               f"{check.current_acceptance:.1%}, along the same {check.positions:,} tokens of the model's own text")
    if check.new_only is not None and check.current_only is not None:
        figures += (f" ({new.name} alone right at {check.new_only:,} of them, {current.name} alone at "
                    f"{check.current_only:,})")
    if clearly_better(check):
        return True, f"{new.name} replaces {current.name} as this model's d2t drafting mode: it measured clearly " \
                     f"better: {figures}."
    if check.positions < MIN_DECIDING_POSITIONS:
        why = (f"the check measured only {check.positions:,} tokens, too few to decide (a replacement needs "
               f"{MIN_DECIDING_POSITIONS:,})")
    elif check.sidecar_acceptance < check.current_acceptance:
        why = "the new one measured worse"
    else:
        why = "the new one did not measure clearly better (a difference this small is within chance)"
    return False, (f"{current.name} stays this model's d2t drafting mode: {why}: {figures}. The new file is kept "
                   "beside it; attach it to use it anyway.")


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
    from app.chats.history import HistoryStore

    store = HistoryStore(path)
    try:
        return [m.content for c in store.conversations() for m in store.messages(c.id)
                if m.role in ("user", "assistant") and m.content.strip()]
    finally:
        store.close()


def corpus_texts(corpus: Corpus, history_path: Path | None = None) -> list[str]:
    """The corpus as texts, in order: prompt sets, chat history, files (whole, in memory: for small corpora;
    ``make_sidecar`` streams them through :func:`count_corpus`).

    Raises:
        SidecarError: a prompt set or a file cannot be read.
    """
    return [b"".join(text.blocks()).decode("utf-8", errors="replace") for text in _texts(corpus, history_path)]


@dataclass(frozen=True)
class _Text:
    """One text of the corpus, tokenized on its own: its size in bytes and its bytes block by block."""

    size: int
    blocks: Callable[[], Iterator[bytes]]


def check_corpus_files(corpus: Corpus) -> None:
    """Refuse a corpus file that is missing, unreadable or not a regular file, before any work is done.

    Raises:
        SidecarError: with the file's name and what it is instead.
    """
    for file in corpus.files:
        handle, _ = _open_corpus_file(Path(file))
        handle.close()


def _open_corpus_file(file: Path) -> tuple[Any, int]:
    from app.core.regular_files import NotRegularFile, open_regular

    try:
        return open_regular(file)  # never waits on a FIFO, never reads a device
    except NotRegularFile as exc:
        raise SidecarError(f"The corpus file {file} is not a regular file ({exc.strerror}); it was not read.",
                           "A corpus is text files: choose a file, or save what the pipe or device gives into one "
                           "first.") from None
    except OSError as exc:
        raise SidecarError(f"The corpus file {file} cannot be read: {exc.strerror or exc}.",
                           "Choose a readable text file.") from None


def _file_text(file: Path) -> _Text:
    handle, size = _open_corpus_file(file)
    handle.close()

    def blocks() -> Iterator[bytes]:
        stream, _ = _open_corpus_file(file)  # opened again, and checked again, when it is read
        left = _MAX_FILE_BYTES
        try:
            with stream:
                while left > 0 and (block := stream.read(min(_READ_BYTES, left))):
                    left -= len(block)
                    yield block
        except OSError as exc:
            raise SidecarError(f"The corpus file {file} cannot be read: {exc.strerror or exc}.",
                               "Choose a readable text file.") from None

    return _Text(min(size, _MAX_FILE_BYTES), blocks)


def _str_text(text: str) -> _Text:
    def blocks() -> Iterator[bytes]:
        for start in range(0, len(text), _READ_BYTES):
            yield text[start:start + _READ_BYTES].encode("utf-8", errors="replace")

    return _Text(len(text.encode("utf-8", errors="replace")) if len(text) < _READ_BYTES else len(text), blocks)


def _texts(corpus: Corpus, history_path: Path | None = None) -> list[_Text]:
    """The corpus's texts, in order: prompt sets, chat history, files (read only when counted)."""
    texts = [_str_text(t) for name in corpus.prompt_sets for t in prompt_texts(name)]
    if corpus.history:
        texts += [_str_text(t) for t in history_texts(history_path)]
    texts += [_file_text(Path(file)) for file in corpus.files]
    return texts


@dataclass(frozen=True)
class CorpusCount:
    """What counting a corpus gave: the counts (None for an empty corpus), the number of tokens, and how many pieces
    had to be cut where no boundary was proven (text without spaces, line breaks or digits for MiBs)."""

    counts: TokenCounts | None
    tokens: int
    forced_cuts: int


def count_corpus(tokenize: Tokenize, corpus: Corpus, *, history_path: Path | None = None,
                 on_progress: OnProgress = lambda _p: None, control: Control | None = None,
                 piece_bytes: int | None = None) -> CorpusCount:
    """Tokenize the corpus piece by piece (about ``piece_bytes``, 1 MiB by default) and count the tokens; the
    memory holds one piece and the counts. ``control`` is checked before every piece.

    Raises:
        JobCancelled: ``control`` was cancelled.
        SidecarError: a prompt set or a corpus file cannot be read, or is not a regular file.
    """
    from app.gguftools.counts import PIECE_BYTES, TokenCounts, text_pieces

    control = control or Control()
    texts = _texts(corpus, history_path)
    if not texts:
        return CorpusCount(None, 0, 0)
    target = piece_bytes or PIECE_BYTES
    total = sum(t.size for t in texts)
    counter: Counter[int] = Counter()
    tokens = forced = done = 0
    on_progress(Progress("tokenizing", 0, total, f"Tokenizing the corpus ({format_bytes(total)})"))
    for text in texts:
        for piece in text_pieces(text.blocks(), target=target, most=4 * target):
            control.check()
            ids = tokenize(piece.data.decode("utf-8", errors="replace"))
            counter.update(ids)
            tokens += len(ids)
            forced += piece.forced
            done += len(piece.data)
            on_progress(Progress("tokenizing", min(done, total), total,
                                 f"Tokenizing the corpus: {format_bytes(done)} of {format_bytes(total)}"))
    control.check()
    return CorpusCount(TokenCounts(counter), tokens, forced)


def default_out(target: Path, vocab_size: int) -> Path:
    """``<target stem>-FastMTP-<n>K.gguf`` beside the target (the release's naming)."""
    return target.with_name(f"{target.stem}-FastMTP-{vocab_size // 1024}K.gguf")


def free_name(wanted: Path) -> Path:
    """``wanted`` when no file has that name, else the first free ``<stem>-2.gguf``, ``<stem>-3.gguf``, ... beside
    it: the name the window and ``sidecar make`` suggest instead of refusing (issue 36 item 7)."""
    if not wanted.exists() and not wanted.with_name(wanted.name + ".partial").exists():
        return wanted
    for n in range(2, 10_000):
        candidate = wanted.with_name(f"{wanted.stem}-{n}{wanted.suffix}")
        if not candidate.exists() and not candidate.with_name(candidate.name + ".partial").exists():
            return candidate
    raise SidecarError(f"Every name like {wanted.name} is taken in {wanted.parent}.", "Choose another folder.")


def free_out(target: Path, vocab_size: int) -> Path:
    """:func:`default_out`, or the first free name like it when that file exists."""
    return free_name(default_out(target, vocab_size))


def make_sidecar(target: Path, out: Path, vocab_size: int = defaults.DRAFT_VOCAB, corpus: Corpus = Corpus(), *,
                 check: bool = True, on_progress: OnProgress = lambda _p: None, control: Control | None = None,
                 history_path: Path | None = None, n_threads: int | None = None,
                 current: Path | None = None) -> SidecarMade:
    """Build a d2t sidecar of ``vocab_size`` draft tokens chosen by ``corpus``, then (``check``) measure it (and
    ``current``, the model's d2t sidecar until now, on the same text: see :func:`replaces_current`).

    Raises:
        JobCancelled: ``control`` was cancelled; no file was left at ``out`` or ``out.partial``.
        SidecarError, GGUFError: the target cannot give a sidecar, or a file cannot be read or written.
        ModelLoadError, BackendError: the backend cannot tokenize or load the pair for the check.
    """
    from app.gguftools.sidecar import SidecarSource, build_sidecar

    control = control or Control()
    target, out = Path(target), Path(out)
    if out.exists():
        raise SidecarError(f"{out} already exists; a sidecar is never written over another file.",
                           f"Use a free name such as {free_name(out).name} (--out), or remove the old file first.")
    check_corpus_files(corpus)  # a FIFO or a device is refused now, not waited on later
    source = SidecarSource(target)  # refuses a non-qwen35 or MTP-less target before any work
    counted = _count_with_model(target, corpus, history_path, on_progress, control)
    counts, total_tokens = counted.counts, counted.tokens
    if counts is not None:
        on_progress(Progress("counting", 0, 1, f"Counting {total_tokens:,} tokens"))
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
    if counted.forced_cuts:
        warnings.append(f"{counted.forced_cuts:,} stretch(es) of the corpus ran for MiBs without a space, line break "
                        "or digit and were cut there: the tokens at those cuts may differ slightly from counting the "
                        "text whole.")
    if counts is not None and len(counts) < vocab_size:
        warnings.append(f"The corpus has only {len(counts):,} distinct tokens; the other "
                        f"{vocab_size - len(counts):,} draft tokens are the lowest token ids. A larger corpus picks "
                        "them better.")
    result_check = None
    if check:
        try:
            result_check = check_sidecar(target, out, on_progress=on_progress, control=control, n_threads=n_threads,
                                         current=current)
        except JobCancelled:
            out.unlink(missing_ok=True)  # cancel means nothing is kept, also once the file was complete
            raise
    return SidecarMade(path=str(out), target=str(target), vocab_size=report.n_draft, corpus=corpus.describe(),
                       corpus_tokens=total_tokens, report=report.to_dict(), check=result_check, warnings=warnings)


def _count_with_model(target: Path, corpus: Corpus, history_path: Path | None, on_progress: OnProgress,
                      control: Control) -> CorpusCount:
    """:func:`count_corpus` with the target's own tokenizer (llama.cpp's, the vocabulary only)."""
    from app.native.handles import Model

    if not (corpus.prompt_sets or corpus.history or corpus.files):
        return CorpusCount(None, 0, 0)
    with Model(target, vocab_only=True) as model:
        def tokenize(text: str) -> list[int]:
            return model.tokenize(text, add_special=False, parse_special=False)

        counted = count_corpus(tokenize, corpus, history_path=history_path, on_progress=on_progress,
                               control=control)
    on_progress(Progress("tokenizing", 1, 1, f"Tokenized {counted.tokens:,} tokens"))
    return counted


def check_sidecar(target: Path, sidecar: Path, *, n_new: int = CHECK_TOKENS, on_progress: OnProgress = lambda _p: None,
                  control: Control | None = None, n_threads: int | None = None,
                  current: Path | None = None) -> SidecarCheck:
    """One-token acceptance of ``sidecar``, of the target's embedded head and of ``current`` (another sidecar of
    the target, when given) along the target's greedy reply to a built-in prompt (the demo model's own table for
    the demo model).

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
            prompt = model.tokenize(render(None, [Message("user", text)]), parse_special=True)  # ChatML
        on_progress(Progress("checking", 1, 3, f"The model writes {n_new} tokens to measure along"))
        generated = draft_probe.greedy(model, prompt, n_new, n_threads)
        control.check()
        sequence = prompt + generated
        on_progress(Progress("checking", 2, 3, "Measuring the new sidecar and the embedded head"))
        new_probe = draft_probe.probe(model, sequence, sidecar, n_threads)
        sidecar_rate = new_probe.acceptance(len(prompt))
        control.check()
        embedded_rate = draft_probe.probe(model, sequence, None, n_threads).acceptance(len(prompt))
        current_rate, new_only, current_only = None, None, None
        if current is not None and Path(current).is_file():
            control.check()
            current_probe = draft_probe.probe(model, sequence, Path(current), n_threads)
            current_rate = round(current_probe.acceptance(len(prompt)), 4)
            new_only, current_only = paired_counts(new_probe, current_probe, len(prompt))
    on_progress(Progress("checking", 3, 3, "Checked"))
    return SidecarCheck(positions=len(generated), sidecar_acceptance=round(sidecar_rate, 4),
                        embedded_acceptance=round(embedded_rate, 4), current_acceptance=current_rate,
                        new_only=new_only, current_only=current_only)


def paired_counts(new: DraftProbe, current: DraftProbe, start: int) -> tuple[int, int]:
    """Along the same text from ``start``: positions only ``new`` guessed right, and positions only ``current`` did
    (the ones that tell the two apart; positions both got right or both missed say nothing about which is better)."""
    rows = zip(new.target_next[start:], new.draft_next[start:], current.draft_next[start:], strict=True)
    new_only = current_only = 0
    for truth, guess_new, guess_current in rows:
        new_only += guess_new == truth and guess_current != truth
        current_only += guess_current == truth and guess_new != truth
    return new_only, current_only
