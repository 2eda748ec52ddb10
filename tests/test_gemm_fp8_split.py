"""The FP8 GEMM's split-K and run-time M (``kernels/gemm_fp8.py``): the units the kernel walks cover
every k-block of every tile once and SB's column stays inside the tensor where a slice runs past K;
the builds are call-free with bounded flag waits and no spills, carry the workspace their units need,
and bind — through the runtime's own argument checks and tensor-map arguments — at every M a bucket
holds, refusing one row past the bound.  The arithmetic is checked on the GPU
(``tests/gpu/cases_gemm_fp8.py``: ``gemm_fp8_splitk*``, ``gemm_fp8_dyn*``)."""

import os
import sys

import pytest

pytest.importorskip("tvm")

import tvm  # noqa: E402

from kernels import fp8_blocks as Q  # noqa: E402
from kernels import gemm_fp8 as G  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import cases_gemm_fp8 as cases  # noqa: E402


def _split_cases():
    """``(M, N, K, bn, split_k)``: the GPU cases' split-K configurations (a run-time M at its bound)."""
    out = [v for v in cases.SPLIT_K.values()]
    out += [(kw["max_rows"], n, k, kw["bn"], kw["split_k"]) for n, k, kw, _ in cases.DYNAMIC.values()
            if kw.get("split_k", 1) > 1 and "tile_m" not in kw]   # the decode tile: test_gemm_fp8_transposed
    return out


@pytest.mark.parametrize("M, N, K, bn, split_k", _split_cases())
def test_split_k_units_cover_every_k_block_once(M, N, K, bn, split_k):
    """Over all CTAs, the units (tile, slice, k0, k1) computed cover each (tile, k-block < k_iters)
    exactly once; the k-blocks past K are walked only where the mainloop clamps SB's column
    (``past_k``), and the clamped column is the k-block itself inside K and the last one past it."""
    sched, main, epi = G.parts(M, N, K, bn, G.STAGES[bn], G.SMS, G.GROUP, 1, False, split_k)
    k_iters = main.k_iters
    seen = {}
    for cid in range(G.SMS):
        for t, s, k0, k1 in sched.units_of(cid):
            for kb in range(k0, min(k1, k_iters)):
                seen[(t, kb)] = seen.get((t, kb), 0) + 1
    assert sorted(seen) == [(t, kb) for t in range(sched.tiles) for kb in range(k_iters)]
    assert set(seen.values()) == {1}
    assert main.past_k == (sched.L * split_k > k_iters)
    ana = tvm.sym.Analyzer()
    for kb in range(sched.L * split_k):
        col = main.sb_k(tvm.tirx.const(kb, "int32"))
        assert int(ana.simplify(col)) == min(kb, k_iters - 1)


#: (name, M or None, N, K, make keywords): split-K at a static size with a slice past K, a run-time M
#: bounded with split-K on the 256-wide tile (ragged K, a ragged half past N), a bounded plain one,
#: an unbounded one (the grid an expression of M), one k-block (SA's extent-1 dimension), the
#: 64-wide decode tile cut in K, and CTA pairs at an unbounded M, 256 wide (a ragged half past N)
#: and 128 wide
BUILDS = {"sk3": (777, 576, 1408, dict(bn=128, split_k=3)),
          "dyn64_sk2": (None, 2112, 1936, dict(bn=256, split_k=2, max_rows=64)),
          "dyn128": (None, 7168, 2048, dict(bn=128, max_rows=128)),
          "dyn_b192": (None, 2112, 7168, dict(bn=192)),
          "dyn64_k1": (None, 512, 128, dict(bn=128, max_rows=64)),
          "dyn16_b64_sk2": (None, 4096, 14336, dict(bn=64, split_k=2, max_rows=16)),
          "dyn_c2_b256": (None, 2112, 1536, dict(bn=256, cluster=2)),
          "dyn_c2_b128": (None, 576, 7168, dict(bn=128, cluster=2))}


