"""The MTP draft / verify loop over the native handles: off, embedded head, or FastMTP sidecar.

Bookkeeping (one sequence):
- ``tokens`` are the tokens the target has evaluated (positions ``0 .. n_past-1``); ``pending`` is the
  last emitted token, not yet evaluated; ``pending_h`` is the target's nextn hidden row of ``n_past-1``.
- The draft context holds the same positions, each fed the target's hidden row of the position before
  (shifted right by one), plus whatever the current round drafted past ``n_past``.
- A round: the draft head proposes up to ``k`` tokens; the target evaluates ``[pending, x1..xk]`` in one
  batch and its own sampler picks a token at every position; drafts are accepted while they equal the
  target's picks, and the target's pick at the first mismatch is emitted too. Both contexts then drop
  the positions past the accepted ones (``llama_memory_seq_rm``; the recurrent state rolls back through
  the ``n_rs_seq`` snapshots, no host copies), and the draft catches up on the accepted tokens with the
  target's hidden rows in the same batch that makes the next round's first draft.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

from app.core import idle_cores
from app.core.errors import ContextFullError, EngineError, FastMTPError
from app.engine.adaptive import START_DEPTH, AdaptiveDepth, RoundTiming
from app.engine.attention import flash_attention
from app.engine.config import DRAFT_DEPTH_MAX, DRAFT_DEPTH_MIN, EngineConfig, Provenance, SamplingParams
from app.engine.depth_memory import DepthMemory, MemoryKey, key_for
from app.engine.depth_worker import DepthWorker, Observation
from app.engine.model_pool import ModelPool
from app.engine.one_token_threads import OneTokenThreads
from app.engine.sampling import Sampler, draft_pick
from app.engine.state_cache import Snapshot
from app.engine.stats import ReplyStats
from app.native.handles import Context, FloatArray, Model, default_threads
from app.native.sampler import SamplerChain

log = logging.getLogger(__name__)


@dataclass
class Reply:
    tokens: list[int] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    stop_reason: str = ""
    stats: ReplyStats = field(default_factory=ReplyStats)


TokenSink = Callable[[int, Provenance, ReplyStats], None]
StopCheck = Callable[[list[int]], bool]
FileProgress = Callable[[str, float], None]  # a model file's name and the fraction of it loaded
PromptProgress = Callable[[int, int], None]  # tokens of the prompt read so far, and how many it has to read
# the reply so far -> tokens to put in next as if the model had picked them (a thinking budget closing the
# thinking), or None; asked after each of the target's own picks
Steer = Callable[[list[int]], "list[int] | None"]
GRAPH_POOL_BATCH = 16  # the largest batch whose graph our patch keeps (its ``gf_pool_max_tokens``)


@dataclass
class _Learning:
    """Adaptive depth at one decode-thread count: its estimates, the record they are saved in (None: not kept)
    and the rounds it had played at the latest save."""

    adaptive: AdaptiveDepth
    memory: tuple[DepthMemory, MemoryKey] | None = None
    saved_rounds: int = 0


class SpeculativeDecoder:
    """Owns the target (and draft) contexts of one conversation; ``generate`` streams one reply."""

    def __init__(self, config: EngineConfig, models: ModelPool | None = None,
                 on_progress: FileProgress | None = None) -> None:
        """Load ``config``'s models (from ``models`` when given); ``on_progress(file name, fraction)`` follows each
        model read from disk, so a long load can be watched."""
        if config.mode == "sidecar" and config.draft is None:
            raise EngineError("Sidecar mode needs a draft sidecar file.", "Pass --draft SIDECAR.gguf.")
        if not DRAFT_DEPTH_MIN <= config.draft_depth <= DRAFT_DEPTH_MAX:
            raise EngineError(f"Draft depth {config.draft_depth} is out of range.",
                              f"Choose a depth from {DRAFT_DEPTH_MIN} to {DRAFT_DEPTH_MAX}.")
        if config.mode == "sidecar" and config.draft is not None:
            _check_pair(config.target, config.draft)
        self.config = config
        self._worker: DepthWorker | None = None  # drives ``adaptive`` (made again when that changes)
        # the target's sampler, kept while the sampling settings stay the same (attached to the graph, a new one
        # makes llama.cpp reserve its graphs again): each reply restarts it at the seed
        self._chain: tuple[SamplingParams, SamplerChain] | None = None
        # adaptive depth learns one set of costs per decode-thread count: a verify pass's cost against a one-token
        # pass has another shape at 1 thread than at 2 (1.35x against 1.08x for 3 against 2 tokens on the scaled
        # demo), so each count keeps its own estimates and its own record (``use_threads``)
        self._learning: dict[int, _Learning] = {}
        drafting = config.mode != "off"
        if config.rpc:  # before the load: the offloaded layers spread over every device registered by then
            from app.native.rpc import connect

            connect(config.rpc)
        # models from the pool stay loaded after this decoder closes (the next mode's load takes them up again);
        # without one, the decoder owns and frees its models
        self._owned: list[Model | Context] = []

        def model(path: Path, load_mtp: bool) -> Model:
            progress = None if on_progress is None else partial(on_progress, path.name)
            if models is not None:
                return models.get(path, n_gpu_layers=config.n_gpu_layers, rpc=config.rpc, load_mtp=load_mtp,
                                  on_progress=progress)
            loaded = Model(path, n_gpu_layers=config.n_gpu_layers, load_mtp=load_mtp, on_progress=progress)
            self._owned.append(loaded)
            return loaded

        # with the pool (the window's engine) a target that has an embedded head is loaded with it in every mode, so
        # a later switch to the head loads nothing: its MTP layers are a small part of the model, a reload is seconds
        keep_head = config.mode == "embedded" or (models is not None and _has_embedded_head(config.target))
        self.target = model(config.target, keep_head)
        # the attention kernel both contexts run (``engine.attention``: on a CPU the plain one, unless set)
        self.flash_attn = flash_attention(config, self.target.n_head)
        # decode threads: the set count, or (none set) as many as the machine leaves idle now, checked again at the
        # start of each reply (``_follow_load``)
        self.threads = config.n_threads or default_threads()
        try:
            self.tctx = Context(self.target, n_ctx=config.n_ctx, n_batch=config.n_batch, n_threads=self.threads,
                                n_rs_seq=config.draft_depth if drafting else 0, nextn_outputs=drafting,
                                flash_attn=self.flash_attn,
                                max_outputs_per_pass=DRAFT_DEPTH_MAX + 1 if config.samples_on_backend else 0)
            self._owned.append(self.tctx)
            self.dctx: Context | None = None
            if config.mode == "sidecar" and config.draft is not None:
                draft_model = model(config.draft, True)
                self.dctx = Context(draft_model, n_ctx=config.n_ctx, n_batch=config.n_batch,
                                    n_threads=self.threads, draft_for=self.tctx, flash_attn=self.flash_attn)
            elif config.mode == "embedded":
                self.dctx = Context(self.target, n_ctx=config.n_ctx, n_batch=config.n_batch,
                                    n_threads=self.threads, draft_for=self.tctx, flash_attn=self.flash_attn)
            if self.dctx is not None:
                self._owned.append(self.dctx)
        except Exception:
            self.close()
            raise
        self.tokens: list[int] = []
        self.pending_h: FloatArray | None = None
        # target-evaluated tokens the draft context has not seen yet, each with the hidden row before it
        self._held: list[tuple[int, FloatArray]] = []
        self.adaptive: AdaptiveDepth | None = None
        if config.adaptive:
            self.adaptive = self._learning_for(self.threads).adaptive
        self._native_marks = (0.0, 0.0)
        self._cpu_only = config.n_gpu_layers == 0
        # per context, the thread count its one-token passes run with: one or all, measured (``one_token_threads``);
        # only on the CPU (with offloaded layers the device does the work and the count matters little)
        self._one_token = self._one_token_paces()
        self._draft_steps_seconds = 0.0  # round clock: the latest round's draft passes after the first ...
        self._first_step_seconds: float | None = None  # ... and the first of them (None: the round made one draft)
        self._decode_cpu_started = 0.0

    # ------------------------------------------------------------------ lifecycle

    @property
    def keyed_config(self) -> EngineConfig:
        """The configuration as loaded, with the attention kernel chosen: what a kept state or a depth record was
        made under (a state of one kernel's cache layout cannot be read into the other's)."""
        return replace(self.config, flash_attn=self.flash_attn)

    def close(self) -> None:
        self._close_worker()
        self._remember()
        self._drop_chain()
        for handle in reversed(self._owned):
            handle.close()
        self._owned.clear()

    def reset(self) -> None:
        """Forget the conversation (both contexts)."""
        self.tctx.truncate(0)
        if self.dctx is not None:
            self.dctx.truncate(0)
        self.tokens = []
        self.pending_h = None
        self._held = []

    def prepare_visit_graphs(self) -> None:
        """Build the target's verify graphs of the depths adaptive depth visits most (the one it plays, its
        neighbours and the next beyond), that one last: our patch keeps the graphs of small batches, so their first
        rounds later reuse a graph instead of building one. A benchmark's warm-up does this for adaptive depth as its
        warm-up reply does it for a fixed depth: else a measured reply's first visit of each depth pays a one-time
        build (1-4 ms on the scaled demo, two threads) and a round more (``AdaptiveDepth``: a round that built its
        graph does not count). Not for a chat: a pass costs more than the build it saves. Forgets the conversation."""
        top = self.config.draft_depth
        if self.adaptive is None or self.dctx is None or self.config.n_batch <= GRAPH_POOL_BATCH \
                or self.config.n_ctx < GRAPH_POOL_BATCH + top + 2:  # room for the prefix and the deepest pass
            return
        played = self.adaptive.current if self.adaptive.current >= 0 else min(START_DEPTH, top)
        # a prefix first: a sequence's first pass clears the recurrent state (a graph of its own), and it is longer
        # than a small batch (those the patch keeps), so it takes no place among them
        prefix = [0] * (GRAPH_POOL_BATCH + 1)
        for depth in (played + 2, played - 1, played + 1, played):
            if 1 <= depth <= top:
                self.reset()
                self.tctx.decode(prefix, 0, logits="last")
                self.tctx.decode([0] * (depth + 1), len(prefix), logits="all")
        self.reset()

    # ------------------------------------------------------------------ prompt

    def _reuse_prefix(self, prompt: list[int]) -> int:
        """Keep the evaluated conversation when ``prompt`` extends it (a new turn); else start over.

        Rolling back into the middle of a conversation would need recurrent-state snapshots older than
        the ``n_rs_seq`` kept for draft rejection, so an edited history is evaluated again in full.
        """
        n = len(self.tokens)
        if 0 < n < len(prompt) and prompt[:n] == self.tokens:
            return n
        if 0 < n == len(prompt) and prompt == self.tokens and self._step_back():
            return n - 1  # a reply that ended on an accepted draft, continued: its last token is read again
        self.reset()
        return 0

    def _step_back(self) -> bool:
        """Forget the last evaluated token in both contexts (it is read again for its logits); False when a
        context cannot roll back that far (then the caller starts over)."""
        n = len(self.tokens)
        if self.dctx is not None and not self._held:
            return False
        if not self.tctx.truncate(n - 1):
            return False
        self.tokens.pop()
        if self.dctx is not None:
            _, row = self._held.pop()
            self.pending_h = row
        return True

    def _prefill(self, suffix: list[int], on_progress: PromptProgress | None = None,
                 cancel: threading.Event | None = None) -> bool:
        """Evaluate ``suffix`` after ``tokens`` in the target (its last row's logits stay in the target
        context for the first pick). Drafting modes also catch the draft context up, holding back its
        last row for the first draft.

        The suffix is read in batches of ``n_batch``; ``on_progress(done, total)`` follows it batch by batch and
        ``cancel`` is looked at between batches: a cancelled read forgets the whole conversation (the recurrent
        layers cannot be rolled back to where it began), so the next reply reads it again, and returns False."""
        n_past = len(self.tokens)
        if n_past + len(suffix) + 1 > self.config.n_ctx:
            raise ContextFullError(
                f"The conversation needs {n_past + len(suffix):,} tokens, more than the context of "
                f"{self.config.n_ctx:,} allows.", "Start a new chat, or raise the context size.",
                used=n_past + len(suffix), context=self.config.n_ctx)
        step = self.config.n_batch
        hidden_blocks: list[FloatArray] = []
        for start in range(0, len(suffix), step):
            if cancel is not None and cancel.is_set() and start > 0:
                self.reset()
                return False
            chunk = suffix[start:start + step]
            # only the prompt's last row needs logits (the first pick): an earlier chunk asking for its last row would
            # run the output head once more per chunk for nothing (the MTP hidden rows come out either way)
            self.tctx.decode(chunk, n_past + start, logits="last" if start + step >= len(suffix) else "none")
            if self.dctx is not None:
                hidden_blocks.append(self.tctx.nextn_rows(len(chunk)))
            if on_progress is not None:
                on_progress(start + len(chunk), len(suffix))
        if self.dctx is not None:
            # the draft gets every new token but the last, each with the hidden row of the one before
            previous = self.pending_h if self.pending_h is not None else np.zeros(self.target.n_embd, np.float32)
            hidden_rows = np.concatenate(hidden_blocks)
            tokens = [*(t for t, _ in self._held), *suffix]
            rows = np.concatenate([np.stack([*(r for _, r in self._held), previous]), hidden_rows[:-1]])
            start = n_past - len(self._held)
            if len(tokens) > 1:
                self._draft_catch_up(tokens[:-1], start, rows[:-1])
            self._held = [(tokens[-1], rows[-1])]
            self.pending_h = hidden_rows[-1]
        self.tokens.extend(suffix)
        return True

    def _draft_catch_up(self, tokens: list[int], start: int, rows: FloatArray) -> None:
        assert self.dctx is not None
        step = self.config.n_batch
        for i in range(0, len(tokens), step):
            self.dctx.decode(tokens[i:i + step], start + i, hidden=rows[i:i + step], logits="none")

    # ------------------------------------------------------------------ generation

    def generate(self, prompt: list[int], max_tokens: int, sampler: Sampler | None = None,
                 on_token: TokenSink | None = None, stop: StopCheck | None = None,
                 cancel: threading.Event | None = None, *, steer: Steer | None = None,
                 on_prompt_progress: PromptProgress | None = None, resume: bool = False) -> Reply:
        """Stream one reply to ``prompt`` (the whole conversation so far, rendered and tokenized).

        ``max_tokens`` 0: until the model stops or the context is full. ``resume``: ``prompt`` is the previous
        reply's prompt and tokens (Continue): when this decoder holds exactly that reply, its seeded sampler goes on
        where it stopped instead of restarting, so the continued tokens are those one longer reply would have had."""
        sampler = sampler or Sampler(SamplingParams())
        goes_on = (resume and self._chain is not None and self._chain[0] == sampler.params
                   and len(prompt) - len(self.tokens) in (0, 1) and prompt[:len(self.tokens)] == self.tokens)
        chain = self._chain[1] if goes_on and self._chain is not None else self._chain_for(sampler)
        try:
            return self._generate(prompt, max_tokens, chain, on_token, stop, cancel, steer, on_prompt_progress,
                                  remember=not goes_on)
        except BaseException:
            if self._worker is not None:
                self._worker.abandon()  # a round cut short: adaptive depth forgets its decision
            raise
        finally:
            if self.follows_load:
                idle_cores.mark()  # the next reply's check measures the machine from here, without a wait

    @property
    def follows_load(self) -> bool:
        """Whether the decode threads follow the machine's idle cores (no thread count was set)."""
        return not self.config.n_threads

    def _follow_load(self) -> None:
        """With no thread count set, decode this reply with as many threads as the machine leaves idle now: both
        contexts switch when that changed since the last reply (``llama_set_n_threads``, from the next pass on)."""
        if not self.follows_load:
            return
        threads = default_threads()
        if threads != self.threads:
            log.info("decode threads %d -> %d (the idle cores now)", self.threads, threads)
            self.use_threads(threads)

    def use_threads(self, threads: int) -> None:
        """Decode with ``threads`` threads from the next pass on, in both contexts; adaptive depth saves what it
        learned at the count before and goes on with what it knows (or remembers) at this one."""
        if self.adaptive is not None:
            self._close_worker()  # the next learner gets its own
            self._remember()  # at the count before (each reply's end saved already: this keeps a cut one's rounds)
        for ctx in (self.tctx, self.dctx):
            if ctx is not None:
                ctx.set_threads(threads)
        self.threads = threads
        self._one_token = self._one_token_paces()
        if self.adaptive is not None:
            self.adaptive = self._learning_for(threads).adaptive

    def _one_token_paces(self) -> tuple[OneTokenThreads, OneTokenThreads]:
        """Fresh measurements of the one-token passes' thread count, for the target and the draft context."""
        threads = self.threads if self._cpu_only else 1
        pinned = self.config.one_token_threads
        return OneTokenThreads(threads, pinned), OneTokenThreads(threads, pinned)

    def _decode(self, ctx: Context, pace: OneTokenThreads, tokens: list[int], start: int, *,
                hidden: FloatArray | None = None, logits: str = "last") -> None:
        """``ctx.decode``; a one-token pass runs with the thread count ``pace`` gives and is timed for it."""
        if len(tokens) != 1 or pace.threads <= 1:
            ctx.decode(tokens, start, hidden=hidden, logits=logits)
            return
        count = pace.next_count()
        if count != ctx.n_threads:
            ctx.set_threads(count, self.threads)
        before = ctx.native_seconds
        ctx.decode(tokens, start, hidden=hidden, logits=logits)
        pace.observe(count, ctx.native_seconds - before)

    @property
    def one_token_threads(self) -> tuple[int | None, int | None]:
        """The thread counts the target's and the draft's one-token passes settled on (None: still measuring)."""
        target, draft = self._one_token
        return (target.next_count() if not target.measuring else None,
                draft.next_count() if not draft.measuring else None)

    @property
    def samples_on_backend(self) -> bool:
        """Whether the latest reply's picks were made inside the target's graph."""
        return self._chain is not None and self._chain[1].on_backend

    def _chain_for(self, sampler: Sampler) -> SamplerChain:
        """The native sampler for a reply with these settings, at the start of its seeded stream."""
        if self._chain is not None and self._chain[0] == sampler.params:
            chain = self._chain[1]
            chain.restart()
            return chain
        self._drop_chain()
        on_backend = self.config.samples_on_backend
        chain = sampler.chain(self.target.n_vocab, for_backend=on_backend)
        if on_backend and not chain.attach(self.tctx):
            log.info("the target samples on the host: llama.cpp cannot sample %s in the graph",
                     "with a repetition penalty" if chain.uses_history else "on this backend")
        self._chain = (sampler.params, chain)
        return chain

    def _drop_chain(self) -> None:
        if self._chain is not None:
            self._chain[1].close()
            self._chain = None

    def _generate(self, prompt: list[int], max_tokens: int, chain: SamplerChain, on_token: TokenSink | None,
                  stop: StopCheck | None, cancel: threading.Event | None, steer: Steer | None = None,
                  on_prompt_progress: PromptProgress | None = None, remember: bool = True) -> Reply:
        reply = Reply()
        stats = reply.stats
        stats.context_size = self.config.n_ctx
        stats.flash_attn = self.flash_attn
        self._follow_load()
        stats.threads = self.threads
        started = time.perf_counter()
        common = self._reuse_prefix(prompt)
        stats.prompt_tokens = len(prompt) - common
        stats.reused_tokens = common
        if not self._prefill(prompt[common:], on_prompt_progress, cancel):
            reply.stop_reason = "cancelled"
            stats.prompt_seconds = time.perf_counter() - started
            return reply
        if remember:  # the repetition penalty looks back over the conversation, as llama-server's
            chain.remember(self.tokens)
        stats.prompt_seconds = time.perf_counter() - started
        stats.context_used = len(self.tokens)
        decode_started = time.perf_counter()
        self._decode_cpu_started = time.thread_time()
        self._native_marks = (self.tctx.native_seconds, self._draft_native())

        def emit(token: int, provenance: Provenance) -> bool:
            reply.tokens.append(token)
            reply.provenance.append(provenance)
            if stats.first_token_seconds is None:
                stats.first_token_seconds = time.perf_counter() - started
            stats.decode_seconds = time.perf_counter() - decode_started
            self._native_into(stats)  # the live split (verify / draft / host) streams with every token
            stats.record_token()
            stats.context_used = len(prompt) + len(reply.tokens)
            if on_token is not None:
                on_token(token, provenance, stats)
            if self.target.is_eog(token):
                reply.stop_reason = "eos"
            elif stop is not None and stop(reply.tokens):
                reply.stop_reason = "stop"
            elif 0 < max_tokens <= len(reply.tokens):
                reply.stop_reason = "length"
            elif cancel is not None and cancel.is_set():
                reply.stop_reason = "cancelled"
            return bool(reply.stop_reason)

        def steered(pending: int) -> int | None:
            """Put in the tokens ``steer`` asks for after ``pending`` (read like a prompt), and pick the next one;
            None when the reply ended (one of them ended it, or the context has no room for them)."""
            forced = steer(reply.tokens) if steer is not None else None
            if not forced:
                return pending
            if len(self.tokens) + 1 + len(forced) + 1 > self.config.n_ctx:
                reply.stop_reason = "context_full"
                return None
            for token in forced:
                if emit(token, "target"):
                    return None
            self._prefill([pending, *forced])
            following = chain.sample(self.tctx, -1)
            return None if emit(following, "target") else following

        pending = chain.sample(self.tctx, -1)
        stats.record_round(0, 0)
        if emit(pending, "target"):
            return self._finish(reply, decode_started)
        picked = steered(pending)
        if picked is None:
            return self._finish(reply, decode_started)
        pending = picked
        while True:
            n_past = len(self.tokens)
            room = self.config.n_ctx - n_past - 1  # positions left after ``pending``
            if room < 0:  # keep what was written; the caller shows the reason
                reply.stop_reason = "context_full"
                return self._finish(reply, decode_started)
            depth = stats.depth = min(self._depth(), room)
            c0 = self._round_clock()
            t0 = time.perf_counter()
            drafts = self._draft(pending, depth) if depth > 0 else []
            t1 = time.perf_counter()
            c1 = self._round_clock()
            batch = [pending, *drafts]
            reused = 0
            if self._worker is not None:
                reused = self.tctx.graphs_reused
                self._worker.verify_starts()  # its bookkeeping runs beside the verify pass
            self._decode(self.tctx, self._one_token[0], batch, n_past, logits="all")
            c2 = self._round_clock()
            accepted = 0
            finished = False
            bonus = -1
            # the rows in order, up to the first pick that is not the draft: exactly the emitted tokens are
            # sampled (one draw each), as in plain decoding
            for i in range(len(batch)):
                pick = chain.sample(self.tctx, i)
                if i < len(drafts) and pick == drafts[i]:
                    accepted += 1
                    if emit(pick, "draft"):
                        finished = True
                        break
                    continue
                bonus = pick
                break
            stats.draft_seconds += t1 - t0
            # drafts past the first mismatch were never really tested: they followed a wrong token
            tested = min(len(drafts), accepted + 1)
            stats.record_round(tested, accepted, proposed=len(drafts))
            self._commit_round(pending, drafts, accepted, drafted=depth > 0)
            if self._worker is not None:
                # (a verify pass that built its graph is not a fair sample of its cost)
                self._worker.observed(Observation(depth, tested, accepted, RoundTiming(
                    self._round_clock() - c0, c2 - c1, c1 - c0, self._draft_steps_seconds if drafts else 0.0,
                    len(drafts), built=self.tctx.graphs_reused == reused,
                    first_step=self._first_step_seconds if len(drafts) >= 2 else None)))
            if finished:
                return self._finish(reply, decode_started)
            if emit(bonus, "target"):
                return self._finish(reply, decode_started)
            picked = steered(bonus)
            if picked is None:
                return self._finish(reply, decode_started)
            pending = picked

    def _round_clock(self) -> float:
        """Adaptive depth's clock. This thread's CPU time when the model runs on the CPU with one thread: on a
        machine shared with other jobs, wall time there mostly measures the waits for a core (round times wander by
        20% and more, CPU time by 3-5%). Wall time with GPU offload (the device's time counts, and only wall time
        sees it) and with several threads, where this thread's CPU time is its share of the work and its waits at
        the other threads' barriers, whose split depends on the batch: on the scaled demo with two threads depth 2
        ran 12% ahead of depth 3 in it where depth 3 ran 7% ahead in wall time, and adaptive depth kept depth 2."""
        return time.thread_time() if self._cpu_only and self.threads == 1 else time.perf_counter()

    def _depth(self) -> int:
        if self.dctx is None:
            return 0
        if self.adaptive is None:
            self._close_worker()  # adaptive depth turned off from outside: its worker goes with it
            return self.config.draft_depth
        if self._worker is None or self._worker.adaptive is not self.adaptive:
            self._close_worker()  # a learner set from outside (a benchmark's, another thread count's)
            self._worker = DepthWorker(self.adaptive, overlap=self._spare_core())
        return self._worker.next_depth()

    def _spare_core(self) -> bool:
        """Whether adaptive depth's bookkeeping can run beside the verify pass without taking a core from it: with
        layers on a device (the CPU waits for it) or fewer decode threads than cores."""
        if not self._cpu_only:
            return True
        return self.threads < idle_cores.usable_cpus()

    def _close_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def _draft(self, pending: int, depth: int) -> list[int]:
        """Up to ``depth`` draft tokens after ``pending``; the first step also catches the draft up."""
        assert self.dctx is not None and self.pending_h is not None
        n_past = len(self.tokens)
        room = self.config.n_batch - 1  # held tokens the first draft pass can take beside ``pending``
        if len(self._held) > room:
            # a long stretch without drafting (adaptive depth at 0, where plain decoding is fastest): the oldest
            # held tokens go first, a batch at a time; one pass of them all overflowed the batch and ended the reply
            split = len(self._held) - room  # not [-room:]: with a batch of 1, room is 0 and [-0:] is everything
            older, self._held = self._held[:split], self._held[split:]
            self._draft_catch_up([t for t, _ in older], n_past - len(older) - len(self._held),
                                 np.stack([r for _, r in older]))
        # catch up on the held tokens in the same batch that makes the first draft
        tokens = [*(t for t, _ in self._held), pending]
        rows = np.stack([*(r for _, r in self._held), self.pending_h])
        self._decode(self.dctx, self._one_token[1], tokens, n_past - len(self._held), hidden=rows, logits="last")
        self._held = []
        drafts: list[int] = []
        pos = n_past
        steps_mark = self._round_clock()
        self._first_step_seconds = None
        while True:
            proposal, confident = draft_pick(self.dctx.logits_view(-1), self.config.p_min)
            if not confident:
                break
            drafts.append(proposal)
            if len(drafts) >= depth:
                break
            hidden = self.dctx.nextn_view(-1)  # copied into the batch before the pass overwrites it
            pos += 1
            self._decode(self.dctx, self._one_token[1], [proposal], pos, hidden=hidden[None, :], logits="last")
            if self._first_step_seconds is None:  # the same work at every depth of 2 or more (``RoundTiming``)
                self._first_step_seconds = self._round_clock() - steps_mark
        self._draft_steps_seconds = self._round_clock() - steps_mark
        return drafts

    def _commit_round(self, pending: int, drafts: list[int], accepted: int, drafted: bool) -> None:
        """Keep ``pending`` + the accepted drafts in both contexts; hold their rows for the draft."""
        n_past = len(self.tokens)
        keep = n_past + 1 + accepted
        if len(drafts) > accepted and not self.tctx.truncate(keep):
            raise EngineError("The target context could not roll back a rejected draft.",
                              "This backend build lacks recurrent-state rollback; rebuild it.")
        if self.dctx is not None:
            hidden = self.tctx.nextn_rows(accepted + 1)
            if not drafted:  # the draft context did not take part in this round: hold ``pending`` too
                assert self.pending_h is not None
                self._held.append((pending, self.pending_h))
            else:  # it is right up to ``pending`` (fed the target's row); the accepted drafts were fed
                # the draft's own rows: drop them and hold them, with the target's rows, for the next
                # round's first draft pass (one draft pass per round catches up, not two)
                self.dctx.truncate(n_past + 1)
                self._held = [(drafts[i], hidden[i]) for i in range(accepted)]
            self.pending_h = hidden[accepted]
        self.tokens.extend([pending, *drafts[:accepted]])

    def _draft_native(self) -> float:
        return self.dctx.native_seconds if self.dctx is not None else 0.0

    def _native_into(self, stats: ReplyStats) -> None:
        stats.verify_native_seconds = self.tctx.native_seconds - self._native_marks[0]
        stats.draft_native_seconds = self._draft_native() - self._native_marks[1]

    def _finish(self, reply: Reply, decode_started: float) -> Reply:
        if self._worker is not None:
            self._worker.settle()  # every round played observed: the learner can be saved and read
        reply.stats.decode_seconds = time.perf_counter() - decode_started
        reply.stats.decode_cpu_seconds = time.thread_time() - self._decode_cpu_started
        target, draft = self.one_token_threads
        reply.stats.one_token_threads = target or 0
        reply.stats.draft_one_token_threads = (draft or 0) if self.dctx is not None else 0
        self._native_into(reply.stats)
        self._remember()
        return reply

    # ------------------------------------------------------------------ depth memory

    def _learning_for(self, threads: int) -> _Learning:
        """Adaptive depth's state for ``threads`` decode threads: the one this decoder keeps, else a new one, started
        from the record an earlier load made at that count when there is one."""
        learning = self._learning.get(threads)
        if learning is None:
            learning = _Learning(AdaptiveDepth(self.config.draft_depth))
            if self.dctx is not None and self.config.depth_memory is not None:
                learning.memory = self._recall(learning.adaptive, self.config.depth_memory, threads)
            self._learning[threads] = learning
        return learning

    def _recall(self, adaptive: AdaptiveDepth, folder: Path, threads: int) -> tuple[DepthMemory, MemoryKey] | None:
        """Start ``adaptive`` from what an earlier load of the same files on this backend, decoding with as many
        threads, learned, if any; the record and its key for the saves, None when there is nothing to key by."""
        from app.native.loader import backend_manifest

        try:
            key = key_for(self.keyed_config, backend_manifest().id, threads)
        except (OSError, FastMTPError) as exc:  # no manifest (a bare backend folder): nothing to key it by
            log.warning("adaptive depth starts cold: %s", exc)
            return None
        memory = DepthMemory(folder)
        state = memory.recall(key)
        if state is not None and not adaptive.restore(state):
            log.warning("adaptive depth starts cold: the record in %s is not one this version can use",
                        memory.path(key))
        return memory, key

    def _remember(self) -> None:
        """Save what adaptive depth learned at the current thread count since the last save. A failure (a full
        disk, a read-only folder) only costs the next load its warm start, so it is logged, not raised into the
        reply."""
        learning = self._learning.get(self.threads)
        if learning is None or learning.memory is None or learning.adaptive.rounds == learning.saved_rounds:
            return
        memory, key = learning.memory
        learning.saved_rounds = learning.adaptive.rounds
        try:
            memory.remember(key, learning.adaptive.snapshot())
        except OSError as exc:
            log.warning("what adaptive depth learned could not be saved in %s: %s", memory.folder, exc)

    # ------------------------------------------------------------------ a chat left and come back to

    def snapshot(self) -> Snapshot:
        """The evaluated conversation, for ``restore`` to put back exactly: the evaluated tokens, the target's and
        the draft context's sequence state (llama.cpp's bytes), the pending hidden row and the draft's held rows
        (copies). ``EngineError`` when there is none, or llama.cpp cannot write a state."""
        if not self.tokens:
            raise EngineError("There is no evaluated conversation to keep.", kind="state-cache")
        n_embd = self.target.n_embd
        target = self.tctx.state_bytes()
        draft = self.dctx.state_bytes() if self.dctx is not None else None
        held_rows = (np.stack([row for _, row in self._held]).astype(np.float32) if self._held
                     else np.zeros((0, n_embd), np.float32))
        pending = None if self.pending_h is None else np.array(self.pending_h, dtype=np.float32, copy=True)
        return Snapshot(list(self.tokens), target, draft, n_embd, pending, [t for t, _ in self._held], held_rows)

    def restore(self, snapshot: Snapshot) -> None:
        """Forget the conversation held now and take up ``snapshot``'s: the next ``generate`` goes on exactly as if
        this decoder had never left it. On any failure (``EngineError``) the decoder holds an empty conversation,
        so the next turn reads its prompt in full."""
        self.reset()
        # the sampler's seeded stream belongs to the reply before: a Continue of this chat must not go on from it
        self._drop_chain()
        try:
            self._load_snapshot(snapshot)
        except (FastMTPError, ValueError) as exc:
            self.reset()
            raise EngineError(f"The saved state could not be used: {exc}", "The conversation is read again.",
                              kind="state-cache") from exc

    def _load_snapshot(self, snapshot: Snapshot) -> None:
        n_embd = self.target.n_embd
        drafting = self.dctx is not None
        n_held = len(snapshot.held_tokens)
        if snapshot.n_embd != n_embd or (snapshot.draft is not None) != drafting or not snapshot.tokens:
            raise ValueError("it was made for another model or drafting mode")
        if drafting != (snapshot.pending_h is not None) or n_held > len(snapshot.tokens) or (
                n_held and snapshot.held_rows.shape != (n_held, n_embd)) or (
                snapshot.pending_h is not None and snapshot.pending_h.shape != (n_embd,)):
            raise ValueError("its host rows do not fit this decoder")
        if len(snapshot.tokens) + 1 > self.config.n_ctx:
            raise ValueError("it is longer than this context")
        self.tctx.load_state_bytes(snapshot.target)
        if self.tctx.last_position() != len(snapshot.tokens) - 1:
            raise ValueError(f"the target's state ends at position {self.tctx.last_position()}, its tokens at "
                             f"{len(snapshot.tokens) - 1}")
        if self.dctx is not None:
            assert snapshot.draft is not None
            self.dctx.load_state_bytes(snapshot.draft)
            if self.dctx.last_position() != len(snapshot.tokens) - n_held - 1:
                raise ValueError("the draft head's state does not end where its held rows begin")
        self.tokens = list(snapshot.tokens)
        self.pending_h = None if snapshot.pending_h is None else snapshot.pending_h.astype(np.float32, copy=True)
        self._held = [(token, snapshot.held_rows[i].astype(np.float32, copy=True))
                      for i, token in enumerate(snapshot.held_tokens)]


def _check_pair(target: Path, draft: Path) -> None:
    from app.gguftools.inspect import inspect_gguf
    from app.gguftools.sidecar import check_pair

    check_pair(inspect_gguf(target), inspect_gguf(draft))


def _has_embedded_head(target: Path) -> bool:
    """Whether ``target``'s header declares MTP (nextn) layers; an unreadable one is left to the load to report."""
    from app.gguftools.inspect import inspect_gguf

    try:
        report = inspect_gguf(target)
    except (FastMTPError, OSError):
        return False
    return report.kind == "target" and report.nextn_layers > 0
