"""Grouping a layout by a shape (App. B)."""

from __future__ import annotations

from itertools import accumulate, chain
from math import gcd, prod
from typing import NamedTuple, Sequence

from .canonical import UNIT, merge_chain
from .iters import Iter
from .layout import Layout
from .swizzle import SwizzledLayout

__all__ = ["group", "Grouped", "LayoutError", "group_blocks"]


class LayoutError(ValueError):
    """An operation of the layout algebra whose preconditions do not hold."""


class Grouped(NamedTuple):
    """A layout grouped by a shape: ``blocks[i]`` holds the iters of dimension i.

    ``layout`` induces the same map as the input; ``bounds[i]`` is the end (exclusive) of
    block i in ``layout.shard``.
    """

    layout: Layout
    bounds: tuple[int, ...]
    blocks: tuple[tuple[Iter, ...], ...]


def group_blocks(shard: Sequence[Iter], shape: Sequence[int]) -> tuple[tuple[Iter, ...], ...] | str:
    """Split and fuse ``shard`` (in order) into ``len(shape)`` blocks of products ``shape``.

    Returns the blocks (each D1-normalized: the fewest iters) or, when no grouping exists,
    a sentence saying why.  Law: concatenating the blocks gives the map of ``shard``.
    Extent-1 iters are skipped (erratum: Algorithm 1 stalls on them).
    """
    src, total = [], 1
    for it in shard:
        if it[0] != 1:
            src.append(it)
            total *= it[0]
    if prod(shape) != total:
        return f"the shape's size {prod(shape)} differs from the layout's size {total}"
    j, blocks = 0, []
    for d, target in enumerate(shape):
        if not isinstance(target, int) or target < 1:
            return f"shape entry {d} is {target!r}, not a positive int"
        block, cur = [], 1
        while cur < target:
            it = src[j]
            e = it[0]
            rem = target // cur
            if rem % e == 0:                      # the whole iter fits: keep it as it is
                block.append(it)
                cur *= e
                j += 1
                continue
            g = gcd(e, rem)
            if g == 1:
                return (f"dimension {d} (extent {target}) would need to split iter "
                        f"{it} at a factor that does not divide it")
            s, a = it[1], it[2]
            block.append(Iter._make(g, (e // g) * s, a))
            cur *= g
            src[j] = Iter._make(e // g, s, a)
        blocks.append(tuple(merge_chain(block)) if len(block) > 1 else tuple(block))
    return tuple(blocks)


def group(L: Layout, shape: Sequence[int]) -> Grouped:
    """``L‖S``: the grouping of L by shape S, with the fewest iters.

    Law: ``grouped.layout`` has the same map as L, and the extents of ``blocks[i]`` multiply
    to ``shape[i]``.  Raises :class:`LayoutError` when S does not group L.
    """
    swizzled = type(L) is SwizzledLayout
    inner = L.inner if swizzled else L
    shape = tuple(shape)
    blocks = group_blocks(inner.shard, shape)
    if type(blocks) is str:
        raise LayoutError(f"group({inner}, {shape}): {blocks}")
    flat = tuple(chain.from_iterable(blocks))
    grouped = inner if flat == inner.shard else Layout._make(flat or (UNIT,), inner.replica, inner.offset,
                                                             sort=False)
    if swizzled:
        grouped = L.with_inner(grouped)
    return Grouped(grouped, tuple(accumulate(map(len, blocks))), blocks)
