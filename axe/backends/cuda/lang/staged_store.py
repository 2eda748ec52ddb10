"""A register tile written to global memory through shared staging buffers (``Ax.cuda.staged_store``):
the epilogue of a warp-specialised Hopper kernel, where a consumer warpgroup's accumulator goes out
by ``stmatrix`` into a swizzled shared buffer and from there by one thread's TMA store (or bulk copy).
"""

from __future__ import annotations

from axe import ops
from axe.ops.scope import scope_or_cta
from axe.schedules.dispatch import run

from .hopper import fence_proxy_async, named_barrier, tma_store_wait

__all__ = ["staged_store"]


def staged_store(out, width: int, buffer, store, barrier: int, leader, bufs: int = 1, before=None, threads: int = 128):
    """Write the register tile ``out`` ``width`` columns at a time.  Chunk ``j`` passes through the
    shared view ``buffer(j)`` (``bufs`` buffers used in rotation): the ``leader`` thread waits until
    the store that last read that buffer has finished reading it, the ``threads`` threads meet at named
    barrier ``barrier``, ``before(j, buf)`` runs (e.g. adding partial sums into the chunk), the chunk is
    copied into the buffer, the writes are fenced for the async proxy, the threads meet again, and
    ``store(j, buf)`` issues the buffer's write to global memory (not waited for: a later chunk's or
    the caller's ``tma_store_wait`` does that)."""
    chunks = out.shape[1] // width
    for j in range(chunks):
        tma_store_wait(bufs - 1, pred=leader)
        named_barrier(barrier, threads)
        buf = buffer(j)
        if before is not None:
            before(j, buf)
        run(ops.copy(buf, out if chunks == 1 else out[:, j * width:(j + 1) * width], scope_or_cta()))
        fence_proxy_async()
        named_barrier(barrier, threads)
        store(j, buf)
