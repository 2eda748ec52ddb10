"""Broadcasting (numpy's rule) and when a broadcast source is already where its consumers are.

A source of shape ``s`` broadcasts to shape ``n`` when, right-aligned, each of its extents is
``n``'s or 1; element ``u`` of ``n`` reads source element ``b(u)`` (``u`` with the broadcast
digits set to 0 and the leading ones dropped).

*Locality.*  An operator run by the threads that hold its consumer operand ``C`` reads a source
``S`` without moving data when every holder of ``C``'s element ``u`` also holds ``S``'s element
``b(u)``, on the axes that name who holds (threads, lanes, warps, GPUs).  Because a layout
grouped by a shape is a sum of one function per dimension, the displacements a holder of ``u``
needs from ``S``'s representative holder form a Minkowski sum::

    need = (O_C − O_S) + R_C + Σ_d { C_d(x) − S_d(x or 0) | x ∈ [0, n_d) }      (projected)

and ``S`` is local to ``C`` exactly when ``need ⊆ R_S`` (projected).  The sets are sets of
thread coordinates, so they stay as small as the threads they name.
"""

from __future__ import annotations

from math import gcd
from typing import NamedTuple, Sequence

from .group import LayoutError, group_blocks
from .iters import Iter
from .layout import Layout
from .swizzle import SwizzledLayout

__all__ = ["broadcast_shape", "aligned_shape", "broadcast_index", "needed_replica", "Locality", "locality",
           "with_replica", "MAX_POINTS"]

#: the most displacements :func:`needed_replica` lists before it gives up on a suggestion
MAX_POINTS = 1 << 16


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy's rule: shapes right-aligned, each extent equal or 1; the result takes the larger.

    Law: every input shape broadcasts to the result, and the result is the smallest such shape.
    Raises :class:`LayoutError` naming the shapes and the first dimension that disagrees."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for d, e in enumerate(aligned_shape(s, rank)):
            if e != 1 and out[d] not in (1, e):
                raise LayoutError(f"broadcast of shapes {[list(x) for x in shapes]}: dimension {d - rank} "
                                  f"is {out[d]} in one and {e} in another (neither is 1)")
            out[d] = max(out[d], e)
    return tuple(out)


