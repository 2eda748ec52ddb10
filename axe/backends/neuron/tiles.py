"""Where an axe tensor's elements sit in NKI terms: partition/free boxes of on-chip tiles, and
index expressions of HBM regions.

An on-chip tensor (SBUF or PSUM) is one NKI array ``name[P, F]``; its Axe layout maps the
logical 2-D shape to the axes ``P`` and ``F``.  :func:`blocks` cuts the logical shape into
rectangles each of which is one box ``name[p0:p0+n, f0:f0+e]`` — the partition iter of the
layout is innermost in its dimension (so consecutive rows take consecutive partitions) and the
other dimension is contiguous on ``F``; outer iters of the partition dimension repeat the box
at other free offsets.  Law: the element (r, c) of the tensor is ``name[p, f]`` of the one
block containing it, with ``p = p0 + (r_dp - lo)`` and ``f = f0 + r_df``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from axe.layout import LayoutError, SwizzledLayout, group

from .emit import TargetError

__all__ = ["Block", "blocks", "box_text", "find_box", "ONCHIP", "onchip_kind", "nki_name", "var_name", "py_expr", "row_major_strides"]

ONCHIP = ("sbuf", "psum")


def onchip_kind(t) -> str | None:
    """"sbuf", "psum" or None (an HBM tensor, or GPU memory)."""
    return t.mem if t.mem in ONCHIP else None


def var_name(name) -> str:
    """The NKI variable for a TIR buffer name (a parameter ``A_`` is the kernel argument ``A``)."""
    name = str(name)
    return name[:-1] if name.endswith("_") and len(name) > 1 else name


def nki_name(t) -> str:
    """The NKI variable of the tensor's storage (views share their root's name)."""
    return var_name(t.buffer.name)


@dataclass(frozen=True)
class Block:
    """Rows ``[lo, lo+n)`` of logical dimension ``dp`` (held on partitions ``[p0, p0+n)``) by the
    whole other dimension ``df`` (``cols`` elements on free offsets ``[f0, f0+cols)``)."""

    dp: int
    lo: int
    n: int
    p0: int
    f0: int
    cols: int


def _two_d(t):
    if t.rank != 2:
        raise LayoutError(f"{t.describe()}: on-chip tiles are 2-D (rank {t.rank})")
    return t.shape


def blocks(t) -> list[Block]:
    """The boxes of on-chip tensor ``t`` (see the module law); LayoutError naming the iter when
    its layout is not of that form."""
    L = t.layout.inner if isinstance(t.layout, SwizzledLayout) else t.layout
    if isinstance(t.layout, SwizzledLayout):
        raise LayoutError(f"{t.describe()}: swizzles are a GPU shared-memory construct; SBUF/PSUM tiles are not swizzled")
    if not (isinstance(t.base, int) and t.base == 0):
        raise LayoutError(f"{t.describe()}: a symbolic offset on an on-chip tile (slice SBUF/PSUM tiles with constants)")
    shape = _two_d(t)
    g = group(L, shape).blocks
    for d, its in enumerate(g):
        for it in its:
            if it.axis not in ("P", "F") and it.extent > 1:
                raise LayoutError(f"{t.describe()}: iter {it} of dim {d} is on axis {it.axis}; on-chip tiles live on P and F")
    p_iters = [(d, i) for d, its in enumerate(g) for i, it in enumerate(its) if it.axis == "P" and it.extent > 1]
    if len(p_iters) > 1:
        raise LayoutError(f"{t.describe()}: {len(p_iters)} iters on P; a tile has one partition iter")
    if p_iters:
        dp, i = p_iters[0]
        if i != len(g[dp]) - 1 or g[dp][i].stride != 1:
            raise LayoutError(f"{t.describe()}: the partition iter {g[dp][i]} must be the innermost iter of dim {dp} "
                              "with stride 1 (consecutive rows on consecutive partitions)")
        n = g[dp][i].extent
    else:
        dp, n = (0, 1) if shape[0] == 1 else (1, 1)
    df = 1 - dp
    cols, stride = 1, None
    for it in reversed(g[df]):
        if it.extent == 1:
            continue
        if it.axis != "F" or it.stride != cols:
            raise LayoutError(f"{t.describe()}: dim {df} must be contiguous on F (iter {it})")
        cols *= it.extent
    outer = [it for it in (g[dp][:-1] if p_iters else g[dp]) if it.extent > 1]
    for it in outer:
        if it.axis != "F":
            raise LayoutError(f"{t.describe()}: outer iter {it} of dim {dp} must be on F")
    p0, f0 = L.offset["P"], L.offset["F"]
    out = []
    for digits in product(*[range(it.extent) for it in outer]):
        lo, w = 0, n
        for dgt, it in zip(reversed(digits), reversed(outer)):
            lo += dgt * w
            w *= it.extent
        off = sum(dgt * it.stride for dgt, it in zip(digits, outer))
        out.append(Block(dp, lo, n, p0, f0 + off, cols))
    return sorted(out, key=lambda b: b.lo)


def find_box(t, rect):
    """``(name[pa:pb, fa:fb] text, partition dim)`` for the logical rectangle
    ``rect = ((r0, nr), (c0, nc))`` of ``t``, which must lie inside one block."""
    for b in blocks(t):
        (a0, an), (c0, cn) = rect[b.dp], rect[1 - b.dp]
        if b.lo <= a0 and a0 + an <= b.lo + b.n and c0 + cn <= b.cols:
            p = b.p0 + a0 - b.lo
            f = b.f0 + c0
            return box_text(nki_name(t), p, an, f, cn), b.dp
    raise LayoutError(f"{t.describe()}: region {rect} spans several partition blocks")


def row_major_strides(shape) -> tuple:
    """Strides of a row-major array of ``shape`` (the last dim contiguous)."""
    strides, acc = [], 1
    for e in reversed(shape):
        strides.append(acc)
        acc *= e
    return tuple(reversed(strides))


def box_text(name, p, n, f, m) -> str:
    return f"{name}[{p}:{p + n}, {f}:{f + m}]"


def py_expr(e) -> str:
    """A TIR integer expression (or int) as Python source over the kernel's loop variables
    (:class:`~.emit.TargetError` for an expression NKI has no form of)."""
    import tvm
    tx = tvm.tirx
    if isinstance(e, int):
        return str(e)
    if isinstance(e, tx.IntImm):
        return str(int(e))
    if isinstance(e, tx.Var):
        return e.name
    ops = {tx.Add: "+", tx.Sub: "-", tx.Mul: "*", tx.FloorDiv: "//", tx.FloorMod: "%"}
    for cls, sym in ops.items():
        if isinstance(e, cls):
            return f"({py_expr(e.a)} {sym} {py_expr(e.b)})"
    if isinstance(e, (tx.Min, tx.Max)):
        return f"{'min' if isinstance(e, tx.Min) else 'max'}({py_expr(e.a)}, {py_expr(e.b)})"
    raise TargetError(f"index expression {e} ({type(e).__name__}) has no NKI form")
