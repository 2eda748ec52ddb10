"""The Axe layout value ``L = (D, R, O)`` and its induced set-valued map.

``D`` (the shard) is an ordered tuple of iters, ``R`` (the replica) a multiset of iters and
``O`` (the offset) a coordinate.  For a flat index x ∈ [0, E_D), unflattened row-major (the
last iter fastest), ``f_L(x) = { f_D(x) + f_R(r) + O | r }``.
"""

from __future__ import annotations

from itertools import product as _cartesian
from math import prod
from typing import Iterable, Mapping, Sequence

from .coord import MEMORY, ZERO, Coord, as_coord, format_coord, format_term
from .iters import Iter

__all__ = ["Layout", "Replica", "S", "R", "flatten_index", "unflatten_index"]


def _as_iter(extent, stride) -> Iter:
    if isinstance(stride, Coord):
        if len(stride) != 1:
            raise ValueError(f"an iter stride names exactly one axis, got {stride}")
        (a, s), = stride.items()
        return Iter(extent, s, a)
    return Iter(extent, stride)


def _iters_from_subscript(key, what: str) -> tuple[Iter, ...]:
    """Read ``(e0,e1,...):(s0,s1,...)``, ``e:s`` or ``(e0,e1,...)`` (row-major on m)."""
    if isinstance(key, slice):
        if key.step is not None:
            raise SyntaxError(f"{what}[extents:strides] takes no third part, got step {key.step!r}")
        ext, strides = key.start, key.stop
        if isinstance(ext, tuple) != isinstance(strides, tuple):
            raise SyntaxError(f"{what}[...]: extents {ext!r} and strides {strides!r} must both be "
                              "tuples or both be scalars")
        if not isinstance(ext, tuple):
            ext, strides = (ext,), (strides,)
        if len(ext) != len(strides):
            raise SyntaxError(f"{what}[...]: {len(ext)} extents but {len(strides)} strides")
        return tuple(_as_iter(e, s) for e, s in zip(ext, strides))
    ext = key if isinstance(key, tuple) else (key,)
    strides, acc = [], 1
    for e in reversed(ext):
        strides.append(acc)
        if not isinstance(e, int) or e < 1:
            raise ValueError(f"{what}[{key!r}]: extents must be ints >= 1")
        acc *= e
    return tuple(Iter(e, s) for e, s in zip(ext, reversed(strides)))


def _sorted_iters(iters: Iterable[Iter]) -> tuple[Iter, ...]:
    return tuple(sorted(iters, key=lambda i: (i[2], i[1], i[0])))


class Replica:
    """The replica part ``R[...]`` on its own, to be added to a layout."""

    __slots__ = ("iters",)

    def __init__(self, iters: Iterable[Iter]):
        self.iters = _sorted_iters(iters)

    def __radd__(self, other):
        if isinstance(other, Layout):
            return other + self
        return NotImplemented

    def __repr__(self) -> str:
        return _format_iters("R", self.iters)


