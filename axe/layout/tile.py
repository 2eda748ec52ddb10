"""Tiling (App. C), tile-of (App. D) and the direct sum (App. F)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from .canonical import UNIT, canonical_replica, canonicalize, merge_chain
from .coord import ZERO, Coord
from .group import LayoutError, group_blocks
from .iters import Iter
from .layout import MAX_REPLICA_CHOICES, Layout, _spans
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
    None is a proof that no C exists, for the shard and for the replica and offset: when the
    replica multisets do not divide syntactically, the replica-plus-offset sets decide
    (:func:`_replica_by_sets`), so T in canonical or any other equivalent form gives a C.
    """
    _ranks("tile_of", shape_t, shape_b)
    if isinstance(T, SwizzledLayout) or isinstance(B, SwizzledLayout):
        if not (isinstance(T, SwizzledLayout) and isinstance(B, SwizzledLayout)) \
                or T.swizzle != B.swizzle or T.axis != B.axis or T.base != B.base:
            return None
        return tile_of(T.inner, shape_t, B.inner, shape_b)
    if any(b < 1 or t % b for t, b in zip(shape_t, shape_b)):
        return None
    # the blocks are grouped from T's iters as written, and merging split iters first can be what
    # lets them group (S[(3,4):(-4,-1)] is S[12:-1]): T's canonical form is tried where T fails
    C = _tile_of_form(T, shape_t, B, shape_b)
    if C is None:
        Tc = canonicalize(T)
        if Tc != T:
            C = _tile_of_form(Tc, shape_t, B, shape_b)
    return C


def _tile_of_form(T, shape_t, B, shape_b):
    """:func:`tile_of` for T's iters as written (shapes checked)."""
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
    # The syntactic match misses C whenever T's replica was rewritten (C2 merged a scaled C
    # replica with a B replica, C1 moved a negative stride into the offset, …): decide on the
    # induced replica-plus-offset sets instead, which is exact (see _replica_by_sets).
    found = _replica_by_sets(T, B, w)
    return None if found is None else Layout._make(shard_c, found[0], found[1])


def _axis_sets(replica, offset: Coord) -> dict[str, frozenset]:
    """Per axis, the set ``{O_a + Σ_t r_t·s_t}`` over the replica iters on that axis."""
    out: dict[str, set] = {}
    for e, s, a in replica:
        pts = out.setdefault(a, {0})
        out[a] = {p + k * s for p in pts for k in range(e)}
    for a in offset:
        out.setdefault(a, {0})
    return {a: frozenset(p + offset[a] for p in pts) for a, pts in out.items()}


def _ap_sum(Y: frozenset):
    """Iters ``[(e, s), …]`` (e ≥ 2, s ≥ 1) with ``Σ {0, s, …, (e−1)s} = Y``, or None if none.

    Y contains 0.  Exhaustive search over strides in non-decreasing order: with partial sum
    S ⊆ Y, the next stride is at least the last one and at most ``min(Y − S)`` (that element
    is a sum of digits, one of them from a later, hence not smaller, stride), and every partial
    sum lies in Y.  The maximum strictly grows, so the search ends; failures are memoized.
    """
    failed: set = set()

    def go(S: frozenset, lo: int):
        if S == Y:
            return []
        if (S, lo) in failed:
            return None
        y = min(Y - S)
        for s in sorted(v for v in Y if lo <= v <= y):   # strides are in Y: not range(lo, y + 1),
            e = 1                                          # which is 2^63 steps for a 2^63 gap
            while all(p + e * s in Y for p in S):
                e += 1
            for ext in range(e, 1, -1):                  # largest first: coalesced answers
                nxt = frozenset(p + k * s for p in S for k in range(ext))
                rest = go(nxt, s)
                if rest is not None:
                    return [(ext, s)] + rest
        failed.add((S, lo))
        return None
    return go(frozenset((0,)), 1)


def _replica_by_sets(T: Layout, B: Layout, w: dict):
    """``(R_C, O_C)`` with ``w ⊙ P_C + P_B = P_T`` on every axis, or None when none exists.

    ``P_L`` is the set ``O_L + f_{R_L}(·)`` (a product of per-axis sets).  On axis a, B's set
    lies in ``[b, b + w_a)`` (its diameter is below span_a(B)), so every t in P_T splits
    uniquely as ``w_a·x + p`` with p − b in [0, w_a): P_C's axis set is forced to be
    ``{⌊(t − b)/w_a⌋}``.  It is accepted when it reproduces P_T and is an offset plus a sum of
    arithmetic progressions (:func:`_ap_sum`, exhaustive), so None is a proof of absence.
    """
    for L in (T, B):
        if L.replica_size > MAX_REPLICA_CHOICES:     # the sets below enumerate the replica
            raise LayoutError(f"tile_of: deciding on replica sets enumerates the {L.replica_size} replica "
                              f"choices of {L}; at most {MAX_REPLICA_CHOICES} are")
    pt, pb = _axis_sets(T.replica, T.offset), _axis_sets(B.replica, B.offset)
    replica, offset = [], {}
    for a in set(pt) | set(pb):
        ta, ba, wa = pt.get(a, frozenset((0,))), pb.get(a, frozenset((0,))), w.get(a, 1)
        b0 = min(ba)
        xs = frozenset((t - b0) // wa for t in ta)
        if frozenset(wa * x + p for x in xs for p in ba) != ta:
            return None
        x0 = min(xs)
        its = _ap_sum(frozenset(x - x0 for x in xs))
        if its is None:
            return None
        replica.extend(Iter._make(e, s, a) for e, s in its)
        if x0:
            offset[a] = x0
    return tuple(replica), Coord(offset)
