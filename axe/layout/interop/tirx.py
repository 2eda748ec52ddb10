"""Conversion between Axe layouts and TVM's ``tvm.tirx.layout`` (``TileLayout``, ``ComposeLayout``).

TVM is imported inside the functions, never at module import.

Axis names: TVM spells three of axe's thread axes differently (``lane`` ↔ ``laneid``,
``warp`` ↔ ``warpid``, ``warpgroup`` ↔ ``wgid``); every other name is passed through as is
(TVM registers an unknown name on first use, although its layout operations reject axes
without a registered thread attribute, e.g. ``gpuid``; see docs/tirx-differences.md).

Swizzles: TVM's ``ComposeLayout(per_element, swizzle_len, atom_len, tile, swizzle_inner=True)``
is ``Swizzle(B=swizzle_len, M=per_element, S=atom_len) ∘ tile`` on the memory axis, i.e. axe's
``SwizzledLayout(tile, Swizzle(swizzle_len, per_element, atom_len))``.
"""

from __future__ import annotations

from ..coord import MEMORY, ZERO, Coord
from ..group import LayoutError
from ..iters import Iter
from ..layout import Layout
from ..swizzle import Swizzle, SwizzledLayout

__all__ = ["to_tirx", "from_tirx", "tvm_axis_name", "axe_axis_name", "TirxConversionError"]

_TO_TVM = {"lane": "laneid", "warp": "warpid", "warpgroup": "wgid"}
_FROM_TVM = {v: k for k, v in _TO_TVM.items()}


class TirxConversionError(LayoutError):
    """A layout that the other side cannot express (the message names it and the condition)."""


def tvm_axis_name(axis: str) -> str:
    """TVM's name of the axe axis ``axis``; ``axe_axis_name(tvm_axis_name(a)) == a``.

    Raises when ``axis`` is itself one of TVM's spellings of a different axe axis (``laneid``,
    ``warpid``, ``wgid``), which would make the conversion ambiguous.
    """
    if axis in _FROM_TVM:
        raise TirxConversionError(f"axe axis {axis!r} collides with TVM's name for axe's "
                                  f"{_FROM_TVM[axis]!r}; rename it")
    return _TO_TVM.get(axis, axis)


def axe_axis_name(name: str) -> str:
    """axe's name of the TVM axis ``name``; ``tvm_axis_name(axe_axis_name(n)) == n``.

    Raises when ``name`` is axe's spelling of an axis TVM names differently (``lane``,
    ``warp``, ``warpgroup`` registered on the TVM side by hand).
    """
    if name in _TO_TVM:
        raise TirxConversionError(f"TVM axis {name!r} collides with axe's name for TVM's "
                                  f"{_TO_TVM[name]!r}; rename it")
    return _FROM_TVM.get(name, name)


def _tvm_iters(iters):
    from tvm.tirx.layout import Axis, Iter as TIter
    return [TIter(e, s, Axis.get(tvm_axis_name(a))) for e, s, a in iters]


def _tile_layout(L: Layout, offset: Coord):
    from tvm.tirx.layout import Axis, TileLayout
    off = {Axis.get(tvm_axis_name(a)): v for a, v in offset.items()}
    return TileLayout.from_iters(_tvm_iters(L.shard), _tvm_iters(L.replica), off)


def to_tirx(L):
    """The ``tvm.tirx.layout`` value with the same induced map as ``L``.

    A :class:`Layout` becomes a ``TileLayout`` iter for iter (shard order kept, replica in
    axe's sorted order, zero offset entries absent), so ``from_tirx(to_tirx(L)) == L``.  A
    :class:`SwizzledLayout` on the memory axis becomes ``ComposeLayout(M, B, S, to_tirx(inner))``;
    TVM has no offset after the swizzle, so a non-zero ``base`` is folded into the inner
    offset where that keeps the map (base components off the swizzled axis, and a multiple of
    the swizzle's period on it), and is an error otherwise.  Law: TVM's ``apply`` of the result
    equals the replica-0 point ``f_D(x) + O`` of ``L`` (swizzled on m) for every x.
    """
    if isinstance(L, SwizzledLayout):
        return _compose(L)
    if not isinstance(L, Layout):
        raise TypeError(f"to_tirx: expected an axe Layout or SwizzledLayout, got {L!r}")
    return _tile_layout(L, L.offset)


