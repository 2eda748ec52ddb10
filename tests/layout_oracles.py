"""Brute-force oracles for the layout tests, written from the definitions alone.

Nothing here calls the algebra under test beyond reading a layout's parts.
"""

from __future__ import annotations

from collections import Counter
from itertools import product
from math import prod

from hypothesis import strategies as st

from axe.layout import Iter, Layout

AXES = ("m", "lane", "warp")


def vec_add(a: dict, b: dict) -> dict:
    out = Counter(a)
    out.update(b)
    return {k: v for k, v in out.items() if v}


def as_key(c) -> tuple:
    return tuple(sorted((k, v) for k, v in dict(c).items() if v))


def digits(x: int, extents) -> list[int]:
    out = []
    for e in reversed(extents):
        x, d = divmod(x, e)
        out.append(d)
    return list(reversed(out))


def shard_value(shard, x: int) -> dict:
    acc: dict = {}
    for (e, s, a), d in zip(shard, digits(x, [i[0] for i in shard])):
        acc = vec_add(acc, {a: d * s})
    return acc


def replica_set(replica) -> set:
    pts = set()
    for ds in product(*(range(i[0]) for i in replica)):
        acc: dict = {}
        for (e, s, a), d in zip(replica, ds):
            acc = vec_add(acc, {a: d * s})
        pts.add(as_key(acc))
    return pts


def brute_map(L: Layout, x: int) -> set:
    """``{f_D(x) + f_R(r) + O}`` straight from the definition."""
    base = vec_add(shard_value(L.shard, x), dict(L.offset))
    return {as_key(vec_add(base, dict(r))) for r in replica_set(L.replica)}


def brute_table(L) -> list:
    return [brute_map(L, x) for x in range(prod(i[0] for i in L.shard))]


def got_map(L, x, shape=None) -> set:
    return {as_key(c) for c in L.map(x, shape)}


def brute_span(L: Layout) -> dict:
    w: dict = {}
    for e, s, a in tuple(L.shard) + tuple(L.replica):
        w[a] = w.get(a, 1) + abs(s) * (e - 1)
    return w


def flat(u, shape) -> int:
    x = 0
    for ui, si in zip(u, shape):
        x = x * si + ui
    return x


def groupable(shard, shape) -> bool:
    """Whether some order-preserving refinement of ``shard`` has every cumulative product of
    ``shape`` among its prefix products (the definition of grouping)."""
    ext = [i[0] for i in shard if i[0] > 1]
    if prod(ext) != prod(shape):
        return False
    prefix = [1]
    for e in ext:
        prefix.append(prefix[-1] * e)
    P = 1
    for s in shape:
        P *= s
        k = max(i for i, p in enumerate(prefix) if p <= P)
        if P == prefix[k]:
            continue
        if P % prefix[k] or ext[k] % (P // prefix[k]):
            return False
    return True


def ordered_factorizations(n: int):
    if n == 1:
        yield ()
        return
    for f in range(2, n + 1):
        if n % f == 0:
            for rest in ordered_factorizations(n // f):
                yield (f,) + rest


def shard_for(values: list) -> bool:
    """Whether some shard (any ordered factorization, strides forced by the values at each
    digit's unit) reproduces ``values[u]`` (dicts, values[0] == {}) for every u."""
    n = len(values)
    for ext in ordered_factorizations(n):
        strides, ok = [], True
        for k in range(len(ext)):
            unit = values[prod(ext[k + 1:])]
            if len(unit) != 1:
                ok = False
                break
            strides.append(next(iter(unit.items())))
        if not ok:
            continue
        if all(as_key(values[u]) == as_key(_sum_digits(u, ext, strides)) for u in range(n)):
            return True
    return n == 1


def _sum_digits(u, ext, strides) -> dict:
    acc: dict = {}
    for d, (a, s) in zip(digits(u, ext), strides):
        acc = vec_add(acc, {a: d * s})
    return acc


# --- hypothesis strategies ------------------------------------------------------------------
nonzero = st.integers(-6, 6).filter(bool)


@st.composite
def iters(draw, max_extent=4, axes=AXES):
    return Iter(draw(st.integers(1, max_extent)), draw(nonzero), draw(st.sampled_from(axes)))


@st.composite
def layouts(draw, max_shard=4, max_replica=2, axes=AXES, max_extent=4, offsets=True):
    shard = draw(st.lists(iters(max_extent, axes), min_size=1, max_size=max_shard))
    replica = draw(st.lists(iters(3, axes), min_size=0, max_size=max_replica))
    offset = {}
    if offsets:
        offset = draw(st.dictionaries(st.sampled_from(axes), st.integers(-8, 8), max_size=2))
    return Layout(shard, replica, offset)


@st.composite
def shapes_for(draw, size: int, max_rank=3):
    """A random ordered factorization of ``size`` into up to ``max_rank`` entries (1s allowed)."""
    rank = draw(st.integers(1, max_rank))
    out, rem = [], size
    for _ in range(rank - 1):
        divs = [d for d in range(1, rem + 1) if rem % d == 0]
        d = draw(st.sampled_from(divs))
        out.append(d)
        rem //= d
    out.append(rem)
    return tuple(out)
