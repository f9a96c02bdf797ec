"""Per-node timing of a llama.cpp graph through the scheduler's eval callback (``bench ops``).

With an eval callback that wants every node, ggml's scheduler computes the graph one node at a time:
it asks about node j (we stamp the clock), computes it on its split's backend, synchronises that
backend, and calls back (we stamp again). The difference is the node's own time, device work
included; our Python bookkeeping runs outside it. Fusions and CUDA graphs are off while profiling and
every node pays one launch and one synchronisation, so the profiled sum is above a plain pass: use
the shares, and time plain passes in a context without the callback.

Which backend ran a node: the scheduler allocates a node's output in the buffer type of the backend
it assigned the node to, so the buffer names it (``CUDA0``; host buffers such as ``CPU`` or
``CUDA_Host`` mean the CPU backend). Views share their source's buffer and compute nothing.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from types import ModuleType

from app.native.handles import ggml_base


class _TensorHead(ctypes.Structure):
    """The first fields of ``struct ggml_tensor`` (ggml.h, stable for years): type, buffer, ne, nb, op."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int)]


@dataclass(frozen=True)
class NodeRecord:
    name: str  # the graph's name for the node, e.g. ``attn_norm-3``, ``result_output``, ``node_57``
    op: str  # ggml_op_desc: MUL_MAT, GATED_DELTA_NET, FLASH_ATTN_EXT, SILU (unary ops by their own name), ...
    backend: str  # ``CPU`` for host buffers, else the buffer type's name (``CUDA0``); ``?`` without one
    buffer: str  # the buffer type's own name (``CPU``, ``CUDA_Host``, ``CUDA0``)
    seconds: float


class OpProfiler:
    """Records every node of every graph the context it is given to (``Context(timer=...)``) computes.

    ``enabled`` False lets the scheduler compute whole splits again (the callback is still asked per
    node); ``take()`` returns and clears what was recorded.
    """

    def __init__(self, lib: ModuleType) -> None:
        base = ggml_base(lib)
        get_name, op_desc = base.ggml_get_name, base.ggml_op_desc
        buffer_name, buffer_is_host = base.ggml_backend_buffer_name, base.ggml_backend_buffer_is_host
        self.enabled = True
        self.records: list[NodeRecord] = []
        asked = [0.0]
        clock = time.perf_counter

        def on_node(tensor: int, ask: bool, _user: object) -> bool:
            if ask:
                if not self.enabled:
                    return False
                asked[0] = clock()
                return True
            seconds = clock() - asked[0]  # stamped first: what follows is ours, not the node's
            head = _TensorHead.from_address(tensor)
            buffer = head.buffer
            buft = (buffer_name(buffer) or b"?").decode() if buffer else "?"
            backend = "CPU" if buffer and buffer_is_host(buffer) else buft
            self.records.append(NodeRecord((get_name(tensor) or b"").decode(errors="replace"),
                                           (op_desc(tensor) or b"?").decode(), backend, buft, seconds))
            return True

        self.callback = lib.ggml_backend_sched_eval_callback(on_node)  # keep a reference for C

    def take(self) -> list[NodeRecord]:
        records, self.records = self.records, []
        return records
