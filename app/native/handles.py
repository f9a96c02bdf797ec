"""Owning wrappers over llama.cpp handles: model, context, batch, and the captured native log.

Each class owns one C object, raises a plain error when creation fails, and frees it exactly once
(``close()`` is idempotent and also runs from ``__exit__``). Nothing above this module uses ctypes.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Protocol, Self, TextIO

import numpy as np
import numpy.typing as npt

from app.backend.toolchain import cpu_has_amx
from app.core import engine_limits
from app.core.errors import EngineError, FastMTPError, ModelLoadError, SidecarError, UnpatchedBackendError
from app.core.idle_cores import choose_threads, idle_cores_now, physical_cores
from app.gguftools.d2t import D2T_ADVICE, check_d2t
from app.native.loader import import_llama_cpp

FloatArray = npt.NDArray[np.float32]
# a load's progress: the fraction read so far (0..1); returning False stops the load, anything else goes on
LoadProgress = Callable[[float], "bool | None"]

# llama.cpp's complaint when an unpatched build meets a trimmed (d2t) LM head
_WRONG_SHAPE = re.compile(
    r"tensor '(?P<name>[^']+)' has wrong shape; expected\s+(?P<expected>[\d, ]+), got\s+(?P<got>[\d, ]+)")
# the patched loader's refusal of a d2t map it cannot scatter with
_D2T_REFUSED = re.compile(r"(?P<why>FastMTP d2t.*?)\s*$")

_GRAPH_LINE = re.compile(r"graph (nodes|splits)\s*=")
# "graph splits = 3" or "graph splits = 5 (with bs=512), 3 (with bs=1)"
_GRAPH_COUNT = re.compile(r"graph (?P<what>nodes|splits)\s*=\s*(?P<first>\d+)"
                          r"(?:\s*\(with bs=(?P<bs>\d+)\),\s*(?P<second>\d+)\s*\(with bs=1\))?")


class NativeLog:
    """Collects llama.cpp's log lines (its log callback is process-global) so failures can be explained."""

    def __init__(self, keep: int = 400) -> None:
        self.lines: deque[str] = deque(maxlen=keep)
        self.echo_to: TextIO | None = None
        self._partial = ""
        self._count = 0
        self._lock = threading.Lock()
        self._callback: Any = None

    def install(self, lib: ModuleType) -> None:
        if self._callback is not None:
            return

        def on_log(_level: int, text: bytes | None, _user: object) -> None:
            self._feed((text or b"").decode("utf-8", errors="replace"))

        self._callback = lib.llama_log_callback(on_log)  # keep a reference: C holds only the pointer
        lib.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _feed(self, text: str) -> None:
        with self._lock:
            self._partial += text
            while "\n" in self._partial:
                line, self._partial = self._partial.split("\n", 1)
                self.lines.append(line)
                self._count += 1
                if self.echo_to is not None:
                    print(line, file=self.echo_to, flush=True)

    def mark(self) -> int:
        with self._lock:
            return self._count

    def since(self, mark: int) -> list[str]:
        with self._lock:
            fresh = self._count - mark
            return list(self.lines)[-fresh:] if fresh > 0 else []


LOG = NativeLog()
_init_lock = threading.Lock()
_initialized = False


def llama() -> ModuleType:
    """The backend's ``llama_cpp`` module, initialised once with our log capture."""
    global _initialized
    lib = import_llama_cpp()
    with _init_lock:
        if not _initialized:
            LOG.install(lib)
            lib.llama_backend_init()
            _initialized = True
    return lib


def system_info() -> str:
    """llama.cpp's one-line report of the CPU features and backends it was built with."""
    return str(llama().llama_print_system_info().decode(errors="replace").strip())


