"""Slicing a layout to a rectangular region (§3.3, App. E), exactly."""

from __future__ import annotations

from math import prod
from typing import Sequence

from .coord import ZERO, Coord
from .group import LayoutError, group_blocks
from .iters import Iter
from .layout import Layout
from .swizzle import SwizzledLayout

__all__ = ["slice_layout", "slice_block"]


def _block_value(block: Sequence[Iter], u: int) -> dict:
    """``f_blk(u)`` of one grouped block, as a plain dict."""
    acc: dict[str, int] = {}
    for e, s, a in reversed(block):
        u, d = divmod(u, e)
        if d:
            acc[a] = acc.get(a, 0) + d * s
    return acc


def _delta(block: Sequence[Iter], b: int, c: int) -> Iter | None:
    """The iter ``(2, f(b+c) − f(b))`` when that difference lies on one axis."""
    lo, hi = _block_value(block, b), _block_value(block, b + c)
    diff = {a: hi.get(a, 0) - lo.get(a, 0) for a in set(lo) | set(hi)}
    diff = {a: v for a, v in diff.items() if v}
    if len(diff) != 1:
        return None
    (a, v), = diff.items()
    return Iter._make(2, v, a)


def _fast(block: Sequence[Iter], b: int, t: int) -> list | None:
    """Algorithm 4 with the exact one-wrap step ``Δ = f(b+c) − f(b)`` (erratum)."""
    m = len(block)
    digits, rest = [0] * m, b
    for k in range(m - 1, -1, -1):
        rest, digits[k] = divmod(rest, block[k][0])
    peeled: list[Iter] = []
    rem, k = t, m - 1
    while k >= 0 and digits[k] == 0 and rem % block[k][0] == 0:
        peeled.insert(0, block[k])
        rem //= block[k][0]
        k -= 1
    if rem == 1:
        return peeled
    if k < 0:
        return None
    e, s, a = block[k]
    if digits[k] + rem <= e:                                   # no wrap (Lemma E.1)
        return [Iter._make(rem, s, a)] + peeled
    if rem % 2 == 0 and digits[k] + rem // 2 == e:             # one symmetric wrap (E.2)
        c = rem // 2
        inner = prod(i[0] for i in peeled)
        step = _delta(block, b, c * inner)
        if step is None:
            return None
        return [step, Iter._make(c, s, a)] + peeled
    return None


#: longest slice of one block decided by enumeration (about a second of Python)
MAX_ENUMERATED = 1 << 18


def _exact(block: Sequence[Iter], b: int, t: int) -> list | None:
    """Decide by enumeration whether ``u ↦ f_blk(b+u) − f_blk(b)`` on [0, t) is a shard.

    In a normalized shard the innermost iter has stride ``g(1)`` and extent the length of
    the arithmetic run from 0 (D1 forbids a longer run), so the answer is forced level by
    level: it is unique when it exists, and None proves no shard exists.
    """
    if t > MAX_ENUMERATED:
        raise LayoutError(f"slice: the block {' '.join(map(repr, block))} from {b} for {t} elements is not "
                          f"a single or symmetric wrap; deciding it enumerates the {t} elements, and at "
                          f"most {MAX_ENUMERATED} are (slice a smaller region, or regroup the shape)")
    base = _block_value(block, b)
    g = []
    for u in range(t):
        v = _block_value(block, b + u)
        g.append(Coord({a: v.get(a, 0) - base.get(a, 0) for a in set(v) | set(base)}))
    out: list[Iter] = []
    while len(g) > 1:
        step = g[1]
        if len(step) != 1:
            return None
        run = 1
        while run < len(g) and g[run] == step * run:
            run += 1
        if len(g) % run:
            return None
        for q in range(0, len(g), run):
            for r in range(run):
                if g[q + r] != g[q] + step * r:
                    return None
        (a, s), = step.items()
        out.insert(0, Iter._make(run, s, a))
        g = g[::run]
    return out


def slice_block(block: Sequence[Iter], b: int, t: int) -> list | None:
    """Iters reproducing ``u ↦ f_blk(b+u) − f_blk(b)`` on [0, t), or None when none exist."""
    found = _fast(block, b, t)
    return found if found is not None else _exact(block, b, t)


def slice_layout(L, shape: Sequence[int], region: Sequence[Sequence[int]]):
    """``L[region : shape]``: the layout of the sub-tensor ``∏[b_i, e_i)``, or None.

    Law: for every u in the region's shape T, ``f_{result⟨T⟩}(u) = f_{L⟨S⟩}(u + b)``.  The
    result has one block per dimension (an extent-1 iter for a dimension of extent 1, so it
    groups by T), L's replica, and offset ``f_{L⟨S⟩}(b)``.  None means no Axe layout has that
    map (for a swizzled L: none with the same swizzle kept innermost).  Raises
    :class:`LayoutError` when L does not group by the shape or the region is out of bounds.
    """
    shape = tuple(shape)
    region = tuple((int(lo), int(hi)) for lo, hi in region)
    if len(region) != len(shape):
        raise LayoutError(f"slice: region {region} has rank {len(region)}, shape {shape} rank {len(shape)}")
    for d, ((lo, hi), n) in enumerate(zip(region, shape)):
        if not 0 <= lo < hi <= n:
            raise LayoutError(f"slice: region {region} dimension {d} [{lo}, {hi}) is empty or "
                              f"outside [0, {n})")
    if isinstance(L, SwizzledLayout):
        return _slice_swizzled(L, shape, region)
    return _slice_checked(L, shape, region)


def _slice_checked(L: Layout, shape: tuple, region: tuple):
    """:func:`slice_layout` on a plain layout whose shape and region are already validated."""
    blocks = group_blocks(L.shard, shape)
    if isinstance(blocks, str):
        raise LayoutError(f"slice: {L} does not group by {shape}: {blocks}")
    shard: list[Iter] = []
    offset = dict(L.offset.items())
    for blk, (lo, hi) in zip(blocks, region):
        if lo == 0 and hi == prod(i[0] for i in blk):
            part = list(blk)
        else:
            part = slice_block(blk, lo, hi - lo)
            if part is None:
                return None
            for a, v in _block_value(blk, lo).items():
                offset[a] = offset.get(a, 0) + v
        shard.extend(part or [Iter._make(1, (blk[0][1] if blk else 1), blk[0][2] if blk else "m")])
    return Layout._make(tuple(shard), L.replica, Coord._from_dict(offset), sort=False)


def _slice_swizzled(L: SwizzledLayout, shape, region):
    inner = _slice_checked(L.inner, shape, region)
    if inner is None:
        return None
    # only the region's displacement may leave the swizzle: the inner offset stays inside
    shift = inner.offset[L.axis] - L.inner.offset[L.axis]
    if shift % L.swizzle.period:
        return None
    moved = Coord.unit(L.axis, shift)
    return L.with_inner(inner - moved, base=L.base + moved)