def _compose(L: SwizzledLayout):
    from tvm.tirx.layout import ComposeLayout
    if L.axis != MEMORY:
        raise TirxConversionError(f"to_tirx({L}): the swizzle acts on axis {L.axis!r}; TVM's "
                                  "ComposeLayout swizzles only the memory axis m")
    moved = L.base[L.axis]
    if moved % L.swizzle.period:
        raise TirxConversionError(
            f"to_tirx({L}): base {moved} on {L.axis} after the swizzle is not a multiple of "
            f"{L.swizzle}'s period {L.swizzle.period}, so it cannot move inside the swizzle "
            "(TVM's ComposeLayout has no offset after its swizzle)")
    inner = _tile_layout(L.inner, L.inner.offset + L.base)
    B, M, S = L.swizzle
    return ComposeLayout(M, B, S, inner, True)


def _const(x, what: str, T) -> int:
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    v = getattr(x, "value", None)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise TirxConversionError(f"from_tirx({T}): {what} {x} is not a constant integer; "
                              "axe layouts have integer extents, strides and offsets")


def _axe_iters(iters, T, part: str) -> list[Iter]:
    out = []
    for k, it in enumerate(iters):
        e = _const(it.extent, f"{part} iter {k} extent", T)
        s = _const(it.stride, f"{part} iter {k} stride", T)
        a = axe_axis_name(str(it.axis.name))
        if s == 0:
            if e == 1 or part == "replica":
                # same map: an extent-1 iter contributes 0 whatever its stride, and a stride-0
                # replica contributes only the point 0
                if part == "shard":
                    out.append(Iter(1, 1, a))
                continue
            raise TirxConversionError(
                f"from_tirx({T}): shard iter {k} ({e}:0@{a}) has stride 0 (a broadcast); "
                "an Axe iter's stride is non-zero")
        out.append(Iter(e, s, a))
    return out


def from_tirx(T):
    """The axe layout with the same induced map as TVM's ``T``.

    ``TileLayout`` → :class:`Layout` iter for iter (zero offset entries dropped; an empty
    shard becomes ``S[1:1]``; a stride-0 iter is dropped from the replica, and kept with
    stride 1 in the shard when its extent is 1), so ``to_tirx(from_tirx(T))`` equals ``T``
    up to those rewrites and the replica's order.  ``ComposeLayout`` with ``swizzle_inner``
    → :class:`SwizzledLayout` (base 0).  Raises :class:`TirxConversionError`, naming ``T``
    and the condition, for symbolic extents/strides/offsets, stride-0 shard iters of extent
    > 1, and ``swizzle_inner=False`` (a swizzle of the input index, which axe does not model).
    """
    from tvm.tirx.layout import ComposeLayout, TileLayout
    if isinstance(T, ComposeLayout):
        if not bool(T.swizzle_inner):
            raise TirxConversionError(
                f"from_tirx({T}): swizzle_inner=False swizzles the input index before the "
                "tile layout; axe's SwizzledLayout swizzles the output address only")
        sw = Swizzle(int(T.swizzle_len), int(T.per_element), int(T.atom_len))
        return SwizzledLayout(from_tirx(T.tile_layout), sw)
    if not isinstance(T, TileLayout):
        raise TypeError(f"from_tirx: expected a tvm.tirx.layout TileLayout or ComposeLayout, got {T!r}")
    shard = _axe_iters(T.shard, T, "shard") or [Iter(1, 1)]
    replica = _axe_iters(T.replica, T, "replica")
    offset = {}
    for ax, v in T.offset.items():
        name = axe_axis_name(str(ax.name))
        offset[name] = offset.get(name, 0) + _const(v, f"offset on {ax.name}", T)
    return Layout(shard, replica, Coord(offset) if offset else ZERO)
