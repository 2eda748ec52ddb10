"""Linear layouts ↔ Axe: the PTX mma fragment, Triton's blocked layout (and the paper's Figure 1),
swizzles, App. G's non-linear example, and brute-force laws over the whole hardware space."""

from itertools import product as cartesian
from math import prod

import pytest
from hypothesis import given, settings, strategies as st

from axe.layout import Layout, LayoutError, Swizzle, SwizzledLayout, equivalent, parse
from axe.layout.coord import Coord
from axe.layout.interop.cute import from_cute_tv
from axe.layout.cute_algebra import parse_cute
from axe.layout.interop.linear import (LinearLayout, blocked, from_linear, parse_triton,
                                       swizzle_bases, to_linear)

SETTINGS = settings(max_examples=50, deadline=None)
AXES = {"register": "m", "offset": "m", "lane": "lane", "warp": "warp", "block": "cta"}


def apply_ll(LL: LinearLayout, **h):
    """Oracle: XOR of the bases of the set bits, written from the paper's definition."""
    out = [0] * len(LL.out_dims)
    for name, x in h.items():
        for i, v in enumerate(LL.bases.get(name, ())):
            if x >> i & 1:
                out = [a ^ b for a, b in zip(out, v)]
    return tuple(out)


def hardware_points(LL: LinearLayout):
    names = [n for n in LL.bases]
    for hs in cartesian(*(range(LL.in_size(n)) for n in names)):
        yield dict(zip(names, hs))


def as_coord(h: dict) -> Coord:
    return Coord({AXES.get(n, n): v for n, v in h.items()})


def check_import_law(LL: LinearLayout):
    A, shape = from_linear(LL)
    holders: dict = {}
    for h in hardware_points(LL):
        holders.setdefault(apply_ll(LL, **h), set()).add(as_coord(h))
    for u in cartesian(*(range(s) for s in shape)):
        assert A.map(u, shape) == frozenset(holders[u]), u
    return A, shape


def check_export_law(L, shape, LL: LinearLayout):
    seen = 0
    for u in cartesian(*(range(s) for s in shape)):
        for c in L.map(u, shape):
            h = {n: c[AXES.get(n, n)] for n in LL.bases}
            assert apply_ll(LL, **h) == u
            seen += 1
    assert seen == prod(LL.in_size(n) for n in LL.bases)   # the holders exhaust the hardware


# --- the mma.m16n8k16 A operand ---------------------------------------------------------------
MMA_A = {"register": [[0, 1], [8, 0], [0, 8]], "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
         "warp": [], "block": []}


def ptx_a_fragment(row, col):
    """PTX ISA, mma.m16n8k16 .f16 A fragment: (lane, value index) of A[row][col]."""
    return 4 * (row % 8) + (col % 8) // 2, (col // 8) * 4 + (row // 8) * 2 + col % 2


def test_mma_a_operand_imports_to_the_ptx_layout():
    A, shape = check_import_law(LinearLayout(MMA_A))
    assert shape == (16, 16)
    assert equivalent(A, parse("S[(2,8,2,4,2):(2@reg,4@lane,4@reg,1@lane,1@reg)]"))
    for r, c in cartesian(range(16), range(16)):
        lane, value = ptx_a_fragment(r, c)
        assert A.map((r, c), shape) == frozenset({Coord({"lane": lane, "m": value})})
    # the same fragment from CuTe's TV layout (SM80_16x8x16 ALayout)
    assert equivalent(A, from_cute_tv(parse_cute("((4,8),(2,2,2)):((32,1),(16,8,128))"), (16, 16)))
    LL = to_linear(A, shape)
    assert LL == LinearLayout({k: v for k, v in MMA_A.items() if v})
    check_export_law(A, shape, LL)


