"""Iters: the atoms of a layout.  ``Iter(e, s, a)`` maps x ∈ [0, e) to ``(x·s)@a``."""

from __future__ import annotations

from math import gcd

from .coord import Coord, canonical_axis, format_term

__all__ = ["Iter", "intersect"]


class Iter(tuple):
    """An immutable iter ``(extent, stride, axis)``: extent > 0, stride ≠ 0 (negative allowed).

    Law: ``f_I(x) = (x·stride)@axis`` for x in [0, extent).
    """

    __slots__ = ()

    def __new__(cls, extent: int, stride: int, axis: str = "m"):
        if not isinstance(extent, int) or isinstance(extent, bool) or extent < 1:
            raise ValueError(f"iter extent must be an int >= 1, got {extent!r}")
        if not isinstance(stride, int) or isinstance(stride, bool) or stride == 0:
            raise ValueError(f"iter stride must be a non-zero int, got {stride!r} (extent {extent})")
        return tuple.__new__(cls, (extent, stride, canonical_axis(axis)))

    @classmethod
    def _make(cls, extent: int, stride: int, axis: str) -> "Iter":
        """Unchecked constructor for values already known valid (hot paths)."""
        return tuple.__new__(cls, (extent, stride, axis))

    @property
    def extent(self) -> int:
        return self[0]

    @property
    def stride(self) -> int:
        return self[1]

    @property
    def axis(self) -> str:
        return self[2]

    def __call__(self, x: int) -> Coord:
        if not 0 <= x < self[0]:
            raise IndexError(f"{self}: index {x} outside [0, {self[0]})")
        return Coord.unit(self[2], x * self[1])

    def values(self) -> range:
        """The values this iter produces on its axis, in order."""
        return range(0, self[0] * self[1], self[1])

    def __repr__(self) -> str:
        return f"{self[0]}:{format_term(self[1], self[2])}"

    def __getnewargs__(self):
        return tuple(self)


def intersect(i1: Iter, i2: Iter) -> Iter | None:
    """``I1 ∩ I2`` (§3.4): the iter whose values are exactly the values both produce.

    Both iters must lie on one axis; None when they do not (their only common coordinate is
    the origin, which names no axis).  On one axis the common values are the multiples of
    ``lcm(|s1|, |s2|)`` up to the nearer end, with the shared sign; iters of opposite signs
    share only 0, an extent-1 iter.
    """
    if i1[2] != i2[2]:
        return None
    (e1, s1, a), (e2, s2, _) = i1, i2
    step = abs(s1) * abs(s2) // gcd(s1, s2)
    if (s1 > 0) != (s2 > 0):
        return Iter._make(1, step, a)
    reach = min((e1 - 1) * abs(s1), (e2 - 1) * abs(s2))
    return Iter._make(reach // step + 1, step if s1 > 0 else -step, a)
