"""Property tests: every operation of axe.layout against brute-force enumeration."""

from itertools import product
from math import prod

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from axe.layout import (Iter, Layout, LayoutError, Swizzle, SwizzledLayout, canonicalize, direct_sum,
                        equivalent, gap_condition, group, interleave, intersect, parse, slice, tile,
                        tile_of)
from layout_oracles import (as_key, brute_map, brute_span, brute_table, flat, got_map, groupable,
                            layouts, shapes_for, shard_value, shard_for, vec_add)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def table(L):
    return [got_map(L, x) for x in range(L.size)]


@SETTINGS
@given(layouts())
def test_map_matches_definition(L):
    assert table(L) == brute_table(L)


@SETTINGS
@given(layouts())
def test_text_round_trip(L):
    assert parse(str(L)) == L
    assert hash(parse(str(L))) == hash(L)


@SETTINGS
@given(layouts())
def test_canonicalize_preserves_map_and_is_idempotent(L):
    C = canonicalize(L)
    assert brute_table(C) == brute_table(L)
    assert canonicalize(C) == C
    assert equivalent(L, C)


@st.composite
def rewritten(draw):
    """A layout and a map-preserving rewrite of it (splits, unit iters, replica reshuffles)."""
    L = draw(layouts())
    shard = []
    for e, s, a in L.shard:
        divs = [d for d in range(1, e + 1) if e % d == 0]
        d = draw(st.sampled_from(divs))
        shard += [Iter(d, (e // d) * s, a), Iter(e // d, s, a)]
        if draw(st.booleans()):
            shard.append(Iter(1, draw(st.integers(1, 5)), a))
    replica, offset = [], dict(L.offset)
    for e, s, a in L.replica:
        if draw(st.booleans()):           # C1 backwards: negate a stride, move the offset
            replica.append(Iter(e, -s, a))
            offset[a] = offset.get(a, 0) + (e - 1) * s
        else:
            replica.append(Iter(e, s, a))
    return L, Layout(shard, replica, offset)


@SETTINGS
@given(rewritten())
def test_equivalent_sees_through_rewrites(pair):
    L, M = pair
    assert brute_table(L) == brute_table(M)
    assert equivalent(L, M)
    if gap_condition(L) and gap_condition(M):
        assert canonicalize(L) == canonicalize(M)       # Theorem A.14


@st.composite
def small_layouts(draw, size):
    """Layouts of a fixed size from few strides and axes, so that equal maps are common."""
    ext = draw(st.sampled_from([(size,), (2, size // 2), (size // 2, 2), (2, 2, size // 4)]))
    stride = st.sampled_from([1, 2, -1, 4])
    ax = st.sampled_from(["m", "warp"])
    shard = [Iter(e, draw(stride), draw(ax)) for e in ext]
    replica = draw(st.lists(st.builds(Iter, st.integers(1, 3), stride, ax), max_size=2))
    return Layout(shard, replica, draw(st.dictionaries(ax, st.integers(-2, 2), max_size=1)))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_equivalent_is_exact(data):
    size = data.draw(st.sampled_from([4, 8]))
    L1, L2 = data.draw(small_layouts(size)), data.draw(small_layouts(size))
    assert equivalent(L1, L2) == (brute_table(L1) == brute_table(L2))


@SETTINGS
@given(st.data())
def test_group(data):
    L = data.draw(layouts())
    shape = data.draw(shapes_for(L.size))
    if groupable(L.shard, shape):
        g = group(L, shape)
        assert brute_table(g.layout) == brute_table(L)
        assert tuple(prod(i.extent for i in b) for b in g.blocks) == shape
        assert g.bounds[-1] == len(sum(g.blocks, ()))
    else:
        try:
            group(L, shape)
        except LayoutError as err:
            assert "group" in str(err)
        else:
            raise AssertionError(f"group({L}, {shape}) should fail")


@st.composite
def tile_pair(draw, offsets=True):
    A = draw(layouts(max_shard=3, max_extent=3, offsets=offsets))
    B = draw(layouts(max_shard=3, max_extent=3, offsets=offsets))
    rank = draw(st.integers(1, 2))
    sa, sb = draw(shapes_for(A.size, rank)), draw(shapes_for(B.size, rank))
    assume(len(sa) == len(sb) == rank)
    assume(groupable(A.shard, sa) and groupable(B.shard, sb))
    return A, sa, B, sb


def kron_oracle(A, sa, B, sb, scale: bool):
    """``{a ⊙ w + b}`` over the interleaved domain, w = span(B) (or 1 for the direct sum)."""
    w = brute_span(B) if scale else {}
    out = {}
    for x in product(*(range(n) for n in sa)):
        fa = brute_map(A, flat(x, sa))
        for y in product(*(range(n) for n in sb)):
            fb = brute_map(B, flat(y, sb))
            key = tuple(v for pair in zip(x, y) for v in pair)
            out[key] = {as_key(vec_add({k: v * w.get(k, 1) for k, v in a}, dict(b))) for a in fa for b in fb}
    return out


@pytest.mark.parametrize("op, scale", [(tile, True), (direct_sum, False)], ids=["tile", "direct_sum"])
@SETTINGS
@given(case=tile_pair())
def test_tile_is_kronecker_and_direct_sum_minkowski(op, scale, case):
    A, sa, B, sb = case
    out = op(A, sa, B, sb)
    shape = interleave(sa, sb)
    for key, want in kron_oracle(A, sa, B, sb, scale=scale).items():
        assert got_map(out, key, shape) == want


@SETTINGS
@given(tile_pair(), st.booleans())
def test_tile_of_inverts_tile(case, canonical_input):
    C, sc, B, sb = case
    T = tile(C, sc, B, sb)
    if canonical_input:
        T = canonicalize(T)
    st_ = tuple(c * b for c, b in zip(sc, sb))
    found = tile_of(T, st_, B, sb)
    assert found is not None, (C, sc, B, sb)       # C exists, so tile_of must find one
    assert brute_table(tile(found, sc, B, sb)) == brute_table(T)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(layouts(max_replica=2, axes=("m", "warp")), layouts(max_shard=2, max_replica=1, axes=("m", "warp")))
def test_tile_of_answers_are_right(T, B):
    """Whatever tile_of returns for arbitrary pairs is a true factor."""
    assume(T.size % B.size == 0)
    sb, st_ = (B.size,), (T.size,)
    C = tile_of(T, st_, B, sb)
    if C is not None:
        assert brute_table(tile(C, (T.size // B.size,), B, sb)) == brute_table(T)


@st.composite
def slice_case(draw):
    L = draw(layouts(max_shard=4, max_extent=4))
    shape = draw(shapes_for(L.size, 2))
    assume(groupable(L.shard, shape))
    region = []
    for n in shape:
        lo = draw(st.integers(0, n - 1))
        hi = draw(st.integers(lo + 1, n))
        region.append((lo, hi))
    return L, shape, region


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slice_case())
def test_slice_is_the_shifted_map_or_provably_absent(case):
    L, shape, region = case
    T = tuple(hi - lo for lo, hi in region)
    b = tuple(lo for lo, _ in region)
    sl = slice(L, shape, region)
    if sl is not None:
        for u in product(*(range(t) for t in T)):
            v = tuple(ui + bi for ui, bi in zip(u, b))
            assert got_map(sl, u, T) == brute_map(L, flat(v, shape))
        return
    # None must mean: some dimension's shifted map is no shard at all (exhaustive search)
    base = shard_value(L.shard, flat(b, shape))
    missing = False
    for d, t in enumerate(T):
        values = []
        for k in range(t):
            v = list(b)
            v[d] += k
            cur = shard_value(L.shard, flat(v, shape))
            values.append({a: cur.get(a, 0) - base.get(a, 0) for a in set(cur) | set(base)
                           if cur.get(a, 0) != base.get(a, 0)})
        if not shard_for(values):
            missing = True
    assert missing, (L, shape, region)


@SETTINGS
@given(st.integers(1, 6), st.integers(-6, 6).filter(bool), st.integers(1, 6), st.integers(-6, 6).filter(bool))
def test_intersection_is_exact(e1, s1, e2, s2):
    got = intersect(Iter(e1, s1), Iter(e2, s2))
    want = set(range(0, e1 * s1, s1)) & set(range(0, e2 * s2, s2))
    assert set(got.values()) == want


@SETTINGS
@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 1 << 12))
def test_swizzle_formula(bits, base, extra, x):
    sw = Swizzle(bits, base, bits + extra)
    want = x ^ ((x >> (bits + extra)) & (((1 << bits) - 1) << base))
    assert sw(x) == want and sw(sw(x)) == x


@SETTINGS
@given(st.data())
def test_swizzled_tile_and_slice(data):
    sw = Swizzle(2, 1, 2)                                    # period 32
    rows = data.draw(st.sampled_from([4, 8]))
    atom = SwizzledLayout(Layout([(rows, 32 // rows), (32 // rows, 1)]), sw)
    outer = data.draw(layouts(max_shard=2, max_replica=0, axes=("m", "warp"), max_extent=3, offsets=False))
    whole = tile(outer, (outer.size, 1), atom, (rows, 32 // rows))
    shape = (outer.size * rows, 32 // rows)
    for r in range(shape[0]):
        for c in range(shape[1]):
            a = next(iter(outer.map(r // rows)))
            lin = (r % rows) * (32 // rows) + c
            want = dict(a)
            want["m"] = want.get("m", 0) * 32 + sw(lin)
            assert got_map(whole, (r // rows, r % rows, 0, c), (outer.size, rows, 1, 32 // rows)) == \
                {as_key(want)}
    lo = data.draw(st.integers(0, shape[0] - 1))
    hi = data.draw(st.integers(lo + 1, shape[0]))
    grouped_shape = shape
    sub = slice(whole, grouped_shape, [(lo, hi), (0, shape[1])])
    if sub is not None:
        for r in range(hi - lo):
            for c in range(shape[1]):
                assert got_map(sub, (r, c), (hi - lo, shape[1])) == \
                    got_map(whole, ((r + lo) // rows, (r + lo) % rows, 0, c), (outer.size, rows, 1, 32 // rows))
