"""CuTe ``shape:stride`` layouts ↔ Axe layouts, and composition across axes.

Conventions.  CuTe unflattens an index colexicographically (first mode fastest), Axe
lexicographically (last iter fastest).  CuTe ``(4,3):(3,1)`` and Axe ``S[(3,4):(1,3)]`` are the
same function of the flat index (both enumerate 0,3,6,9,1,4,7,10,2,5,8,11).

Three directions of meaning:

* **data layouts** (logical index → address): :func:`from_cute` keeps the flat index
  (``f_axe(x) == {L(x)}``), :func:`from_cute_modes` keeps the natural coordinate
  (``f_axe⟨(size(L_0), size(L_1), …)⟩(u) == {L(u)}``), :func:`to_cute` inverts either.
* **thread/value layouts** (CuTe's TV layouts map ``(thread, value) → logical index`` of a
  tile, the opposite direction of an Axe layout): :func:`from_cute_tv` inverts one into the
  Axe layout ``tile element → {thread@t + value@v}``; a stride-0 thread or value mode (several
  threads holding one element) becomes a replica ``R[...]``.  :func:`to_cute_tv` goes back.
* :func:`compose` composes across axes: an Axe layout whose component on one axis is an
  index into another Axe layout (e.g. a thread/value layout whose register index addresses a
  memory layout).

What each direction loses or refuses (always with a :class:`LayoutError`, never silently):

* CuTe → Axe (data): the nesting of modes below the top level (Axe shards are flat lists;
  :func:`axe.layout.group` recovers any grouping that exists).  Stride-0 modes are refused:
  in a data layout they make several logical elements share one address, and an Axe shard
  iter has a non-zero stride (an Axe replica is the opposite: one element at several places).
* Axe → CuTe (data): only layouts on one axis, without replicas, swizzle or offset (a CuTe
  layout is an offset-free function into one integer; CuTe's ScaledBasis strides are not
  modelled).  Extent-1 iters disappear.
* CuTe TV → Axe: the TV layout's non-zero-stride modes must cover the tile exactly once and
  group by the tile's dimensions; otherwise an element's holders are not a shard-plus-replica
  pattern.  The thread and value hardware indices are the colex indices of the two modes.
* Axe → CuTe TV: every iter must be on the thread or the value axis, with positive stride,
  and per axis the iters sorted by stride must tile ``[0, n)`` densely (CuTe numbers threads
  and values densely); offsets are refused.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..canonical import UNIT
from ..coord import MEMORY, ZERO, Coord, as_coord, canonical_axis
from ..cute_algebra import (CuteLayout, _fmt, _from_modes, check_no_carry, coalesce_modes,
                            compose_leaf, flatten, size_of)
from ..group import LayoutError, group_blocks
from ..iters import Iter
from ..layout import Layout
from ..swizzle import SwizzledLayout

__all__ = ["from_cute", "from_cute_modes", "to_cute", "from_cute_tv", "to_cute_tv", "compose"]


def _as_cute(L) -> CuteLayout:
    if isinstance(L, CuteLayout):
        return L
    if isinstance(L, str):
        from ..cute_algebra import parse_cute
        return parse_cute(L)
    if isinstance(L, tuple) and len(L) == 2:
        return CuteLayout(L[0], L[1])
    raise TypeError(f"expected a CuteLayout, 'shape:stride' text or a (shape, stride) pair, got {L!r}")


def _iters_of_modes(modes, axis: str, who: str, L) -> list:
    out = []
    for e, d in modes:
        if e == 1:
            continue
        if d == 0:
            raise LayoutError(f"{who}({L}): mode {e}:0 makes {e} logical elements share one address; "
                              "an Axe shard iter needs a non-zero stride (use from_cute_tv when the "
                              "stride-0 mode is a replication of threads or values)")
        out.append(Iter(e, d, axis))
    return out


def from_cute(L, axis: str = MEMORY) -> Layout:
    """The Axe layout with the same flat-index function: ``f(x) == {L(x)}`` for x < size(L).

    The shard is L's leaf modes reversed, on ``axis``; it admits ``reversed(flatten(shape))``.
    """
    L = _as_cute(L)
    axis = canonical_axis(axis)
    its = _iters_of_modes(reversed(L.modes()), axis, "from_cute", L)
    return Layout._make(tuple(its) or (UNIT,))


def from_cute_modes(L, axis: str = MEMORY) -> tuple[Layout, tuple[int, ...]]:
    """``(A, S)`` with S the sizes of L's top-level modes and ``f_{A⟨S⟩}(u) == {L(u)}``.

    u is L's natural coordinate (one index per top-level mode, colex inside the mode): A keeps
    the modes in order and reverses the leaves inside each one.
    """
    L = _as_cute(L)
    axis = canonical_axis(axis)
    modes = list(L) if isinstance(L.shape, tuple) else [L]
    its = []
    for M in modes:
        its.extend(_iters_of_modes(reversed(M.modes()), axis, "from_cute_modes", L))
    return Layout._make(tuple(its) or (UNIT,)), tuple(M.size for M in modes)


def _single_axis(L, who: str) -> str:
    if isinstance(L, SwizzledLayout):
        raise LayoutError(f"{who}({L}): a swizzled layout is not a CuTe Layout (a ComposedLayout "
                          "with a Swizzle is not modelled)")
    if L.replica:
        raise LayoutError(f"{who}({L}): a replicated element has several addresses; a CuTe layout "
                          "is a function (use to_cute_tv for thread/value replication)")
    if L.offset:
        raise LayoutError(f"{who}({L}): offset {L.offset} is not part of a CuTe layout; subtract it "
                          "and add it to the pointer")
    axes = {i[2] for i in L.shard if i[0] > 1}
    if len(axes) > 1:
        raise LayoutError(f"{who}({L}): iters on {sorted(axes)}; a CuTe layout has integer strides "
                          "on one axis")
    return axes.pop() if axes else MEMORY


def to_cute(L: Layout, shape: Sequence[int] | None = None) -> CuteLayout:
    """The CuTe layout of a one-axis, replica-free, offset-free Axe layout.

    Without ``shape``: the flat-index form (``to_cute(from_cute(C))`` has C's function).  With
    an admitted ``shape``: one CuTe mode per dimension, so that ``R(u) == f_{L⟨shape⟩}(u)``
    for every coordinate u (the inverse of :func:`from_cute_modes`).
    """
    _single_axis(L, "to_cute")
    if shape is None:
        modes = [(e, s) for e, s, _ in reversed(L.shard) if e > 1]
        return _from_modes(modes)
    blocks = group_blocks(L.shard, tuple(shape))
    if isinstance(blocks, str):
        raise LayoutError(f"to_cute({L}, {tuple(shape)}): {blocks}")
    parts = [_from_modes([(e, s) for e, s, _ in reversed(b)]) for b in blocks]
    if len(parts) == 1:
        return parts[0]
    return CuteLayout(tuple(p.shape for p in parts), tuple(p.stride for p in parts))


# --- thread/value layouts -------------------------------------------------------------------
def _tv_modes(tv: CuteLayout):
    """``[(extent, logical stride, which, hardware weight)]`` for the thread (0) and value (1) modes."""
    if tv.rank != 2:
        raise LayoutError(f"from_cute_tv({tv}): a TV layout has two modes (thread, value), got {tv.rank}")
    out = []
    for which in (0, 1):
        w = 1
        for e, d in tv[which].modes():
            if e > 1:
                out.append((e, d, which, w))
            w *= e
    return out


def from_cute_tv(tv, tile_shape: Sequence[int], thread_axis: str = "lane",
                 value_axis: str = "reg") -> Layout:
    """Invert a CuTe TV layout into the Axe layout of the tile: element → {thread, value}.

    ``tv((t, v))`` is the colex index of a ``tile_shape`` element.  Law: for every element u
    of the tile (Axe row-major over ``tile_shape``), ``f_{A⟨tile_shape⟩}(u) ==
    { t@thread_axis + v@value_axis | tv((t, v)) == colex(u) }``.  Stride-0 modes become
    replicas; the other modes must enumerate the tile exactly once.
    """
    tv = _as_cute(tv)
    tile_shape = tuple(tile_shape)
    n = prod(tile_shape)
    axes = (canonical_axis(thread_axis), canonical_axis(value_axis))
    modes = _tv_modes(tv)
    replica = [Iter(e, w, axes[k]) for e, d, k, w in modes if d == 0]
    live = sorted(((d, e, k, w) for e, d, k, w in modes if d != 0))
    expect = 1
    for d, e, k, w in live:
        if d != expect:
            raise LayoutError(f"from_cute_tv({tv}, {tile_shape}): the non-zero-stride modes sorted by "
                              f"stride must tile [0, {n}) exactly once; mode {e}:{d} comes where stride "
                              f"{expect} is needed")
        expect *= e
    if expect != n:
        raise LayoutError(f"from_cute_tv({tv}, {tile_shape}): the non-zero-stride modes cover "
                          f"{expect} elements, the tile has {n}")
    flat = [Iter(e, w, axes[k]) for d, e, k, w in reversed(live)]
    blocks = group_blocks(flat or [UNIT], tuple(reversed(tile_shape)))
    if isinstance(blocks, str):
        raise LayoutError(f"from_cute_tv({tv}, {tile_shape}): the modes do not split at the tile's "
                          f"dimensions: {blocks}")
    shard = [i for b in reversed(blocks) for i in b]
    return Layout._make(tuple(shard) or (UNIT,), tuple(replica))


def to_cute_tv(L: Layout, tile_shape: Sequence[int], thread_axis: str = "lane",
               value_axis: str = "reg") -> CuteLayout:
    """The CuTe TV layout ``(thread, value) → colex tile index`` of an Axe tile layout.

    Inverse of :func:`from_cute_tv`: ``from_cute_tv(to_cute_tv(L, T), T)`` equals L as a map.
    Replica iters become stride-0 modes.
    """
    who = f"to_cute_tv({L}, {tuple(tile_shape)})"
    if isinstance(L, SwizzledLayout):
        raise LayoutError(f"{who}: a swizzled layout is not a TV layout")
    if L.offset:
        raise LayoutError(f"{who}: offset {L.offset} would shift the thread or value numbering")
    tile_shape = tuple(tile_shape)
    axes = (canonical_axis(thread_axis), canonical_axis(value_axis))
    blocks = group_blocks(L.shard, tile_shape)
    if isinstance(blocks, str):
        raise LayoutError(f"{who}: {blocks}")
    per_axis: dict[str, list] = {a: [] for a in axes}
    colex = 1
    for b, t in zip(blocks, tile_shape):
        w = 1
        for e, s, a in reversed(b):
            per_axis.setdefault(a, []).append((s, e, w * colex))
            w *= e
        colex *= t
    for e, s, a in L.replica:
        per_axis.setdefault(a, []).append((s, e, 0))
    parts = []
    for a, its in per_axis.items():
        if a not in axes and any(i[1] > 1 for i in its):
            raise LayoutError(f"{who}: iters on axis {a}; a TV layout has only {axes[0]} and {axes[1]}")
    for a in axes:
        its = sorted(i for i in per_axis[a] if i[1] > 1)
        expect = 1
        for s, e, d in its:
            if s != expect:
                raise LayoutError(f"{who}: on {a} the iters sorted by stride must number [0, n) densely; "
                                  f"stride {s} comes where {expect} is needed")
            expect *= e
        parts.append(_from_modes([(e, d) for s, e, d in its]))
    return CuteLayout(tuple(p.shape for p in parts), tuple(p.stride for p in parts))


# --- composition across axes ----------------------------------------------------------------
def compose(M, T: Layout, axis: str = MEMORY):
    """``M ∘_axis T``: T's component on ``axis`` is an index into M's domain.

    Law: ``f(x) = { c − c[axis]@axis + y | c ∈ f_T(x), y ∈ f_M(c[axis]) }``: the other axes
    of T pass through, the indexed axis is replaced by M's coordinates (on any axes).  Each T
    iter ``(e, s, axis)`` becomes the iters of CuTe's ``M ∘ e:s`` (M's shard read as a flat
    CuTe layout), in place; T's replicas on ``axis`` likewise become replicas; T's offset on
    ``axis`` goes through M's shard.  Preconditions (checked, :class:`LayoutError` otherwise):
    positive strides on ``axis``, every index inside ``[0, size(M))``, CuTe's divisibility
    conditions per iter, and no carries between iters in M's mixed radix (which is what makes
    the result a sum of per-iter parts).  A swizzled M keeps its swizzle outermost, which
    needs T not to pass anything through on the swizzled axis.
    """
    axis = canonical_axis(axis)
    who = f"compose({M}, {T}, axis={axis})"
    if isinstance(T, SwizzledLayout):
        raise LayoutError(f"{who}: the indexing layout T is swizzled; only M may be")
    if isinstance(M, SwizzledLayout):
        clash = (set(T.axes()) - {axis}) & {M.axis}
        if clash:
            raise LayoutError(f"{who}: T passes axis {M.axis} through, where M's swizzle acts")
        return M.with_inner(compose(M.inner, T, axis))
    idx_iters = [i for i in T.shard if i[2] == axis] + [i for i in T.replica if i[2] == axis]
    base = T.offset[axis]
    for e, s, _ in idx_iters:
        if s < 0 and e > 1:
            raise LayoutError(f"{who}: iter {e}:{s}@{axis} has a negative stride")
    top = base + sum((e - 1) * s for e, s, _ in idx_iters)
    if base < 0 or top >= M.size:
        raise LayoutError(f"{who}: T indexes [{base}, {top}] on {axis}, M has size {M.size}")
    modes_m = coalesce_modes([(e, Coord.unit(a, s)) for e, s, a in reversed(M.shard)]) or [(1, ZERO)]
    check_no_carry(modes_m, [(e, s) for e, s, _ in idx_iters if e > 1], who, offsets=(base,))

    def replace(it) -> list:
        e, s, a = it
        if a != axis:
            return [it]
        if e == 1:
            return []
        out = []
        for ce, cs in reversed(compose_leaf(modes_m, e, s, who)):
            (ca, cv), = cs.items()
            out.append(Iter._make(ce, cv, ca))
        return out

    shard = [j for i in T.shard for j in replace(i)]
    replica = [j for i in T.replica for j in replace(i)] + list(M.replica)
    offset = T.offset - Coord.unit(axis, base) + M.shard_coord(base)
    return Layout._make(tuple(shard) or (UNIT,), tuple(replica), as_coord(offset))