def explain_load_failure(path: Path, log_lines: list[str]) -> FastMTPError:
    """Turn llama.cpp's load log into an error a user can act on."""
    for line in log_lines:
        refused = _D2T_REFUSED.search(line)
        if refused:  # the patched loader's own d2t check (the backstop behind ``check_d2t``)
            return SidecarError(f"llama.cpp refused the d2t sidecar {path}: {refused.group('why')}.", D2T_ADVICE)
        match = _WRONG_SHAPE.search(line)
        if match and match.group("name") == "output.weight":
            # llama.cpp prints four dims, padded with 1s: "got 64, 32768, 1, 1"
            expected = [int(x) for x in match.group("expected").replace(",", " ").split()][:2]
            got = [int(x) for x in match.group("got").replace(",", " ").split()][:2]
            if len(expected) == 2 and len(got) == 2 and got[0] == expected[0] and got[1] < expected[1]:
                return UnpatchedBackendError(
                    f"{path.name} is a FastMTP d2t sidecar (LM head trimmed to {got[1]} draft tokens), "
                    f"but the active llama.cpp backend is not patched for d2t: it expected the full "
                    f"{expected[1]}-token head ('expected {expected[0]}, {expected[1]}, got {got[0]}, {got[1]}').",
                    "The sidecar is fine; the backend lacks the d2t patch. Build the patched backend with "
                    "`python -m app backend build` (or make a patched build active with `backend use`).",
                )
    detail = "\n".join(line for line in log_lines if "error" in line.lower() or "failed" in line.lower())
    return ModelLoadError(f"llama.cpp could not load {path}." + (f"\n{detail}" if detail else ""),
                          "Check that the file is a complete GGUF for a supported architecture "
                          "(`python -m app gguf inspect FILE`).")


