"""Canonical forms (App. A) and equality of induced maps."""

from __future__ import annotations

from collections import defaultdict

from .coord import ZERO, Coord
from .iters import Iter
from .layout import Layout, _minkowski
from .swizzle import SwizzledLayout

__all__ = ["canonicalize", "canonical_shard", "canonical_replica", "equivalent", "gap_condition"]

UNIT = Iter._make(1, 1, "m")


def merge_chain(iters) -> list[Iter]:
    """D0 + D1 on an ordered iter list: drop extent-1 iters, merge same-axis chains.

    Law: the result induces the same map as ``iters`` on [0, ∏e) and is the unique normalized
    list for that map (Thm A.8); it is empty only for a map of size 1.
    """
    out: list[Iter] = []
    make = tuple.__new__
    for it in iters:
        e = it[0]
        if e == 1:
            continue
        if out:
            p = out[-1]
            if p[2] == it[2] and p[1] == e * it[1]:
                out[-1] = make(Iter, (p[0] * e, it[1], it[2]))
                continue
        out.append(it)
    return out


def canonical_shard(shard) -> tuple[Iter, ...]:
    """The normalized shard (D0, D1); ``(1:1)`` stands for a size-1 shard."""
    out = merge_chain(shard)
    return tuple(out) if out else (UNIT,)


def canonical_replica(replica, offset: Coord = ZERO) -> tuple[tuple[Iter, ...], Coord]:
    """C0, C1, C2 to a fixpoint, per axis, in a fixed order: (replica, offset).

    Law: ``offset + f_R(·)`` is unchanged as a set.  C2 always lets the smallest stride absorb
    the smallest absorbable multiple; under the gap condition the result is unique
    (Thm A.14), without it the fixed order still gives one deterministic answer.
    """
    if not replica:
        return (), offset
    if len(replica) == 1 and replica[0][1] > 0:
        return ((replica[0],) if replica[0][0] > 1 else ()), offset
    per_axis: dict[str, list[list[int]]] = defaultdict(list)
    shift: dict[str, int] = {}
    for e, s, a in replica:
        if e == 1:
            continue
        if s < 0:                                   # C1
            shift[a] = shift.get(a, 0) + (e - 1) * s
            s = -s
        per_axis[a].append([s, e])
    out: list[Iter] = []
    for a, its in per_axis.items():
        its.sort()
        changed = True
        while changed:                              # C2
            changed = False
            for i, (si, ei) in enumerate(its):
                for j, (sj, ej) in enumerate(its):
                    if j != i and sj % si == 0 and sj // si <= ei and (sj, -ej) >= (si, -ei):
                        q = sj // si
                        its[i] = [si, ei + q * (ej - 1)]
                        del its[j]
                        its.sort()
                        changed = True
                        break
                if changed:
                    break
        out.extend(Iter._make(e, s, a) for s, e in its)
    if shift:
        offset = offset + Coord(shift)
    return tuple(sorted(out, key=lambda i: (i[2], i[1], i[0]))), offset


def canonicalize(L: Layout) -> Layout:
    """The canonical form of L (D0, D1, C0, C1, C2).  Idempotent; never changes the map."""
    if type(L) is SwizzledLayout:
        inner = canonicalize(L.inner)
        return L if inner is L.inner else L.with_inner(inner)
    replica, offset = canonical_replica(L.replica, L.offset)
    shard = canonical_shard(L.shard)
    if shard == L.shard and replica == L.replica and offset is L.offset:
        return L                                     # already canonical: values are immutable
    return Layout._make(shard, replica, offset, sort=False)


def gap_condition(L: Layout) -> bool:
    """GC of App. A on L's canonical replica: per axis, ``σ_{k+1} > E_k·σ_k``.

    Under GC two layouts have equal maps iff their canonical forms are identical.
    """
    replica, _ = canonical_replica(L.replica, L.offset)
    last: dict[str, tuple[int, int]] = {}
    for e, s, a in replica:
        if a in last and s <= last[a][0] * last[a][1]:
            return False
        last[a] = (e, s)
    return True


def _axis_points(replica, offset: Coord) -> dict[str, frozenset]:
    by_axis: dict[str, list[Iter]] = defaultdict(list)
    for it in replica:
        by_axis[it[2]].append(it)
    for a in offset:
        by_axis.setdefault(a, [])
    return {a: frozenset(p[a] + offset[a] for p in _minkowski(its)) for a, its in by_axis.items()}


def equivalent(L1: Layout, L2: Layout) -> bool:
    """Whether L1 and L2 induce the same set-valued map (always exact).

    The shard parts must have identical normalized forms (a map determines them: the
    origin's fiber pins ``O + f_R``, and then ``f_D``).  The replica-plus-offset sets are
    compared through canonical forms when both satisfy the gap condition, and otherwise by
    enumerating them per axis (they are products of per-axis sets).
    """
    if isinstance(L1, SwizzledLayout) or isinstance(L2, SwizzledLayout):
        if not (isinstance(L1, SwizzledLayout) and isinstance(L2, SwizzledLayout)):
            return False
        return L1.swizzle == L2.swizzle and L1.base == L2.base and equivalent(L1.inner, L2.inner)
    if canonical_shard(L1.shard) != canonical_shard(L2.shard):
        return False
    r1, o1 = canonical_replica(L1.replica, L1.offset)
    r2, o2 = canonical_replica(L2.replica, L2.offset)
    if r1 == r2 and o1 == o2:
        return True
    if gap_condition(L1) and gap_condition(L2):
        return False
    p1, p2 = _axis_points(r1, o1), _axis_points(r2, o2)
    zero = frozenset((0,))
    return all(p1.get(a, zero) == p2.get(a, zero) for a in set(p1) | set(p2))
