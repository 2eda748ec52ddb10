"""TMA (cp.async.bulk.tensor) global→shared, completing on an mbarrier.

Preconditions, all from the layout algebra: the global tensor groups by its shape into one
memory iter per dimension (innermost stride 1) — that is the tensor map; the shared tile is a
tiling ``C ⊗ atom`` (``tile_of``) of the TMA atom: a row-major box whose inner extent is the
swizzle width (32/64/128 bytes, ``Swizzle(b, log2(16/elem), 3)``) or, unswizzled, the whole
row.  One instruction per atom; C places the atoms in shared memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import S, SwizzledLayout, Swizzle, group, tile_of
from axe.layout.layout import unflatten_index
from axe.schedules.emit import guard
from axe.schedules.registry import register

__all__ = ["TmaPlan", "swizzle_mode"]

_MODES = {1: 32, 2: 64, 3: 128}


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

    def describe(self) -> str:
        return (f"{len(self.atoms)} x cp.async.bulk.tensor.{len(self.box)}d box {list(self.box)} "
                f"swizzle {self.swizzle or 'none'}, {self.nbytes} bytes on the barrier; map {self.spec['param']}")


def _global_strides(t):
    """Per-dim element strides of the global root tensor, or a reason."""
    root = t.origin
    try:
        g = group(root.layout if not isinstance(root.layout, SwizzledLayout) else root.layout.inner, root.shape)
    except ValueError as err:
        return str(err)
    strides = []
    for d, blk in enumerate(g.blocks):
        if len(blk) > 1 or (blk and blk[0][2] != "m"):
            return f"global {root.name}: dimension {d} is not one memory iter ({blk})"
        strides.append(blk[0][1] if blk else 0)
    if strides[-1] not in (0, 1):
        return f"global {root.name}: innermost stride {strides[-1]} != 1"
    return strides


def _plan(call, ctx):
    dst, src = call.operands["dst"], call.operands["src"]
    if ctx.arch < 90:
        return f"TMA needs sm_90+, target is {ctx.target}"
    if not (src.mem == "global" and dst.mem == "shared"):
        return f"TMA loads global→shared, not {src.mem}→{dst.mem}"
    if src.origin.tensormap is None:
        return f"src {src.origin.name} has no tensormap parameter (Ax.param(..., tensormap=...))"
    if call.config.get("barrier") is None:
        return "TMA completes on an mbarrier: pass barrier="
    if dst.shape != src.shape or src.rank != src.origin.rank or src.rank > 5:
        return f"dst shape {list(dst.shape)} and src region {list(src.shape)} must match the global rank (<= 5)"
    strides = _global_strides(src)
    if isinstance(strides, str):
        return strides
    eb = dst.elem_bytes
    mode = swizzle_mode(dst.layout, eb)
    if isinstance(mode, str):
        return mode
    inner_w = mode // eb if mode else dst.shape[-1]
    if dst.shape[-1] % inner_w or inner_w * eb % 16 or inner_w > 256:
        return f"inner extent {dst.shape[-1]} does not split into TMA rows of {inner_w} elements (16-byte multiple, <= 256)"
    box = tuple(min(e, 256) for e in dst.shape[:-1]) + (inner_w,)
    if any(e % b for e, b in zip(dst.shape, box)):
        return f"tile {list(dst.shape)} is not a whole number of boxes {list(box)}"
    atom = S[box]
    if mode:
        atom = SwizzledLayout(atom, dst.layout.swizzle)
        if prod(box) % atom.swizzle.period:
            return f"box {list(box)} is not a whole number of swizzle periods ({atom.swizzle.period} elements)"
    C = tile_of(dst.layout, dst.shape, atom, box)
    if C is None:
        return f"shared layout {dst.layout} is not a tiling C ⊗ {atom} of the TMA atom over {list(box)}"
    if any(a != "m" for a in C.axes()):
        return f"atom placement {C} leaves the memory axis"
    span = prod(box)
    cshape = tuple(e // b for e, b in zip(dst.shape, box))
    atoms = []
    for x in range(prod(cshape)):
        (c,) = C.map(x)
        atoms.append((unflatten_index(x, cshape), c["m"] * span))
    root = src.origin
    spec = {
        "param": root.tensormap.name, "tensor": root.buffer.name, "dtype": root.dtype,
        "shape": [int(e) for e in reversed(root.shape)],
        "strides_bytes": [int(s) * eb for s in reversed(strides[:-1])],
        "box": list(reversed(box)), "elem_strides": [1] * len(box), "swizzle": mode, "oob_fill": "zero",
    }
    return TmaPlan(box, mode, atoms, spec, prod(dst.shape) * eb)


@register("copy", "tma", "cuda", priority=30,
          requires="global tensor map (one memory iter per dim); shared = tile_of(C, TMA atom) with a TMA swizzle")
class TmaCopy:
    """cp.async.bulk.tensor g2s issued by one thread, expect_tx on ``barrier=``; wait is the caller's."""

    @staticmethod
    def check(call, ctx):
        return _plan(call, ctx)

    @staticmethod
    def emit(call, plan, ctx):
        from tvm.script import tirx as T
        from ..sync import expect_tx
        dst, src = call.operands["dst"], call.operands["src"]
        bar = call.config["barrier"]
        stage = call.config.get("stage", 0)
        ctx.add_tensormap(plan.spec)
        ptr = bar.ptr(stage) if hasattr(bar, "stages") else bar.ptr()
        chain = f"cp.async.bulk.tensor.{len(plan.box)}d.shared::cluster.global.mbarrier::complete_tx::bytes"
        tmap = src.origin.tensormap
        with guard(call.scope.local_tx() == 0):
            expect_tx(bar, plan.nbytes, stage)
            for idx, off in plan.atoms:
                coords = [s + i * b for s, i, b in zip(src.starts, idx, plan.box)]
                coords = [T.int32(c) if isinstance(c, int) else T.Cast("int32", c) for c in reversed(coords)]
                base = dst.layout.base["m"] if isinstance(dst.layout, SwizzledLayout) else 0
                soff = dst.layout.inner.offset["m"] + off + base if isinstance(dst.layout, SwizzledLayout) \
                    else dst.layout.offset["m"] + off
                soff = soff + dst.base
                T.evaluate(T.ptx[chain](dst.flat().ptr_to([soff]), T.address_of(tmap), *coords, ptr))
