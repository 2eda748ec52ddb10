"""Bulk copies (``cp.async.bulk``), chosen when asked for (``schedule="bulk"``) or when nothing
else fits — like the vector copies it writes exactly the region, so a region past a tensor's end
is the caller's to avoid (TMA clips, and is preferred where a tensor map exists).  One thread
hands the copy engine a
shared tile whose memory image is the destination's, byte for byte — a contiguous run laid out
by the same layout on both sides (the same swizzle, anchored alike) — and the engine writes it to
global memory asynchronously, this GPU's or a peer's (a distributed tensor sliced at a device
index: the address goes through the mesh's peer table).  No tensor map is involved, so a peer's
buffer needs none.

The tile is read through the async proxy, so the threads that wrote it fence
(``fence.proxy.async.shared::cta``) before the barrier that precedes the issuing thread; the
issuing thread commits the bulk group, and before the tile is rewritten waits for its reads
(``cp.async.bulk.wait_group.read``) — both left to the caller with ``fence=False, wait=False``
as for the TMA store.  Before another GPU may read what was written, the issuing thread waits
for the group's completion (``cp.async.bulk.wait_group 0``) and then releases a signal.

The other direction, global → shared (``cp.async.bulk.shared::cluster.global.mbarrier``), loads
such an image back (this GPU's memory) and completes its bytes on ``barrier=`` (``stage=``),
which the caller waits on, as for a TMA load.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import SwizzledLayout, equivalent
from axe.schedules.emit import guard, is_zero
from axe.schedules.registry import add_schedule

from .tma import _scope_barrier
from .vector import NO_SIGNAL, on_this_gpu

__all__ = ["BulkPlan", "contiguous_image"]


@dataclass
class BulkPlan:
    nbytes: int
    gpu: object = None
    load: bool = False

    def describe(self) -> str:
        if self.load:
            return f"1 x cp.async.bulk of {self.nbytes} contiguous bytes, global → shared, on the barrier"
        peer = "" if self.gpu is None else f" in the memory of GPU {self.gpu} (peer address over NVLink)"
        return f"1 x cp.async.bulk of {self.nbytes} contiguous bytes, shared → global{peer}; bulk group"


def _parts(t):
    L = t.layout
    inner, sw, base = (L.inner, L.swizzle, L.base["m"]) if isinstance(L, SwizzledLayout) else (L, None, 0)
    return inner, sw, base


def contiguous_image(t) -> str | None:
    """None when ``t``'s elements fill one contiguous run of memory (its shard, sorted by stride,
    is dense and the replicas are empty); else the reason."""
    inner, _, _ = _parts(t)
    its = sorted((it for it in inner.shard if it[0] > 1), key=lambda it: it[1])
    if inner.replica or any(a != "m" or s < 0 for _, s, a in its):
        return f"{t.name}: {inner} is not a plain memory layout"
    w = 1
    for e, s, _ in its:
        if s != w:
            return f"{t.name}: {inner} leaves gaps (stride {s} where {w} is next)"
        w *= e
    return None


def _check(call, ctx):
    if ctx.arch < 90:
        return f"bulk copies need sm_90+, target is {ctx.target}"
    if call.config.get("signal") is not None:
        return NO_SIGNAL
    local, remote = on_this_gpu(call)
    if remote is None:
        return local
    dst, src = local.operands["dst"], local.operands["src"]
    load = src.mem == "global" and dst.mem == "shared"
    if not (load or (src.mem == "shared" and dst.mem == "global")):
        return f"bulk copies go shared → global or global → shared, not {src.mem} → {dst.mem}"
    if load and remote:
        return "a bulk load reads this GPU's memory"
    if remote and ctx.mesh is None:
        return "dst is on a peer GPU but the kernel declares no mesh (Ax.mesh)"
    if load != (call.config.get("barrier") is not None):
        return "a bulk load completes on barrier=; a bulk store through a bulk group (no barrier=)"
    if tuple(e for e in dst.shape if e != 1) != tuple(e for e in src.shape if e != 1):
        return f"dst shape {list(dst.shape)} differs from src shape {list(src.shape)}"
    for t in (dst, src):
        why = contiguous_image(t)
        if why:
            return why
    (di, dsw, dbase), (si, ssw, sbase) = _parts(dst), _parts(src)
    if dsw != ssw:
        return f"the swizzles differ ({dsw} and {ssw}): the shared image is not the global one"
    n = prod(src.shape)
    if not _same_order(dst, src, tuple(e for e in dst.shape if e != 1) or (1,)):
        return f"dst layout {dst.layout} and src layout {src.layout} place the elements differently"
    period = dsw.period if dsw is not None else 1
    for t, inner, base in ((dst, di, dbase), (src, si, sbase)):
        off = inner.offset["m"] + base
        if off % max(period, 16 // t.elem_bytes):
            return f"{t.name}: offset {off} is not a multiple of {max(period, 16 // t.elem_bytes)} elements"
        if not is_zero(t.base) and not _provably_multiple(t.base, max(period, 16 // t.elem_bytes)):
            return f"{t.name}: symbolic offset {t.base} is not provably a multiple of {max(period, 16 // t.elem_bytes)}"
    nbytes = n * src.elem_bytes
    if nbytes % 16:
        return f"{nbytes} bytes is not a multiple of 16"
    if load:
        return BulkPlan(nbytes, load=True)
    if _scope_barrier(call.scope) is None and (call.config.get("fence", True) or call.config.get("wait", True)):
        return f"the {call.scope.describe()} scope has no barrier this schedule can emit; pass fence=False, wait=False"
    return BulkPlan(nbytes, remote.get("dst"))


def _same_order(dst, src, shape) -> bool:
    """Both inner layouts map every element of ``shape`` to the same memory offset (their
    offsets aside); regrouped by the common shape first."""
    from axe.layout import Layout, LayoutError, group
    try:
        a = group(Layout(_parts(dst)[0].shard, (), {}), shape).layout
        b = group(Layout(_parts(src)[0].shard, (), {}), shape).layout
    except LayoutError:     # no common grouping: not the same order
        return False
    return equivalent(a, b)


def _provably_multiple(x, k) -> bool:
    import tvm
    import tvm.sym
    return tvm.sym.Analyzer().can_prove(tvm.tirx.floormod(x, k) == 0)


def _start(t):
    inner, _, base = _parts(t)
    return inner.offset["m"] + base + t.base


def _emit(call, plan, ctx):
    from tvm.script import tirx as T
    local, _ = on_this_gpu(call)
    dst, src = local.operands["dst"], local.operands["src"]
    if plan.load:
        from ..sync import barrier_ptr as bar_ptr, expect_tx
        bar, stage = call.config["barrier"], call.config.get("stage", 0)
        with guard(call.scope.local_tx() == 0):
            expect_tx(bar, plan.nbytes, stage)
            T.evaluate(T.ptx["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"](
                dst.flat().ptr_to([_start(dst)]), src.flat().ptr_to([_start(src)]), plan.nbytes, bar_ptr(bar, stage)))
        return
    barrier = _scope_barrier(call.scope)
    if call.config.get("fence", True):
        T.evaluate(T.ptx["fence.proxy.async.shared::cta"]())
        barrier()
    ptr = dst.flat().ptr_to([_start(dst)])
    if plan.gpu is not None:
        from ..peer import remote_ptr
        ptr = remote_ptr(ptr, plan.gpu, ctx.mesh)
    wait = call.config.get("wait", True)
    with guard(call.scope.local_tx() == 0):
        T.evaluate(T.ptx["cp.async.bulk.global.shared::cta.bulk_group"](
            ptr, src.flat().ptr_to([_start(src)]), plan.nbytes))
        T.evaluate(T.ptx["cp.async.bulk.commit_group"]())
        if wait:
            T.evaluate(T.ptx["cp.async.bulk.wait_group.read"](0))
    if wait:
        barrier()


add_schedule("copy", "bulk", "cuda", 5, "shared ↔ global (a store may go to a peer's memory) with the same "
             "contiguous memory image on both sides", devices=True, check=_check, emit=_emit)
