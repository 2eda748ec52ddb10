"""Readiness counters in global memory: the CTAs that write the parts of a tile count them, and a
CTA that needs the whole tile waits until the count is complete — how one persistent launch runs a
second GEMM's tiles while the first GEMM's last tiles are still being computed.

Writer (:func:`count_done`): once its TMA stores have been *written* (``Ax.cuda.bulk_wait``:
``cp.async.bulk.wait_group`` and ``fence.proxy.async.global``), one thread adds 1 with release
semantics at GPU scope.  Reader (:func:`wait_count`): one thread spins on acquire loads until the
count reaches ``want`` — bounded: after ``timeout_ns`` of ``%globaltimer`` it writes a report and
traps, with no function call (:mod:`~axe.backends.cuda.report`) — then orders what it saw before
its own async-proxy reads (``fence.proxy.async.global``: the TMA loads it issues next), and counts
itself among the ``readers`` (a second count in the same tensor); the last reader resets both to zero, so the workspace leaves
the launch zero-filled as it came (no writer adds to a count once its readers have started).

The counting CTAs must be co-resident (a persistent grid of at most one CTA per SM) and every
writer's part must come before any of its readers in the writer's own order of work, or a wait
never ends.
"""

from __future__ import annotations

from axe.schedules.emit import guard

from .. import report as _report
from ..sync import CTA_WAIT_TIMEOUT_NS
from .flags import WAIT_AT_LEAST_SRC, word_ptr

__all__ = ["count_done", "wait_count"]

# one source per function: the code generator includes each function's source once, by name
_DONE_SRC = r"""
__forceinline__ __device__ void axe_count_done(int* c) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(c) : "memory");
}
"""
_WAIT_SRC = WAIT_AT_LEAST_SRC + r"""
__forceinline__ __device__ void axe_wait_count(int* c, int* seen, int want, int readers, int index,
    long long timeout_ns, unsigned n0, unsigned n1, unsigned n2, unsigned n3) {
  axe_wait_at_least(c, want, AXE_KIND, index, timeout_ns, n0, n1, n2, n3);
  asm volatile("fence.proxy.async.global;" ::: "memory");
  if (atomicAdd(seen, 1) == readers - 1) {      // the last reader: every writer and reader is done
    asm volatile("st.relaxed.gpu.global.b32 [%0], 0;" :: "l"(c) : "memory");
    asm volatile("st.relaxed.gpu.global.b32 [%0], 0;" :: "l"(seen) : "memory");
  }
}
""".replace("AXE_KIND", f"{_report.FLAG}u")


def count_done(counts, index, pred):
    """The thread where ``pred`` holds adds 1 to ``counts[index]`` with release semantics at GPU
    scope (call it after ``Ax.cuda.bulk_wait``, so the stores it announces are written)."""
    from tvm.script import tirx as T
    with guard(pred):
        T.evaluate(T.cuda.func_call("axe_count_done", word_ptr(counts, index, "counters"), source_code=_DONE_SRC))


def wait_count(counts, index, want, seen_at, readers: int, pred, timeout_ns: int = CTA_WAIT_TIMEOUT_NS):
    """The thread where ``pred`` holds waits until ``counts[index] >= want`` (acquire), orders it
    before its TMA loads, and counts itself in ``counts[seen_at + index]`` (flat indices of the
    same tensor); the ``readers``-th reader resets both to zero.  Bounded: a count that never
    completes ends the launch with a report naming the counters' tensor, the index, the count
    wanted and the count seen."""
    from tvm.script import tirx as T
    name = counts.name or "counts"
    with guard(pred):
        T.evaluate(T.cuda.func_call("axe_wait_count", word_ptr(counts, index, "counters"),
                                    word_ptr(counts, seen_at + index, "counters"), want, readers, index,
                                    T.int64(timeout_ns), *(T.uint32(w) for w in _report.name_words(name)),
                                    source_code=_WAIT_SRC))
