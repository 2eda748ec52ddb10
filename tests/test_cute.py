"""CuTe algebra and CuTe ↔ Axe interop: CuTe's documented examples and brute-force laws.

The oracle for every law is :func:`ref`, an evaluator of ``shape:stride`` written here from
CuTe's definition (colex unflattening, last leaf unbounded), independent of the module.
"""

from itertools import product as cartesian
from math import prod

import pytest
from hypothesis import given, settings, strategies as st

from axe.layout import LayoutError, SwizzledLayout, Swizzle, equivalent, parse
from axe.layout.cute_algebra import (CuteLayout, blocked_product, coalesce, complement, composition,
                                     flat_divide, flatten, left_inverse, logical_divide,
                                     logical_product, make_layout, parse_cute, raked_product,
                                     right_inverse, tiled_divide, zipped_divide)
from axe.layout.interop.cute import (compose, from_cute, from_cute_modes, from_cute_tv, to_cute,
                                     to_cute_tv)

SETTINGS = settings(max_examples=60, deadline=None)
P = parse_cute


def ref(L: CuteLayout, x: int) -> int:
    """CuTe's index function from its definition: colex digits of x, last leaf unbounded."""
    shape, stride = flatten(L.shape), flatten(L.stride)
    out = 0
    for k, (e, d) in enumerate(zip(shape, stride)):
        digit = x if k == len(shape) - 1 else x % e
        x //= e
        out += digit * d
    return out


def ref_values(L):
    return [ref(L, x) for x in range(L.size)]


def mode_sizes(L):
    return tuple(prod(flatten(s)) for s in L.shape) if isinstance(L.shape, tuple) else (L.size,)


def compatible(B, R):
    """CuTe's compatible(B, R): an int of B matches any shape of R of the same size."""
    def walk(b, r):
        if not isinstance(b, tuple):
            return b == prod(flatten(r))
        return isinstance(r, tuple) and len(b) == len(r) and all(walk(x, y) for x, y in zip(b, r))
    return walk(B.shape, R.shape)


# --- generators -----------------------------------------------------------------------------
def nest(leaves):
    """Group consecutive leaves into a random-looking but deterministic nested tuple."""
    if len(leaves) <= 2:
        return tuple(leaves) if len(leaves) > 1 else leaves[0]
    return (leaves[0], tuple(leaves[1:3])) + tuple(leaves[3:])


@st.composite
def layouts(draw, pow2=False, max_modes=4, min_stride=0):
    n = draw(st.integers(1, max_modes))
    ext = st.sampled_from([1, 2, 4, 8]) if pow2 else st.integers(1, 6)
    shape = [draw(ext) for _ in range(n)]
    stride = [draw(st.integers(min_stride, 40)) for _ in range(n)]
    if draw(st.booleans()):
        return CuteLayout(nest(shape), nest(stride))
    return CuteLayout(tuple(shape) if n > 1 else shape[0], tuple(stride) if n > 1 else stride[0])


@st.composite
def injective_layouts(draw, pow2=False, max_modes=4):
    """Modes placed in a random order, each a multiple (with gaps) of the ones below it."""
    n = draw(st.integers(1, max_modes))
    ext = st.sampled_from([2, 4]) if pow2 else st.integers(2, 5)
    shape = [draw(ext) for _ in range(n)]
    order = draw(st.permutations(range(n)))
    stride, acc = [0] * n, 1
    for k in order:
        acc *= draw(st.sampled_from([1, 1, 2]) if pow2 else st.sampled_from([1, 1, 2, 3]))
        stride[k] = acc
        acc *= shape[k]
    return CuteLayout(tuple(shape) if n > 1 else shape[0], tuple(stride) if n > 1 else stride[0])


