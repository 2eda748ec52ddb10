"""Which part of a tensor each device of a mesh holds, and where in its memory.

A distributed tensor's Axe layout maps each global element x to the set of points
``{gpuid: g, m: off}``: device g holds x at memory offset ``off`` of its local buffer.  A
multi-GPU schedule needs that map the other way round: per rank, the elements it holds (to
iterate over its own part) and, for any element, its ranks and offsets (to address a peer's
copy).  :func:`device_sharding` reads both off the layout's structure, without enumerating
elements.

The law (exact, for every global element x and rank g)::

    (g, off) ∈ { (c[gpuid], c[m]) | c ∈ layout.map(x, shape) }
        ⇔  ∃ b ∈ boxes[g]:  x ∈ b  and  off == local.map(x − b.lows)[m]

Supported layouts are those of "device outer, memory inner" form — each tensor dimension is
cut into equal contiguous chunks over devices, and a chunk is laid out in memory the same way
on every device:

* the layout touches only the device axis and ``m`` (iters of extent 1 touch nothing);
* grouped by the shape (:func:`axe.layout.group`), each dimension's block lists its device
  iters before (outer to) all its memory iters — so dimension d's coordinate is
  ``chunk·E_d + y`` with ``E_d`` the product of its memory extents;
* replicas are over the device axis only (a replica over ``m`` would put an element twice
  into one memory);
* every device id is ≥ 0; plain layouts only (a swizzle is not a chunk layout).

Anything else raises :class:`LayoutError` naming the layout and the condition.  Pure Python:
no TVM, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product as _cartesian
from math import prod
from typing import Iterator, Sequence

from .coord import MEMORY, Coord, canonical_axis
from .group import LayoutError, group
from .iters import Iter
from .layout import Layout, _minkowski, unflatten_index
from .swizzle import SwizzledLayout
from .syntax import parse

__all__ = ["DeviceBox", "DeviceSharding", "device_sharding"]


@dataclass(frozen=True)
class DeviceBox:
    """The box ``∏_d [lows[d], lows[d] + exts[d])`` of a tensor's global (row-major) index space."""

    lows: tuple[int, ...]
    exts: tuple[int, ...]

    def __post_init__(self):
        if len(self.lows) != len(self.exts):
            raise ValueError(f"DeviceBox: lows {self.lows} and exts {self.exts} differ in rank")

    @property
    def size(self) -> int:
        """The number of elements in the box."""
        return prod(self.exts)

    def contains(self, x: Sequence[int]) -> bool:
        """Whether global index x lies in the box."""
        return len(x) == len(self.lows) and all(lo <= xi < lo + e
                                                for xi, lo, e in zip(x, self.lows, self.exts))

    def indices(self) -> Iterator[tuple[int, ...]]:
        """The global indices of the box, row-major (the box-relative flat order)."""
        return _cartesian(*(range(lo, lo + e) for lo, e in zip(self.lows, self.exts)))


