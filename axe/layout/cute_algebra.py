"""CuTe's layout algebra on its own terms: ``shape:stride`` with nested tuples, colexicographic.

A :class:`CuteLayout` is CuTe's ``Layout<Shape, Stride>``: ``shape`` and ``stride`` are
congruent nested tuples of ints (or a single int each).  A 1-D index x is unflattened
**colexicographically** (the first mode fastest) and dotted with the strides.  Beyond its size
the last leaf mode keeps counting, as CuTe's ``idx2crd`` does; composition relies on that.

The operations follow the CuTe documentation (``media/docs/cpp/cute/02_layout_algebra.md``):
:func:`coalesce`, :func:`composition`, :func:`complement`, :func:`right_inverse`,
:func:`left_inverse`, :func:`logical_divide` (and :func:`zipped_divide`, :func:`tiled_divide`,
:func:`flat_divide`), :func:`logical_product`, :func:`blocked_product`, :func:`raked_product`.
Each states its law; the tests check every law by enumerating the induced index functions.
Where CuTe only asserts a precondition this module checks it and raises
:class:`~axe.layout.group.LayoutError` naming the operands and the failed condition.

The leaf routines work on ``(extent, stride)`` pairs whose strides need only ``+``, ``*int``
and ``==``, so :mod:`axe.layout.interop.cute` reuses them with Axe coordinates as strides.
"""

from __future__ import annotations

import re
from math import prod
from typing import Sequence

from .group import LayoutError

__all__ = [
    "CuteLayout", "make_layout", "parse_cute", "coalesce", "composition", "complement",
    "right_inverse", "left_inverse", "logical_divide", "zipped_divide", "tiled_divide",
    "flat_divide", "logical_product", "blocked_product", "raked_product",
    "flatten", "size_of", "compact_colex",
]


# --- integer tuples -------------------------------------------------------------------------
def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def flatten(t) -> tuple:
    """The leaves of a nested tuple, in order (an int is its own single leaf)."""
    if isinstance(t, tuple):
        return tuple(x for e in t for x in flatten(e))
    return (t,)


def size_of(shape) -> int:
    """Product of the leaves of a shape."""
    return prod(flatten(shape))


def _congruent(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_congruent(x, y) for x, y in zip(a, b))
    return not isinstance(a, tuple) and not isinstance(b, tuple)


def compact_colex(shape, start: int = 1):
    """CuTe's ``LayoutLeft`` strides for ``shape``: the first leaf fastest."""
    acc = [start]

    def walk(s):
        if isinstance(s, tuple):
            return tuple(walk(x) for x in s)
        d = acc[0]
        acc[0] *= s
        return d
    return walk(shape)


def _fmt(t) -> str:
    if isinstance(t, tuple):
        return "(" + ",".join(_fmt(x) for x in t) + ")"
    return str(t)


def _unflatten_like(flat: Sequence, profile):
    """Rebuild a nested tuple with the profile of ``profile`` from its leaves."""
    it = iter(flat)

    def walk(p):
        if isinstance(p, tuple):
            return tuple(walk(x) for x in p)
        return next(it)
    return walk(profile)


