"""The FP8 GEMM's transposed decode tile (``tile_m`` 16/32/64, ``kernels/gemm_fp8.py``,
``kernels/parts/mainloops/fp8_transposed.py``): which scales each accumulator element is promoted
with — SB's block of its weight row, SA's scale of its activation row — derived from the mainloop's
own hooks and the scale schedule's plan, against the definition ``C[i, j] = Σ SA[i, kb]·SB[j // 128,
kb]·…`` through the transposed store's law; the builds for sm_90a (ptxas: no spills, shared memory
within the SM's, ``wgmma.m64n{tile_m}k32`` e4m3, split-K's flag hand-over), their binding at every
M of the bucket and the refusal past it; the refusals of what does not compose; the tune
candidates.  The arithmetic is checked on the GPU (``tests/gpu/cases_gemm_fp8.py``: ``gemm_fp8_t*``)."""

import os
import re
import sys

import pytest

pytest.importorskip("tvm")

import tvm  # noqa: E402

from axe.backends.cuda.schedules.wgmma import d_fragment  # noqa: E402
from axe.layout import S  # noqa: E402
from kernels import gemm_fp8 as G  # noqa: E402
from kernels import gemm_fp8_select as SEL  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gemm_fp8 import _driver_rules_hold, _plan_pairs, _t  # noqa: E402
from test_gemm_fp8_split import _bind, assert_split_handover, build_entry  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import cases_gemm_fp8 as cases  # noqa: E402


