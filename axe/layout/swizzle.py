"""Swizzled layouts: an Axe layout followed by an XOR swizzle of its memory axis."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from .coord import MEMORY, ZERO, Coord, as_coord, canonical_axis, format_coord
from .layout import Layout

__all__ = ["Swizzle", "SwizzledLayout"]


class Swizzle(NamedTuple):
    """CuTe's ``Swizzle<B, M, S>``: ``x ^ ((x >> S) & ((2^B − 1) << M))``.

    ``bits`` B rows of ``2^M`` elements are permuted by the B bits found ``shift`` S above
    them.  Requires ``shift >= bits`` (then the map is an involution on every aligned block
    of ``period`` elements).  TMA's 128-byte swizzle of 2-byte elements is Swizzle(3, 3, 3).
    """

    bits: int
    base: int
    shift: int

    def check(self) -> "Swizzle":
        """``self`` if it is a swizzle (non-negative fields, ``shift >= bits``, at most 64 bits in
        all), else a ValueError naming the condition."""
        if min(self) < 0 or self.shift < self.bits:
            raise ValueError(f"{self}: need bits, base, shift >= 0 and shift >= bits")
        if self.bits + self.base + self.shift > 64:
            # it acts on offsets of B+M+S bits (its period); beyond 64 it is no address swizzle,
            # and a period of 2^(10^30) would exhaust memory in the algebra
            raise ValueError(f"{self}: bits + base + shift is {sum(self)}; at most 64")
        return self

    @property
    def period(self) -> int:
        """Adding a multiple of ``period`` commutes with the swizzle."""
        return 1 << (self.bits + self.base + self.shift)

    def __call__(self, x: int) -> int:
        return x ^ ((x >> self.shift) & (((1 << self.bits) - 1) << self.base))

    def __repr__(self) -> str:
        return f"Swizzle({self.bits},{self.base},{self.shift})"


class SwizzledLayout:
    """``x ↦ { swizzle(c[m]) on the memory axis, other axes as they are | c ∈ f_inner(x) } + base``.

    ``inner`` is an Axe layout; ``base`` (on any axes) is added after the swizzle, which lets
    slices keep the swizzle innermost.
    """

    __slots__ = ("inner", "swizzle", "base", "axis")

    def __init__(self, inner: Layout, swizzle: Swizzle | Sequence[int], base=ZERO, axis: str = MEMORY):
        if not isinstance(inner, Layout):
            raise TypeError(f"a swizzled layout wraps an Axe layout, got {inner!r}")
        self.inner = inner
        self.swizzle = Swizzle(*swizzle).check()
        self.base = as_coord(base)
        self.axis = canonical_axis(axis)

    def with_inner(self, inner: Layout, base=None) -> "SwizzledLayout":
        """The same swizzle (and base, unless given) over another inner layout."""
        out = object.__new__(SwizzledLayout)
        out.inner, out.swizzle, out.axis = inner, self.swizzle, self.axis
        out.base = self.base if base is None else as_coord(base)
        return out

    # delegated shape facts
    @property
    def shard(self):
        return self.inner.shard

    @property
    def replica(self):
        return self.inner.replica

    @property
    def size(self) -> int:
        return self.inner.size

    def admits(self, shape) -> bool:
        """Whether the unswizzled layout admits ``shape`` (a swizzle changes offsets, not shapes)."""
        return self.inner.admits(shape)

    def axes(self):
        """The axes of the unswizzled layout and of the base offset, sorted."""
        return tuple(sorted(set(self.inner.axes()) | set(self.base)))

    def _apply(self, c: Coord) -> Coord:
        # two's-complement XOR: multiples of the period commute with the swizzle at any sign
        v = c[self.axis]
        return c + Coord.unit(self.axis, self.swizzle(v) - v) + self.base

    def map(self, x, shape=None) -> frozenset:
        """The inner layout's coordinates with the memory axis swizzled, plus ``base``."""
        return frozenset(self._apply(c) for c in self.inner.map(x, shape))

    __call__ = map

    def __eq__(self, other) -> bool:
        return (isinstance(other, SwizzledLayout) and self.inner == other.inner
                and self.swizzle == other.swizzle and self.base == other.base and self.axis == other.axis)

    def __hash__(self) -> int:
        return hash((self.inner, self.swizzle, self.base, self.axis))

    def __repr__(self) -> str:
        text = f"{self.swizzle} ∘ ({self.inner})"
        if self.axis != MEMORY:
            text += f" on {self.axis}"
        if self.base:
            base = format_coord(self.base)        # "-1 + 2@lane" must print as "- 1 + 2@lane" to parse
            text += f" - {base[1:]}" if base.startswith("-") else f" + {base}"
        return text