# --- the value ------------------------------------------------------------------------------
class CuteLayout:
    """An immutable CuTe layout ``shape:stride`` (nested tuples of ints, congruent).

    Law: ``L(x) = Σ_k ι(x)_k · stride_k`` with ι the colexicographic unflattening of x by the
    flattened shape (first leaf fastest; the last leaf unbounded).  ``L((c0, c1, …))`` takes a
    coordinate with one entry per top-level mode (each an int, itself colex within its mode,
    or a nested tuple).  ``stride`` defaults to the compact column-major strides.
    """

    __slots__ = ("shape", "stride")

    def __init__(self, shape, stride=None):
        if stride is None:
            stride = compact_colex(shape)
        if not _congruent(shape, stride):
            raise ValueError(f"CuteLayout: shape {_fmt(shape)} and stride {_fmt(stride)} are not congruent")
        for e in flatten(shape):
            if not _is_int(e) or e < 1:
                raise ValueError(f"CuteLayout: shape {_fmt(shape)} has a leaf {e!r} that is not an int >= 1")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    def __setattr__(self, *_):
        raise AttributeError("CuteLayout is immutable")

    # structure
    @property
    def rank(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    @property
    def depth(self) -> int:
        def d(t):
            return 1 + max((d(x) for x in t), default=0) if isinstance(t, tuple) else 0
        return d(self.shape)

    @property
    def size(self) -> int:
        return size_of(self.shape)

    @property
    def cosize(self) -> int:
        """``L(size − 1) + 1`` for non-negative strides: one past the largest index."""
        return sum((e - 1) * abs(d) for e, d in self.modes()) + 1

    def modes(self) -> list:
        """The flattened leaf modes ``[(extent, stride), …]`` (first fastest)."""
        return list(zip(flatten(self.shape), flatten(self.stride)))

    def __getitem__(self, i: int) -> "CuteLayout":
        """Top-level mode i as a layout (``layout<i>`` in CuTe)."""
        if not isinstance(self.shape, tuple):
            if i != 0:
                raise IndexError(f"{self} has rank 1, no mode {i}")
            return self
        return CuteLayout(self.shape[i], self.stride[i])

    def __iter__(self):
        return (self[i] for i in range(self.rank))

    # the function
    def __call__(self, coord=None, *more):
        if more:
            coord = (coord,) + more
        return _crd2idx(coord, self.shape, self.stride)

    def values(self) -> list:
        """``[L(0), L(1), …, L(size−1)]``."""
        return [self(i) for i in range(self.size)]

    # value semantics
    def __eq__(self, other) -> bool:
        return isinstance(other, CuteLayout) and self.shape == other.shape and self.stride == other.stride

    def __hash__(self) -> int:
        return hash((self.shape, self.stride))

    def __repr__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


def _crd2idx(coord, shape, stride):
    if isinstance(coord, tuple):
        if not isinstance(shape, tuple) or len(coord) != len(shape):
            raise ValueError(f"coordinate {_fmt(coord)} does not match shape {_fmt(shape)}")
        return sum(_crd2idx(c, s, d) for c, s, d in zip(coord, shape, stride))
    if not _is_int(coord) or coord < 0:
        raise ValueError(f"coordinate {coord!r} must be a non-negative int")
    leaves_s, leaves_d = flatten(shape), flatten(stride)
    acc = 0
    for k, (e, d) in enumerate(zip(leaves_s, leaves_d)):
        if k == len(leaves_s) - 1:
            return acc + coord * d
        coord, r = divmod(coord, e)
        acc += r * d
    return acc


def make_layout(*layouts: CuteLayout) -> CuteLayout:
    """Concatenation ``(L0, L1, …)``: mode i of the result is ``layouts[i]``."""
    return CuteLayout(tuple(L.shape for L in layouts), tuple(L.stride for L in layouts))


def _from_modes(modes: list) -> CuteLayout:
    """A depth-≤1 layout from leaf modes: a scalar for one mode, ``1:0`` for none."""
    if not modes:
        return CuteLayout(1, 0)
    if len(modes) == 1:
        return CuteLayout(modes[0][0], modes[0][1])
    return CuteLayout(tuple(e for e, _ in modes), tuple(d for _, d in modes))


_TOKEN = re.compile(r"\s*(?:(-?\d+)|([(),:]))", re.ASCII)
_MAX_DIGITS = 1000
#: deepest tuple nesting read: the CuteLayout value, its printing and its algebra recurse on
#: the nesting, so deeper text is refused here instead of exhausting Python's stack later
MAX_NESTING = 100


def parse_cute(text: str) -> CuteLayout:
    """Read CuTe's printed form ``((2,4),3):((1,8),2)`` (static ``_`` prefixes allowed).

    Law: ``parse_cute(str(L)) == L``; any other text raises ValueError naming what was
    expected.  The reader keeps an explicit stack; nesting beyond ``MAX_NESTING`` is refused.
    """
    src = text.replace("_", "")
    toks, pos = [], 0
    while pos < len(src):
        mt = _TOKEN.match(src, pos)
        if mt is None or mt.end() == pos:
            if src[pos:].strip() == "":
                break
            raise ValueError(f"parse_cute({_short(text)}): unexpected {src[pos:pos + 8]!r} at column {pos}")
        if mt.group(1) is not None and len(mt.group(1)) > _MAX_DIGITS:
            raise ValueError(f"parse_cute({_short(text)}): an integer of {len(mt.group(1))} digits at column "
                             f"{mt.start(1)} (at most {_MAX_DIGITS})")
        toks.append(int(mt.group(1)) if mt.group(1) is not None else mt.group(2))
        pos = mt.end()
    i = 0

    def tup():
        """One int or parenthesized tuple from toks[i:], iteratively."""
        nonlocal i
        stack: list[list] = []
        while True:
            if i < len(toks) and toks[i] == "(":
                i += 1
                stack.append([])
                if len(stack) > MAX_NESTING:
                    raise ValueError(f"parse_cute({_short(text)}): tuples nested deeper than {MAX_NESTING}")
                continue
            if not (i < len(toks) and _is_int(toks[i])):
                raise ValueError(f"parse_cute({_short(text)}): expected an int or '('")
            value = toks[i]
            i += 1
            while True:                      # close as many tuples as the text closes
                if not stack:
                    return value
                stack[-1].append(value)
                if i < len(toks) and toks[i] == ",":
                    i += 1
                    break                    # the next item of the innermost tuple
                if i >= len(toks) or toks[i] != ")":
                    raise ValueError(f"parse_cute({_short(text)}): expected ')'")
                i += 1
                value = tuple(stack.pop())
    shape = tup()
    if i >= len(toks) or toks[i] != ":":
        if i != len(toks):
            raise ValueError(f"parse_cute({_short(text)}): trailing text")
        return CuteLayout(shape)
    i += 1
    stride = tup()
    if i != len(toks):
        raise ValueError(f"parse_cute({_short(text)}): trailing text")
    return CuteLayout(shape, stride)


def _short(text: str) -> str:
    return repr(text) if len(text) <= 120 else f"{text[:60]!r}…({len(text)} characters)"


# --- coalesce -------------------------------------------------------------------------------
def coalesce_modes(modes) -> list:
    """Drop extent-1 modes and merge ``(e0, d0), (e1, e0·d0)`` into ``(e0·e1, d0)``."""
    out: list = []
    for e, d in modes:
        if e == 1:
            continue
        if out and d == out[-1][1] * out[-1][0]:
            out[-1] = (out[-1][0] * e, out[-1][1])
        else:
            out.append((e, d))
    return out


def coalesce(L: CuteLayout, profile=None) -> CuteLayout:
    """The simplest layout with L's size and index function.

    Law: ``size(R) == size(L)``, ``depth(R) <= 1`` and ``R(i) == L(i)`` for i < size(L).  With
    a ``profile`` (a nested tuple of flags) coalescing applies per mode at its leaves, and R
    keeps L's modes down to the profile.
    """
    if profile is None or not isinstance(profile, tuple):
        return _from_modes(coalesce_modes(L.modes()))
    if len(profile) > L.rank:
        raise LayoutError(f"coalesce({L}, {_fmt(profile)}): the profile has more modes than the layout")
    parts = [coalesce(L[i], profile[i]) if i < len(profile) else L[i] for i in range(L.rank)]
    return make_layout(*parts)


# --- composition ----------------------------------------------------------------------------
def radix_digits(modes, x: int) -> list:
    """Colex digits of x in the mixed radix of ``modes``' extents (the last digit unbounded)."""
    out = []
    for k, (e, _) in enumerate(modes):
        if k == len(modes) - 1:
            out.append(x)
        else:
            x, r = divmod(x, e)
            out.append(r)
    return out


def compose_leaf(modes_a, s: int, d: int, who: str = "composition") -> list:
    """``A ∘ s:d`` for coalesced leaf modes of A: the modes of ``k ↦ A(k·d)``, k < s.

    Divide d out of A's shape from the left (each mode must divide the remaining stride or
    be divided by it: CuTe's stride divisibility condition), then keep the first s elements
    (shape divisibility condition).  A's last mode is unbounded.  Those conditions are
    sufficient, not necessary: when one fails, the s values are factored directly
    (:func:`factor_values`, exhaustive), so a refusal proves that no layout lists them.
    """
    if s == 1:
        return []
    if d == 0:
        return [(s, 0 * modes_a[0][1])]
    if d < 0:
        raise LayoutError(f"{who}: the inner mode {s}:{d} has a negative stride; it would index A "
                          "below 0")
    try:
        return _compose_leaf_divisible(modes_a, s, d, who)
    except LayoutError as err:
        vals = [_eval_modes(modes_a, k * d) for k in range(s)]
        modes = factor_values(vals)
        if modes is None:
            raise LayoutError(f"{err}; and no layout lists the values {_show_values(vals)} of "
                              f"k ↦ A({d}·k), k < {s}") from None
        return modes


def _show_values(vals) -> str:
    return "(" + ",".join(map(str, vals[:8])) + (",…)" if len(vals) > 8 else ")")


def _eval_modes(modes, x: int):
    """``Σ digit_k · stride_k`` over the colex digits of x (the last mode unbounded)."""
    acc = 0 * modes[0][1]
    for (_, t), v in zip(modes, radix_digits(modes, x)):
        acc = acc + t * v
    return acc


def _compose_leaf_divisible(modes_a, s: int, d: int, who: str) -> list:
    """CuTe's algorithm for ``A ∘ s:d`` under its divisibility conditions (s > 1, d > 0)."""
    unbounded = list(modes_a[:-1]) + [(None, modes_a[-1][1])]
    rest, strided = d, []
    for k, (e, t) in enumerate(unbounded):
        if e is None:
            strided.append((None, t * rest))
            break
        if rest % e == 0:
            rest //= e
            continue
        if e % rest:
            raise LayoutError(f"{who}: stride divisibility fails for the inner mode {s}:{d}: "
                              f"after dividing out {d // rest}, the remaining stride {rest} and "
                              f"A's mode {e}:{t} do not divide one another")
        strided.append((e // rest, t * rest))
        strided.extend(unbounded[k + 1:])
        break
    out, left = [], s
    for e, t in strided:
        if e is None:
            out.append((left, t))
            break
        if left % e == 0:
            out.append((e, t))
            left //= e
        elif e % left == 0:
            out.append((left, t))
            left = 1
        else:
            raise LayoutError(f"{who}: shape divisibility fails for the inner mode {s}:{d}: "
                              f"{left} remaining elements and the strided mode {e}:{t} do not "
                              "divide one another")
        if left == 1:
            break
    return coalesce_modes(out)


def check_no_carry(modes_a, leaves, who: str, offsets=()) -> None:
    """Left-distributivity guard: the inner modes' digits in A's radix never carry.

    ``A(Σ_k B_k(c_k)) = Σ_k A(B_k(c_k))`` holds when, in every mode of A but the last, the
    largest digits of the leaves (and of the extra ``offsets``) sum below the extent.
    """
    if len(modes_a) < 2:
        return
    top = [0] * len(modes_a)
    for s, d in leaves:
        best = [0] * len(modes_a)
        for c in range(s):
            for i, v in enumerate(radix_digits(modes_a, c * d)):
                best[i] = max(best[i], v)
        top = [a + b for a, b in zip(top, best)]
    for off in offsets:
        top = [a + b for a, b in zip(top, radix_digits(modes_a, off))]
    for i, ((e, t), v) in enumerate(zip(modes_a[:-1], top)):
        if v > e - 1:
            raise LayoutError(f"{who}: the inner layout is not left-distributive over A: its modes "
                              f"{_fmt(tuple(leaves))} reach digit {v} in A's mode {i} ({e}:{t}), "
                              "which carries (the inner layout is not injective enough)")


def _layout_modes_nonneg(B: CuteLayout, who: str):
    for e, d in B.modes():
        if d < 0 and e > 1:
            raise LayoutError(f"{who}: the inner layout {B} has a negative stride")


def composition(A: CuteLayout, B) -> CuteLayout:
    """``R = A ∘ B``: ``R(c) == A(B(c))`` for every coordinate c of B, R compatible with B.

    B is a layout, an int n (``n:1``), or a tiler: a tuple of those applied to A's modes one by
    one (``R_i = A_i ∘ B_i``; A's further modes are kept).  Beyond ``size(A)``, A is extended
    along the last mode of ``coalesce(A)``, as in CuTe (the law above then reads A that way).  Raises :class:`LayoutError` when a divisibility condition fails or B's modes would
    carry into one another in A's radix (then no layout computes ``A ∘ B``).
    """
    if _is_int(B):
        B = CuteLayout(B, 1)
    if isinstance(B, tuple):
        if len(B) > A.rank:
            raise LayoutError(f"composition({A}, tiler of {len(B)} modes): A has only {A.rank} modes")
        parts = [composition(A[i], B[i]) if i < len(B) else A[i] for i in range(A.rank)]
        return make_layout(*parts)
    if not isinstance(B, CuteLayout):
        raise TypeError(f"composition: the inner operand must be a CuteLayout, an int or a tuple, got {B!r}")
    who = f"composition({A}, {B})"
    _layout_modes_nonneg(B, who)
    modes_a = coalesce_modes(A.modes()) or [(1, 0)]
    leaves = B.modes()

    def walk(shape, stride, leaf):
        if isinstance(shape, tuple):
            parts = [walk(s, d, leaf) for s, d in zip(shape, stride)]
            return tuple(p[0] for p in parts), tuple(p[1] for p in parts)
        R = _from_modes(leaf(shape, stride))
        return R.shape, R.stride
    try:
        check_no_carry(modes_a, leaves, who)
        shape, stride = walk(B.shape, B.stride, lambda s, d: compose_leaf(modes_a, s, d, who))
    except LayoutError as err:
        # CuTe's divisibility conditions are sufficient, not necessary: decide on the composed
        # function itself, so that a refusal is a proof that no layout computes A ∘ B.
        leaf_modes = _compose_by_values(_from_modes(modes_a), B)
        if leaf_modes is None:
            raise LayoutError(f"{err} (and by enumeration no layout compatible with {B} computes "
                              f"{A} ∘ {B})") from None
        it = iter(leaf_modes)
        shape, stride = walk(B.shape, B.stride, lambda s, d: next(it))
    return CuteLayout(shape, stride)


def factor_values(vals: Sequence[int]):
    """Leaf modes ``[(e, d), …]`` (colex, coalesced) whose layout lists exactly ``vals``, or None.

    Exhaustive: a layout's first non-unit mode (e, d) has e | len(vals), ``vals[i] = i·d`` for
    i < e and ``vals[i + e·j] = vals[i] + vals[e·j]``; the rest ``vals[::e]`` is again a layout.
    Every divisor is tried, so None means no layout of that size has these values.
    """
    n = len(vals)
    if _is_int(vals[0]) and vals[0] != 0:
        return None
    if n == 1:
        return []
    d = vals[1]
    for e in sorted((e for e in range(2, n + 1) if n % e == 0), reverse=True):
        if any(vals[i] != d * i for i in range(e)):
            continue
        rest = vals[::e]
        if any(vals[i + e * j] != vals[i] + rest[j] for j in range(len(rest)) for i in range(e)):
            continue
        tail = factor_values(rest)
        if tail is not None:
            return coalesce_modes([(e, d)] + tail)
    return None


def _compose_by_values(A: CuteLayout, B: CuteLayout):
    """Per leaf of B, modes computing ``c ↦ A(B(c))``, or None when no layout compatible with B
    does (a layout is the sum of its modes' functions, so ``A ∘ B`` must split into one
    function per leaf of B, each of which must be a layout: both are checked exhaustively).
    A is read beyond its size along its last (coalesced) mode, as in CuTe."""
    leaves = B.modes()
    per_leaf = []
    for e, d in leaves:
        vals = [A(c * d) for c in range(e)]
        modes = factor_values(vals)
        if modes is None:
            return None
        per_leaf.append((vals, modes))
    for x in range(B.size):
        acc, rest = 0, x
        for (e, _), (vals, _) in zip(leaves, per_leaf):
            rest, r = divmod(rest, e)
            acc += vals[r]
        if acc != A(B(x)):
            return None
    return [modes for _, modes in per_leaf]


# --- complement and inverses ----------------------------------------------------------------
def complement(A: CuteLayout, cotarget=None) -> CuteLayout:
    """``A*``: the ordered layout of the repetitions of A within ``size(cotarget)``.

    Laws (CuTe's post-conditions): R's strides are positive and increasing, ``R(i) != A(j)``
    for ``1 <= i < size(R)``, ``(A, R)`` is injective and its cosize is at least
    ``size(cotarget)``.  Default cotarget: ``cosize(A)``.  CuTe's current algorithm: a
    stride that is not a multiple of the extent·stride below it leaves a gap of
    ``⌊stride / current⌋`` repetitions (``complement((4,10):(1,10)) = 2:4``).  Raises
    :class:`LayoutError` exactly where CuTe's static_assert fires (a sorted stride below the
    extent·stride of the modes below it: every non-injective A, and some injective ones such
    as ``(3,2):(2,3)``, which CuTe rejects too).
    """
    M = A.cosize if cotarget is None else (size_of(cotarget) if isinstance(cotarget, tuple) else cotarget)
    modes = [(e, d) for e, d in coalesce_modes(A.modes()) if e > 1 and d != 0]
    if any(d < 0 for _, d in modes):
        raise LayoutError(f"complement({A}, {M}): A has a negative stride")
    modes.sort(key=lambda m: (m[1], m[0]))
    current, out, reach = 1, [], 1   # reach: cosize of (A, R) so far
    for e, d in modes:
        if d < current:                  # CuTe: new_shape = d / current == 0, a static_assert
            raise LayoutError(f"complement({A}, {M}): mode {e}:{d} has a stride below {current}, the "
                              "extent·stride of the modes below it (CuTe: non-injective layout)")
        g = d // current                 # floor, as CuTe: the gap below d, rounded down
        out.append((g, current))
        reach += (g - 1) * current + (e - 1) * d
        current = e * d
    # CuTe's rest mode is ceil_div(M, current); when a stride did not divide, (A, R) reaches
    # only `reach` < current, and that count can fall short of CuTe's own post-condition
    # cosize((A, R)) >= M: take the repetitions that meet it (identical to CuTe whenever M <=
    # reach, e.g. for the default cotarget cosize(A)).
    rest = max(-(-M // current), 1 + max(0, -(-(M - reach) // current)))
    out.append((rest, current))
    return _from_modes(coalesce_modes(out))


def right_inverse(A: CuteLayout) -> CuteLayout:
    """The largest R with ``A(R(i)) == i`` for every i < size(R), built greedily.

    Walks A's coalesced modes by stride from 1: the mode with stride ``current`` contributes
    its extent, at A's colex weight of that mode.  For injective A with non-negative strides
    ``size(R)`` is the largest n with ``[0, n)`` inside A's image.
    """
    modes = coalesce_modes(A.modes())
    weights, w = [], 1
    for e, _ in modes:
        weights.append(w)
        w *= e
    current, out, used = 1, [], set()
    while True:
        pick = next((k for k, (e, d) in enumerate(modes) if d == current and k not in used), None)
        if pick is None:
            break
        used.add(pick)
        out.append((modes[pick][0], weights[pick]))
        current *= modes[pick][0]
    return _from_modes(coalesce_modes(out))


def left_inverse(A: CuteLayout) -> CuteLayout:
    """L with ``L(A(i)) == i`` for every i < size(A); A must be injective.

    ``left_inverse(A) = right_inverse((A, complement(A)))``.
    """
    vals = A.values()
    if len(set(vals)) < len(vals):
        raise LayoutError(f"left_inverse({A}): A is not injective; no left inverse exists")
    try:
        R = right_inverse(make_layout(A, complement(A)))
        if R.size >= A.cosize:
            return R
    except LayoutError:
        pass
    # Non-divisible strides (CuTe's complement leaves gaps, e.g. (4,6):(1,6)): read an index
    # in the mixed radix of A's sorted strides instead, L = (d_1, d_2/d_1, …):(0, w_1, …).
    R = _radix_left_inverse(A)
    if R is not None and all(R(v) == i for i, v in enumerate(vals)):
        return R
    if max(vals) <= _SEARCH_LIMIT:
        R = _search_left_inverse(vals)
        if R is not None:
            return R
        raise LayoutError(f"left_inverse({A}): no layout L has L(A(i)) == i for every i "
                          "(exhaustive search over L's mixed radix, strides solved over ℤ)")
    raise LayoutError(f"left_inverse({A}): A is injective, but neither right_inverse((A, A*)) "
                      f"nor the radix of A's sorted strides inverts it, and cosize {A.cosize} is "
                      f"beyond the exhaustive search's limit {_SEARCH_LIMIT + 1}: a left inverse "
                      "may still exist")


_SEARCH_LIMIT = 256


def _ordered_radices(limit: int):
    """Every tuple of extents ≥ 2 whose product is at most ``limit``, shortest first."""
    level = [((), 1)]
    while level:
        for t, _ in level:
            yield t
        level = [(t + (e,), p * e) for t, p in level for e in range(2, limit // p + 1)]


def solve_integer(rows: list, rhs: list, n: int):
    """An integer vector d with ``rows · d == rhs``, or None when none exists (exact).

    Column-style Hermite reduction: unimodular column operations U turn ``rows`` into a lower
    echelon H; ``H y = rhs`` is solved by forward substitution (a pivot must divide, a row
    without a new pivot must already hold), and ``d = U y``.
    """
    H = [list(r) for r in rows]
    U = [[int(i == j) for j in range(n)] for i in range(n)]

    def colop(i: int, j: int, q: int):                # column i -= q · column j
        for M in (H, U):
            for row in M:
                row[i] -= q * row[j]

    def swap(i: int, j: int):
        for M in (H, U):
            for row in M:
                row[i], row[j] = row[j], row[i]
    pc, pivots = 0, []
    for r in range(len(H)):
        if pc < n:
            for j in range(pc + 1, n):
                while H[r][j]:
                    colop(pc, j, H[r][pc] // H[r][j])
                    swap(pc, j)
            if H[r][pc] == 0:
                nz = next((j for j in range(pc + 1, n) if H[r][j]), None)
                if nz is not None:
                    swap(pc, nz)
        pivots.append(pc < n and H[r][pc] != 0)
        if pivots[-1]:
            pc += 1
    y, k = [0] * n, 0
    for r, piv in enumerate(pivots):
        acc = sum(H[r][j] * y[j] for j in range(k))
        if piv:
            q, rem = divmod(rhs[r] - acc, H[r][k])
            if rem:
                return None
            y[k] = q
            k += 1
        elif acc != rhs[r]:
            return None
    return [sum(U[i][j] * y[j] for j in range(n)) for i in range(n)]


def _search_left_inverse(vals: list):
    """A layout L with ``L(vals[i]) == i`` for every i, or None when none exists.

    L only matters on [0, max(vals)], where it is ``Σ_k digit_k(x)·d_k`` in the colex radix of
    its extents, the last mode running on (CuTe's unbounded last mode): every radix with
    product ≤ max(vals) is tried, and for each the strides solve a linear system over ℤ.
    """
    top = max(vals)
    for radix in _ordered_radices(top):
        n = len(radix) + 1
        rows = []
        for v in vals:
            row = []
            for e in radix:
                v, r = divmod(v, e)
                row.append(r)
            rows.append(row + [v])
        d = solve_integer(rows, list(range(len(vals))), n)
        if d is not None:
            last = -(-(top + 1) // prod(radix))
            return _from_modes(coalesce_modes(list(zip(radix + (last,), d))))
    return None


def _radix_left_inverse(A: CuteLayout):
    """``(d_1, d_2/d_1, …, e_k):(0, w_1, …, w_k)`` over A's coalesced modes sorted by stride
    (w: their colex weights in A's domain), when each stride divides the next; else None."""
    modes = coalesce_modes(A.modes())
    weights, w = [], 1
    for e, _ in modes:
        weights.append(w)
        w *= e
    ordered = sorted((d, e, wt) for (e, d), wt in zip(modes, weights) if e > 1)
    if not ordered or ordered[0][0] <= 0:
        return None
    out, below = [(ordered[0][0], 0)], ordered[0][0]
    for (d, e, wt), nxt in zip(ordered, ordered[1:] + [None]):
        if nxt is None:
            out.append((e, wt))
            break
        if nxt[0] % d or nxt[0] < e * d:
            return None
        out.append((nxt[0] // d, wt))
    return _from_modes(coalesce_modes(out))


# --- divide and product ---------------------------------------------------------------------
def _tiler_layout(B) -> CuteLayout:
    return CuteLayout(B, 1) if _is_int(B) else B


def logical_divide(A: CuteLayout, B) -> CuteLayout:
    """``A ⊘ B = A ∘ (B, B*)`` with ``B* = complement(B, size(A))``: (tile, rest).

    Law: ``R((i, j)) == A((B, B*)(i + size(B)·j))``.  A tuple tiler divides mode by mode.
    """
    if isinstance(B, tuple):
        if len(B) > A.rank:
            raise LayoutError(f"logical_divide({A}, tiler of {len(B)} modes): A has only {A.rank} modes")
        return make_layout(*[logical_divide(A[i], B[i]) if i < len(B) else A[i] for i in range(A.rank)])
    B = _tiler_layout(B)
    return composition(A, make_layout(B, complement(B, A.size)))


def _split_divide(A: CuteLayout, B):
    ld = logical_divide(A, B)
    if not isinstance(B, tuple):
        return [ld[0]], [ld[1]]
    tiles = [ld[i][0] for i in range(len(B))]
    rests = [ld[i][1] for i in range(len(B))] + [ld[i] for i in range(len(B), A.rank)]
    return tiles, rests


def zipped_divide(A: CuteLayout, B) -> CuteLayout:
    """``((tiles…), (rests…, A's other modes))``: mode 0 is ``composition(A, B)``."""
    tiles, rests = _split_divide(A, B)
    return make_layout(make_layout(*tiles) if len(tiles) > 1 else tiles[0],
                       make_layout(*rests) if len(rests) > 1 else rests[0])


def tiled_divide(A: CuteLayout, B) -> CuteLayout:
    """``((tiles…), rest0, rest1, …)``."""
    tiles, rests = _split_divide(A, B)
    return make_layout(make_layout(*tiles) if len(tiles) > 1 else tiles[0], *rests)


def flat_divide(A: CuteLayout, B) -> CuteLayout:
    """``(tile0, tile1, …, rest0, rest1, …)``."""
    tiles, rests = _split_divide(A, B)
    return make_layout(*tiles, *rests)


def logical_product(A: CuteLayout, B) -> CuteLayout:
    """``A ⊗ B = (A, complement(A, size(A)·cosize(B)) ∘ B)``: B's arrangement of copies of A.

    Law: mode 0 is A; ``R((i, j)) == A(i) + C(j)`` with C the second mode; for injective A and
    B the result is injective.  A tuple tiler multiplies mode by mode.
    """
    if isinstance(B, tuple):
        if len(B) > A.rank:
            raise LayoutError(f"logical_product({A}, tiler of {len(B)} modes): A has only {A.rank} modes")
        return make_layout(*[logical_product(A[i], B[i]) if i < len(B) else A[i] for i in range(A.rank)])
    B = _tiler_layout(B)
    return make_layout(A, composition(complement(A, A.size * B.cosize), B))


def _padded(L: CuteLayout, rank: int) -> list:
    modes = list(L) if isinstance(L.shape, tuple) else [L]
    return modes + [CuteLayout(1, 0)] * (rank - len(modes))


def _zip_product(A: CuteLayout, B: CuteLayout, raked: bool) -> CuteLayout:
    rank = max(A.rank, B.rank)
    a_modes, b_modes = _padded(A, rank), _padded(B, rank)
    A2, B2 = make_layout(*a_modes), make_layout(*b_modes)
    C = logical_product(A2, B2)[1]
    parts = []
    for i in range(rank):
        pair = (C[i], A2[i]) if raked else (A2[i], C[i])
        parts.append(coalesce(make_layout(*pair)))
    return make_layout(*parts)


def blocked_product(A: CuteLayout, B: CuteLayout) -> CuteLayout:
    """Rank-wise ``(A_i, C_i)`` with ``(A, C) = logical_product(A, B)``, each mode coalesced.

    Law: ``R((i_0 + size(A_0)·j_0, i_1 + …)) == A((i_0, i_1, …)) + C((j_0, j_1, …))``: B
    arranges whole blocks of A.  Ranks are padded with ``1:0`` modes to agree.
    """
    return _zip_product(A, B, raked=False)


def raked_product(A: CuteLayout, B: CuteLayout) -> CuteLayout:
    """Rank-wise ``(C_i, A_i)``: the copies of A interleave (a cyclic distribution).

    Law: ``R((j_0 + size(C_0)·i_0, …)) == A((i_0, …)) + C((j_0, …))``.
    """
    return _zip_product(A, B, raked=True)