class Layout:
    """An immutable Axe layout ``(shard, replica, offset)``.

    ``shard``: non-empty tuple of :class:`Iter` (ordered); ``replica``: tuple of iters kept in
    a fixed sorted order (it is a multiset); ``offset``: :class:`Coord` (axis name → int).
    ``==`` compares these parts structurally; :func:`axe.layout.equivalent` compares maps.
    """

    __slots__ = ("shard", "replica", "offset", "_hash")

    def __init__(self, shard: Sequence, replica: Sequence = (), offset=ZERO):
        shard = tuple(i if isinstance(i, Iter) else Iter(*i) for i in shard)
        if not shard:
            raise ValueError("a layout needs at least one shard iter (use S[1:1] for a single element)")
        self.shard = shard
        self.replica = _sorted_iters(i if isinstance(i, Iter) else Iter(*i) for i in replica)
        self.offset = as_coord(offset) if not isinstance(offset, Mapping) or isinstance(offset, Coord) \
            else Coord(offset)
        self._hash = None

    @classmethod
    def _make(cls, shard: tuple, replica: tuple = (), offset: Coord = ZERO, sort: bool = True) -> "Layout":
        """Unchecked constructor for already-valid parts (hot paths)."""
        L = object.__new__(cls)
        L.shard = shard
        L.replica = _sorted_iters(replica) if sort and len(replica) > 1 else tuple(replica)
        L.offset = offset
        L._hash = None
        return L

    # --- value semantics -------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        if not isinstance(other, Layout) or type(other) is not type(self):
            return NotImplemented
        return (self.shard == other.shard and self.replica == other.replica
                and self.offset == other.offset)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.shard, self.replica, self.offset))
        return self._hash

    def __repr__(self) -> str:
        return format_layout(self)

    __str__ = __repr__

    def __add__(self, other) -> "Layout":
        if isinstance(other, Replica):
            return Layout._make(self.shard, self.replica + other.iters, self.offset)
        if isinstance(other, Layout):
            raise TypeError("layout + layout is not defined; use direct_sum(A, shape_a, B, shape_b)")
        return Layout._make(self.shard, self.replica, self.offset + as_coord(other), sort=False)

    def __sub__(self, other) -> "Layout":
        return self + (-as_coord(other))

    def with_offset(self, offset) -> "Layout":
        """The same shard and replica with ``offset`` replacing the offset."""
        return Layout._make(self.shard, self.replica, as_coord(offset), sort=False)

    # --- sizes and axes --------------------------------------------------------------------
    @property
    def size(self) -> int:
        """``E_D``: the number of logical elements (product of shard extents)."""
        return prod(i[0] for i in self.shard)

    @property
    def replica_size(self) -> int:
        """``E_R``: the number of replica choices (points may coincide, see :meth:`map`)."""
        return prod(i[0] for i in self.replica)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shard extents, i.e. the finest shape this layout admits."""
        return tuple(i[0] for i in self.shard)

    def axes(self) -> tuple[str, ...]:
        """The axes this layout touches (shard, replica and non-zero offset), sorted."""
        return tuple(sorted({i[2] for i in self.shard} | {i[2] for i in self.replica} | set(self.offset)))

    def span(self, axis: str | None = None):
        """Axis-wise span (Lemma C.1): ``1 + Σ |s|(e−1)`` over D ∪ R iters on the axis.

        With an axis: that axis's span (1 for an axis the layout does not touch).  Without:
        a dict over the axes the shard and replica touch.  The offset never enters.
        """
        spans = _spans(self.shard, self.replica)
        if axis is None:
            return spans
        from .coord import canonical_axis
        return spans.get(canonical_axis(axis), 1)

    def admits(self, shape: Sequence[int]) -> bool:
        """A shape is admitted when its product is ``E_D``."""
        return prod(shape) == self.size

    # --- the induced map -------------------------------------------------------------------
    def shard_coord(self, x: int) -> Coord:
        """``f_D(x) + O``: the representative coordinate of flat index x (replica 0)."""
        n = self.size
        if not 0 <= x < n:
            raise IndexError(f"{self}: flat index {x} outside [0, {n})")
        acc: dict[str, int] = dict(self.offset.items())
        for e, s, a in reversed(self.shard):
            x, d = divmod(x, e)
            if d:
                acc[a] = acc.get(a, 0) + d * s
        return Coord._from_dict(acc)

    def replica_points(self) -> frozenset:
        """``{ f_R(r) }``: the set of replica displacements (coinciding choices collapse)."""
        return _minkowski(self.replica)

    def map(self, x, shape: Sequence[int] | None = None) -> frozenset:
        """``f_L(x)``: the set of coordinates of element x, replicas included.

        ``x`` is a flat index, or a multi-index together with an admitted ``shape``
        (row-major, ``f_{L⟨S⟩}(u) = f_L(flat_S(u))``).
        """
        if shape is not None or isinstance(x, tuple):
            if shape is None:
                raise ValueError("a multi-dimensional index needs the shape it indexes")
            if not self.admits(shape):
                raise ValueError(f"shape {tuple(shape)} is not admitted by {self} (size {self.size})")
            x = flatten_index(x, shape)
        base = self.shard_coord(x)
        if not self.replica:
            return frozenset((base,))
        return frozenset(base + r for r in self.replica_points())

    def __call__(self, x, shape: Sequence[int] | None = None) -> frozenset:
        return self.map(x, shape)


def _spans(shard: Iterable[Iter], replica: Iterable[Iter] = ()) -> dict[str, int]:
    spans: dict[str, int] = {}
    for e, s, a in shard:
        spans[a] = spans.get(a, 1) + abs(s) * (e - 1)
    for e, s, a in replica:
        spans[a] = spans.get(a, 1) + abs(s) * (e - 1)
    return spans


#: most replica choices enumerated (by map, replica_points): beyond it an element's holders are
#: too many to list, and a ValueError says so instead of exhausting time and memory
MAX_REPLICA_CHOICES = 1 << 16


def _minkowski(iters: Sequence[Iter]) -> frozenset:
    """All sums ``Σ r_t·s_t@a_t`` over replica digits (a set: colliding choices merge)."""
    choices = prod(e for e, _, _ in iters)
    if choices > MAX_REPLICA_CHOICES:
        raise ValueError(f"replica {' '.join(map(repr, iters))} has {choices} choices; listing an "
                         f"element's holders enumerates them, and at most {MAX_REPLICA_CHOICES} are")
    points = {ZERO}
    for e, s, a in iters:
        step = [Coord.unit(a, k * s) for k in range(e)]
        points = {p + d for p in points for d in step}
    return frozenset(points)


def flatten_index(u: Sequence[int], shape: Sequence[int]) -> int:
    """Row-major ``flat_S(u)``; raises when u is outside the shape."""
    if len(u) != len(shape):
        raise ValueError(f"index {tuple(u)} has rank {len(u)}, shape {tuple(shape)} rank {len(shape)}")
    x = 0
    for ui, si in zip(u, shape):
        if not 0 <= ui < si:
            raise IndexError(f"index {tuple(u)} outside shape {tuple(shape)}")
        x = x * si + ui
    return x


def unflatten_index(x: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Inverse of :func:`flatten_index`: row-major digits of x (the last fastest)."""
    out = []
    for si in reversed(shape):
        x, d = divmod(x, si)
        out.append(d)
    return tuple(reversed(out))


