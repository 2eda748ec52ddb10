"""Axes and coordinates: the codomain of every Axe layout.

A coordinate is an element of ℤA, the free abelian group over axis names: one integer per
axis, absent axes are 0.  Axes are plain names (strings) kept in an open registry; a new name
is a new axis.  ``reg`` is an alias of the memory axis ``m`` (a thread's registers are the
memory axis of its local buffer).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

__all__ = [
    "Axis", "Coord", "axis", "register_axis", "axis_names", "MEMORY",
    "m", "reg", "lane", "warp", "warpgroup", "tx", "cta", "bx", "by", "bz", "gpuid",
    "P", "F", "TLane", "TCol",
]

MEMORY = "m"

_ALIASES = {"reg": MEMORY}
_REGISTRY: dict[str, "Axis"] = {}


class Axis:
    """A named hardware axis.  ``k @ axis`` builds the coordinate k on that axis.

    Law: ``(k @ a)[a] == k`` and ``(k @ a)[b] == 0`` for every other axis b.
    """

    __slots__ = ("name", "doc")

    def __init__(self, name: str, doc: str = ""):
        self.name = name
        self.doc = doc

    def __rmatmul__(self, k: int) -> "Coord":
        if not isinstance(k, int) or isinstance(k, bool):
            raise TypeError(f"{k!r} @ {self.name}: the stride must be an int, got {type(k).__name__}")
        return Coord.unit(self.name, k)

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        return isinstance(other, Axis) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def canonical_axis(name) -> str:
    """The registered name of an axis given as a name, an alias or an :class:`Axis`."""
    if isinstance(name, Axis):
        return name.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"axis name must be an identifier, got {name!r}")
    return _ALIASES.get(name, name)


def register_axis(name: str, doc: str = "") -> Axis:
    """Register (or fetch) the axis called ``name``; the registry is open to any identifier."""
    key = canonical_axis(name)
    found = _REGISTRY.get(key)
    if found is None:
        found = _REGISTRY[key] = Axis(key, doc)
    return found


def axis(name) -> Axis:
    """The :class:`Axis` for a name or alias (registered on first use)."""
    return register_axis(name)


def axis_names() -> tuple[str, ...]:
    """Every registered axis name, in registration order."""
    return tuple(_REGISTRY)


m = register_axis("m", "memory (the default axis; a thread's registers are `m` of its local buffer)")
reg = m
lane = register_axis("lane", "lane within a warp")
warp = register_axis("warp", "warp within a CTA (or within a warpgroup slice)")
warpgroup = register_axis("warpgroup", "warpgroup within a CTA")
tx = register_axis("tx", "thread within a CTA")
cta = register_axis("cta", "CTA within a grid or cluster")
bx = register_axis("bx", "grid x index")
by = register_axis("by", "grid y index")
bz = register_axis("bz", "grid z index")
gpuid = register_axis("gpuid", "device within a mesh")
P = register_axis("P", "Trainium SBUF/PSUM partition")
F = register_axis("F", "Trainium free dimension")
TLane = register_axis("TLane", "Blackwell tensor-memory lane")
TCol = register_axis("TCol", "Blackwell tensor-memory column")


class Coord(Mapping):
    """An immutable, hashable element of ℤA: axis name → int, zero entries dropped.

    Supports ``+``, ``-``, scalar ``*`` and the axis-wise product :meth:`scale` (⊙).
    ``Coord`` compares equal to any mapping with the same non-zero entries.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, entries: Mapping | Iterable = ()):
        acc: dict[str, int] = {}
        items = entries.items() if isinstance(entries, Mapping) else entries
        for a, v in items:
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"coordinate component on {a!r} must be an int, got {v!r}")
            key = canonical_axis(a)
            acc[key] = acc.get(key, 0) + v
        self._items = tuple(sorted((a, v) for a, v in acc.items() if v))
        self._hash = None

    @classmethod
    def _from_sorted(cls, items: tuple) -> "Coord":
        c = object.__new__(cls)
        c._items = items
        c._hash = None
        return c

    @classmethod
    def _from_dict(cls, acc: dict) -> "Coord":
        """Unchecked constructor from a dict of registered axis names to ints."""
        return cls._from_sorted(tuple(sorted((a, v) for a, v in acc.items() if v)))

    @classmethod
    def unit(cls, axis_name: str, k: int = 1) -> "Coord":
        """``k@axis``."""
        return cls._from_sorted(((canonical_axis(axis_name), k),) if k else ())

    # Mapping protocol
    def __getitem__(self, a) -> int:
        for k, v in self._items:
            if k == a:
                return v
        a = canonical_axis(a)   # an alias or an Axis: look again under the registered name
        for k, v in self._items:
            if k == a:
                return v
        return 0

    def get(self, a, default=0):
        return self[a] if a in self else default

    def __contains__(self, a) -> bool:
        a = canonical_axis(a)
        return any(k == a for k, _ in self._items)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self):
        return self._items

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._items)
        return self._hash

    def __eq__(self, other) -> bool:
        if isinstance(other, Coord):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == Coord(other)._items
        if isinstance(other, int) and not isinstance(other, bool):
            return self._items == Coord.unit(MEMORY, other)._items
        return NotImplemented

    # group operations
    def __add__(self, other) -> "Coord":
        other = as_coord(other)
        if not other._items:
            return self
        if not self._items:
            return other
        acc = dict(self._items)
        for a, v in other._items:
            acc[a] = acc.get(a, 0) + v
        return Coord._from_sorted(tuple(sorted((a, v) for a, v in acc.items() if v)))

    __radd__ = __add__

    def __neg__(self) -> "Coord":
        return Coord._from_sorted(tuple((a, -v) for a, v in self._items))

    def __sub__(self, other) -> "Coord":
        return self + (-as_coord(other))

    def __rsub__(self, other) -> "Coord":
        return as_coord(other) - self

    def __mul__(self, k: int) -> "Coord":
        if not isinstance(k, int):
            return NotImplemented
        if k == 0:
            return Coord._from_sorted(())
        return Coord._from_sorted(tuple((a, v * k) for a, v in self._items))

    __rmul__ = __mul__

    def scale(self, w: Mapping) -> "Coord":
        """Axis-wise product ``self ⊙ w``; axes missing from ``w`` scale by 1."""
        return Coord._from_sorted(tuple((a, v * w.get(a, 1)) for a, v in self._items))

    def __repr__(self) -> str:
        return format_coord(self)

    def __str__(self) -> str:
        return format_coord(self)


ZERO = Coord._from_sorted(())


def as_coord(x) -> Coord:
    """Coerce an int (memory axis), a mapping or a Coord to a Coord."""
    if isinstance(x, Coord):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Coord.unit(MEMORY, x)
    if isinstance(x, Mapping):
        return Coord(x)
    raise TypeError(f"expected a coordinate (int, k@axis or mapping), got {x!r}")


def format_term(k: int, a: str) -> str:
    """``k@a``, or a bare ``k`` on the memory axis."""
    return str(k) if a == MEMORY else f"{k}@{a}"


def format_coord(c: Coord) -> str:
    """``5@warp + 3`` style text; ``0`` for the origin."""
    if not c._items:
        return "0"
    # memory first reads naturally ("64 + 1@warp"); other axes by name
    items = sorted(c._items, key=lambda t: (t[0] != MEMORY, t[0]))
    out = ""
    for i, (a, v) in enumerate(items):
        term = format_term(abs(v), a)
        if i == 0:
            out = ("-" if v < 0 else "") + term
        else:
            out += (" - " if v < 0 else " + ") + term
    return out