class Model:
    """A loaded GGUF model (``llama_model *``)."""

    def __init__(self, path: Path, *, n_gpu_layers: int = 0, load_mtp: bool = False, use_mmap: bool = True,
                 vocab_only: bool = False, on_progress: LoadProgress | None = None) -> None:
        """Load ``path``; ``on_progress(fraction)`` is called as llama.cpp reads it (0..1, ending at 1.0), so a
        long load can be watched; returning False from it stops the load (a ``ModelLoadError``)."""
        _check_counts(engine_limits.engine_number_problems(n_gpu_layers=n_gpu_layers))
        self.lib = llama()
        self.path = path
        self.load_mtp = load_mtp and not vocab_only
        self.vocab_only = vocab_only
        if not path.is_file():
            raise ModelLoadError(f"The model file {path} does not exist.")
        if load_mtp and not vocab_only:
            # a d2t id llama.cpp cannot scatter with would abort this process (the patched loader refuses it
            # too, but an older patched build does not): refuse it here, in words
            check_d2t(path)
        params = self.lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.load_mtp = load_mtp
        params.use_mmap = use_mmap
        params.vocab_only = vocab_only
        # llama.cpp's extra CPU weight buffers include AMX's where the processor has it, and that path crashes this
        # build (a segfault in llama_decode on Q4_K/Q6_K weights, e.g. a 9-token prompt of the 27B-shaped demo on a
        # Sapphire Rapids Xeon): weights stay in plain buffers there (llama-server's --no-repack)
        params.use_extra_bufts = not cpu_has_amx()
        stopped = threading.Event()
        callback: Any = None
        if on_progress is not None:
            def progress(fraction: float, _user: object) -> bool:
                # an exception escaping a ctypes callback reads as False (the load aborted): a bug in a progress
                # display must not fail the load, so only an explicit False stops it
                try:
                    keep_going = on_progress(float(fraction)) is not False
                except Exception:  # a broken display: the load goes on without it
                    keep_going = True
                if not keep_going:
                    stopped.set()
                return keep_going

            # referenced until the load returns: C holds only the pointer
            callback = self.lib.llama_progress_callback(progress)
            params.progress_callback = callback
        mark = LOG.mark()
        self._ptr: Any = self.lib.llama_model_load_from_file(str(path).encode(), params)
        del callback  # the load is over: llama.cpp does not call it again
        if not self._ptr:
            if stopped.is_set():
                raise ModelLoadError(f"The load of {path.name} was stopped.")
            raise explain_load_failure(path, LOG.since(mark))
        self.vocab: Any = self.lib.llama_model_get_vocab(self._ptr)
        self.n_embd: int = self.lib.llama_model_n_embd(self._ptr)
        self.n_vocab: int = self.lib.llama_vocab_n_tokens(self.vocab)

    @property
    def n_head(self) -> int:
        """Attention heads (what the plain attention kernel's scores are sized by, ``engine.attention``). Read when
        asked: llama.cpp aborts the process for a model loaded for its vocabulary only, which has no layers."""
        if self.vocab_only:
            raise EngineError(f"{self.path.name} was loaded for its vocabulary only: it has no attention heads.")
        return int(self.lib.llama_model_n_head(self.ptr))

    @property
    def ptr(self) -> Any:
        if not self._ptr:
            raise ValueError("the model is closed")
        return self._ptr

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (self.lib.llama_token * capacity)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (self.lib.llama_token * capacity)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        """End of generation (``<|im_end|>``, EOS): it ends a reply and is never part of its text."""
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def chat_template(self) -> str | None:
        """The chat template stored in the GGUF (``tokenizer.chat_template``), or None when it has none."""
        raw = self.lib.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def close(self) -> None:
        if self._ptr:
            self.lib.llama_model_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Batch:
    """A ``llama_batch`` for one sequence, with an embeddings array too (MTP batches carry both).

    Its token, position and output-flag arrays are written through numpy views: filling a batch
    costs a few slice assignments, not a Python loop of ctypes stores per token.
    """

    def __init__(self, lib: ModuleType, capacity: int, n_embd: int) -> None:
        self.lib = lib
        self.capacity = capacity
        self.n_embd = n_embd
        self._batch: Any = lib.llama_batch_init(capacity, 0, 1)
        self._embd = np.zeros((capacity, n_embd), dtype=np.float32)
        self._embd_pointer = self._embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._owned = True
        batch = self._batch
        self._token = np.ctypeslib.as_array(batch.token, shape=(capacity,))
        self._pos = np.ctypeslib.as_array(batch.pos, shape=(capacity,))
        self._wants = np.ctypeslib.as_array(batch.logits, shape=(capacity,))
        self._offsets = np.arange(capacity, dtype=self._pos.dtype)
        for i in range(capacity):  # one sequence: the same for every slot, set once
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0

    def fill(self, tokens: list[int], start_pos: int, *, hidden: FloatArray | None = None,
             logits: str = "last") -> None:
        """Load tokens at positions ``start_pos...``; ``logits`` is "last", "all" or "none"."""
        n = len(tokens)
        if n > self.capacity:
            raise ValueError(f"batch holds {self.capacity} tokens, got {n}")
        self._batch.n_tokens = n
        self._token[:n] = tokens
        np.add(self._offsets[:n], start_pos, out=self._pos[:n])
        self._wants[:n] = 1 if logits == "all" else 0
        if logits == "last" and n:
            self._wants[n - 1] = 1
        if hidden is not None:
            self._embd[:n] = hidden
            self._batch.embd = self._embd_pointer
        else:
            self._batch.embd = None

    @property
    def struct(self) -> Any:
        return self._batch

    def close(self) -> None:
        if self._owned:
            self._batch.embd = None  # ours, not llama.cpp's: never let llama_batch_free see it
            self.lib.llama_batch_free(self._batch)
            self._owned = False


class EvalCallbackOwner(Protocol):
    """What ``Context(timer=...)`` takes: an object holding a ``ggml_backend_sched_eval_callback``."""

    callback: Any


def ggml_base(lib: ModuleType) -> ctypes.CDLL:
    """The backend's ggml-base library (the one ``lib`` loaded), with the graph-inspection calls typed."""
    folder = Path(lib.__file__ or "").parent / "lib"
    path = next(iter(sorted(folder.glob("*ggml-base*"))), None)
    if path is None:
        raise ModelLoadError(f"No ggml-base library next to {lib.__file__}.")
    base = ctypes.CDLL(str(path))
    for name, restype in (("ggml_get_name", ctypes.c_char_p), ("ggml_op_desc", ctypes.c_char_p),
                          ("ggml_backend_buffer_name", ctypes.c_char_p),
                          ("ggml_backend_buffer_is_host", ctypes.c_bool)):
        function = getattr(base, name)
        function.argtypes = [ctypes.c_void_p]
        function.restype = restype
    return base