@st.composite
def bit_layouts(draw, bits: int):
    """A layout with power-of-two extents whose modes use disjoint bit ranges of [0, bits)."""
    free = list(range(bits))
    modes = []
    for _ in range(draw(st.integers(1, 3))):
        if not free:
            break
        lo = draw(st.sampled_from(free))
        width = 1
        while lo + width in free and width < 3 and draw(st.booleans()):
            width += 1
        for b in range(lo, lo + width):
            free.remove(b)
        modes.append((1 << width, 1 << lo))
    modes = draw(st.permutations(modes))
    return CuteLayout(tuple(e for e, _ in modes), tuple(d for _, d in modes))


# --- CuTe's documented examples (02_layout_algebra.md) --------------------------------------
def test_documented_coalesce():
    assert coalesce(P("(2,(1,6)):(1,(6,2))")) == P("12:1")
    assert coalesce(P("(2,(1,6)):(1,(6,2))"), (1, 1)) == P("(2,6):(1,2)")


def test_documented_composition():
    assert composition(P("(6,2):(8,2)"), P("(4,3):(3,1)")) == P("((2,2),3):((24,2),8)")
    assert composition(P("20:2"), P("(5,4):(4,1)")) == P("(5,4):(8,2)")
    assert composition(P("(10,2):(16,4)"), P("(5,4):(1,5)")) == P("(5,(2,2)):(16,(80,4))")
    a = P("(12,(4,8)):(59,(13,1))")
    assert composition(a, (P("3:4"), P("8:2"))) == P("(3,(2,4)):(236,(26,1))")
    assert composition(a, (3, 8)) == P("(3,(4,2)):(59,(13,1))")


@pytest.mark.parametrize("a, m, want", [
    ("4:1", 24, "6:4"), ("6:4", 24, "4:1"), ("(4,6):(1,4)", 24, "1:0"), ("4:2", 24, "(2,3):(1,8)"),
    ("(2,4):(1,6)", 24, "3:2"), ("(2,2):(1,6)", 24, "(3,2):(2,12)"),
])
def test_documented_complement(a, m, want):
    assert complement(P(a), m) == P(want)


def test_documented_divide():
    assert logical_divide(P("(4,2,3):(2,1,8)"), P("4:2")) == P("((2,2),(2,3)):((4,1),(2,8))")
    a = P("(9,(4,8)):(59,(13,1))")
    tiler = (P("3:3"), P("(2,4):(1,8)"))
    ld, zd = logical_divide(a, tiler), zipped_divide(a, tiler)
    assert zd[0] == composition(a, tiler) == P("(3,(2,4)):(177,(13,2))")
    assert mode_sizes(ld[0]) == (3, 3) and mode_sizes(ld[1]) == (8, 4)
    assert mode_sizes(zd[0]) == (3, 8) and mode_sizes(zd[1]) == (3, 4)
    td, fd = tiled_divide(a, tiler), flat_divide(a, tiler)
    assert td.rank == 3 and td[0] == zd[0] and (td[1], td[2]) == (zd[1][0], zd[1][1])
    assert fd.rank == 4 and ref_values(fd) == ref_values(zd)


def test_documented_product():
    assert logical_product(P("(2,2):(4,1)"), P("6:1")) == P("((2,2),(2,3)):((4,1),(2,8))")
    assert complement(P("(2,2):(4,1)"), 24) == P("(2,3):(2,8)")
    A, B = P("(2,5):(5,1)"), P("(3,4):(1,3)")
    # the docs' figure: a 2x5 row-major block tiled over a 3x4 column-major arrangement,
    # ((2,3),(5,4)):((5,10),(1,30)) with mode 0 coalesced to 6:5 by blocked_product
    assert blocked_product(A, B) == P("(6,(5,4)):(5,(1,30))")
    assert ref_values(blocked_product(A, B)) == ref_values(P("((2,3),(5,4)):((5,10),(1,30))"))
    assert raked_product(A, B) == P("((3,2),(4,5)):((10,5),(30,1))")


def test_parse_and_print_round_trip():
    for text in ["((2,4),3):((1,8),2)", "12:1", "(4,3):(3,1)", "((4,8),(2,2,2)):((32,1),(16,8,128))"]:
        assert str(P(text)) == text
    assert P("(_4,_3):(_3,_1)") == P("(4,3):(3,1)")
    assert P("(4,3)") == P("(4,3):(1,4)")
    with pytest.raises(ValueError):
        P("(4,3):(1,4")
    with pytest.raises(ValueError):
        CuteLayout((4, 3), (1,))


