"""Pairing operand layouts dimension by dimension: the common refinement of their shards.

Every schedule reads its operands through :func:`pair_dims`: the logical shape is split into
the coarsest dims such that, in every operand, each dim is exactly one iter ``(stride, axis)``
(stride 0 for a broadcast operand).  The law: element u of the shape lives in operand k at
``Σ_d digit_d(u)·stride[d][k] @ axis[d][k]`` plus the operand's offset.  Thread dims (an axis
other than memory) say who holds an element; memory dims say where.
"""

from __future__ import annotations

from dataclasses import dataclass

from axe.layout import SwizzledLayout
from axe.layout.group import group_blocks

__all__ = ["Dim", "pair_dims", "inner_layout", "THREAD_AXES", "contiguous_run"]

THREAD_AXES = ("tx", "lane", "warp", "warpgroup")


def inner_layout(L):
    return L.inner if isinstance(L, SwizzledLayout) else L


@dataclass(frozen=True)
class Dim:
    """One paired dimension: ``extent`` and per operand ``(stride, axis)`` (axis None: broadcast)."""

    extent: int
    parts: tuple

    def axis(self, k):
        return self.parts[k][1]

    def stride(self, k):
        return self.parts[k][0]


def _refine(seqs, d):
    """Split the per-operand iter lists of one logical dim into common pieces, innermost first."""
    states = []
    for seq in seqs:
        its = list(reversed(seq))
        states.append([its, 0, its[0][0], its[0][1]])
    out = []
    while states[0][0] is not None and states[0][1] < len(states[0][0]):
        p = min(st[2] for st in states)
        for k, st in enumerate(states):
            if st[2] % p:
                e, s, a = st[0][st[1]]
                return (f"dimension {d}: operand {k}'s iter {e}:{s}@{a} cannot be split at {p} "
                        "(no common refinement of the operand layouts)")
        out.append(Dim(p, tuple((st[3], st[0][st[1]][2]) for st in states)))
        for st in states:
            st[2] //= p
            st[3] *= p
            if st[2] == 1:
                st[1] += 1
                if st[1] < len(st[0]):
                    st[2], st[3] = st[0][st[1]][0], st[0][st[1]][1]
    return list(reversed(out))


def pair_dims(shape, operands):
    """``operands``: ``(layout, shape_k)`` with shape_k[d] == shape[d] or 1 (broadcast).

    Returns the paired dims, outermost first (extent-1 dims dropped), or a reason string.
    """
    blocks = []
    for k, (L, sk) in enumerate(operands):
        inner = inner_layout(L)
        if any(s < 0 for _, s, _ in inner.shard):
            return f"operand {k}: negative strides are not supported ({L})"
        b = group_blocks(inner.shard, tuple(sk))
        if isinstance(b, str):
            return f"operand {k}: {inner} does not group by {tuple(sk)}: {b}"
        blocks.append(b)
    dims = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        seqs = []
        for (L, sk), b in zip(operands, blocks):
            seqs.append([(n, 0, None)] if sk[d] == 1 else [i for i in b[d] if i[0] > 1])
        got = _refine(seqs, d)
        if isinstance(got, str):
            return got
        dims.extend(got)
    return _merge(dims)


def _merge(dims):
    """Fuse adjacent dims that chain in every operand (fewer, longer dims: longer vector runs)."""
    out = []
    for dim in dims:
        if out:
            prev = out[-1]
            if all(pa == a and ps == dim.extent * s for (ps, pa), (s, a) in zip(prev.parts, dim.parts)):
                out[-1] = Dim(prev.extent * dim.extent, dim.parts)
                continue
        out.append(dim)
    return out


def contiguous_run(dims, ks):
    """The innermost dims forming a unit-stride run on memory in every operand of ``ks``.

    Returns ``(elements, ndims)``: how many elements of the innermost dims are contiguous
    (stride 1, 2·… in all listed operands) and how many trailing dims that covers.
    """
    run, n = 1, 0
    for dim in reversed(dims):
        if all(dim.axis(k) == "m" and dim.stride(k) == run for k in ks):
            run *= dim.extent
            n += 1
        else:
            break
    return run, n