def _promotions(tile_m, N, slot=3, wg=1, kb=2, m_blk=1, n_blk=0):
    """For each accumulator element (thread, register) of warpgroup wg in tile (m_blk, n_blk) of the
    decode tile: (C's row i, C's column j) by the transposed store's law, and (SA's row, SB's row)
    the kernel reads — the plan's offsets into the operands the mainloop hands ``scale_accumulate``
    (its ``sa_view`` of a slot, SB at its ``sb_block``), mapped back through what the producer put
    in the slot (SA's k-block kb, rows from ``sa_block · sa_width``)."""
    sched, main, epi = G.parts(tile_m, N, 1024, 128, SEL.TILE_M_STAGES[tile_m], G.SMS, G.GROUP, 1, False,
                               tile_m=tile_m)
    nb, kbs = -(-N // 128), 8
    main.sa = _t((main.stages, main.sa_width), S[(main.stages, main.sa_width)], "shared", "float32", "sa")
    SA = main.sa_view(slot, wg)
    SB = _t((nb, kbs), S[(nb, kbs)], "global", "float32", "SB")
    row = main.sb_block(m_blk, n_blk, 0)
    SBt = SB[row:row + 1, kb:kb + 1]
    D = _t((64, tile_m), d_fragment(tile_m, "tx"), "local", "float32", "acc")
    P = _t((64, tile_m), d_fragment(main.part_n, "tx"), "local", "float32", "part")
    got, _ = _plan_pairs(D, P, [SA, SBt])
    where = {}
    for r in range(64):
        for c in range(tile_m):
            (h,) = D.layout.map((r, c), D.shape)
            where[(h["tx"], h["m"])] = (r, c)
    out = {}
    for (t, m), (_p, sa_off, sb_off) in got.items():
        r, c = where[(t, m)]
        i, j = n_blk * main.bn + c, m_blk * main.bm + main.row0(wg) + r     # TransposedStore's law
        s_row, s_col = divmod(sa_off, main.sa_width)
        assert s_row == slot
        sb_row, sb_col = divmod(sb_off, kbs)
        assert sb_col == kb
        out[(t, m)] = ((i, j), (main.sa_block(m_blk, n_blk) * main.sa_width + s_col, sb_row))
    return out


@pytest.mark.parametrize("tile_m", [16, 32, 64])
def test_each_element_is_promoted_with_its_rows_sa_and_its_weight_blocks_sb(tile_m):
    """Every element of the 64 × tile_m part, both warpgroups, two weight blocks: SA of C's row i and
    SB of block j // 128 — the definition; the 128-row tile's hooks (SA per accumulator row, SB by
    n_blk) would read other scales (the oracle can fail)."""
    for wg in (0, 1):
        for m_blk in (0, 3):
            pro = _promotions(tile_m, 576, wg=wg, m_blk=m_blk)
            assert len(pro) == 64 * tile_m
            for (i, j), (sa_row, sb_row) in pro.values():
                assert sa_row == i and sb_row == j // 128, (wg, m_blk, i, j, sa_row, sb_row)
    main = G.parts(1024, 576, 1024, 128, G.STAGES[128], G.SMS, G.GROUP, 1, False)[1]
    assert main.sb_block(3, 0, 0) != 3 and main.sa_block(3, 0) != 0


def _split_cases():
    """``(rows, N, K, tile_m, split_k)``: the GPU cases' decode tiles cut in K (a run-time M at its bound)."""
    out = [(m, n, k, kw["tile_m"], kw["split_k"]) for m, n, k, kw in cases.TRANSPOSED.values() if kw.get("split_k", 1) > 1]
    return out + [(kw["max_rows"], n, k, kw["tile_m"], kw["split_k"]) for n, k, kw, _ in cases.DYNAMIC.values()
                  if "tile_m" in kw and kw.get("split_k", 1) > 1]


@pytest.mark.parametrize("M, N, K, tile_m, split_k", _split_cases())
def test_split_units_of_the_decode_tile_cover_every_k_block_once(M, N, K, tile_m, split_k):
    """Over all CTAs, the split-K units of the transposed tile grid (N weight rows × M rows in 128 ×
    tile_m tiles) cover each (tile, k-block) exactly once."""
    sched, main, _ = G.parts(M, N, K, 128, SEL.TILE_M_STAGES[tile_m], G.SMS, G.GROUP, 1, False, split_k, tile_m=tile_m)
    seen = {}
    for cid in range(G.SMS):
        for t, _s, k0, k1 in sched.units_of(cid):
            for kb in range(k0, min(k1, main.k_iters)):
                seen[(t, kb)] = seen.get((t, kb), 0) + 1
    assert sched.tiles == -(-N // 128) * -(-M // tile_m)
    assert sorted(seen) == [(t, kb) for t in range(sched.tiles) for kb in range(main.k_iters)]
    assert set(seen.values()) == {1}


#: (M or None, N, K, make keywords): static M below the tile with ragged N and K, DeepSeek's and
#: Llama's shapes, a run-time M bounded by the tile, split-K (a slice past K), one k-block
BUILDS = {"t16_m7": (7, 400, 1936, dict(tile_m=16)),
          "t32_m1_sk3": (1, 576, 1408, dict(tile_m=32, split_k=3)),
          "dyn16_llama": (None, 4096, 14336, dict(tile_m=16, max_rows=16)),
          "dyn64_ds_sk2": (None, 2112, 7168, dict(tile_m=64, split_k=2, max_rows=64)),
          "dyn64_k1": (None, 576, 128, dict(tile_m=64, max_rows=64))}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request):
    return build_entry(f"gemm_fp8_tr_{request.param}", BUILDS[request.param])


def test_builds_for_sm90a_without_spills_with_the_narrow_wgmma(built):
    """ptxas: no spills, registers within the consumers', shared memory within 227 KiB; the PTX issues
    ``wgmma.m64n{tile_m}k32`` on e4m3 and no 128-wide one; the TMA boxes are the tile's (B 128×128,
    A tile_m×128, SA tile_m scales, C tile_m×64) and A's, SA's and C's extents come from the tensors;
    split-K hands over through release/acquire flags and a workspace of (tile, slice, warpgroup)
    64 × tile_m blocks."""
    (M, N, K, kw), art = built
    tm, s = kw["tile_m"], kw.get("split_k", 1)
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["registers"] <= G.CONSUMER_REGS
    assert art.launch["dynamic_smem"] + res["static_smem"] <= 232448
    assert re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{tm}k32\.f32\.e4m3\.e4m3", art.ptx)
    assert not re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(?!%d)\d+k" % tm, art.ptx)
    maps = {m["param"]: m for m in art.launch["tensormaps"]}
    assert maps["B_map"]["box"] == [128, 128] and maps["A_map"]["box"] == [128, tm]
    assert maps["SA_map"]["box"] == [tm, 1] and maps["C_map"]["box"] == [64, tm]
    assert all(maps[p]["shape"] is None for p in ("A_map", "SA_map", "C_map"))
    assert _driver_rules_hold(maps["B_map"])
    args = {a["name"]: a for a in art.launch["args"]}
    if s == 1:
        assert list(args) == ["A_", "B_", "SA_", "SB_", "C_"]
        return
    assert_split_handover(art)
    tiles = -(-N // 128) * -(-(M or kw["max_rows"]) // tm)
    assert args["W_"]["shape"] == [tiles * (s - 1) * 2 * 64, tm]


def test_binds_at_every_m_up_to_the_tile_and_refuses_one_more(built):
    import axe.runtime as rt
    (M, N, K, kw), art = built
    if M is not None:
        b, _ = _bind(art, M, N, K)
        assert b.grid[0] >= 1
        return
    bound = kw["max_rows"]
    for m in sorted({1, 5, bound}):
        b, _ = _bind(art, m, N, K)
        assert b.env["M"] == m
    with pytest.raises(rt.LaunchError, match=f"exceeds {bound}"):
        _bind(art, bound + 1, N, K)


def test_refusals_name_the_parameter_and_the_condition():
    with pytest.raises(ValueError, match="tile_m must be 128 or one of"):
        G.make(8, 2112, 4096, tile_m=48)
    with pytest.raises(ValueError, match=r"at most tile_m rows .* got M=17"):
        G.make(17, 2112, 4096, tile_m=16)
    with pytest.raises(ValueError, match=r"at most tile_m rows .* max_rows=None"):
        G.make_dynamic(2112, 4096, tile_m=16)
    with pytest.raises(ValueError, match=r"at most tile_m rows .* max_rows=128"):
        G.make_dynamic(2112, 4096, tile_m=64, max_rows=128)
    for kw, what in ((dict(bn=256), "bn=256"), (dict(cluster=2), "cluster=2"), (dict(stream_k=True), "stream_k=True")):
        with pytest.raises(ValueError, match=f"without stream-K .*{what}"):
            G.make(16, 2112, 4096, tile_m=16, **kw)
    with pytest.raises(ValueError, match="N=64 >= 128 weight rows"):
        G.make(16, 64, 4096, tile_m=16)
    with pytest.raises(ValueError, match="at least 2 k-blocks per slice"):
        G.make(16, 2112, 256, tile_m=16, split_k=2)


def test_tune_candidates_hold_the_decode_tile_and_the_heuristic_picks_it():
    """Buckets 16 and 64: the decode tile of the bucket's height with every split K allows, built
    by make_dynamic at the bound, and the heuristic's pick (``decode_tile``); bucket 128 and wider:
    none, and a 128-row tile is picked."""
    for bound in (16, 64):
        cands = [c for c in SEL.candidates(bound, 4096, 14336) if "tile_m" in c]
        assert [c["split_k"] for c in cands] == list(SEL.splits(14336))
        assert all(c["tile_m"] == bound and c["stages"] == SEL.TILE_M_STAGES[bound] for c in cands)
        G.make_dynamic(4096, 14336, **SEL.with_bound(bound, cands[-1]))
    assert not [c for b in (128, 256, None) for c in SEL.candidates(b, 4096, 14336) if "tile_m" in c]
    for M in (1, 7, 16, 33, 64):
        pick = SEL.heuristic(M, 4096, 14336)
        assert pick["tile_m"] == (16 if M <= 16 else 64) and pick in [SEL.with_bound(pick["max_rows"], c)
                                                                       for c in SEL.candidates(pick["max_rows"], 4096, 14336)]
        G.make_dynamic(4096, 14336, **pick)
    for M in (65, 128, 1000):
        assert "tile_m" not in SEL.heuristic(M, 4096, 14336)
