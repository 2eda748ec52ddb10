"""Swizzle synthesis (issue 27 item 3): the bank model against facts known from the hardware and
closed forms, the fast pattern cost against the per-instruction model on every candidate, the
candidates' offsets against their layouts' maps, and the search on power-of-two and other tiles."""

import random
from math import gcd

import pytest

from axe.layout import Layout, LayoutError, Swizzle, SwizzledLayout, parse
from axe.layout.swizzle_search import (Access, candidates, cost, ldmatrix_accesses, search_swizzle, storage_offsets,
                                       warp_accesses, wavefronts)


def _row_major(rows, cols, pad=0):
    return Layout(((rows, cols + pad), (cols, 1)))


def _offsets(L, shape):
    return storage_offsets(L, shape).__getitem__


# --- the model ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stride", range(1, 65))
def test_a_strided_fp32_warp_access_is_gcd_way(stride):
    """32 lanes reading 4-byte words ``l·stride`` apart: bank ``l·stride mod 32`` takes
    ``gcd(stride, 32)`` distinct words (closed form)."""
    c = wavefronts([4 * stride * lane for lane in range(32)], 4)
    assert c.worst == gcd(stride, 32) and c.conflicts == gcd(stride, 32) - 1


def test_broadcast_and_contiguous_accesses_take_one_wavefront_a_phase():
    assert wavefronts([64] * 32, 4) == (1, 1, 1)                    # one word for every lane
    assert wavefronts([16 * lane for lane in range(32)], 16).conflicts == 0   # 4 phases of 128 B
    assert wavefronts([16 * lane for lane in range(32)], 16).wavefronts == 4
    assert wavefronts([8 * lane for lane in range(32)], 8) == (2, 2, 1)
    assert wavefronts([None] * 32, 4) == (0, 0, 0)


def test_lanes_permuted_inside_a_phase_cost_the_same():
    rng = random.Random(0)
    for width in (2, 4, 8, 16):
        per = 32 if width <= 4 else 128 // width
        for _ in range(50):
            addrs = [width * rng.randrange(256) for _ in range(32)]
            shuffled = []
            for p in range(0, 32, per):
                block = addrs[p:p + per]
                rng.shuffle(block)
                shuffled += block
            assert wavefronts(addrs, width) == wavefronts(shuffled, width)


def test_ldmatrix_on_a_128_byte_swizzled_64_column_bf16_tile_is_conflict_free():
    acc = ldmatrix_accesses((64, 64))
    sw = SwizzledLayout(_row_major(64, 64), Swizzle(3, 3, 3))
    assert cost(acc, _offsets(sw, (64, 64)), 2).conflicts == 0
    plain = cost(acc, _offsets(_row_major(64, 64), (64, 64)), 2)
    assert plain.worst == 8              # 8 rows of 128 B: one bank group, 8 words each


def test_an_unswizzled_column_read_of_a_32x32_fp32_tile_is_32_way():
    col = warp_accesses(parse("S[(32,32):(1@lane,1)]"), (32, 32))
    c = cost(col, _offsets(_row_major(32, 32), (32, 32)), 4)
    assert len(col) == 32 and c.worst == 32 and c.conflicts == 32 * 31


def test_warp_accesses_follow_the_layouts_registers():
    acc = warp_accesses(parse("S[(2,32,4):(4,1@lane,1)]"), (64, 4), vector=4)
    assert [a.lanes[:3] for a in acc] == [(0, 4, 8), (128, 132, 136)] and {a.vector for a in acc} == {4}
    with pytest.raises(LayoutError, match="not 4 consecutive"):
        warp_accesses(parse("S[(4,32):(1,1@lane)]"), (4, 32), vector=4)
    with pytest.raises(LayoutError, match="not contiguous"):
        cost([Access((0,) + (None,) * 31, 4)], lambda x: x - x % 4 + [0, 2, 1, 3][x % 4], 4)


# --- the search is exact ------------------------------------------------------------------------

