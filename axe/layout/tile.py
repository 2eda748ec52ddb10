"""Tiling (App. C), tile-of (App. D) and the direct sum (App. F)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from .canonical import UNIT, canonical_replica, merge_chain
from .coord import ZERO, Coord
from .group import LayoutError, group_blocks
from .iters import Iter
from .layout import Layout, _spans
from .swizzle import SwizzledLayout

__all__ = ["tile", "tile_of", "direct_sum", "interleave"]


def interleave(shape_a: Sequence[int], shape_b: Sequence[int]) -> tuple[int, ...]:
    """``(S_A[0], S_B[0], S_A[1], S_B[1], …)``: the domain shape of A ⊗ B and A + B."""
    return tuple(x for pair in zip(shape_a, shape_b) for x in pair)


def _blocks(op: str, L: Layout, shape) -> tuple:
    blocks = group_blocks(L.shard, tuple(shape))
    if isinstance(blocks, str):
        raise LayoutError(f"{op}: {L} does not group by {tuple(shape)}: {blocks}")
    return blocks


def _ranks(op: str, shape_a, shape_b):
    if len(shape_a) != len(shape_b):
        raise LayoutError(f"{op}: shapes {tuple(shape_a)} and {tuple(shape_b)} differ in rank")


def _scaled(it: Iter, w: dict) -> Iter:
    return Iter._make(it[0], it[1] * w.get(it[2], 1), it[2])


def tile(A, shape_a: Sequence[int], B, shape_b: Sequence[int]):
    """``A ⊗ B`` with A outer: ``f(x‖y) = f_A(x) ⊙ span(B) + f_B(y)``.

    The result is grouped by ``interleave(shape_a, shape_b)`` (and so admits it):
    ``R = span(B)·R_A ∪ R_B`` and ``O = O_A ⊙ span(B) + O_B``.  A swizzled B keeps its swizzle
    innermost when span(B) on the swizzled axis is a multiple of the swizzle's period.
    """
    _ranks("tile", shape_a, shape_b)
    if isinstance(A, SwizzledLayout):
        raise LayoutError(f"tile: the outer layout {A} is swizzled; only the inner (B) may be")
    if isinstance(B, SwizzledLayout):
        w = B.inner.span(B.axis)
        if w % B.swizzle.period:
            raise LayoutError(f"tile: span {w} of {B.inner} on {B.axis} is not a multiple of "
                              f"{B.swizzle}'s period {B.swizzle.period}; the swizzle cannot stay innermost")
        return B.with_inner(tile(A, shape_a, B.inner, shape_b))
    ba, bb = _blocks("tile", A, shape_a), _blocks("tile", B, shape_b)
    w = _spans(B.shard, B.replica)
    shard = []
    for blk_a, blk_b in zip(ba, bb):
        shard.extend(_scaled(i, w) for i in blk_a)
        shard.extend(blk_b)
    replica = tuple(_scaled(i, w) for i in A.replica) + B.replica
    return Layout._make(tuple(shard) or (UNIT,), replica, A.offset.scale(w) + B.offset)


def direct_sum(A: Layout, shape_a: Sequence[int], B: Layout, shape_b: Sequence[int]) -> Layout:
    """``A + B`` on the tiling domain: ``f(x‖y) = f_A(x) + f_B(y)`` (no span scaling).

    Grouped by ``interleave(shape_a, shape_b)``; ``R = R_A ∪ R_B``, ``O = O_A + O_B``.
    ``direct_sum(A·span(B), …, B, …) == tile(A, …, B, …)``.
    """
    _ranks("direct_sum", shape_a, shape_b)
    ba, bb = _blocks("direct_sum", A, shape_a), _blocks("direct_sum", B, shape_b)
    shard = [i for blk_a, blk_b in zip(ba, bb) for i in blk_a + blk_b]
    return Layout._make(tuple(shard) or (UNIT,), A.replica + B.replica, A.offset + B.offset)


def _exact_div(c: Coord, w: dict) -> Coord | None:
    """``c / w`` axis-wise, or None when some component does not divide."""
    out = []
    for a, v in c.items():
        q, r = divmod(v, w.get(a, 1))
        if r:
            return None
        out.append((a, q))
    return Coord._from_sorted(tuple(out))   # c's items are sorted and non-zero, so are these


def _positive(replica, offset):
    """C0 + C1 only: positive strides, offset adjusted; order kept as a multiset."""
    if all(i[0] > 1 and i[1] > 0 for i in replica):
        return list(replica), offset
    out, shift = [], {}
    for e, s, a in replica:
        if e == 1:
            continue
        if s < 0:
            shift[a] = shift.get(a, 0) + (e - 1) * s
            s = -s
        out.append(Iter._make(e, s, a))
    return out, offset + Coord(shift)


def _outer_replica(T: Layout, B: Layout, w: dict):
    """Candidates (R_C, O_C) with ``R_T = w·R_C ∪ R_B`` and ``O_T = O_C ⊙ w + O_B``."""
    for norm in (_positive, canonical_replica):
        rt, ot = norm(T.replica, T.offset)
        rb, ob = norm(B.replica, B.offset)
        if rt == rb:                                    # all of T's replica comes from B
            oc = _exact_div(ot - ob, w)
            if oc is not None:
                yield (), oc
            continue
        left = Counter(rt)
        left.subtract(Counter(rb))
        if any(n < 0 for n in left.values()):
            continue
        rc = []
        for it, n in left.items():
            if n and it[1] % w.get(it[2], 1):
                break
            rc.extend([Iter._make(it[0], it[1] // w.get(it[2], 1), it[2])] * n)
        else:
            oc = _exact_div(ot - ob, w)
            if oc is not None:
                yield tuple(rc), oc


def tile_of(T, shape_t: Sequence[int], B, shape_b: Sequence[int]):
    """C with ``T = C ⊗ B`` over ``shape_c = shape_t / shape_b``, or None when none exists.

    T is grouped by the interleaved shape ``(shape_c[0], shape_b[0], …)`` (erratum: greedy
    subsequence matching on a canonical T fails when a C iter merged with a B iter); at each
    rank the B part must equal B's block and the C part must be ``span(B)``-scaled.  The
    replica and offset of C are recovered as in D.4 (an exact multiset division).
    None for the shard is a proof that no C exists; for replicas, C is found whenever T's
    replica multiset (raw or canonical) contains B's.
    """
    _ranks("tile_of", shape_t, shape_b)
    if isinstance(T, SwizzledLayout) or isinstance(B, SwizzledLayout):
        if not (isinstance(T, SwizzledLayout) and isinstance(B, SwizzledLayout)) \
                or T.swizzle != B.swizzle or T.axis != B.axis or T.base != B.base:
            return None
        return tile_of(T.inner, shape_t, B.inner, shape_b)
    if any(b < 1 or t % b for t, b in zip(shape_t, shape_b)):
        return None
    shape_c = tuple(t // b for t, b in zip(shape_t, shape_b))
    bt = group_blocks(T.shard, interleave(shape_c, shape_b))
    bb = group_blocks(B.shard, tuple(shape_b))
    if isinstance(bt, str) or isinstance(bb, str):
        return None
    w = _spans(B.shard, B.replica)
    shard_c = []
    for j, blk_b in enumerate(bb):
        outer, inner = bt[2 * j], bt[2 * j + 1]
        if tuple(merge_chain(inner)) != tuple(merge_chain(blk_b)):
            return None
        for e, s, a in outer:
            q, r = divmod(s, w.get(a, 1))
            if r:
                return None
            shard_c.append(Iter._make(e, q, a))
    shard_c = tuple(shard_c) or (UNIT,)
    if not (T.replica or B.replica):
        oc = _exact_div(T.offset - B.offset, w)
        return None if oc is None else Layout._make(shard_c, (), oc, sort=False)
    # Exact by construction: the shard blocks match, w·R_C ∪ R_B is T's (normalized) replica
    # multiset and the offset divides exactly, so C ⊗ B has T's map; no check is needed.
    for rc, oc in _outer_replica(T, B, w):
        return Layout._make(shard_c, rc, oc)
    return None