class NodeTimer:
    """Times chosen graph nodes through llama.cpp's eval callback.

    The scheduler asks the callback about every node; for the ones named here it computes the graph up
    to that node, synchronises the device, and calls back: each call is stamped with ``perf_counter``.
    """

    def __init__(self, lib: ModuleType, names: set[str]) -> None:
        get_name = ggml_base(lib).ggml_get_name
        self.stamps: dict[str, float] = {}

        def on_node(tensor: int, ask: bool, _user: object) -> bool:
            name = (get_name(tensor) or b"").decode()
            if ask:
                return name in names
            self.stamps[name] = time.perf_counter()
            return True

        self.callback = lib.ggml_backend_sched_eval_callback(on_node)  # keep a reference for C

    def between(self, first: str, last: str) -> float:
        """Seconds from the end of node ``first`` to the end of node ``last`` in the latest evaluation."""
        return self.stamps[last] - self.stamps[first]


def default_threads() -> int:
    """Decode threads when none are asked for: the cores other work leaves idle now (``app.core.idle_cores``), at
    least one and at most the physical cores (llama-server's own default, ``cpu_get_num_math``).

    llama.cpp's threads spin at every barrier, so a thread whose core is taken by another process stalls the pass:
    on 2 cores, 2 threads make a pass 0.55x the time of 1 when the machine is quiet and 2-3x when both cores are
    busy elsewhere. Where the idle cores cannot be measured (Windows), the fixed default below.
    """
    return threads_for(idle_cores_now())


def threads_for(idle: float | None) -> int:
    """``default_threads`` for a measure of the idle cores taken by the caller (None: the fixed default)."""
    return choose_threads(idle, physical_cores() or _fixed_default_threads(), _fixed_default_threads())