PATTERNS = [
    ((32, 32), 4, parse("S[(32,32):(1,1@lane)]"), 1, parse("S[(32,32):(1@lane,1)]"), 1),
    ((64, 64), 2, parse("S[(16,4,8,8):(8,8@lane,1@lane,1)]"), 8, None, 8),
    ((24, 24), 4, parse("S[(24,24):(1,1@lane)]"), 1, parse("S[(24,24):(1@lane,1)]"), 1),
    ((64, 48), 2, parse("S[(16,4,6,8):(8,6@lane,1@lane,1)]"), 8, None, 8),
]


def _accesses(shape, wl, wv, rl, rv):
    write = warp_accesses(wl, shape, wv)
    read = ldmatrix_accesses(shape) if rl is None else warp_accesses(rl, shape, rv)
    return write, read


@pytest.mark.parametrize("case", range(len(PATTERNS)))
def test_every_candidates_cost_is_the_per_instruction_model_and_the_best_is_least(case):
    shape, eb, wl, wv, rl, rv = PATTERNS[case]
    write, read = _accesses(shape, wl, wv, rl, rv)
    ranked = search_swizzle(shape, eb, write, read)
    by_layout = {c.layout: c for c in ranked}
    usable = 0
    every = candidates(shape, eb, sorted({wv, rv}))
    for L, offs in every[::max(1, len(every) // 40)]:      # a spread of 40 (each is seconds' work)
        try:
            want = (cost(write, offs.__getitem__, eb), cost(read, offs.__getitem__, eb))
        except LayoutError:
            assert L not in by_layout
            continue
        usable += 1
        got = by_layout[L]
        assert (got.write, got.read) == want, L
        assert ranked[0].conflicts <= got.conflicts
    assert usable > 10 and all(ranked[0].conflicts <= c.conflicts for c in ranked)


def test_candidate_offsets_are_their_layouts_maps():
    for shape, eb, vec in (((8, 16), 4, 1), ((16, 12), 2, 4), ((4, 8, 8), 2, 8)):
        for L, offs in candidates(shape, eb, (vec,)):
            assert list(offs) == storage_offsets(L, shape), L


def test_the_search_finds_the_known_conflict_free_layouts():
    write, read = _accesses(*PATTERNS[0][:1], *PATTERNS[0][2:])
    best = search_swizzle((32, 32), 4, write, read)[0]
    assert best.conflicts == 0 and best.storage == 1024 and best.layout == SwizzledLayout(_row_major(32, 32), Swizzle(5, 0, 5))
    write, read = _accesses((64, 64), *PATTERNS[1][2:])
    best = search_swizzle((64, 64), 2, write, read)[0]
    assert best.conflicts == 0 and best.storage == 4096 and best.layout == SwizzledLayout(_row_major(64, 64), Swizzle(3, 3, 3))


@pytest.mark.parametrize("case", [2, 3])
def test_extents_that_are_not_powers_of_two_get_a_conflict_free_layout(case):
    """24×24 fp32 column reads (rows 24 words apart: 6-way plain) and 48-column bf16 ldmatrix
    reads (96-byte rows): each has a conflict-free candidate, which the search ranks first."""
    shape, eb, wl, wv, rl, rv = PATTERNS[case]
    write, read = _accesses(shape, wl, wv, rl, rv)
    ranked = search_swizzle(shape, eb, write, read)
    plain = next(c for c in ranked if c.layout == _row_major(*shape))
    assert plain.conflicts > 0 and ranked[0].conflicts == 0
    assert all(c.storage >= ranked[0].storage for c in ranked if c.conflicts == 0)


def test_the_command_line_ranks_the_same_layouts(capsys):
    from axe.cli import main
    assert main(["layout", "S[(32,32):(1,1@lane)]", "--shape", "32,32", "--swizzle", "S[(32,32):(1@lane,1)]",
                 "--bytes", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].strip().startswith("Swizzle(5,0,5) ∘ (S[(32,32):(32,1)]): write 0 conflicts")
    assert main(["layout", "S[(16,4,8,8):(8,8@lane,1@lane,1)]", "--shape", "64,64", "--swizzle", "ldmatrix",
                 "--vector", "8"]) == 0
    assert "Swizzle(3,3,3) ∘ (S[(64,64):(64,1)]): write 0 conflicts" in capsys.readouterr().out