def all_indices(shape: Sequence[int]):
    """Every multi-index of a shape in row-major order."""
    return _cartesian(*(range(s) for s in shape))


# --- syntax: building and printing ---------------------------------------------------------
class _ShardBuilder:
    """``S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)]``, ``S[e:s]``, ``S[(2,3,4)]`` (row-major)."""

    def __getitem__(self, key) -> Layout:
        return Layout._make(_iters_from_subscript(key, "S"))

    def __repr__(self):
        return "S"


class _ReplicaBuilder:
    """``R[2:4@warp]``, ``R[(2,3):(4@warp,1@gpuid)]``."""

    def __getitem__(self, key) -> Replica:
        return Replica(_iters_from_subscript(key, "R"))

    def __repr__(self):
        return "R"


S = _ShardBuilder()
R = _ReplicaBuilder()


def _format_iters(head: str, iters: Sequence[Iter]) -> str:
    if len(iters) == 1:
        e, s, a = iters[0]
        return f"{head}[{e}:{format_term(s, a)}]"
    ext = ",".join(str(i[0]) for i in iters)
    strides = ",".join(format_term(i[1], i[2]) for i in iters)
    return f"{head}[({ext}):({strides})]"


def format_layout(L: Layout) -> str:
    """The layout in the building syntax; ``parse(format_layout(L)) == L``."""
    text = _format_iters("S", L.shard)
    if L.replica:
        text += " + " + _format_iters("R", L.replica)
    if L.offset:
        off = format_coord(L.offset)
        text += (" - " + off[1:]) if off.startswith("-") else (" + " + off)
    return text