@dataclass(frozen=True)
class DeviceSharding:
    """Per rank, the boxes of a tensor it holds, and the memory layout of one box.

    ``shape``: the global shape; ``world``: 1 + the largest device id the layout reaches;
    ``boxes[g]`` for every g in ``range(world)``: the disjoint boxes rank g holds, sorted by
    ``lows`` (empty when g holds nothing; several when the device strides or replicas give g
    more than one chunk); ``local``: a layout over ``m`` only whose shape is
    :meth:`local_shape` — element y of a box (box-relative) lies at ``local.map(y)[m]`` on its
    rank, the same for every box.  The law is the module's.

    Every box has the same extents, so the box holding x has ``lows[d] = x[d] − x[d] % ext[d]``
    whatever the rank: :meth:`owners` and :meth:`local_offset` look it up, they never scan.
    """

    shape: tuple[int, ...]
    world: int
    boxes: dict[int, tuple[DeviceBox, ...]]
    local: Layout
    # lows of a box → the ranks holding it (ascending); derived from ``boxes``
    _ranks: dict[tuple[int, ...], tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        ranks: dict[tuple[int, ...], list[int]] = {}
        for g in sorted(self.boxes):
            for b in self.boxes[g]:
                ranks.setdefault(b.lows, []).append(g)
        object.__setattr__(self, "_ranks", {k: tuple(v) for k, v in ranks.items()})

    def local_shape(self) -> tuple[int, ...]:
        """The extents of every box (the shape ``local`` admits)."""
        # device_sharding gives every sharding at least one box, all of one extent
        return next(bs[0].exts for bs in self.boxes.values() if bs)

    def _lows(self, x) -> tuple[int, ...]:
        if isinstance(x, int) and not isinstance(x, bool):
            if not 0 <= x < prod(self.shape):
                raise IndexError(f"flat index {x} outside shape {self.shape}")
            x = unflatten_index(x, self.shape)
        x = tuple(x)
        if len(x) != len(self.shape) or not all(0 <= xi < n for xi, n in zip(x, self.shape)):
            raise IndexError(f"index {x} outside shape {self.shape}")
        return tuple(xi - xi % e for xi, e in zip(x, self.local_shape()))

    def owners(self, x) -> tuple[int, ...]:
        """The ranks holding global element x (a multi-index or a flat row-major index), ascending.

        Law: ``g in owners(x)`` ⇔ some point of ``layout.map(x, shape)`` has ``gpuid == g``.
        """
        return self._ranks.get(self._lows(x), ())

    def local_offset(self, x, g: int) -> int | None:
        """The memory offset of global element x on rank g, or None when g does not hold x.

        Law: ``(g, local_offset(x, g))`` is the one point of x's map on rank g.
        """
        lows = self._lows(x)
        if g not in self._ranks.get(lows, ()):
            return None
        x = unflatten_index(x, self.shape) if isinstance(x, int) else tuple(x)
        y = tuple(xi - lo for xi, lo in zip(x, lows))
        (c,) = self.local.map(y, self.local_shape())
        return c[MEMORY]


def device_sharding(layout, shape: Sequence[int], axis="gpuid") -> DeviceSharding:
    """The :class:`DeviceSharding` of ``layout`` (a :class:`Layout` or its text) over ``shape``.

    ``axis`` names the device axis (``gpuid`` by default); the other axis must be ``m``.
    Boxes come from the structure: for each choice of device digits (one per device iter) and
    replica value, ``g = O[axis] + Σ digit·stride + Σ replica`` and the box's low in dimension
    d is that dimension's device digits, read row-major, times the product of its memory
    extents.  Raises :class:`LayoutError` when the layout is outside the supported class (see
    the module docstring), naming the layout and the condition.
    """
    dev = canonical_axis(axis)
    if isinstance(layout, str):
        layout = parse(layout)
    try:
        shape = tuple(int(n) for n in shape)
    except TypeError:
        raise LayoutError(f"device_sharding: shape {shape!r} is not a sequence of ints") from None
    where = f"device_sharding({layout}, shape {shape}, axis {dev!r})"
    if dev == MEMORY:
        raise LayoutError(f"{where}: the device axis must differ from the memory axis {MEMORY!r}")
    if isinstance(layout, SwizzledLayout):
        raise LayoutError(f"{where}: a swizzled layout is not a chunk layout (the swizzle permutes "
                          "memory across box rows); give the plain layout")
    if not isinstance(layout, Layout):
        raise LayoutError(f"{where}: a {type(layout).__name__} is not an Axe Layout "
                          "(for a DistributedLayout pass its .layout and .shape)")

    # Axes: extent-1 iters produce only 0, so they do not count as touching their axis.
    stray = sorted({a for e, _, a in layout.shard + layout.replica if e > 1 and a not in (dev, MEMORY)}
                   | {a for a in layout.offset if a not in (dev, MEMORY)})
    if stray:
        raise LayoutError(f"{where}: touches axes {stray}; only the device axis {dev!r} and memory "
                          f"{MEMORY!r} are allowed")
    mem_replicas = [it for it in layout.replica if it[2] == MEMORY and it[0] > 1]
    if mem_replicas:
        raise LayoutError(f"{where}: replica {mem_replicas[0]} is over memory; an element would be "
                          "held twice in one memory (replicas must be over the device axis)")

    try:
        blocks = group(layout, shape).blocks
    except LayoutError as err:
        raise LayoutError(f"{where}: does not group by the shape: {err}") from None

    # Per dimension: the device iters (outer) and the memory iters (inner) of its block.
    dev_iters: list[tuple[Iter, ...]] = []
    mem_iters: list[Iter] = []
    exts: list[int] = []
    for d, blk in enumerate(blocks):
        blk = [it for it in blk if it[0] > 1]
        first_mem = next((k for k, it in enumerate(blk) if it[2] == MEMORY), len(blk))
        inner_dev = next((it for it in blk[first_mem:] if it[2] == dev), None)
        if inner_dev is not None:
            raise LayoutError(f"{where}: dim {d} has a {dev} iter {inner_dev} inside a memory iter "
                              f"{blk[first_mem]}; a device must hold contiguous chunks "
                              f"({dev} iters outer to memory iters in every dim)")
        dev_iters.append(tuple(blk[:first_mem]))
        mem_iters.extend(blk[first_mem:])
        exts.append(prod(it[0] for it in blk[first_mem:]))
    exts_t = tuple(exts)

    # Per dimension, each chunk: (its low, its contribution to the device id).  The device
    # digits of a dimension read row-major give the chunk's index along that dimension.
    per_dim: list[list[tuple[int, int]]] = []
    for its, e in zip(dev_iters, exts_t):
        chunks = []
        for digits in _cartesian(*(range(it[0]) for it in its)):
            index, gid = 0, 0
            for dg, it in zip(digits, its):
                index = index * it[0] + dg
                gid += dg * it[1]
            chunks.append((index * e, gid))
        per_dim.append(chunks)
    # Replica values on the device axis, as a set: coinciding choices hold one copy.
    shifts = sorted(c[dev] for c in _minkowski(tuple(it for it in layout.replica if it[0] > 1)))
    base = layout.offset[dev]

    held: dict[int, set] = {}
    for combo in _cartesian(*per_dim):
        lows = tuple(lo for lo, _ in combo)
        g0 = base + sum(gid for _, gid in combo)
        for r in shifts:
            g = g0 + r
            if g < 0:
                raise LayoutError(f"{where}: the chunk at {lows} is on device {g} < 0 (replica shift "
                                  f"{r}); device ids must be >= 0 — raise the {dev} offset")
            held.setdefault(g, set()).add(lows)
    world = 1 + max(held)
    boxes = {g: tuple(DeviceBox(lows, exts_t) for lows in sorted(held.get(g, ()))) for g in range(world)}
    local = Layout(mem_iters or [Iter(1, 1)], (), Coord.unit(MEMORY, layout.offset[MEMORY]))
    return DeviceSharding(shape, world, boxes, local)