def aligned_shape(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """``shape`` with leading 1s to ``rank`` dimensions (numpy's right alignment)."""
    if len(shape) > rank:
        raise LayoutError(f"shape {list(shape)} has more than {rank} dimensions")
    return (1,) * (rank - len(shape)) + tuple(shape)


def broadcast_index(u: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """``b(u)``: the element of a source of ``shape`` that element ``u`` of the result reads.

    Law: ``b(u)[i] = u[i + r] if shape[i] > 1 else 0`` with ``r = len(u) − len(shape)``."""
    r = len(u) - len(shape)
    return tuple(u[i + r] if e > 1 else 0 for i, e in enumerate(shape))


def _inner(L):
    return L.inner if isinstance(L, SwizzledLayout) else L


def _dim_values(L: Layout, shape: tuple, n: tuple, axes: tuple):
    """Per dimension d of ``n``: the list over x ∈ [0, n_d) of ``L_d(x or 0)`` projected on ``axes``
    (``L`` over ``shape``, aligned to ``n``)."""
    blocks = group_blocks(L.shard, shape)
    if isinstance(blocks, str):
        raise LayoutError(f"{L} over shape {list(shape)}: {blocks}")
    out = []
    for block, e, nd in zip(blocks, shape, n):
        vals = []
        for x in range(nd):
            acc, rest = [0] * len(axes), (x if e > 1 else 0)
            for ei, si, ai in reversed(block):
                rest, digit = divmod(rest, ei)
                if ai in axes:
                    acc[axes.index(ai)] += digit * si
            vals.append(tuple(acc))
        out.append(vals)
    return out


def _project(c, axes) -> tuple:
    return tuple(c[a] for a in axes)


def _replica_set(iters, axes) -> set:
    pts = {(0,) * len(axes)}
    for e, s, a in iters:
        if a not in axes:
            continue
        k = axes.index(a)
        pts = {p[:k] + (p[k] + j * s,) + p[k + 1:] for p in pts for j in range(e)}
    return pts


def _add(P: set, Q, limit: int) -> set | None:
    out = set()
    for p in P:
        for q in Q:
            out.add(tuple(a + b for a, b in zip(p, q)))
        if len(out) > limit:
            return None
    return out


def needed_replica(consumer, consumer_shape: Sequence[int], source, source_shape: Sequence[int],
                   axes: Sequence[str], limit: int = MAX_POINTS) -> set | None:
    """The displacements (tuples over ``axes``) the source's replica must contain for every holder
    of the consumer's element u to hold the source's element b(u); None past ``limit`` points.

    Law: for every u and every consumer holder h of u (projected on ``axes``),
    ``h − proj(f_D^S(b(u)) + O_S) ∈ result``, and every point of the result is such a difference.
    Both shapes broadcast to ``consumer_shape`` ∨ ``source_shape`` (numpy's rule)."""
    axes = tuple(axes)
    n = broadcast_shape(consumer_shape, source_shape)
    C, S = _inner(consumer), _inner(source)
    cs, ss = aligned_shape(consumer_shape, len(n)), aligned_shape(source_shape, len(n))
    cv, sv = _dim_values(C, cs, n, axes), _dim_values(S, ss, n, axes)
    need = {tuple(a - b for a, b in zip(_project(C.offset, axes), _project(S.offset, axes)))}
    need = _add(need, _replica_set(C.replica, axes), limit)
    for cd, sd in zip(cv, sv):
        if need is None:
            return None
        need = _add(need, {tuple(a - b for a, b in zip(p, q)) for p, q in zip(cd, sd)}, limit)
    return need


class Locality(NamedTuple):
    """:func:`locality`'s verdict: ``local`` and, when not, a ``witness`` displacement the source's
    replica lacks and a ``suggestion``: a replica (iters) under which the source would be local,
    or None when no replica can do it (a negative displacement needs another offset)."""

    local: bool
    witness: dict | None = None
    suggestion: tuple | None = None


def locality(consumer, consumer_shape: Sequence[int], source, source_shape: Sequence[int],
             axes: Sequence[str]) -> Locality:
    """Whether every holder of each consumer element u holds source element b(u) on ``axes``.

    Law: ``local`` iff for all u, ``proj(f_C(u)) ⊆ proj(f_S(b(u)))`` (``proj`` onto ``axes``);
    a suggestion R makes ``local`` true for the source with its replica replaced by R (its
    projection on ``axes``: the source's other replicas are kept)."""
    axes = tuple(axes)
    S = _inner(source)
    need = needed_replica(consumer, consumer_shape, source, source_shape, axes)
    have = _replica_set(S.replica, axes)
    if need is not None and need <= have:
        return Locality(True)
    if need is None:
        return Locality(False, None, None)
    missing = min(need - have)
    witness = {a: v for a, v in zip(axes, missing) if v}
    return Locality(False, witness, _cover(need, axes))


def _cover(points: set, axes: tuple) -> tuple | None:
    """The fewest iters (one per axis, a progression from 0) whose Minkowski sum contains
    ``points``; None when a point is negative on some axis (no replica reaches it)."""
    iters = []
    for k, a in enumerate(axes):
        vals = {p[k] for p in points}
        if min(vals) < 0:
            return None
        top = max(vals)
        if top == 0:
            continue
        g = 0
        for v in vals:
            g = gcd(g, v)
        iters.append(Iter(top // g + 1, g, a))
    return tuple(iters)


def with_replica(L, replica: Sequence[Iter], axes: Sequence[str]):
    """``L`` with its replica iters on ``axes`` replaced by ``replica`` (others kept)."""
    inner = _inner(L)
    keep = tuple(r for r in inner.replica if r[2] not in axes)
    new = Layout(inner.shard, keep + tuple(replica), inner.offset)
    return L.with_inner(new) if isinstance(L, SwizzledLayout) else new