def test_triton_text_round_trip():
    text = """
 - register=1 -> (0, 1)
   register=2 -> (8, 0)
 - lane=1 -> (0, 2)
   lane=2 -> (0, 4)
   lane=4 -> (1, 0)
   lane=8 -> (2, 0)
   lane=16 -> (4, 0)
 - warp is a size 1 dimension
where out dims are: [dim0 (size 16), dim1 (size 8)]
"""
    LL = parse_triton(text)
    assert LL.out_dims == (("dim0", 16), ("dim1", 8))
    assert parse_triton(repr(LL)) == LL
    A, shape = check_import_law(LL)          # the m16n8 accumulator fragment
    assert equivalent(A, parse("S[(2,8,4,2):(2@reg,4@lane,1@lane,1@reg)]"))
    with pytest.raises(ValueError, match="out of order"):
        parse_triton(" - register=2 -> (0, 1)\nwhere out dims are: [dim0 (size 2)]")


# --- Triton's blocked layout ------------------------------------------------------------------
def blocked_owner(reg, lane, warp, shape, spt, tpw, wpc, order):
    """Oracle written from Triton's description: the element held by (reg, lane, warp)."""
    def split(x, per):
        digits = {}
        for d in order:
            digits[d] = x % per[d]
            x //= per[d]
        return digits, x
    r_in, rep = split(reg, spt)
    l_in, _ = split(lane, tpw)
    w_in, _ = split(warp, wpc)
    tile = [spt[d] * tpw[d] * wpc[d] for d in range(len(shape))]
    reps = [max(1, shape[d] // tile[d]) for d in range(len(shape))]
    r_rep, _ = split(rep, reps)
    return tuple((r_in[d] + spt[d] * (l_in[d] + tpw[d] * w_in[d]) + tile[d] * r_rep[d]) % shape[d]
                 for d in range(len(shape)))


@pytest.mark.parametrize("shape, spt, tpw, wpc, order", [
    ((32, 16), (1, 4), (8, 4), (4, 1), (1, 0)),     # exactly one CTA tile
    ((64, 16), (1, 4), (8, 4), (4, 1), (1, 0)),     # repeats through registers
    ((16, 16), (1, 4), (8, 4), (4, 1), (1, 0)),     # broadcast over warps
    ((16, 32), (2, 1), (4, 8), (1, 2), (0, 1)),     # column-major order
    ((16, 16), (2, 2), (4, 8), (2, 1), (1, 0)),     # the paper's Figure 1, layout A
])
def test_blocked_layout(shape, spt, tpw, wpc, order):
    LL = blocked(shape, spt, tpw, wpc, order)
    nreg = LL.in_size("register")
    for reg, lane, warp in cartesian(range(nreg), range(32), range(prod(wpc))):
        assert apply_ll(LL, register=reg, lane=lane, warp=warp) == \
            blocked_owner(reg, lane, warp, shape, spt, tpw, wpc, order)
    A, _ = check_import_law(LL)
    check_export_law(A, shape, to_linear(A, shape))


def test_paper_figure_1_points():
    A, shape = from_linear(blocked((16, 16), (2, 2), (4, 8), (2, 1), (1, 0)))
    # "r_0 of t_1 is at (0,2); r_1 of t_9 is at (2,3); r_0 of t_10 is at (2,4)"
    for (i, j), lane, reg in [((0, 2), 1, 0), ((2, 3), 9, 1), ((2, 4), 10, 0)]:
        assert A.map((i, j), shape) == frozenset({Coord({"lane": lane, "m": reg})})


def test_broadcast_is_replication():
    """Warps past the tensor hold copies: zero bases, imported as an Axe replica."""
    A, _ = from_linear(blocked((16, 16), (1, 4), (8, 4), (4, 1), (1, 0)))
    assert A.replica and all(a == "warp" for _, _, a in A.replica)


# --- refusals -------------------------------------------------------------------------------
def test_example_9_column_major_24x24_is_refused():
    L = parse("S[(24,24):(1,24)]")
    assert [min(L.map(i))["m"] for i in (1, 2, 3)] == [24, 48, 72]
    with pytest.raises(LayoutError, match=r"not a power of two.*f\(3\)=72 ≠ f\(1\) XOR f\(2\) = 40"):
        to_linear(L, (24, 24))


@pytest.mark.parametrize("text, shape, why", [
    ("S[4:3]", (4,), "carry"),                       # 0,3,6,9: 3 XOR 6 = 5 ≠ 9
    ("S[(2,2):(1,4)]", (2, 2), "holds nothing"),     # offsets 2, 3 unused
    ("S[4:1] + 1", (4,), "affine"),
    ("S[4:-1]", (4,), "negative"),
])
def test_export_refusals(text, shape, why):
    with pytest.raises(LayoutError, match=why):
        to_linear(parse(text), shape)


@pytest.mark.parametrize("bases, why", [
    ({"register": [[1, 1]], "lane": [[0, 1]]}, "mixes output bits"),
    ({"register": [[3]]}, "mixes output bits"),
    ({"register": [[1]], "lane": [[1]]}, "both map to"),
])
def test_import_refusals(bases, why):
    with pytest.raises(LayoutError, match=why):
        from_linear(bases)
    with pytest.raises(LayoutError, match="not surjective"):
        from_linear({"register": [[1]]}, out_dims=(("dim0", 4),))


# --- swizzles ---------------------------------------------------------------------------------
def test_swizzle_is_f2_linear():
    for sw in [Swizzle(3, 3, 3), Swizzle(2, 1, 3), Swizzle(1, 0, 1)]:
        bits = sw.bits + sw.base + sw.shift + 1
        cols = swizzle_bases(sw, bits)
        for x in range(1 << bits):
            acc = 0
            for i in range(bits):
                if x >> i & 1:
                    acc ^= cols[i]
            assert acc == sw(x)


@pytest.mark.parametrize("inner, shape, sw", [
    ("S[(8,8):(8,1)]", (8, 8), Swizzle(3, 0, 3)),
    ("S[(16,64):(64,1)]", (16, 64), Swizzle(3, 3, 3)),          # TMA 128B swizzle, 2-byte elements
    ("S[(4,2,8):(1@warp,8,1)] + R[2:1@lane]", (8, 8), Swizzle(1, 1, 2)),
])
def test_swizzled_export(inner, shape, sw):
    L = SwizzledLayout(parse(inner), sw)
    LL = to_linear(L, shape, names={"m": "offset"})
    check_export_law(L, shape, LL)


# --- round trips by brute force ---------------------------------------------------------------
@st.composite
def distributed(draw):
    """A random distributed linear layout: output bits dealt to hardware bits, plus zero bases."""
    shape = (1 << draw(st.integers(0, 3)), 1 << draw(st.integers(0, 3)))
    outs = [(d, j) for d in range(2) for j in range(shape[d].bit_length() - 1)]
    outs = draw(st.permutations(outs))
    bases = {"register": [], "lane": [], "warp": []}
    for d, j in outs:
        v = [0, 0]
        v[d] = 1 << j
        bases[draw(st.sampled_from(sorted(bases)))].append(v)
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(bases)))
        bases[name].insert(draw(st.integers(0, len(bases[name]))), [0, 0])
    return LinearLayout(bases, (("dim0", shape[0]), ("dim1", shape[1])))


