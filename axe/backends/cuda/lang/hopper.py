"""Hopper (sm_90a) kernel-language features: register reallocation between warpgroup roles,
per-warpgroup scopes, named barriers, proxy fences, single-thread election and the wgmma wait.

A warp-specialized kernel is a chain of role branches, each one warpgroup range::

    Ax.cuda.min_blocks_per_sm(1)               # __launch_bounds__(threads, 1): setmaxnreg needs it
    bx, tx = Ax.launch(132, 384)
    with Ax.cuda.role(0, 1, regs=40):          # producer warpgroup gives registers back
        ...
    with Ax.cuda.role(1, 3, regs=232, each=True):   # two consumer warpgroups, one tile half each
        ...

``setmaxnreg`` is ``.sync.aligned`` (every thread of the warpgroup runs it) and ptxas honours it
only when the kernel's register count at entry is fixed (C7508 otherwise), hence
:func:`min_blocks_per_sm`.
"""

from __future__ import annotations

import contextlib

from axe.layout import S
from axe.ops.scope import ExecScope, pop_scope, push_scope
from axe.schedules.emit import guard

from axe.ops.scope import scope_or_cta

__all__ = ["min_blocks_per_sm", "setmaxnreg", "role", "warpgroup_index", "named_barrier", "named_barrier_arrive",
           "fence_proxy_async", "elect_one", "entry_registers", "tma_store_wait", "dynamic_shared", "fence_registers",
           "wgmma_wait"]

REGISTER_FILE = 65536          # 32-bit registers per SM (sm_90)


def min_blocks_per_sm(n: int = 1):
    """``__launch_bounds__(threads, n)``: write before :func:`axe.lang.launch`."""
    from tvm.script import tirx as T
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"min_blocks_per_sm: n must be a positive int, got {n!r}")
    T.func_attr({"tirx.launch_bounds_min_blocks_per_sm": n})


