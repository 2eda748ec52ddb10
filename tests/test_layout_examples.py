"""The worked examples of the layout specification (docs/layouts.md), each checked against the definition."""

import pytest

from axe.layout import (Iter, Layout, LayoutError, LayoutSyntaxError, R, S, Swizzle, SwizzledLayout,
                        canonicalize, direct_sum, equivalent, gpuid, group, intersect, lane, parse,
                        reg, slice, span, tile, tile_of, tx, warp, F, P, TCol, TLane)
from layout_oracles import as_key, brute_map, brute_table, got_map

TC = S[(8, 2, 4, 2):(4 @ lane, 1 @ warp, 1 @ lane, 1 @ reg)] + R[2:4 @ warp] + 5 @ warp


def test_example1_tensor_core_tile():
    for i in range(8):
        for j in range(16):
            w = (j // 8) % 2
            want = {as_key({"warp": 5 + w, "lane": 4 * i + (j // 2) % 4, "m": j % 2}),
                    as_key({"warp": 9 + w, "lane": 4 * i + (j // 2) % 4, "m": j % 2})}
            assert got_map(TC, (i, j), (8, 16)) == want
    warps = {c["warp"] for x in range(TC.size) for c in TC.map(x)}
    assert warps == {5, 6, 9, 10}
    assert TC.span("warp") == 6 and span(TC, "lane") == 32 and TC.span("gpuid") == 1


def test_example1_text_round_trip():
    text = "S[(8,2,4,2):(4@lane,1@warp,1@lane,1@reg)] + R[2:4@warp] + 5@warp"
    assert parse(text) == TC
    assert str(TC) == "S[(8,2,4,2):(4@lane,1@warp,1@lane,1)] + R[2:4@warp] + 5@warp"
    assert parse(str(TC)) == TC


def test_example2_mesh_layouts():
    s0s1 = S[(2, 32, 2, 64):(1 @ gpuid, 128, 2 @ gpuid, 1)]
    s0r = S[(2, 32, 128):(1 @ gpuid, 128, 1)] + R[2:2 @ gpuid]
    for i in range(0, 64, 7):
        for j in range(0, 128, 5):
            assert got_map(s0s1, (i, j), (64, 128)) == {
                as_key({"gpuid": (i // 32) + 2 * (j // 64), "m": (i % 32) * 128 + j % 64})}
            assert got_map(s0r, (i, j), (64, 128)) == {
                as_key({"gpuid": i // 32 + 2 * r, "m": (i % 32) * 128 + j}) for r in (0, 1)}


def test_example3_trainium_and_tmem():
    sbuf = S[(2, 128, 512):(512 @ F, 1 @ P, 1 @ F)]
    assert got_map(sbuf, (200, 7), (256, 512)) == {as_key({"P": 72, "F": 512 + 7})}
    tmem = S[(2, 128, 112):(112 @ TCol, 1 @ TLane, 1 @ TCol)]
    assert got_map(tmem, (130, 5), (256, 112)) == {as_key({"TLane": 2, "TCol": 117})}


def test_example4_tile():
    T = tile(S[(2, 3):(3, 1)], (2, 3), S[(8, 8):(8, 1)], (8, 8))
    assert T == S[(2, 8, 3, 8):(192, 8, 64, 1)]
    # a 16x24 row-major grid of 2x3 tiles of contiguous 8x8 blocks
    for i in range(16):
        for j in range(24):
            addr = (i // 8 * 3 + j // 8) * 64 + (i % 8) * 8 + j % 8
            assert got_map(T, (i // 8, i % 8, j // 8, j % 8), (2, 8, 3, 8)) == {as_key({"m": addr})}


def test_example5_slice():
    L = S[(2, 8, 3, 8):(192, 8, 64, 1)]
    sl = slice(L, (16, 24), [(0, 8), (8, 24)])
    assert canonicalize(sl) == S[(8, 2, 8):(8, 64, 1)] + 64
    assert equivalent(sl, S[(1, 8, 2, 8):(192, 8, 64, 1)] + 64)
    for u0 in range(8):
        for u1 in range(16):
            assert got_map(sl, (u0, u1), (8, 16)) == got_map(L, (u0, u1 + 8), (16, 24))


def test_example6_direct_sum_and_no_tile():
    B, A = S[(2, 2):(4, 1)], S[(2, 2):(8, 2)]
    ds = direct_sum(A, (2, 2), B, (2, 2))
    assert ds == S[(2, 2, 2, 2):(8, 4, 2, 1)]          # F.2's construction (erratum of F.4)
    assert canonicalize(ds) == S[16:1]
    assert B.span() == {"m": 6}
    assert tile_of(S[16:1], (4, 4), B, (2, 2)) is None


def test_example7_copy_partition():
    L = S[(16, 8, 2, 4):(128, 8, 4, 1)] + 2112
    for t in (0, 9, 127):
        sl = slice(L, (16, 8, 2, 4), [(t // 8, t // 8 + 1), (t % 8, t % 8 + 1), (0, 2), (0, 4)])
        want = S[(2, 4):(4, 1)] + ((t // 8) * 128 + (t % 8) * 8 + 2112)
        assert canonicalize(sl) == canonicalize(want) == S[8:1] + want.offset
    cta = S[(16, 8, 8):(8 @ tx, 1 @ tx, 1 @ reg)]
    assert cta.span("tx") == 128 and cta.span("reg") == 8


def test_example8_reduce_scatter_signature():
    inp = S[(4, 64, 64):(1 @ gpuid, 64, 1)]
    out = S[(4, 16, 64):(1 @ gpuid, 64, 1)]
    assert got_map(inp, (3, 5, 6), (4, 64, 64)) == {as_key({"gpuid": 3, "m": 5 * 64 + 6})}
    assert got_map(out, (37, 6), (64, 64)) == {as_key({"gpuid": 2, "m": 5 * 64 + 6})}


def test_example9_non_bit_linear():
    L = S[(24, 24):(1, 24)]                            # column-major 24x24
    f = [next(iter(L.map(i)))["m"] for i in range(4)]
    assert f == [0, 24, 48, 72] and f[3] != f[1] ^ f[2]


def test_errata_slice_carry_into_second_digit():
    # the printed Δ gives 12,13,20,21; the true values are 12,13,100,101
    L = S[(3, 2, 4):(100, 10, 1)]
    sl = slice(L, (24,), [(6, 10)])
    assert [next(iter(sl.map(u)))["m"] for u in range(4)] == [12, 13, 100, 101]


def test_errata_group_skips_extent_one():
    g = group(Layout([(2, 1), (1, 5), (3, 7, "lane")]), (6,))
    assert [i.extent for i in g.blocks[0]] == [2, 3]
    assert brute_table(g.layout) == brute_table(Layout([(2, 1), (1, 5), (3, 7, "lane")]))


def test_errata_tile_of_after_merge():
    T = tile(S[2:1], (2,), S[4:1], (4,))
    assert canonicalize(T) == S[8:1]
    C = tile_of(S[8:1], (8,), S[4:1], (4,))
    assert C is not None and equivalent(C, S[2:1])


def test_errata_replica_collisions_are_a_set():
    L = S[1:1] + R[(2, 2):(1, 1)]
    assert len(L.map(0)) == 3 and L.replica_size == 4


def test_errata_c2_without_gap_condition():
    a = parse("S[4:1] + R[(2:3@warp),(6:2@warp)]")
    b = parse("S[4:1] + R[(3:2@warp),(4:3@warp)]")
    assert brute_table(a) == brute_table(b)
    assert equivalent(a, b)                           # exact even where forms differ
    assert not equivalent(a, parse("S[4:1] + R[(3:2@warp),(3:3@warp)]"))


def test_size_one_canonical_form():
    assert canonicalize(S[(1, 1):(3, 5 @ warp)] + 2) == S[1:1] + 2


def test_intersection():
    assert intersect(Iter(8, 4), Iter(6, 6)) == Iter(3, 12)     # {0,12,24} within 28 and 30
    assert intersect(Iter(4, -2), Iter(4, -3)) == Iter(2, -6)
    assert intersect(Iter(4, 2), Iter(4, -3)) == Iter(1, 6)
    assert intersect(Iter(4, 1, "lane"), Iter(4, 1)) is None


def test_invalid_input_errors():
    with pytest.raises(ValueError, match="non-zero"):
        Iter(4, 0)
    with pytest.raises(ValueError, match=">= 1"):
        Iter(0, 1)
    with pytest.raises(ValueError, match="at least one shard"):
        Layout([])
    with pytest.raises(LayoutSyntaxError, match="column"):
        parse("S[(8,2):(4@lane)]")
    with pytest.raises(LayoutSyntaxError):
        parse("S[(8,2):(4@lane,1)] * 2")
    with pytest.raises(LayoutSyntaxError):
        parse("T[8:1]")
    with pytest.raises(LayoutSyntaxError, match="non-zero"):
        parse("S[4:0]")
    with pytest.raises(LayoutError, match="does not group"):
        tile(S[(6, 2):(2, 1)], (4, 3), S[1:1], (1, 1))
    with pytest.raises(LayoutError, match="outside"):
        slice(S[8:1], (8,), [(4, 9)])
    with pytest.raises(ValueError, match="not admitted"):
        S[8:1].map((1, 1), (3, 3))


def test_swizzled_tma_tile():
    """128x64 fp16 tile: 8x64 atoms under the 128-byte swizzle, stacked 16 high."""
    atom = SwizzledLayout(S[(8, 64):(64, 1)], Swizzle(3, 3, 3))
    whole = tile(S[16:1], (16, 1), atom, (8, 64))
    assert isinstance(whole, SwizzledLayout)
    for r in range(128):
        for c in range(64):
            linear = r * 64 + c
            swz = linear ^ ((linear >> 3) & (7 << 3))
            assert got_map(whole, (r // 8, r % 8, 0, c), (16, 8, 1, 64)) == {as_key({"m": swz})}
    rows = slice(whole, (128, 64), [(16, 48), (0, 64)])
    for r in range(32):
        for c in range(0, 64, 3):
            assert got_map(rows, (r, c), (32, 64)) == got_map(whole, ((r + 16) // 8, (r + 16) % 8, 0, c),
                                                            (16, 8, 1, 64))
    assert slice(whole, (128, 64), [(3, 11), (0, 64)]) is None   # breaks an 8-row swizzle atom
    with pytest.raises(LayoutError, match="period"):
        tile(S[2:1], (2, 1), SwizzledLayout(S[(4, 8):(8, 1)], Swizzle(3, 3, 3)), (4, 8))


def test_swizzled_text_round_trip():
    for L in (SwizzledLayout(S[(8, 64):(64, 1)], Swizzle(3, 3, 3), base=512),
              SwizzledLayout(S[(8, 64):(64, 1)] + 3 @ warp, Swizzle(2, 4, 3), axis="warp")):
        assert parse(str(L)) == L
    assert parse("Swizzle(3,3,3) o (S[(8,64):(64,1)])") == SwizzledLayout(S[(8, 64):(64, 1)], Swizzle(3, 3, 3))
    with pytest.raises(LayoutSyntaxError, match="unbalanced"):
        parse("Swizzle(3,3,3) ∘ (S[8:1]")


@pytest.mark.parametrize("text,column", [("S[(8,4):(0,1)]", 9), ("S[(8,4):(2,0@lane)]", 11), ("S[8:0]", 4),
                                         ("S[(2,8):(1@warp,0)]", 16)])
def test_zero_stride_error_points_at_the_zero(text, column):
    """A zero stride is reported at its own column (the ``0``), not at the bracket that opens the
    strides, and ``0@axis`` is read whole."""
    from axe.layout import parse
    from axe.layout.syntax import LayoutSyntaxError
    with pytest.raises(LayoutSyntaxError, match=f"at column {column}: iter stride must be a non-zero int"):
        parse(text)
    assert text[column] == "0"
