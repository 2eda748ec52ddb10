"""TMA (cp.async.bulk.tensor): global→shared completing on an mbarrier, and shared→global
completing through a bulk group.

Preconditions, all from the layout algebra and the same in both directions: the global tensor
groups by its shape into one memory iter per dimension (innermost stride 1) — that is the
tensor map; the shared tile is a tiling ``C ⊗ atom`` (``tile_of``) of the TMA atom: a row-major
box whose inner extent is the swizzle width (32/64/128 bytes, ``Swizzle(b, log2(16/elem), 3)``)
or, unswizzled, the whole row.  One instruction per atom; C places the atoms in shared memory.

A load with ``multicast=mask`` (an int CTA mask of the cluster) writes the tile to the same
CTA-relative shared offset of every CTA in the mask and completes bytes on each one's barrier at
the barrier's offset (``.multicast::cluster``); each CTA of the mask is expected to multicast an
equal slice into the same barrier, so the issuing thread announces ``nbytes * popcount(mask)``.

The store reads shared memory through the async proxy, so the threads that wrote the tile
with ordinary stores (``st.shared``, ``stmatrix``) each run ``fence.proxy.async.shared::cta``
before the barrier that precedes the issuing thread's copies; the issuing thread then commits
the bulk group and waits for its reads (``cp.async.bulk.wait_group.read 0``) before the tile
may be written again.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import LayoutError, S, SwizzledLayout, Swizzle, group, tile_of
from axe.layout.layout import unflatten_index
from ..tensormap import packed_strides
from axe.schedules.emit import guard
from axe.schedules.registry import declining, register

__all__ = ["TmaPlan", "swizzle_mode", "tma_plan"]

_MODES = {1: 32, 2: 64, 3: 128}

#: the L2 promotion every tensor map asks for (bytes): a TMA box row of 64–128 bytes (a 64-deep bf16
#: k-block, a 128-deep fp8 one) then fills its 256-byte L2 line pair from DRAM at once, so the next
#: k-block of the same rows hits L2 instead of opening the DRAM row again (the driver's default is
#: none; ``benchmarks/tma_l2.py`` times both on the same cubins)
L2_PROMOTION = 256


def swizzle_mode(L, elem_bytes: int):
    """TMA swizzle bytes (0, 32, 64, 128) of a shared layout, or a reason string."""
    if not isinstance(L, SwizzledLayout):
        return 0
    sw = L.swizzle
    want_base = (16 // elem_bytes).bit_length() - 1
    if sw.bits in _MODES and sw.base == want_base and sw.shift == 3 and L.axis == "m":
        return _MODES[sw.bits]
    return (f"swizzle {sw} is not a TMA mode for {elem_bytes}-byte elements "
            f"(Swizzle(b, {want_base}, 3) with b in 1..3)")


@dataclass
class TmaPlan:
    box: tuple            # atom shape, outermost first
    swizzle: int
    atoms: list           # (atom multi-index, shared element offset of its origin)
    spec: dict
    nbytes: int
    store: bool = False

    def describe(self) -> str:
        done = "bulk group, wait_group.read" if self.store else "on the barrier"
        return (f"{len(self.atoms)} x cp.async.bulk.tensor.{len(self.box)}d{' store' if self.store else ''} "
                f"box {list(self.box)} swizzle {self.swizzle or 'none'}, {self.nbytes} bytes {done}; "
                f"map {self.spec['param']}")

    def coords(self, region, idx):
        """The instruction's coordinates (innermost first, int32) of atom ``idx`` in ``region``."""
        from tvm.script import tirx as T
        coords = [s + i * b for s, i, b in zip(region.starts, idx, self.box)]
        return [T.int32(c) if isinstance(c, int) else T.Cast("int32", c) for c in reversed(coords)]


def _smem_offset(smem, off):
    """Element offset in ``smem``'s storage of the atom whose origin C places at ``off``."""
    L = smem.layout
    if isinstance(L, SwizzledLayout):
        return L.inner.offset["m"] + off + L.base["m"] + smem.base
    return L.offset["m"] + off + smem.base


#: TMA reads and writes shared memory at 128-byte aligned addresses (the allocations themselves are)
SMEM_ALIGN = 128


def _unaligned(smem, offset, elem_bytes):
    """None if every value the element ``offset`` into ``smem``'s storage may take is a multiple of
    :data:`SMEM_ALIGN` bytes (TVM's modular analysis: ``coeff·k + base``), else why not."""
    import tvm
    if isinstance(offset, int):
        coeff, base = 0, offset
    else:
        m = tvm.sym.Analyzer().modular_set(offset)
        coeff, base = int(m.coeff), int(m.base)
    if (coeff * elem_bytes) % SMEM_ALIGN or (base * elem_bytes) % SMEM_ALIGN:
        return (f"shared {smem.name}: a TMA box starts at element offset {offset} ({coeff}·k + {base} elements of "
                f"{elem_bytes} bytes), not always a multiple of {SMEM_ALIGN} bytes (TMA's shared alignment)")
    return None


