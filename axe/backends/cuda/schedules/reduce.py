"""Cross-thread reductions: warp shuffles (shfl.sync.bfly) and CTA reductions through shared memory.

From the paired dims of src and dst (dst broadcast over the reduced dims): each thread first
reduces its registers; reduced dims on ``lane`` (or ``tx`` within 32) are combined with XOR
shuffles whose masks are the iter's stride times powers of two; reduced dims reaching across
warps go through a shared scratch, one partial per warp.
"""

from __future__ import annotations

import contextlib
from math import prod

from axe.schedules.emit import guard, loops, mem_offset
from axe.schedules.generic import emit_thread_reduce, reduce_combine, reduce_plan
from axe.schedules.registry import register

__all__ = []


def _pow2(n):
    return n & (n - 1) == 0


def _lane_masks(plan):
    """XOR masks (in lanes) for the reduced thread dims inside a warp, plus warp-level dims."""
    masks, warp_dims = [], []
    for i in plan.cross:
        d = plan.dims[i]
        a, s, e = d.axis(0), d.stride(0), d.extent
        if not (_pow2(s) and _pow2(e)):
            return f"reduced thread dim {e}:{s}@{a} is not a power of two", None
        if a == "lane" or (a == "tx" and s * e <= 32):
            masks += [s << k for k in range(e.bit_length() - 1)]
        elif a == "tx" and s < 32:
            inner = 32 // s
            masks += [s << k for k in range(inner.bit_length() - 1)]
            warp_dims.append((e // inner, s * inner // 32))
        elif a == "tx":
            warp_dims.append((e, s // 32))
        elif a == "warp":
            warp_dims.append((e, s))
        else:
            return f"reduced dim on {a} is not a lane/tx/warp axis", None
    return masks, warp_dims


def _check(call, ctx, want_warps: bool):
    plan = reduce_plan(call)
    if isinstance(plan, str):
        return plan
    if not plan.cross:
        return "no reduced dim lies on a thread axis (in_thread suffices)"
    if plan.dist.predicate is not None:
        return "src does not cover every thread of the scope (shuffles need full warps)"
    masks, warp_dims = _lane_masks(plan)
    if isinstance(masks, str):
        return masks
    dst = call.operands["dst"]
    if dst.mem != "local":
        return f"dst {dst.name} is in {dst.mem}; the reduce result lands in registers"
    if want_warps != bool(warp_dims):
        return ("reduced dims reach across warps (needs cta_smem)" if warp_dims
                else "every reduced dim lies within a warp (warp_shuffle suffices)")
    plan.masks, plan.warp_dims = masks, warp_dims
    return plan


def _kept_loops(plan):
    return [i for i in plan.dist.loop_dims if i not in plan.reduced]


@contextlib.contextmanager
def _kept_elements(plan, dst):
    """Loop over this thread's kept elements: yields (row-major kept index, dst offset)."""
    kept = _kept_loops(plan)
    with loops([plan.dims[i].extent for i in kept]) as kv:
        digits = dict(plan.dist.thread_dims)
        digits.update(zip(kept, kv))
        flat = 0
        for i, v in zip(kept, kv):
            flat = flat * plan.dims[i].extent + v
        yield flat, mem_offset(dst, plan.dims, 1, digits)


def _shuffle(call, plan):
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    dst = call.operands["dst"]
    kind = call.attrs["kind"]
    kept = _kept_loops(plan)
    with loops([plan.dims[i].extent for i in kept]) as kv:
        digits = dict(plan.dist.thread_dims)
        digits.update(zip(kept, kv))
        off = mem_offset(dst, plan.dims, 1, digits)
        for m in plan.masks:
            v = dst.flat()[off]
            other = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), v, m, 32)
            IRB.buffer_store(dst.flat(), reduce_combine(kind, v, other), [off])


@register("reduce", "warp_shuffle", "cuda", priority=10,
          requires="reduced dims on lanes (power-of-two extents and strides) covering full warps; dst in registers")
class WarpShuffleReduce:
    """In-register partials, then shfl.sync.bfly over the reduced lane dims; every lane gets the result."""

    @staticmethod
    def check(call, ctx):
        return _check(call, ctx, want_warps=False)

    @staticmethod
    def emit(call, plan, ctx):
        emit_thread_reduce(call, plan)
        _shuffle(call, plan)


@register("reduce", "cta_smem", "cuda", priority=5,
          requires="reduced dims across warps; kept dims in registers; a shared scratch of warps x kept")
class CtaSharedReduce:
    """Warp shuffles, then lane 0 of each warp writes its partial to shared memory, the CTA
    syncs and every thread combines the warps' partials."""

    @staticmethod
    def check(call, ctx):
        plan = _check(call, ctx, want_warps=True)
        if isinstance(plan, str):
            return plan
        if any(i not in plan.reduced for i in plan.dist.thread_dims):
            return "kept dims on threads are not supported by cta_smem (keep them in registers)"
        if len(plan.warp_dims) != 1 or plan.warp_dims[0][1] != 1:
            return f"warp-level reduced dims {plan.warp_dims} are not one contiguous warp range"
        return plan

    @staticmethod
    def emit(call, plan, ctx):
        from tvm.script import tirx as T
        from tvm.script.ir_builder import tirx as IRB
        dst = call.operands["dst"]
        kind = call.attrs["kind"]
        emit_thread_reduce(call, plan)
        _shuffle(call, plan)
        nw = plan.warp_dims[0][0]
        kept = _kept_loops(plan)
        nk = prod(plan.dims[i].extent for i in kept)
        scratch = T.alloc_buffer((nk * nw,), dst.dtype, scope="shared")
        tx = call.scope.local_tx()
        warp, lane = tx // 32, tx % 32
        T.evaluate(T.tvm_storage_sync("shared"))
        with _kept_elements(plan, dst) as (flat, off):
            with guard(lane == 0):
                IRB.buffer_store(scratch, dst.flat()[off], [flat * nw + warp])
        T.evaluate(T.tvm_storage_sync("shared"))
        with _kept_elements(plan, dst) as (flat, off):
            IRB.buffer_store(dst.flat(), scratch[flat * nw], [off])
            for w in range(1, nw):
                IRB.buffer_store(dst.flat(), reduce_combine(kind, dst.flat()[off], scratch[flat * nw + w]), [off])
        T.evaluate(T.tvm_storage_sync("shared"))