def test_call_with_natural_coordinates():
    L = P("((2,4),3):((1,8),2)")
    for i, j in cartesian(range(8), range(3)):
        assert L((i, j)) == ref(L, i + 8 * j)
        assert L(((i % 2, i // 2), j)) == ref(L, i + 8 * j)


# --- laws by brute force --------------------------------------------------------------------
@SETTINGS
@given(layouts())
def test_coalesce_law(L):
    R = coalesce(L)
    assert R.size == L.size and R.depth <= 1
    assert ref_values(R) == ref_values(L)


@SETTINGS
@given(layouts(pow2=True), st.data())
def test_composition_pow2_always_exists(A, data):
    bits = max(1, (A.size - 1).bit_length())
    B = data.draw(bit_layouts(bits))
    if B.cosize > A.size:     # beyond size(A) CuTe extends coalesce(A)'s last mode, not A's
        B = CuteLayout(A.size, 1)
    R = composition(A, B)
    assert compatible(B, R)
    assert [ref(R, c) for c in range(B.size)] == [ref(A, ref(B, c)) for c in range(B.size)]


@SETTINGS
@given(layouts(), layouts())
def test_composition_law_or_refusal(A, B):
    if B.cosize > A.size:
        B = coalesce(B)
        B = CuteLayout(B.shape, B.stride) if B.cosize <= A.size else CuteLayout(A.size, 1)
    try:
        R = composition(A, B)
    except LayoutError:
        return
    assert compatible(B, R)
    assert [ref(R, c) for c in range(B.size)] == [ref(A, ref(B, c)) for c in range(B.size)]


def test_composition_refuses_what_cute_would_get_wrong():
    # A o B for a non-injective B: the modes of B carry into one another in A's radix
    A, B = P("(2,2):(1,10)"), P("(2,2):(1,1)")
    with pytest.raises(LayoutError, match="left-distributive"):
        composition(A, B)
    with pytest.raises(LayoutError, match="stride divisibility"):
        composition(P("(3,4):(4,1)"), P("3:2"))
    with pytest.raises(LayoutError, match="shape divisibility"):
        composition(P("(4,3):(1,5)"), P("6:1"))


@SETTINGS
@given(injective_layouts(), st.integers(1, 300))
def test_complement_law(A, M):
    R = complement(A, M)
    rv, av = ref_values(R), ref_values(A)
    strides = [d for e, d in R.modes() if e > 1]
    assert all(d > 0 for d in strides) and strides == sorted(strides)
    assert rv == sorted(rv) and len(set(rv)) == len(rv)
    assert not set(rv[1:]) & set(av)
    joint = [a + r for r in rv for a in av]
    assert len(set(joint)) == len(joint)
    assert max(joint) + 1 >= M


def test_complement_refuses_overlap():
    with pytest.raises(LayoutError, match="stride below"):
        complement(P("(2,2):(1,1)"), 8)


@SETTINGS
@given(layouts(min_stride=1))
def test_right_inverse_law(A):
    R = right_inverse(A)
    assert all(ref(A, ref(R, i)) == i for i in range(R.size))


@SETTINGS
@given(injective_layouts())
def test_right_inverse_is_largest(A):
    image = set(ref_values(A))
    n = 0
    while n in image:
        n += 1
    assert right_inverse(A).size == n


@SETTINGS
@given(injective_layouts())
def test_left_inverse_law(A):
    L = left_inverse(A)
    assert all(ref(L, ref(A, i)) == i for i in range(A.size))


@SETTINGS
@given(layouts(pow2=True), st.data())
def test_logical_divide_law(A, data):
    bits = max(1, (A.size - 1).bit_length())
    B = data.draw(bit_layouts(bits))
    if B.cosize > A.size:
        B = CuteLayout(1, 0)
    D = logical_divide(A, B)
    assert [ref(D[0], c) for c in range(B.size)] == [ref(A, ref(B, c)) for c in range(B.size)]
    # B and its complement enumerate [0, size(A)) once: the divide permutes A's values
    assert D.size == A.size and sorted(ref_values(D)) == sorted(ref_values(A))
    Z = zipped_divide(A, B)
    assert ref_values(Z) == ref_values(D)


@st.composite
def compact_pow2(draw, max_modes=2):
    n = draw(st.integers(1, max_modes))
    shape = tuple(draw(st.sampled_from([1, 2, 4])) for _ in range(n))
    return CuteLayout(shape if n > 1 else shape[0])


@SETTINGS
@given(st.one_of(injective_layouts(max_modes=3), injective_layouts(pow2=True, max_modes=3)),
       st.one_of(injective_layouts(max_modes=2), compact_pow2()))
def test_logical_product_law(A, B):
    try:
        R = logical_product(A, B)
    except LayoutError:
        # CuTe's admissibility: with power-of-two extents everywhere every division is exact
        numbers = flatten(complement(A, A.size * B.cosize).shape) + flatten(B.shape) + flatten(B.stride)
        assert any(e & (e - 1) for e in numbers if e)
        return
    assert ref_values(R[0]) == ref_values(A)
    C = R[1]
    assert compatible(B, C)
    vals = [ref(A, i) + ref(C, j) for j in range(B.size) for i in range(A.size)]
    assert ref_values(R) == vals and len(set(vals)) == len(vals)


@SETTINGS
@given(injective_layouts(max_modes=2), st.one_of(injective_layouts(max_modes=2), compact_pow2()))
def test_blocked_and_raked_products(A, B):
    A2 = A if A.rank == 2 else make_layout(A, CuteLayout(1, 0))
    B2 = B if B.rank == 2 else make_layout(B, CuteLayout(1, 0))
    try:
        C = logical_product(A2, B2)[1]
    except LayoutError:
        with pytest.raises(LayoutError):
            blocked_product(A2, B2)
        return
    blk, rak = blocked_product(A2, B2), raked_product(A2, B2)
    (a0, a1), (c0, c1) = mode_sizes(A2), mode_sizes(C)
    for i0, i1, j0, j1 in cartesian(range(a0), range(a1), range(c0), range(c1)):
        want = A2((i0, i1)) + C((j0, j1))
        assert blk((i0 + a0 * j0, i1 + a1 * j1)) == want
        assert rak((j0 + c0 * i0, j1 + c1 * i1)) == want


# --- CuTe <-> Axe ---------------------------------------------------------------------------
def test_spec_convention_example():
    assert from_cute(P("(4,3):(3,1)")) == parse("S[(3,4):(1,3)]")
    assert [min(from_cute(P("(4,3):(3,1)")).map(x))[("m")] for x in range(12)] == \
        [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]
    A, shape = from_cute_modes(P("(4,3):(3,1)"))
    assert shape == (4, 3) and A == parse("S[(4,3):(3,1)]")


@SETTINGS
@given(layouts(min_stride=1))
def test_from_cute_laws(L):
    A = from_cute(L)
    assert [A.map(x) for x in range(L.size)] == [frozenset({_m(ref(L, x))}) for x in range(L.size)]
    B, shape = from_cute_modes(L)
    assert shape == mode_sizes(L)
    for u in cartesian(*(range(s) for s in shape)):
        assert B.map(u, shape) == frozenset({_m(L(u if len(u) > 1 else u[0]))})
    assert ref_values(to_cute(A)) == ref_values(L)
    back = to_cute(B, shape)
    for u in cartesian(*(range(s) for s in shape)):
        u = u if len(u) > 1 else u[0]
        assert back(u) == L(u)


def _m(v):
    from axe.layout.coord import Coord
    return Coord.unit("m", v)


def test_from_cute_refuses_stride_zero_and_to_cute_refuses_what_cute_cannot_say():
    with pytest.raises(LayoutError, match="share one address"):
        from_cute(P("(4,3):(1,0)"))
    for text, why in [("S[4:1] + R[2:4]", "several addresses"), ("S[4:1] + 3", "offset"),
                      ("S[(4,2):(1,1@warp)]", "one axis")]:
        with pytest.raises(LayoutError, match=why):
            to_cute(parse(text))


# --- thread/value layouts -------------------------------------------------------------------
SM80_16x8x16_A = "((4,8),(2,2,2)):((32,1),(16,8,128))"   # CuTe's MMA_Traits ALayout (T32,V8) -> (M16,K16)


def ptx_a_fragment(row, col):
    """PTX ISA, mma.m16n8k16 .f16 A fragment: the (lane, value index) holding A[row][col]."""
    group, pair = row % 8, (col % 8) // 2
    value = (col // 8) * 4 + (row // 8) * 2 + col % 2
    return 4 * group + pair, value


def test_mma_a_operand_from_cute_tv_matches_ptx():
    A = from_cute_tv(P(SM80_16x8x16_A), (16, 16))
    assert equivalent(A, parse("S[(2,8,2,4,2):(2@reg,4@lane,4@reg,1@lane,1@reg)]"))
    for r, c in cartesian(range(16), range(16)):
        lane, value = ptx_a_fragment(r, c)
        assert A.map((r, c), (16, 16)) == frozenset({parse(f"S[1:1] + {lane}@lane + {value}").offset})
    assert ref_values(to_cute_tv(A, (16, 16))) == ref_values(P(SM80_16x8x16_A))


@st.composite
def tv_layouts(draw):
    """A TV layout over a small tile: the tile's prime leaves dealt to threads and values."""
    tile = (draw(st.sampled_from([2, 4, 6, 8])), draw(st.sampled_from([1, 2, 3, 4])))
    leaves, acc = [], 1
    for t in tile:
        k = t
        for p in (2, 3):
            while k % p == 0:
                leaves.append((p, acc))
                acc *= p
                k //= p
    leaves = draw(st.permutations(leaves))
    leaves += [(draw(st.sampled_from([2, 3])), 0) for _ in range(draw(st.integers(0, 2)))]
    thr, val = [], []
    for leaf in leaves:
        (thr if draw(st.booleans()) else val).append(leaf)
    thr, val = thr or [(1, 0)], val or [(1, 0)]

    def mode(ms):
        return (tuple(e for e, _ in ms), tuple(d for _, d in ms)) if len(ms) > 1 else ms[0]
    (ts, td), (vs, vd) = mode(thr), mode(val)
    return CuteLayout((ts, vs), (td, vd)), tile


@SETTINGS
@given(tv_layouts())
def test_from_cute_tv_law_and_round_trip(case):
    tv, tile = case
    try:
        A = from_cute_tv(tv, tile)
    except LayoutError as err:
        assert "split at the tile" in str(err)
        return
    nt, nv = mode_sizes(tv)
    holders = {}
    for t, v in cartesian(range(nt), range(nv)):
        ell = tv((t, v))
        holders.setdefault(ell, set()).add(parse(f"S[1:1] + {t}@lane + {v}").offset)
    for u in cartesian(*(range(s) for s in tile)):
        ell = u[0] + tile[0] * u[1]
        assert A.map(u, tile) == frozenset(holders[ell])
    back = to_cute_tv(A, tile)
    assert all(back((t, v)) == tv((t, v)) for t, v in cartesian(range(nt), range(nv)))


def test_tv_refusals():
    with pytest.raises(LayoutError, match="exactly once"):
        from_cute_tv(P("(4,2):(1,1)"), (8,))
    with pytest.raises(LayoutError, match="densely"):
        to_cute_tv(parse("S[(4,2):(2@lane,1)]"), (8,))
    with pytest.raises(LayoutError, match="axis warp"):
        to_cute_tv(parse("S[(4,2):(1@lane,1@warp)]"), (8,))


# --- composition across axes ----------------------------------------------------------------
def brute_compose(M, T, x, axis="m"):
    from axe.layout.coord import Coord
    out = set()
    for c in T.map(x):
        for y in M.map(c[axis]):
            out.add(c - Coord.unit(axis, c[axis]) + y)
    return frozenset(out)


@st.composite
def compose_cases(draw):
    """M: power-of-two shard on m and warp; T: m-iters on disjoint bit ranges, plus lane iters."""
    k = draw(st.integers(1, 5))
    m_modes = draw(bit_layouts(k))
    m_iters = [(e, d, draw(st.sampled_from(["m", "warp"]))) for e, d in
               zip(flatten(m_modes.shape), flatten(m_modes.stride))]
    rest = (1 << k) // prod(e for e, _, _ in m_iters)
    if rest > 1:
        m_iters.append((rest, 100, "m"))
    m_iters = draw(st.permutations(m_iters))
    from axe.layout import Layout
    M = Layout(m_iters, replica=[(2, 7, "warp")] if draw(st.booleans()) else [], offset={"m": 3})
    T_modes = draw(bit_layouts(k))
    t_iters = [(e, d, "m") for e, d in zip(flatten(T_modes.shape), flatten(T_modes.stride))]
    t_iters += [(draw(st.sampled_from([2, 3])), draw(st.sampled_from([1, 4])), "lane")]
    t_iters = draw(st.permutations(t_iters))
    used = sum((e - 1) * d for e, d, a in t_iters if a == "m")
    free_bits = [b for b in range(k) if not (used >> b) & 1 and (1 << b) > used]
    off = {"lane": 5}
    replica = []
    if free_bits and draw(st.booleans()):
        replica = [(2, 1 << free_bits[0], "m")]
    elif free_bits:
        off["m"] = 1 << free_bits[0]
    T = Layout(t_iters, replica=replica, offset=off)
    return M, T


@SETTINGS
@given(compose_cases())
def test_compose_law(case):
    M, T = case
    R = compose(M, T)
    assert R.size == T.size
    for x in range(T.size):
        assert R.map(x) == brute_compose(M, T, x)


@SETTINGS
@given(layouts(pow2=True, min_stride=1), st.data())
def test_compose_agrees_with_cute_composition(A, data):
    B = data.draw(bit_layouts(max(1, (A.size - 1).bit_length())))
    if B.cosize > A.size:
        return
    assert equivalent(compose(from_cute(A), from_cute(B)), from_cute(composition(A, B)))


def test_compose_mma_fragment_with_register_file():
    # the A fragment's value index v addresses the thread's registers: v -> (v//2)@r32 + (v%2)@half
    T = from_cute_tv(P(SM80_16x8x16_A), (16, 16))
    regs = parse("S[(4,2):(1@r32,1@half)]")
    R = compose(regs, T)
    assert equivalent(R, parse("S[(2,8,2,4,2):(1@r32,4@lane,2@r32,1@lane,1@half)]"))
    for r, c in cartesian(range(16), range(16)):
        lane, _ = ptx_a_fragment(r, c)
        want = parse(f"S[1:1] + {lane}@lane + {2 * (c // 8) + r // 8}@r32 + {c % 2}@half").offset
        assert R.map((r, c), (16, 16)) == frozenset({want})


def test_compose_keeps_memory_swizzle_outermost():
    M = SwizzledLayout(parse("S[64:1]"), Swizzle(1, 1, 3))
    T = parse("S[(8,8):(1@lane,8)]")
    R = compose(M, T)
    assert isinstance(R, SwizzledLayout)
    for x in range(64):
        assert R.map(x) == brute_compose(M, T, x)


def test_compose_refusals():
    with pytest.raises(LayoutError, match="has size"):
        compose(parse("S[4:1]"), parse("S[4:2]"))
    with pytest.raises(LayoutError, match="left-distributive"):
        compose(parse("S[(2,2):(1@warp,10)]"), parse("S[(2,2):(1,1@lane)] + R[2:1]"))
    with pytest.raises(LayoutError, match="divisibility"):
        compose(parse("S[(4,3):(1,4)]"), parse("S[3:2]"))