def build_entry(name, entry):
    """``(entry, artifact)`` of a ``(M or None, N, K, make keywords)`` entry (None: a run-time M)."""
    M, N, K, kw = entry
    art = G.build(M, N, K, name=name, **kw) if M is not None else G.build_dynamic(N, K, name=name, **kw)
    return entry, art


def assert_split_handover(art):
    """A split-K build: call-free, its flag waits bounded and inline, flags set and taken with
    release/acquire."""
    from test_gemm_kernel import assert_bounded_waits, assert_call_free
    assert_call_free(art)
    assert assert_bounded_waits(art, "axe_flag_take") >= 1
    assert "st.release.gpu.global.b32" in art.ptx and "ld.acquire.gpu.global.b32" in art.ptx


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request):
    return build_entry(f"gemm_fp8_t_{request.param}", BUILDS[request.param])


def test_builds_without_spills_and_with_the_workspace_their_units_need(built):
    """No spills within the consumers' registers; split-K: call-free, the flag waits bounded and
    inline, flags set and taken with release/acquire, a workspace of one 64-row fp32 block per (tile,
    slice but the last, warpgroup) and as many flags; otherwise neither leaves a parameter."""
    (M, N, K, kw), art = built
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["registers"] <= G.CONSUMER_REGS
    args = {a["name"]: a for a in art.launch["args"]}
    s = kw.get("split_k", 1)
    if s == 1:
        assert list(args) == ["A_", "B_", "SA_", "SB_", "C_"]
        return
    assert_split_handover(art)
    rows = M or kw["max_rows"]
    tiles = -(-rows // 128) * -(-N // kw["bn"])
    assert args["W_"]["shape"] == [tiles * (s - 1) * 2 * 64, kw["bn"]] and args["F_"]["shape"] == [tiles * (s - 1) * 2]
    assert args["W_"]["scratch"] and args["F_"]["scratch"]


def test_every_consumer_warp_releases_its_slot(built):
    """A slot's row scales are read by every consumer thread's own shared loads, so a slot is free
    only once every warp is done: the empty barriers count 2 warpgroups x 4 warps (x the CTAs
    sharing a slot), and every arrival follows a warp barrier (an arrival per warpgroup let the
    producer refill a slot a slower warp still read; in a pair lane 0 arrives on both CTAs')."""
    import re
    (M, N, K, kw), art = built
    src = art.cuda_source
    counts = [int(c) for c in re.findall(r"mbarrier_init_init_shared_b64\([^;]*\(uint\)(\d+)\);", src)]
    assert counts.count(8 * kw.get("cluster", 1)) >= 2, counts     # empty: 8 arrivals (full: 3)
    released = re.findall(r"warp_sync\(\);\s*if \(\(\(\(int\)threadIdx\.x\) % 32\) == 0\) \{\s*"
                          r"(?:tvm_builtin_ptx_mbarrier_arrive|axe_mbarrier_arrive_remote)", src)
    assert released, "no warp barrier before the consumers' lane-0 arrivals"


def test_run_time_pairs_multicast_b_with_bounded_waits_in_a_cluster_launch(built):
    """CTA pairs at a run-time M: launched as clusters of 2 on every SM, B's halves multicast to both
    CTAs (``.multicast::cluster``), every wait on a barrier the peer completes bounded and inline
    (the ring's acquire and wait), the peers' last cluster barrier before exit; single CTAs have none
    of these."""
    from test_gemm_kernel import assert_bounded_waits, assert_call_free
    (M, N, K, kw), art = built
    pair = kw.get("cluster", 1) > 1
    assert art.launch["cluster"] == ([2, 1, 1] if pair else None)
    assert ("multicast::cluster" in art.ptx) == pair and ("barrier.cluster.arrive" in art.ptx) == pair
    if not pair:
        return
    assert art.launch["grid"] == [G.SMS, 1, 1]
    assert_call_free(art)
    assert assert_bounded_waits(art, "axe_mbarrier_wait_bounded") >= 2
    assert "mbarrier.try_wait" in art.ptx and "mapa.shared::cluster" in art.ptx


def _at(M, m):
    """An evaluator of expressions of the run-time ``M`` at ``m`` rows (ints)."""
    ana = tvm.sym.Analyzer()
    ana.bind(M, tvm.tirx.const(m, "int32"))
    return lambda expr: expr if isinstance(expr, int) else int(ana.simplify(expr))


@pytest.mark.parametrize("bn, N", [(256, 2112), (128, 576)])
def test_run_time_pairs_cover_every_tile_once_and_store_only_inside_m(bn, N):
    """The run-time-M pair schedule evaluated at M = 1, 100, 129, 300, 1000, 4097 (1, 1, 2, 3, 8 and 33
    block-rows): over the 66 clusters x 2 ranks the tiles given cover every (block-row < ⌈M/128⌉,
    block-column) exactly once; a block-row past M occurs only as the last pair's second CTA over an
    odd count (where the epilogue guards its store: ``past_rows``); clusters past the tiles are given
    none; the launch grid is every SM (a whole number of pairs)."""
    M = tvm.tirx.Var("M", "int32")
    sched = G.parts(M, N, 1536, bn, G.STAGES[bn], G.SMS, G.GROUP, 2, False)[0]
    assert sched.launch_grid(G.SMS) == G.SMS and G.SMS % 2 == 0 and sched.past_rows
    n_tiles = -(-N // bn)
    for m in (1, 100, 129, 300, 1000, 4097):
        m_tiles, value = -(-m // 128), _at(M, m)
        seen, past = {}, []
        for cid in range(G.SMS // 2):
            count = value(sched.count(tvm.tirx.const(cid, "int32")))
            assert count >= 0 and (count == 0) == (cid >= -(-m_tiles // 2) * n_tiles), (m, cid, count)
            for it in range(count):
                for rank in (0, 1):
                    mb, nb = (value(x) for x in sched.coords(tvm.tirx.const(cid, "int32"),
                                                             tvm.tirx.const(it, "int32"), rank))
                    if mb >= m_tiles:
                        past.append((mb, nb, rank))
                    else:
                        seen[(mb, nb)] = seen.get((mb, nb), 0) + 1
        assert sorted(seen) == [(i, j) for i in range(m_tiles) for j in range(n_tiles)] and set(seen.values()) == {1}
        assert sorted(past) == ([(m_tiles, j, 1) for j in range(n_tiles)] if m_tiles % 2 else []), m
        assert value(sched.m_tiles) == m_tiles


def _bind(art, M, N, K):
    """The runtime's argument binding (device type cpu) of quantized M×N×K operands with the scratch
    the launcher appends; returns the binding."""
    torch = pytest.importorskip("torch")
    import axe.runtime as rt
    from axe.runtime import bind_arguments
    A, SA = Q.quantize_rows(torch.randn(M, K))
    B, SB = Q.quantize_blocks(torch.randn(N, K))
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    args = rt.Kernel(art)._with_scratch((A, B, SA, SB, C), 0, 0, device="cpu")
    return bind_arguments(art.launch, list(args), device_type="cpu"), (A, B, SA, SB, C)


def test_a_run_time_m_binds_at_every_m_of_its_bucket(built):
    """M = 1, a count that is not a multiple of 4 (SA's padded rows), the bound: the launch binds, the
    grid is the persistent one (bounded or in CTA pairs: every SM; unbounded on single CTAs: no more
    CTAs than tiles), and the tensor
    maps of A, SA and C take the tensors' extents and SA's row stride (``round_up(M, 4)`` scales)."""
    from axe.backends.cuda.tensormap import tiled_args
    (M, N, K, kw), art = built
    if M is not None:
        pytest.skip("a static M")
    bound = kw.get("max_rows")
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert art.launch["symbols"]["M"].get("max") == bound
    for m in (1, 7, bound or 1000):
        b, (A, B, SA, SB, C) = _bind(art, m, N, K)
        tiles = -(-m // 128) * -(-N // kw["bn"])
        assert b.grid == ((G.SMS if bound or kw.get("cluster", 1) > 1 else min(G.SMS, tiles)), 1, 1)
        assert b.env["M"] == m
        for param, t in (("A_map", A), ("SA_map", SA), ("C_map", C)):
            dims, strides, _, _ = tiled_args(specs[param], t.data_ptr(), tuple(t.shape), t.stride(),
                                             t.element_size(), str(t.dtype).removeprefix("torch."))
            assert dims == list(reversed(t.shape)), param
            if t.shape[0] > 1:
                assert strides == [t.shape[1] * t.element_size()], param
        assert SA.shape == (-(-K // 128), -(-m // 4) * 4)


def test_a_bounded_m_refuses_one_row_past_its_bound(built):
    import axe.runtime as rt
    (M, N, K, kw), art = built
    bound = kw.get("max_rows")
    if M is not None or bound is None:
        pytest.skip("not a bounded run-time M")
    with pytest.raises(rt.LaunchError, match=f"exceeds {bound}"):
        _bind(art, bound + 1, N, K)


def test_split_k_and_run_time_m_refusals_name_the_condition():
    with pytest.raises(ValueError, match="stream_k and split_k are built for bn 64, 128 or 256 without clusters .*, got bn=192"):
        G.make(1024, 2112, 4096, bn=192, split_k=2)
    with pytest.raises(ValueError, match="got bn=128, cluster=2"):
        G.make(1024, 2112, 4096, bn=128, cluster=2, split_k=2)
    with pytest.raises(ValueError, match="two tile schedulers"):
        G.make(1024, 2112, 4096, bn=128, stream_k=True, split_k=2)
    with pytest.raises(ValueError, match="at least 2 k-blocks per slice"):
        G.make(1024, 2112, 256, bn=128, split_k=2)
    with pytest.raises(ValueError, match="stream-K and split-K plan .*got stream_k=False, split_k=2.*bound it with max_rows"):
        G.make_dynamic(2112, 4096, bn=128, split_k=2)
    with pytest.raises(ValueError, match="got stream_k=True, split_k=1.*bound it with max_rows"):
        G.make_dynamic(2112, 4096, bn=128, stream_k=True)
    with pytest.raises(ValueError, match="max_rows bounds a run-time M"):
        G.make(1024, 2112, 4096, max_rows=1024)
    with pytest.raises(ValueError, match="max_rows bounds a run-time M"):
        G.make_dynamic(2112, 4096, max_rows=2048)
    G.make_dynamic(2112, 4096, bn=256, cluster=2, max_rows=512)         # pairs on a bounded grid compose
    G.make_dynamic(2112, 4096, bn=128, cluster=2)                       # and on the run-time grid


@pytest.mark.parametrize("N", [400, 576, 2112, 4096, 7168])
def test_each_columns_sb_block_for_the_tile_widths_read_from_global(N):
    """bn 64, 128, 256: every column j < N of every tile's half h is scaled by SB row ``j // 128``
    (the definition) — the row ``sb_block`` gives; a 64-wide tile read as a 128-wide one's would not
    be (the oracle can fail)."""
    for bn in (64, 128, 256):
        main = G.parts(1024, N, 1024, bn, G.STAGES[bn], G.SMS, G.GROUP, 1, False)[1]
        assert not main.staged
        for n_blk in range(-(-N // bn)):
            for h in range(main.halves):
                cols = [n_blk * bn + h * main.part_n + c for c in range(main.part_n)]
                assert {j // 128 for j in cols if j < N} <= {main.sb_block(0, n_blk, h)}, (bn, n_blk, h)
    wrong = G.parts(1024, N, 1024, 64, G.STAGES[64], G.SMS, G.GROUP, 1, False)[1]
    assert any(n_blk * wrong.halves != (n_blk * 64) // 128 for n_blk in range(2))
