"""Layouts that follow from others: the constructions layout inference uses (pure functions).

- :func:`replicated_for`: the layout of a broadcast source that every consumer thread holds —
  the consumer's thread placement of the kept dims, its thread iters of the broadcast dims turned
  into replicas (the issue's ``S[(8,8):(1@tx,1)] + R[32:8@tx]`` for cos/sin beside x's
  ``S[(32,8,8):(8@tx,1@tx,1)]``);
- :func:`vector_layout`: a register tile spread over ``threads`` in 16-byte runs of its last
  dimension, consecutive threads on consecutive runs (memory accesses coalesce and vectorize);
- :func:`compact_memory`: the same thread placement with registers renumbered densely;
- :func:`atom_tilings`: a register tile as ``C ⊗ atom`` of an instruction's fragment (ldmatrix's
  8×8 atom, wgmma's accumulator), C spreading the atoms over the warps and then over registers;
- :func:`tma_rows`: a shared tile as TMA writes it under its 128/64/32-byte swizzle (boxes of one
  swizzle row's width side by side), the layout ldmatrix rows and wgmma descriptors read.
"""

from __future__ import annotations

from math import gcd, prod
from typing import Sequence

from .broadcast import aligned_shape
from .group import LayoutError, group
from .iters import Iter
from .layout import Layout
from .swizzle import Swizzle, SwizzledLayout
from .tile import tile

__all__ = ["replicated_for", "vector_layout", "compact_memory", "atom_tilings", "tma_rows", "MEMORY_AXES"]

MEMORY_AXES = ("m",)


def compact_memory(L: Layout) -> Layout:
    """``L`` with its memory iters' strides renumbered densely in the order of their strides
    (smallest first), other axes untouched; a memory offset is dropped.

    Law: the thread parts of the map are unchanged, and the memory part is a bijection of the
    shard onto ``[0, ∏ memory extents)`` when the original memory part was injective."""
    mem = sorted((i for i, it in enumerate(L.shard) if it[2] in MEMORY_AXES), key=lambda i: L.shard[i][1])
    shard, w = list(L.shard), 1
    for i in mem:
        e, _, a = shard[i]
        shard[i] = Iter(e, w, a)
        w *= e
    off = {a: v for a, v in L.offset.items() if a not in MEMORY_AXES}
    return Layout(shard, L.replica, off)


def replicated_for(consumer: Layout, shape: Sequence[int], source_shape: Sequence[int]) -> Layout:
    """A layout over ``source_shape`` (which broadcasts to ``shape``) that is local to ``consumer``
    (over ``shape``): every holder of consumer element u holds source element b(u).

    Construction: group the consumer by ``shape``; a kept dim keeps its iters; a broadcast dim's
    thread iters become replicas and its memory iters vanish (one register serves them all);
    registers are then renumbered densely.  Law: :func:`axe.layout.broadcast.locality` of the
    result against the consumer holds on every thread axis."""
    shape = tuple(shape)
    src = aligned_shape(source_shape, len(shape))
    blocks = group(consumer, shape).blocks
    shard, reps = [], list(consumer.replica)
    for block, e in zip(blocks, src):
        if e > 1:
            shard.extend(block)
        else:
            reps.extend(it for it in block if it[2] not in MEMORY_AXES)
    if not shard:
        shard = [Iter(1, 1)]
    return compact_memory(Layout(shard, reps, consumer.offset))


def vector_layout(shape: Sequence[int], elem_bytes: int, threads: int, axis: str = "tx",
                  vector_bytes: int = 16) -> Layout:
    """The tile of ``shape`` (row-major element order) cut into runs of ``v`` elements (``v·elem
    bytes`` the largest power of two ≤ ``vector_bytes`` dividing the last extent), run r held by
    thread ``r mod T`` in registers ``[(r div T)·v, …)``, T = min(threads, runs).

    Law: each thread's registers ``[k·v, (k+1)·v)`` hold ``v`` consecutive elements of one row,
    threads ``0…T−1`` hold consecutive runs, and every element is held exactly once.  Raises
    :class:`LayoutError` when the runs do not share evenly over the threads."""
    shape = tuple(shape)
    n = prod(shape)
    v = max(1, vector_bytes // elem_bytes)
    while v > 1 and shape[-1] % v:
        v //= 2
    runs = n // v
    t = min(threads, runs)
    if runs % t:
        t = gcd(runs, threads)
    if runs % t:
        raise LayoutError(f"vector layout of {shape}: {runs} runs of {v} do not share over {threads} threads")
    L = Layout([Iter(runs // t, v, "m"), Iter(t, 1, axis), Iter(v, 1, "m")])
    group(L, shape)       # the tile's dims must split the three iters (raises LayoutError)
    return Layout(tuple(it for it in L.shard if it[0] > 1) or (Iter(1, 1),))


def atom_tilings(shape: Sequence[int], atom: Layout, atom_shape: Sequence[int], warps: int,
                 axis: str = "tx") -> list[Layout]:
    """The layouts ``tile(C, grid, atom, atom_shape)`` of the 2-D ``shape`` (grid = shape / atom
    shape) whose C places the grid's atoms on ``warps`` groups of the atom's threads (C's ``axis``
    iter of stride 1, scaled by the atom's thread span; none when ``warps`` is 1) and the rest on
    registers: first the rows of atoms split over the warps (warp w holds a band of rows), then
    the columns.  Empty when the atom does not divide the shape or neither grid extent splits.

    Law: every result ``L`` satisfies ``tile_of(L, shape, atom, atom_shape) == C`` with C free of
    replicas, each warp holding the same number of atoms in distinct registers."""
    (r, c), (ar, ac) = tuple(shape), tuple(atom_shape)
    if r % ar or c % ac:
        return []
    a, b = r // ar, c // ac
    outer = []
    if a % warps == 0:
        outer.append(((warps, 1, axis), (a // warps, b, "m"), (b, 1, "m")))
    if b % warps == 0 and warps > 1:
        outer.append(((a, b // warps, "m"), (warps, 1, axis), (b // warps, 1, "m")))
    out = []
    for its in outer:
        C = Layout(tuple(Iter(*it) for it in its if it[0] > 1) or (Iter(1, 1, "m"),))
        out.append(tile(C, (a, b), atom, (ar, ac)))
    return out


def tma_rows(shape: Sequence[int], elem_bytes: int, swizzle_bytes: int):
    """The 2-D tile ``shape`` as a TMA copy with ``swizzle_bytes`` (32, 64 or 128) swizzle writes
    it: boxes ``(rows, w)`` of ``w = swizzle_bytes / elem_bytes`` columns, box after box, each
    row-major under ``Swizzle(log2(sw/16), log2(16/e), 3)``; None when the row is no whole number
    of boxes.

    Law: element (i, j) sits at ``(j div w)·rows·w + i·w + j mod w`` before the swizzle, and the
    swizzle permutes 16-byte chunks within each 8-row group (a bijection of the tile)."""
    rows, cols = tuple(shape)
    w = swizzle_bytes // elem_bytes
    if w < 1 or swizzle_bytes % 16 or cols % w or 16 % elem_bytes:
        return None
    L = Layout((Iter(rows, w, "m"), Iter(w, 1, "m"))) if cols == w else \
        Layout((Iter(rows, w, "m"), Iter(cols // w, rows * w, "m"), Iter(w, 1, "m")))
    return SwizzledLayout(L, Swizzle((swizzle_bytes // 16).bit_length() - 1, (16 // elem_bytes).bit_length() - 1, 3))