def entry_registers(threads: int, blocks: int = 1) -> int:
    """Registers per thread at entry under ``__launch_bounds__(threads, blocks)`` (multiple of 8,
    at most 255)."""
    return min(REGISTER_FILE // (threads * blocks) // 8 * 8, 255 // 8 * 8)


def setmaxnreg(regs: int, increase: bool):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 regs`` (24..256, a multiple of 8)."""
    from tvm.script import tirx as T
    if not (24 <= regs <= 256 and regs % 8 == 0):
        raise ValueError(f"setmaxnreg: {regs} registers is not a multiple of 8 in [24, 256]")
    T.evaluate(T.ptx[f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32"](regs))


@contextlib.contextmanager
def role(lo: int, hi: int, regs: int | None = None, each: bool = False):
    """Warpgroups ``[lo, hi)`` take a role: ``if lo*128 <= tx < hi*128``, then ``setmaxnreg`` to
    ``regs`` (increase or decrease decided against the entry budget of the CTA's size).

    ``each=False``: the warpgroups act together (a collective scope of ``(hi-lo)*128`` threads);
    ``each=True``: every warpgroup runs the operators on its own data (``wgmma`` needs this
    one-warpgroup scope); :func:`warpgroup_index` tells which.
    """
    from tvm.script.ir_builder import tirx as IRB
    import tvm
    outer = scope_or_cta()
    if hi <= lo or hi * 128 > outer.cta_threads:
        raise ValueError(f"role: warpgroups [{lo}, {hi}) do not fit a CTA of {outer.cta_threads} threads")
    tx = outer.tx
    scope = ExecScope("warpgroup", tx, outer.cta_threads, lo, hi, collective=not each)
    with IRB.If(tvm.tirx.And(tx >= lo * 128, tx < hi * 128)):
        with IRB.Then():
            if regs is not None:
                setmaxnreg(regs, regs > entry_registers(outer.cta_threads))
            push_scope(scope)
            try:
                yield
            finally:
                pop_scope()


def warpgroup_index():
    """Which warpgroup of the current role this thread is in (0 for the role's first)."""
    s = scope_or_cta()
    if s.kind != "warpgroup":
        raise RuntimeError(f"warpgroup_index outside a warpgroup role (scope: {s.describe()})")
    return s.tx // 128 - s.lo


def named_barrier(barrier_id, threads: int | None = None):
    """``bar.sync id, threads``: a barrier among ``threads`` (default: the current scope's), a
    multiple of 32; id 0 is ``__syncthreads``'s, so roles use 1..15."""
    from tvm.script import tirx as T
    n = threads if threads is not None else scope_or_cta().threads
    if n % 32:
        raise ValueError(f"named_barrier: {n} threads is not a multiple of 32")
    T.evaluate(T.ptx.bar.sync(T.uint32(barrier_id) if isinstance(barrier_id, int) else T.Cast("uint32", barrier_id),
                              T.uint32(n)))


def warp_sync():
    """``bar.warp.sync`` over the full warp: the warp's lanes meet, and their memory accesses
    before it are ordered before every lane's accesses after it (e.g. before one lane signals for
    the warp)."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.warp_sync())


def named_barrier_arrive(barrier_id, threads: int):
    """``bar.arrive id, threads``: count this scope's threads on barrier ``id`` without waiting
    (the other ``threads`` minus these wait on it with :func:`named_barrier`): a one-way signal,
    e.g. the turn-passing of two warpgroups that take turns."""
    from tvm.script import tirx as T
    if threads % 32:
        raise ValueError(f"named_barrier_arrive: {threads} threads is not a multiple of 32")
    T.evaluate(T.ptx.bar.arrive(T.uint32(barrier_id) if isinstance(barrier_id, int) else T.Cast("uint32", barrier_id),
                                T.uint32(threads)))


def fence_proxy_async(space="shared::cta"):
    """``fence.proxy.async.<space>``: order ordinary (generic-proxy) accesses of ``space`` before
    later async-proxy accesses (TMA, wgmma operands): ``"shared::cta"`` for this thread's shared
    writes, ``"global"`` for global memory a peer or another thread wrote before a signal."""
    from tvm.script import tirx as T
    if space not in ("shared::cta", "shared::cluster", "global"):
        raise ValueError(f"fence_proxy_async: space must be 'shared::cta', 'shared::cluster' or 'global', got {space!r}")
    T.evaluate(T.ptx[f"fence.proxy.async.{space}"]())


@contextlib.contextmanager
def elect_one():
    """One lane of each warp in the scope runs the body (``elect.sync``)."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    s = scope_or_cta()
    with IRB.If(T.cuda.elect_sync()):
        with IRB.Then():
            push_scope(ExecScope("thread", s.tx, s.cta_threads, 0, None, collective=False))
            try:
                yield
            finally:
                pop_scope()


def tma_store_wait(pending: int = 0, pred=None):
    """``cp.async.bulk.wait_group.read pending``: this thread's TMA stores have finished reading
    shared memory (all but ``pending`` bulk groups), so their source tiles may be rewritten.
    ``pred`` selects the thread that issued them."""
    from tvm.script import tirx as T
    with guard(pred):
        T.evaluate(T.ptx["cp.async.bulk.wait_group.read"](pending))


def bulk_wait(pending: int = 0, pred=None):
    """``cp.async.bulk.wait_group pending`` then ``fence.proxy.async.global``: this thread's bulk
    copies and TMA stores (all but ``pending`` groups) have been written — not only read — so a
    signal it releases next covers them.  ``pred`` selects the thread that issued them."""
    from tvm.script import tirx as T
    with guard(pred):
        T.evaluate(T.ptx["cp.async.bulk.wait_group"](pending))
        T.evaluate(T.ptx["fence.proxy.async.global"]())


def dynamic_shared(elements: int, dtype, name="pool", align: int = 1024):
    """A flat tile of ``elements`` in dynamic shared memory (``shared.dyn``, the only kind a CTA may
    hold more than 48 KiB of, and of which a kernel has one allocation): carve operand tiles out
    of it with ``Ax.view(pool, layout, shape, base=offset)``.  ``align`` bytes (1024 suits the
    128-byte swizzle, whose pattern is anchored to absolute addresses)."""
    from tvm.script import tirx as T
    from axe.ops.tensor import Tensor, register_tensor
    buf = T.alloc_buffer((int(elements),), dtype, scope="shared.dyn", align=align)
    return register_tensor(Tensor(buf, S[(int(elements),)], (int(elements),), dtype, "shared", name=name))


_FENCE_SRC = """
__forceinline__ __device__ void axe_fence_regs4(float& a, float& b, float& c, float& d) {
  asm volatile("" : "+f"(a), "+f"(b), "+f"(c), "+f"(d) :: "memory");
}
"""


def fence_registers(t):
    """Pin the float32 register tile ``t`` at this point of the instruction stream (an empty
    ``asm volatile`` with every register as an in-out operand).

    Asynchronous register writers (``wgmma`` accumulators) complete at a wait instruction that
    names no registers, so without this the compiler may read the registers above the wait —
    before the hardware has written them.  Write it right after :func:`wgmma_wait` when the
    accumulator is read next (CUTLASS's ``warpgroup_fence_operand``).
    """
    from tvm.script import tirx as T
    if t.mem != "local" or t.dtype != "float32":
        raise ValueError(f"fence_registers: {t.describe()} is not a float32 register tile")
    buf = t.flat()
    n = int(buf.shape[0])
    if n % 4:
        raise ValueError(f"fence_registers: {n} registers is not a multiple of 4")
    for i in range(0, n, 4):
        T.evaluate(T.cuda.func_call("axe_fence_regs4", *(buf[i + j] for j in range(4)), source_code=_FENCE_SRC))


def wgmma_wait(pending: int = 0):
    """``wgmma.wait_group pending``: block until at most ``pending`` wgmma groups are in flight
    (pair with ``Ax.gemm(..., wait=False)`` to overlap the tensor cores with other work)."""
    from ..schedules.wgmma import emit_wait
    emit_wait(pending)
