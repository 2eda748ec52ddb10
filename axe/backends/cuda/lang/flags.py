"""Flags in global memory that hand data from one CTA to another within a launch.

A producer CTA writes a workspace, then sets a flag (:func:`flag_set`: every thread fences at GPU
scope, the threads meet at a barrier, one thread stores 1 with release semantics); a consumer CTA
takes it (:func:`flag_take`: one thread spins with acquire loads until it reads 1, stores 0 back
so the flag is ready for the next launch, then the threads meet at a barrier and fence) and may
then read the workspace.  The spin is bounded (:data:`~axe.backends.cuda.sync.CTA_WAIT_TIMEOUT_NS`):
a flag that never comes ends the launch with a report (:mod:`~axe.backends.cuda.report`) and a
trap, not a hang; the report path calls no function, so kernels with wgmma may wait on flags.
Both sides name the group of threads that meets at the barrier (a named barrier of ``threads``
threads).  The CTAs must be co-resident (a persistent grid of at
most one CTA per SM), or the consumer's spin never ends; the flags live in a zero-filled
``Ax.param(..., scratch=True)`` buffer that every launch leaves zero-filled again.
"""

from __future__ import annotations

from axe.schedules.emit import guard

from .. import report as _report
from ..sync import CTA_WAIT_TIMEOUT_NS

__all__ = ["flag_set", "flag_take", "fence_gpu", "counter_publish", "counter_wait"]

# one source per function: the code generator includes each function's source once, by name
_FENCE_SRC = r"""
__forceinline__ __device__ void axe_fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
"""
_SET_SRC = r"""
__forceinline__ __device__ void axe_flag_set(int* flag) {
  asm volatile("st.release.gpu.global.b32 [%0], 1;" :: "l"(flag) : "memory");
}
"""
# the first acquire load runs before the timer is read (a flag that is set costs one load); the
# timeout path is inline (report.SOURCE): no call, so wgmma kernels (stream-K) may use it
WAIT_AT_LEAST_SRC = _report.SOURCE + r"""
#ifndef AXE_WAIT_AT_LEAST_DEFINED
#define AXE_WAIT_AT_LEAST_DEFINED
__forceinline__ __device__ int axe_acquire_load(int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// spin until *p >= want (acquire); after timeout_ns a report names the wait (kind, index, the
// value wanted and the value seen, the tensor's name) and the launch traps
__forceinline__ __device__ int axe_wait_at_least(int* p, int want, unsigned kind, int index, long long timeout_ns,
    unsigned n0, unsigned n1, unsigned n2, unsigned n3) {
  int v = axe_acquire_load(p);
  if (v < want) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while ((v = axe_acquire_load(p)) < want) {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if ((long long)(t - t0) > timeout_ns)
        axe_report_trap(kind, (unsigned)index, 0u, (unsigned)want, (unsigned)v, timeout_ns, n0, n1, n2, n3);
    }
  }
  return v;
}
#endif
"""
_TAKE_SRC = WAIT_AT_LEAST_SRC + r"""
__forceinline__ __device__ void axe_flag_take(int* flag, int index, long long timeout_ns,
    unsigned n0, unsigned n1, unsigned n2, unsigned n3) {
  axe_wait_at_least(flag, 1, AXE_KIND, index, timeout_ns, n0, n1, n2, n3);
  asm volatile("st.relaxed.gpu.global.b32 [%0], 0;" :: "l"(flag) : "memory");
}
""".replace("AXE_KIND", f"{_report.FLAG}u")


def fence_gpu():
    """``fence.acq_rel.gpu``: this thread's memory accesses before it are ordered, at GPU scope,
    before those after it."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.func_call("axe_fence_gpu", source_code=_FENCE_SRC))


def word_ptr(words, index, what="flags"):
    """The address of ``words[index]`` (flat), for a global int32 tensor of flags or counts;
    ``what`` names the construct in the error for any other tensor."""
    from tvm.script import tirx as T
    if words.mem != "global" or words.dtype != "int32":
        raise ValueError(f"{what}: {words.describe()} is not a global int32 tensor")
    return T.address_of(words.flat()[index])


def _flag_name(flags):
    """The flags tensor's name for the timeout report (``flags`` when it has none)."""
    return flags.name or "flags"


def flag_set(flags, index, pred, barrier: int, threads: int):
    """Publish what the calling threads wrote before this call: each fences at GPU scope, they
    meet at named barrier ``barrier`` (``threads`` threads), then the thread where ``pred`` holds
    sets ``flags[index]`` to 1 with a release store."""
    from tvm.script import tirx as T
    from .hopper import named_barrier
    fence_gpu()
    named_barrier(barrier, threads)
    with guard(pred):
        T.evaluate(T.cuda.func_call("axe_flag_set", word_ptr(flags, index), source_code=_SET_SRC))


def flag_take(flags, index, pred, barrier: int, threads: int, timeout_ns: int = CTA_WAIT_TIMEOUT_NS):
    """Wait for ``flags[index]`` to be set: the thread where ``pred`` holds spins on acquire loads
    until it reads 1 and stores 0 back; then the ``threads`` threads meet at named barrier
    ``barrier`` and each fences at GPU scope, so their reads that follow see what the setter
    published.  The wait is bounded: after ``timeout_ns`` of ``%globaltimer`` the waiting thread
    writes a report (its CTA, the flag's name and index; :mod:`~axe.backends.cuda.report`) and
    traps, so the launch fails with an error instead of hanging.  Call-free: wgmma kernels may use it."""
    from tvm.script import tirx as T
    from .hopper import named_barrier
    with guard(pred):
        T.evaluate(T.cuda.func_call("axe_flag_take", word_ptr(flags, index), index, T.int64(timeout_ns),
                                    *(T.uint32(w) for w in _report.name_words(_flag_name(flags))),
                                    source_code=_TAKE_SRC))
    named_barrier(barrier, threads)
    fence_gpu()


_PUBLISH_SRC = r"""
__forceinline__ __device__ void axe_counter_publish(int* c, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" :: "l"(c), "r"(v) : "memory");
}
"""


def counter_publish(flags, index, value):
    """One thread stores ``value`` into ``flags[index]`` with release semantics at GPU scope: what
    it wrote (and completed) before is visible to a thread that reads the value with acquire."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.func_call("axe_counter_publish", word_ptr(flags, index), value, source_code=_PUBLISH_SRC))


def counter_wait(flags, index, value):
    """One thread waits until ``flags[index]`` reaches ``value`` (acquire loads), bounded by the
    mesh's timeout like every wait of a distributed kernel (a failure is recorded and reported)."""
    from axe.schedules.context import current_context
    from ..peer import wait_value
    wait_value(current_context("Ax.cuda.counter_wait").mesh, word_ptr(flags, index), value, index)
