"""L2 prefetch of a contiguous range of global memory (``cp.async.bulk.prefetch.L2.global``,
sm_90+): the bytes start moving into L2 with no destination in shared memory and no barrier —
what a kernel can do with data it will read later but cannot load yet (before its programmatic
launch wait, say, or before a shared-memory slot is free).  A hint: nothing waits for it, and
reading the range later is correct whether or not the prefetch happened.
"""

from __future__ import annotations

from axe.schedules.emit import guard

__all__ = ["prefetch_l2"]

_SRC = r"""
__forceinline__ __device__ void axe_prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
"""


def prefetch_l2(buffer, index, nbytes: int, pred=None):
    """The thread where ``pred`` holds (every thread: ``None``) prefetches ``nbytes`` bytes into L2
    from the address of ``buffer[index]`` (a tuple of indices; the range must be contiguous in
    global memory and 16-byte aligned).  ``nbytes``: a positive multiple of 16."""
    from tvm.script import tirx as T
    if not isinstance(nbytes, int) or nbytes <= 0 or nbytes % 16:
        raise ValueError(f"prefetch_l2({getattr(buffer, 'name', buffer)}): nbytes must be a positive multiple "
                         f"of 16 (cp.async.bulk.prefetch), got {nbytes!r}")
    with guard(pred):
        T.evaluate(T.cuda.func_call("axe_prefetch_l2", T.address_of(buffer[tuple(index)]), T.uint32(nbytes),
                                    source_code=_SRC))