def _global_strides(t):
    """Per-dim element strides of the global root tensor (0 for an extent-1 dimension, which has
    no iter), or a reason."""
    root = t.origin
    try:
        g = group(root.layout if not isinstance(root.layout, SwizzledLayout) else root.layout.inner, root.shape)
    except LayoutError as err:
        return str(err)
    strides = []
    for d, blk in enumerate(g.blocks):
        if len(blk) > 1 or (blk and blk[0][2] != "m"):
            return f"global {root.name}: dimension {d} is not one memory iter ({blk})"
        strides.append(blk[0][1] if blk else 0)
    if strides[-1] not in (0, 1):
        return f"global {root.name}: innermost stride {strides[-1]} != 1"
    return strides


@declining()
def tma_plan(call, ctx, store: bool = False):
    """A :class:`TmaPlan` for a global→shared load (``store=False``) or a shared→global store,
    or the reason the operands do not fit the bulk tensor copy."""
    dst, src = call.operands["dst"], call.operands["src"]
    glob, smem = (dst, src) if store else (src, dst)
    role = "dst" if store else "src"
    if ctx.arch < 90:
        return f"TMA needs sm_90+, target is {ctx.target}"
    if store and not (src.mem == "shared" and dst.mem == "global"):
        return f"TMA stores shared→global, not {src.mem}→{dst.mem}"
    if not store and not (src.mem == "global" and dst.mem == "shared"):
        return f"TMA loads global→shared, not {src.mem}→{dst.mem}"
    if glob.origin.tensormap is None:
        return f"{role} {glob.origin.name} has no tensormap parameter (Ax.param(..., tensormap=...))"
    if not store and call.config.get("barrier") is None:
        return "TMA completes on an mbarrier: pass barrier="
    if store and call.config.get("barrier") is not None:
        return "a TMA store completes through a bulk group, not an mbarrier: drop barrier="
    mc = call.config.get("multicast")
    if mc is not None and (store or not isinstance(mc, int) or not 0 < mc < 1 << 16):
        return f"multicast= takes a CTA mask (int in 1..0xffff) on a TMA load, got {mc!r}"
    if dst.shape != src.shape or glob.rank != glob.origin.rank or glob.rank > 5:
        return f"dst shape {list(dst.shape)} and src region {list(src.shape)} must match the global rank (<= 5)"
    strides = _global_strides(glob)
    if isinstance(strides, str):
        return strides
    eb = smem.elem_bytes
    mode = swizzle_mode(smem.layout, eb)
    if isinstance(mode, str):
        return mode
    inner_w = mode // eb if mode else smem.shape[-1]
    if smem.shape[-1] % inner_w or inner_w * eb % 16 or inner_w > 256:
        return f"inner extent {smem.shape[-1]} does not split into TMA rows of {inner_w} elements (16-byte multiple, <= 256)"
    box = tuple(min(e, 256) for e in smem.shape[:-1]) + (inner_w,)
    if any(e % b for e, b in zip(smem.shape, box)):
        return f"tile {list(smem.shape)} is not a whole number of boxes {list(box)}"
    atom = S[box]
    if mode:
        atom = SwizzledLayout(atom, smem.layout.swizzle)
        if prod(box) % atom.swizzle.period:
            return f"box {list(box)} is not a whole number of swizzle periods ({atom.swizzle.period} elements)"
    C = tile_of(smem.layout, smem.shape, atom, box)
    if C is None:
        return f"shared layout {smem.layout} is not a tiling C ⊗ {atom} of the TMA atom over {list(box)}"
    if any(a != "m" for a in C.axes()):
        return f"atom placement {C} leaves the memory axis"
    span = prod(box)
    cshape = tuple(e // b for e, b in zip(smem.shape, box))
    atoms = []
    for x in range(prod(cshape)):
        (c,) = C.map(x)
        atoms.append((unflatten_index(x, cshape), c["m"] * span))
    for _, off in atoms:
        why = _unaligned(smem, _smem_offset(smem, off), eb)
        if why:
            return why
    root = glob.origin
    dims = [int(e) for e in reversed(root.shape)]
    spec = {
        "param": root.tensormap.name, "tensor": root.buffer.name, "dtype": root.dtype,
        "shape": dims,
        # an extent-1 dimension has no iter (stride 0), which the driver rejects: it gets the packed stride
        "strides_bytes": packed_strides(dims, [int(s) * eb for s in reversed(strides[:-1])], eb),
        "box": list(reversed(box)), "elem_strides": [1] * len(box), "swizzle": mode, "oob_fill": "zero",
        "l2_promotion": L2_PROMOTION,
    }
    return TmaPlan(box, mode, atoms, spec, prod(smem.shape) * eb, store)


@register("copy", "tma", "cuda", priority=30,
          requires="global tensor map (one memory iter per dim); shared = tile_of(C, TMA atom) with a TMA swizzle")
class TmaCopy:
    """cp.async.bulk.tensor g2s issued by one thread, expect_tx on ``barrier=``; wait is the caller's."""

    @staticmethod
    def check(call, ctx):
        return tma_plan(call, ctx)

    @staticmethod
    def emit(call, plan, ctx):
        from tvm.script import tirx as T
        from ..sync import barrier_ptr, expect_tx
        dst, src = call.operands["dst"], call.operands["src"]
        bar = call.config["barrier"]
        stage = call.config.get("stage", 0)
        ctx.add_tensormap(plan.spec)
        ptr = barrier_ptr(bar, stage)
        chain = f"cp.async.bulk.tensor.{len(plan.box)}d.shared::cluster.global.mbarrier::complete_tx::bytes"
        mask = call.config.get("multicast")
        extra = ()
        if mask is not None:
            chain += ".multicast::cluster"
            extra = (T.uint16(mask),)
        tmap = src.origin.tensormap
        with guard(call.scope.local_tx() == 0):
            expect_tx(bar, plan.nbytes * (bin(mask).count("1") if mask else 1), stage)
            for idx, off in plan.atoms:
                T.evaluate(T.ptx[chain](dst.flat().ptr_to([_smem_offset(dst, off)]), T.address_of(tmap),
                                        *plan.coords(src, idx), ptr, *extra))


def _scope_barrier(scope):
    """A barrier over the threads of ``scope`` (bar.sync for the CTA, bar.warp.sync for a warp),
    or None where the scope has no barrier the schedule can name."""
    from tvm.script import tirx as T
    if scope.kind in ("kernel", "cluster", "cta"):
        return lambda: T.evaluate(T.tvm_storage_sync("shared"))
    if scope.threads == 32 and not (scope.kind == "warp" and scope.collective and scope.hi is not None
                                    and scope.hi - scope.lo > 1):
        return lambda: T.evaluate(T.cuda.warp_sync())
    return None


@register("copy", "tma_store", "cuda", priority=30,
          requires="global tensor map (one memory iter per dim); shared = tile_of(C, TMA atom) with a TMA swizzle")
class TmaStore:
    """cp.async.bulk.tensor s2g: every thread of the scope fences (``fence.proxy.async``) its
    ordinary shared stores and the scope synchronises; one thread issues the copies, commits the
    bulk group and, unless ``wait=False``, waits for the tile's reads
    (``cp.async.bulk.wait_group.read 0``), after which the scope synchronises again so the tile
    may be rewritten.  ``fence=False`` leaves the fence and the first barrier to the caller."""

    @staticmethod
    def check(call, ctx):
        plan = tma_plan(call, ctx, store=True)
        if isinstance(plan, str):
            return plan
        if _scope_barrier(call.scope) is None and (call.config.get("fence", True) or call.config.get("wait", True)):
            return (f"the {call.scope.describe()} scope has no barrier this schedule can emit; "
                    "pass fence=False, wait=False and synchronise around the store yourself")
        return plan

    @staticmethod
    def emit(call, plan, ctx):
        from tvm.script import tirx as T
        dst, src = call.operands["dst"], call.operands["src"]
        ctx.add_tensormap(plan.spec)
        barrier = _scope_barrier(call.scope)
        if call.config.get("fence", True):
            T.evaluate(T.ptx["fence.proxy.async.shared::cta"]())
            barrier()
        chain = f"cp.async.bulk.tensor.{len(plan.box)}d.global.shared::cta.tile.bulk_group"
        tmap = dst.origin.tensormap
        wait = call.config.get("wait", True)
        with guard(call.scope.local_tx() == 0):
            for idx, off in plan.atoms:
                T.evaluate(T.ptx[chain](T.address_of(tmap), *plan.coords(dst, idx),
                                        src.flat().ptr_to([_smem_offset(src, off)])))
            T.evaluate(T.ptx["cp.async.bulk.commit_group"]())
            if wait:
                T.evaluate(T.ptx["cp.async.bulk.wait_group.read"](0))
        if wait:
            barrier()