def _fixed_default_threads() -> int:
    """One per physical core when SMT siblings are likely (4+ logical cores), else one core left for the rest."""
    logical = os.cpu_count() or 1
    return max(1, logical // 2) if logical >= 4 else max(1, logical - 1) if logical > 1 else 1


def _check_counts(problems: list[str]) -> None:
    """Counts llama.cpp would overflow on (C ints) or abort with (100,000 threads): refused before the call."""
    if problems:
        raise ModelLoadError(f"Not loading: {'; '.join(problems)}.", engine_limits.LIMITS_ADVICE)


class Context:
    """A ``llama_context``: a target context, or an MTP draft context bound to a target one."""

    def __init__(self, model: Model, *, n_ctx: int = 2048, n_batch: int = 512, n_threads: int | None = None,
                 n_rs_seq: int = 0, draft_for: Context | None = None, nextn_outputs: bool = False,
                 flash_attn: bool | None = None, timer: EvalCallbackOwner | None = None,
                 max_outputs_per_pass: int = 0) -> None:
        _check_counts(engine_limits.engine_number_problems(n_threads=n_threads, n_batch=n_batch, n_ctx=n_ctx,
                                                           ctx_min=1))
        self.lib = model.lib
        self.model = model
        params = self.lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_rs_seq = n_rs_seq
        # the most rows with logits one pass asks for (0: the whole batch): a sampler attached to the graph is
        # built for this many, so a verify pass's few rows do not reserve sampling graphs for 512
        params.n_outputs_max_per_seq = max_outputs_per_pass
        params.n_threads = n_threads or default_threads()
        params.n_threads_batch = params.n_threads
        self.n_threads = int(params.n_threads)  # what llama.cpp runs a one-token pass with (``set_threads``)
        if flash_attn is not None:
            params.flash_attn_type = 1 if flash_attn else 0
        if timer is not None:
            params.cb_eval = timer.callback
        if draft_for is not None:
            params.ctx_type = self.lib.LLAMA_CONTEXT_TYPE_MTP
            params.ctx_other = draft_for.ptr
        mark = LOG.mark()
        self._ptr: Any = self.lib.llama_init_from_model(model.ptr, params)
        if not self._ptr:
            detail = "\n".join(LOG.since(mark)[-5:])
            raise ModelLoadError(f"llama.cpp could not create a context of {n_ctx:,} tokens for {model.path.name} "
                                 f"(not enough memory?).\n{detail}",
                                 f"Try a smaller context than {n_ctx:,} tokens (Settings, Context size; or --ctx): "
                                 "Auto picks the largest that fits this machine. Or offload fewer GPU layers.")
        # llama.cpp's own account of the graph it reserved: "graph nodes = ...", "graph splits = ..."
        self.graph_log = [line.strip() for line in LOG.since(mark) if _GRAPH_LINE.search(line)]
        self.n_ctx = n_ctx
        self.is_draft = draft_for is not None
        self.nextn_outputs = nextn_outputs or self.is_draft
        # wall time inside llama_decode and rollback, each followed by llama_synchronize so that a GPU's
        # work is in it (llama_decode returns before the device is done): the rest of a round is ours
        self.native_seconds = 0.0
        self._llama_decode = self.lib.llama_decode
        self._synchronize = self.lib.llama_synchronize
        self._batch = Batch(self.lib, n_batch, model.n_embd)
        self.n_vocab = model.n_vocab
        self.n_embd = model.n_embd
        # the shape of the latest pass's output: rows with logits, and how batch indices map onto them
        self._n_tokens = 0
        self._outputs = "none"
        self._logits_block: FloatArray | None = None
        self._array_types: dict[int, Any] = {}  # ctypes float arrays by length: a view costs a cast, no inference
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        if nextn_outputs or self.is_draft:
            # unmasked, a draft context too: its MTP graph (qwen35, qwen35moe) names the hidden state of every row
            # h_nextn and crops only the head's input, so a masked copy of "the output rows" takes the pass's first
            # rows: a draft pass of [held..., pending] asking for the last row's logits handed back the first held
            # token's hidden row for the next draft step. Unmasked, every row comes back (4 KiB each) by batch index
            llama_cpp_ext.llama_set_embeddings_nextn(self._ptr, True, False)
        else:
            # no MTP hidden rows wanted (plain decoding): "masked" lets the graph drop the rows without logits
            # before the last layer's FFN, as llama.cpp's own graphs do without nextn. Unmasked (llama.cpp's default,
            # kept for a drafting target, which needs every row's hidden state) that layer runs for every prompt
            # token: 10% of a 512-token prompt pass on the small demo, with the same logits (docs/benchmarks.md)
            llama_cpp_ext.llama_set_embeddings_nextn(self._ptr, False, True)

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        """Decode one-token passes with ``n_threads`` and bigger batches with ``n_threads_batch`` (the same by default)
        from the next pass on (llama.cpp picks by the batch: ``graph_compute``'s ``batched``)."""
        _check_counts(engine_limits.engine_number_problems(n_threads=n_threads))
        self.lib.llama_set_n_threads(self._ptr, n_threads, n_threads_batch or n_threads)
        self.n_threads = n_threads

    def set_nextn_outputs(self, enabled: bool, masked: bool) -> None:
        """Whether passes hand back MTP hidden rows (``enabled``) and whether the graph may drop rows without logits
        before the last layer (``masked``): the choice this context made at creation, for a benchmark to compare."""
        self._ext.llama_set_embeddings_nextn(self._ptr, enabled, masked)

    def graph_counts(self) -> dict[str, dict[str, int]]:
        """Graph nodes and splits (backend hand-overs) llama.cpp reported when it reserved this context's
        graphs: ``{"splits": {"batch": n, "single": m}, "nodes": {...}}`` for a full batch and one token."""
        counts: dict[str, dict[str, int]] = {}
        for line in self.graph_log:
            match = _GRAPH_COUNT.search(line)
            if match:
                first = int(match["first"])
                second = int(match["second"]) if match["second"] else first
                counts[match["what"]] = {"batch": first, "single": second}
        return counts

    @property
    def ptr(self) -> Any:
        if not self._ptr:
            raise ValueError("the context is closed")
        return self._ptr

    @property
    def is_open(self) -> bool:
        return bool(self._ptr)

    def decode(self, tokens: list[int], start_pos: int, *, hidden: FloatArray | None = None,
               logits: str = "last") -> None:
        """Evaluate ``tokens`` at ``start_pos``; raises ModelLoadError on a llama.cpp failure."""
        self._batch.fill(tokens, start_pos, hidden=hidden, logits=logits)
        self._logits_block = None
        ptr = self.ptr
        started = time.perf_counter()
        code = self._llama_decode(ptr, self._batch.struct)
        # a GPU backend returns from llama_decode before the device has finished: wait for it here, so
        # the pass's device time is counted as native (not in whatever reads the outputs first)
        self._synchronize(ptr)
        self.native_seconds += time.perf_counter() - started
        self._n_tokens, self._outputs = len(tokens), logits
        if code != 0:
            self._n_tokens, self._outputs = 0, "none"
            raise ModelLoadError(f"llama_decode failed with code {code} at position {start_pos}.",
                                 "The context may be full: start a new chat or raise the context size.")

    def _view(self, address: int | None, length: int) -> FloatArray:
        """A float32 numpy view of ``length`` floats of llama.cpp memory at ``address`` (no copy)."""
        if not address:
            raise ValueError("llama.cpp returned no output buffer")
        array_type: Any = self._array_types.get(length)
        if array_type is None:
            array_type = self._array_types[length] = ctypes.c_float * length
        view: FloatArray = np.frombuffer(array_type.from_address(address), dtype=np.float32)
        return view

    def _output_row(self, i: int) -> int:
        """Which output row holds batch index ``i`` (negative counts from the end) of the latest pass."""
        n = self._n_tokens
        index = i + n if i < 0 else i
        if not 0 <= index < n or self._outputs == "none" or (self._outputs == "last" and index != n - 1):
            raise ValueError(f"no logits row {i}")
        return index if self._outputs == "all" else 0

    def logits(self, i: int) -> FloatArray:
        """Logits of batch index ``i`` (negative counts from the end), copied out of llama.cpp."""
        return self.logits_view(i).copy()

    def logits_view(self, i: int) -> FloatArray:
        """Logits of batch index ``i`` without a copy: valid only until this context's next ``decode``.

        The hot path reads each row once (an argmax or a sample) right after the pass, so copying
        the vocabulary-sized row (1 MB for Qwen) every position would be pure overhead. All rows of a
        pass are one block in llama.cpp (a single sequence keeps batch order), viewed once per pass.
        """
        row = self._output_row(i)
        if self._logits_block is None:
            n_rows = self._n_tokens if self._outputs == "all" else 1
            address = ctypes.cast(self.lib.llama_get_logits(self.ptr), ctypes.c_void_p).value
            self._logits_block = self._view(address, n_rows * self.n_vocab).reshape(n_rows, self.n_vocab)
        view: FloatArray = self._logits_block[row]
        return view

    def nextn_hidden(self, i: int) -> FloatArray:
        """The MTP hidden row of batch index ``i`` (a copy; needs ``nextn_outputs`` or a draft context)."""
        return self.nextn_view(i).copy()

    def nextn_view(self, i: int) -> FloatArray:
        """Like ``nextn_hidden`` without the copy: valid only until this context's next ``decode``."""
        index = i + self._n_tokens if i < 0 else i  # unmasked rows are kept by batch index, every token's
        if not 0 <= index < self._n_tokens:
            raise ValueError(f"no nextn row {i}")
        pointer = self._ext.llama_get_embeddings_nextn_ith(self.ptr, index)
        return self._view(ctypes.cast(pointer, ctypes.c_void_p).value, self.n_embd)

    def nextn_rows(self, n: int) -> FloatArray:
        """A copy of the MTP hidden rows of batch indices ``0..n-1`` of a target context's latest pass
        (a target keeps a row for every token, in batch order): one read for a whole verify pass."""
        if self.is_draft or not 0 < n <= self._n_tokens:
            raise ValueError(f"no nextn rows 0..{n - 1}")
        pointer = self._ext.llama_get_embeddings_nextn(self.ptr)
        return self._view(ctypes.cast(pointer, ctypes.c_void_p).value, n * self.n_embd).reshape(n, self.n_embd).copy()

    @property
    def graphs_reused(self) -> int:
        """Passes that reused a graph llama.cpp had built before instead of building one (our patch keeps the graphs
        of small batches, one per shape, so a verify pass at another draft depth need not build its graph again)."""
        return int(self.lib.llama_perf_context(self.ptr).n_reused)

    def truncate(self, n_keep: int) -> bool:
        """Forget every position from ``n_keep`` on (rollback after a rejected draft).

        False when llama.cpp cannot: a recurrent state has no snapshot that far back. The rollback
        is llama.cpp's work (restoring a recurrent snapshot), so it counts as native time.
        """
        ptr = self.ptr
        started = time.perf_counter()
        memory = self.lib.llama_get_memory(ptr)
        done = bool(self.lib.llama_memory_seq_rm(memory, 0, n_keep, -1))
        self._synchronize(ptr)  # any device copy the rollback started is native time too
        self.native_seconds += time.perf_counter() - started
        return done

    def close(self) -> None:
        if self._ptr:
            self._batch.close()
            self.lib.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ sequence state (a chat left and resumed)

    def state_bytes(self) -> bytearray:
        """A copy of sequence 0's evaluated state: its attention cells and, on a hybrid model, its recurrent state
        (``llama_state_seq_get_size`` / ``llama_state_seq_get_data``), for ``load_state_bytes`` of a context of
        the same model and settings. Host memory: a long context's state can be gigabytes. Raises
        ``EngineError`` when llama.cpp cannot write it."""
        ptr = self.ptr
        size = int(self.lib.llama_state_seq_get_size(ptr, 0))
        if size <= 0:
            raise EngineError(f"llama.cpp could not size the state of {self.model.path.name}'s context.",
                              "The chat goes on; its state is not kept.", kind="state-cache")
        data = bytearray(size)
        written = int(self.lib.llama_state_seq_get_data(ptr, (ctypes.c_uint8 * size).from_buffer(data), size, 0))
        if written != size:
            raise EngineError(f"llama.cpp wrote {written} of the {size} bytes of {self.model.path.name}'s state.",
                              "The chat goes on; its state is not kept.", kind="state-cache")
        return data

    def load_state_bytes(self, data: bytes | bytearray | memoryview) -> None:
        """Replace sequence 0 with ``data`` from ``state_bytes`` (``llama_state_seq_set_data``). Only bytes this
        app wrote and checked may come here: llama.cpp trusts them. On ``EngineError`` (llama.cpp refused them:
        another model's or context's layout) the sequence is left empty."""
        view = np.frombuffer(data, dtype=np.uint8)  # no copy; read-only is fine, llama.cpp only reads it
        if view.size == 0:
            raise EngineError("An empty state cannot be loaded.", kind="state-cache")
        ptr = self.ptr
        mark = LOG.mark()
        read = int(self.lib.llama_state_seq_set_data(ptr, view.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                                     view.size, 0))
        if read != view.size:
            self.truncate(0)
            detail = " ".join(line.strip() for line in LOG.since(mark) if line.strip())[-300:]
            raise EngineError(f"llama.cpp refused the saved state of {self.model.path.name} (read {read} of "
                              f"{view.size} bytes){': ' + detail if detail else ''}.",
                              "It is not used; the conversation is read again.", kind="state-cache")

    def last_position(self) -> int:
        """The highest position sequence 0 holds (-1: none): a loaded state's length, checked against its tokens."""
        return int(self.lib.llama_memory_seq_pos_max(self.lib.llama_get_memory(self.ptr), 0))