@SETTINGS
@given(distributed())
def test_import_law_and_round_trip(LL):
    A, shape = check_import_law(LL)
    assert to_linear(A, shape) == LinearLayout({k: v for k, v in LL.bases.items() if v}, LL.out_dims)


@st.composite
def linear_axe(draw):
    """A random F2-linear Axe layout: hardware bits of m/lane/warp dealt to tensor bits."""
    n = draw(st.integers(1, 6))
    pool = [(a, b) for a in ("m", "lane", "warp") for b in range(3)]
    hw = draw(st.permutations(pool))[:n + draw(st.integers(0, 2))]
    per_axis = {}
    for a, _ in hw:
        per_axis[a] = per_axis.get(a, 0) + 1
    dense = []
    for a, k in per_axis.items():
        dense += [(a, b) for b in range(k)]
    dense = draw(st.permutations(dense))
    shard, replica = dense[:n], dense[n:]
    L = Layout([(2, 1 << b, a) for a, b in shard], [(2, 1 << b, a) for a, b in replica])
    k0 = draw(st.integers(0, n))
    return L, (1 << k0, 1 << (n - k0))


@SETTINGS
@given(linear_axe())
def test_export_law_and_round_trip(case):
    L, shape = case
    LL = to_linear(L, shape)
    check_export_law(L, shape, LL)
    A, shape2 = from_linear(LL)
    assert shape2 == shape and equivalent(A, L)
