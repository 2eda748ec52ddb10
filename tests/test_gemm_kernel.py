"""The Hopper GEMM (kernels/gemm.py) builds for sm_90a with both B layouts and both dtypes; the
PTX holds the instructions its design promises; setmaxnreg is honoured (no C7508 or C7507
warning); no spills; no function calls (C7510), also where waits on other CTAs are bounded
(cluster, stream-K) and in the fused reduce-scatter; the wrong shapes are refused with clear errors."""

import os
import re

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from kernels import gemm  # noqa: E402
from kernels.parts.schedulers.stream_k import stream_k_bound  # noqa: E402

PROMISED = ["wgmma.mma_async.sync.aligned.m64n256k16.f32", "cp.async.bulk.tensor.2d.shared::cluster.global",
            "cp.async.bulk.tensor.2d.global.shared::cta", "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx",
            "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232", "stmatrix.sync.aligned",
            "fence.proxy.async.shared::cta", "bar.sync"]


def assert_call_free(art):
    """ptxas kept every wgmma asynchronous and every setmaxnreg (no C7510, C7507, C7508), nothing
    spilled, no stack, and the PTX calls no function (printf's vprintf included)."""
    for code in ("C7510", "C7507", "C7508"):
        assert code not in art.log, f"{art.name}: ptxas {code}: " + next(l for l in art.log.splitlines() if code in l)
    calls = re.findall(r"^\s*call(?:\.uni)?\b.*$", art.ptx, re.M)
    assert not calls and "vprintf" not in art.ptx, f"{art.name}: PTX calls {calls[:3]}"
    r = art.launch["resources"]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, (art.name, r)


def assert_bounded_waits(art, wait):
    """Every call of the bounded wait ``wait`` (at least one) became, inline, the %globaltimer
    spin, the report's stores into the slot ``axe_report`` points at, its fences and the trap that
    ends the launch; returns the number of call sites."""
    from axe.backends.cuda import report
    src, ptx = art.cuda_source, art.ptx
    assert report.SOURCE in src and src.count("#define AXE_REPORT_DEFINED") == 1   # the report code, once
    sites = len(re.findall(rf"\b{wait}\((?!void\*|int\*)", src))
    assert sites >= 1, f"{art.name}: no call of {wait}"
    assert ".global .align 8 .u64 axe_report;" in ptx and "axe_report_claim" in ptx
    assert ptx.count("trap;") == sites, (art.name, sites, ptx.count("trap;"))
    assert ptx.count("%globaltimer") == 2 * sites               # the start, and each time a try fails
    assert ptx.count("st.relaxed.sys.global.u32") == sites * (10 + report.NAME_WORDS)
    assert ptx.count("fence.sc.sys") == 2 * sites
    return sites


@pytest.mark.parametrize("dtype,b_major", [("float16", "row"), ("bfloat16", "col")])
def test_gemm_builds(dtype, b_major):
    art = gemm.build(1000, 1000, 1000, dtype=dtype, b_major=b_major)
    for ins in PROMISED:
        assert ins in art.ptx, f"PTX lacks {ins}"
    t = "f16" if dtype == "float16" else "bf16"
    assert f"m64n256k16.f32.{t}.{t}" in art.ptx
    assert "__launch_bounds__(384, 1)" in art.cuda_source
    assert_call_free(art)
    assert "axe_mbarrier_wait_bounded" not in art.cuda_source and "axe_report" not in art.ptx   # no wait on another CTA
    assert art.launch["grid"] == [gemm.SMS, 1, 1] and art.launch["block"] == [384, 1, 1]
    assert art.launch["dynamic_smem"] >= gemm.STAGES * (128 * 64 + 64 * 256) * 2
    # the epilogue stores each warpgroup's 64x256 tile as two 64x128 chunks through one buffer
    assert [r.chosen for r in art.records] == ["tma", "tma", "wgmma", "wgmma", "wgmma", "per_thread"] + \
        ["stmatrix", "tma_store"] * 2
    # the layouts decide B's transpose bit: MN-major (row-major B) sets imm-trans-b
    trans_b = re.findall(r"wgmma_f16_ss_mma_async_sync_aligned_m64n256k16_f32_\w+?_1_1_0_(\d)", art.cuda_source) or \
        re.findall(r"wgmma_bf16_ss_mma_async_sync_aligned_m64n256k16_f32_\w+?_1_1_0_(\d)", art.cuda_source)
    assert trans_b and set(trans_b) == {"1" if b_major == "row" else "0"}, trans_b
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert specs["A_map"]["box"] == [64, 128] and specs["A_map"]["swizzle"] == 128
    assert specs["B_map"]["box"] == ([64, 64] if b_major == "row" else [64, 256])
    assert specs["C_map"]["box"] == [64, 64]


def test_accumulator_pinned_after_wait():
    """The accumulator is read only after wgmma.wait_group 0 (fence_registers pins it)."""
    art = gemm.build(1024, 1024, 1024)
    src = art.cuda_source
    wait = src.rindex("wait_group_sync_aligned_0")
    fence = src.index("axe_fence_f32(", wait)
    first_cast = src.index("((half)", wait)
    assert fence < first_cast


@pytest.mark.parametrize("in_flight", [0, 1])
def test_accumulator_complete_before_epilogue(in_flight):
    """``in_flight`` wgmma groups stay in flight in the main loop (wait_group 1 or 0), and the last
    k-block's wait_group 0 sits in the same basic block as the epilogue's first read of the
    accumulator (ptxas hoisted that read above a wait_group 0 placed after the loop)."""
    ptx = gemm.build(1024, 1024, 1024, in_flight=in_flight).ptx
    assert ("wgmma.wait_group.sync.aligned 1;" in ptx) == (in_flight == 1)
    first_cvt = ptx.index("cvt.rn.f16.f32")
    wait0 = ptx.rindex("wgmma.wait_group.sync.aligned 0;", 0, first_cvt)
    assert wait0 > ptx.rindex("wgmma.mma_async", 0, first_cvt)
    assert "$L__BB" not in ptx[ptx.rindex("wgmma.mma_async", 0, first_cvt):wait0]


def test_gemm_refuses_bad_shapes():
    """Sizes only the GPU form cannot take are refused by the GPU build (trn1 builds them)."""
    with pytest.raises(Ax.TargetError, match="gemm on sm_90a: .*multiples of 8"):
        Ax.build_func(gemm.make(1024, 1000 + 4, 1024), "sm_90a")
    with pytest.raises(Ax.TargetError, match="gemm on sm_90a: .*smaller than one 256-column"):
        Ax.build_func(gemm.make(1024, 128, 1024), "sm_90a")          # N below the tile: tile_n=128 builds
    Ax.build_func(gemm.make(64, 1024, 1024), "sm_90a")    # fewer rows than a tile: read through a tile-high view
    with pytest.raises(ValueError, match="b_major"):
        gemm.make(1024, 1024, 1024, b_major="diag")
    with pytest.raises(ValueError, match="dtype"):
        gemm.make(1024, 1024, 1024, dtype="float32")


def test_tile_schedule_covers_every_tile_once():
    """Grouped rasterization is a bijection onto the tile grid (checked with plain ints)."""
    import axe.lang as Ax
    for mt, nt, group in ((7, 5, 8), (64, 56, 8), (9, 3, 4)):
        s = Ax.TileSchedule(mt, nt, 132, group)
        seen = set()
        seen = [s.coords(t) for t in range(s.tiles)]
        assert len(set(seen)) == s.tiles
        seen = set(seen)
        assert seen == {(m, n) for m in range(mt) for n in range(nt)}
        assert sum(s.count(c) for c in range(132)) == s.tiles


@pytest.mark.parametrize("dtype,b_major", [("float16", "row"), ("bfloat16", "col")])
def test_gemm_cluster_builds(dtype, b_major):
    """cluster=2: clusters of two CTAs (launch record), B loaded half per CTA and multicast
    (``multicast::cluster``, mask 3), peer releases through ``mapa`` + a cluster-scope arrive,
    cluster barriers at the start and end; no spills, setmaxnreg honoured."""
    art = gemm.build(777, 1496, 328, dtype=dtype, b_major=b_major, cluster=2)
    ptx = art.ptx
    for ins in ["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster",
                "barrier.cluster.arrive", "barrier.cluster.wait", "fence.mbarrier_init.release.cluster",
                "mapa.shared::cluster.u32", "mbarrier.arrive.shared::cluster.b64",
                "wgmma.mma_async.sync.aligned.m64n256k16.f32"]:
        assert ins in ptx, f"PTX lacks {ins}"
    assert ptx.count("barrier.cluster.wait") >= 2       # publish the barriers, and the end
    # the peer arrive keeps the default .release.cta semantics (a cluster-scope release on every
    # consumer arrive cost a third of the throughput on the H200); the producer waits plainly
    assert "mbarrier.arrive.release.cluster" not in ptx and "try_wait.parity.acquire.cluster" not in ptx
    # every wait on the pair's barriers is bounded (the producer's empty-slot wait, each consumer
    # warpgroup's full-slot wait: the peer's multicast fills the slot), and no call anywhere
    assert assert_bounded_waits(art, "axe_mbarrier_wait_bounded") >= 2
    assert "tvm_builtin_cuda_mbarrier_wait" not in art.cuda_source, "an unbounded mbarrier wait is left"
    assert_call_free(art)
    assert art.launch["cluster"] == [2, 1, 1] and art.launch["grid"] == [gemm.SMS, 1, 1]
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert specs["B_map"]["box"] == ([64, 64] if b_major == "row" else [64, 128])   # half of B per CTA
    # both CTAs' full barriers expect A (16 KiB) + both halves of B (2 x 16 KiB)
    assert "(uint)32768" in art.cuda_source and "(uint)16384" in art.cuda_source
    with pytest.raises(ValueError, match="cluster"):
        gemm.make(1024, 1024, 1024, cluster=3)


def test_cluster_tile_schedule_pairs_block_rows():
    """cluster=2 walks pairs of block-rows: rank r of the cluster takes block-row 2p + r, so the
    pair shares B's block-column; every tile (and the odd pair's phantom row) exactly once."""
    import axe.lang as Ax
    for mt, nt in ((7, 5), (64, 56), (3, 3)):
        s = Ax.TileSchedule(-(-mt // 2), nt, 66, 8, stack=2)
        tiles = [s.coords(t, r) for t in range(s.tiles) for r in (0, 1)]
        assert len(set(tiles)) == len(tiles) == 2 * s.tiles
        assert {t for t in tiles if t[0] < mt} == {(m, n) for m in range(mt) for n in range(nt)}


def test_gemm_default_epilogue_fits_four_stages():
    """The default: 4 stages of 48 KiB and one 16 KiB buffer per warpgroup (224 KiB); the second
    64x128 chunk waits until the first chunk's store has read the buffer (wait_group.read 0)."""
    art = gemm.build(1000, 1000, 1000, b_major="col")
    assert gemm.STAGES == 4 and gemm.EPILOGUE["wgmma"] == 128 and gemm.Config().in_flight == 0
    assert art.launch["dynamic_smem"] == 4 * (128 * 64 + 64 * 256) * 2 + 2 * 64 * 128 * 2
    ptx = art.ptx
    first_store = ptx.index("cp.async.bulk.tensor.2d.global.shared::cta")
    assert "cp.async.bulk.wait_group.read 0;" in ptx[first_store:]
    with pytest.raises(ValueError, match="epilogue_bufs"):
        gemm.make(1024, 1024, 1024, epilogue_bufs=3)


def test_gemm_chunked_epilogue_four_stages():
    """epilogue=64: the 64×256 warpgroup tile is stored as four 64×64 chunks through two 8 KiB
    buffers (wait_group.read 1 before reusing one), which leaves room for a 4th stage."""
    art = gemm.build(1000, 1000, 1000, b_major="col", stages=4, epilogue=64)
    assert art.launch["dynamic_smem"] == 4 * (128 * 64 + 64 * 256) * 2 + 2 * 2 * 64 * 64 * 2
    assert [r.chosen for r in art.records][-8:] == ["stmatrix", "tma_store"] * 4
    assert "cp.async.bulk.wait_group.read 1;" in art.ptx
    r = art.launch["resources"]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r
    with pytest.raises(ValueError, match="epilogue"):
        gemm.make(1024, 1024, 1024, epilogue=96)


@pytest.mark.parametrize("dtype,b_major", [("float16", "row"), ("bfloat16", "col")])
def test_gemm_pingpong_builds(dtype, b_major):
    """schedule="pingpong": each consumer warpgroup computes its own 64×256 tiles (the CTA's tiles
    alternate between them); their main loops take turns through two named barriers (ids 3, 4:
    ``bar.sync`` to wait for its turn, ``bar.arrive`` to pass it on), one consumer releases each
    slot, A is loaded 64 rows at a time into 4 stages of 40 KiB; no spills, setmaxnreg honoured."""
    art = gemm.build(777, 1496, 328, dtype=dtype, b_major=b_major, schedule="pingpong")
    t = "f16" if dtype == "float16" else "bf16"
    for ins in PROMISED + [f"m64n256k16.f32.{t}.{t}", "bar.arrive"]:
        assert ins in art.ptx, f"PTX lacks {ins}"
    assert "C7508" not in art.log, "ptxas ignored setmaxnreg"
    r = art.launch["resources"]
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r
    assert art.launch["dynamic_smem"] == 4 * (64 * 64 + 64 * 256) * 2 + 2 * 64 * 256 * 2
    src = art.cuda_source
    assert "bar_arrive_arrive(((uint)(4 - wg" in src and "bar_sync_count_sync(((uint)(wg_ptr[0] + 3)), (uint)256)" in src
    assert "(uint)8192" in src and "(uint)32768" in src           # A 64×64 + B 256×64 per slot
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert specs["A_map"]["box"] == [64, 64]
    # each slot is released by the one warpgroup that consumed it
    inits = re.findall(r"mbarrier_init_init_shared_b64\(tvm_builtin.*\(uint\)(\d+)\);", src)
    assert sorted(inits) == ["1"] * 4 + ["2"] * 4, inits        # full: A and B copies; empty: one consumer
    # the accumulator is complete before the epilogue reads it (as in the cooperative schedule)
    ptx = art.ptx
    first_cvt = ptx.index(f"cvt.rn.{t}.f32")
    wait0 = ptx.rindex("wgmma.wait_group.sync.aligned 0;", 0, first_cvt)
    assert "$L__BB" not in ptx[ptx.rindex("wgmma.mma_async", 0, first_cvt):wait0]
    with pytest.raises(ValueError, match="schedule"):
        gemm.make(1024, 1024, 1024, schedule="pingpong", cluster=2)
    with pytest.raises(ValueError, match="schedule"):
        gemm.make(1024, 1024, 1024, schedule="zigzag")


def test_the_decode_tile_spreads_stream_k_over_every_cta():
    """The transposed decode tile with ``stream_k``: 28 tiles of 224 k-blocks (3584 × 14336) spread over
    132 CTAs — one fp32 slot of 64 × tile_m per CTA and warpgroup, one flag each, every wait bounded,
    and the head's takes (up to ``most_takes``) acquire-ordered."""
    art = gemm.build_dynamic(3584, 14336, "bfloat16", "col", max_rows=16, tile_m=16, tile_n=128, stream_k=True)
    args = {a["name"]: a for a in art.launch["args"]}
    assert args["W_"]["shape"] == [132 * 2 * 64, 16] and args["F_"]["shape"] == [264]
    assert "st.release.gpu.global.b32" in art.ptx and "ld.acquire.gpu.global.b32" in art.ptx
    assert assert_bounded_waits(art, "axe_flag_take") >= 1
    assert_call_free(art)


@pytest.mark.parametrize("ctas", [132, 114, 16, 8])
def test_stream_k_spread_over_few_tiles(ctas):
    """Spread stream-K (fewer tiles than CTAs), brute force over tile counts and K: every k-block of
    every tile in exactly one CTA's range; a CTA runs at most two pieces, each of at least two
    k-blocks, a tail (starting inside its tile) only first; a tile's head (its first k-blocks) takes
    exactly the tails of that tile, from CTAs after its own (so every wait is on a CTA that hands
    its tail over before it waits), at most ``most_takes()`` of them; out-of-range splits refused."""
    from kernels.parts.schedulers.stream_k import StreamK
    built = 0
    for tiles in range(1, ctas):
        for k_iters in (8, 13, 56, 64, 224, 576):
            try:
                sk = StreamK(tiles, k_iters, ctas, spread=True)
            except ValueError as err:
                assert not 4 <= tiles * k_iters // ctas <= k_iters - 4 and "must hold 4 to" in str(err)
                continue
            built += 1
            assert sk.spread and sk.dp_waves == 0
            owner, tails = {}, {}
            for p in range(ctas):
                pieces = sk.pieces(p)
                assert len(pieces) <= 2
                for i, (t, k0, k1) in enumerate(pieces):
                    assert k1 - k0 >= 2
                    for kb in range(k0, k1):
                        assert (t, kb) not in owner
                        owner[t, kb] = p
                    if k0 > 0:
                        assert i == 0
                        tails[p] = t
            assert len(owner) == tiles * k_iters
            for p in range(ctas):
                for t, k0, k1 in sk.pieces(p):
                    if k0 == 0 and k1 < k_iters:
                        takes = [p + r for r in range(1, sk.most_takes() + 2) if sk.takes(p, k1, r)]
                        assert takes == sorted(q for q, tt in tails.items() if tt == t) and takes and \
                            len(takes) <= sk.most_takes() and all(q > p for q in takes)
    assert built


@pytest.mark.parametrize("tiles,ctas,k_iters", [(20, 8, 16), (48, 10, 4), (304, 132, 9), (1024, 132, 224),
                                                (3072, 132, 64), (17, 8, 5), (264, 132, 4)])
def test_stream_k_split(tiles, ctas, k_iters):
    """The stream-K tail (the last whole wave and the partial one) is covered exactly once; each
    tile falls into at most two CTAs' ranges, every piece holds at least two k-iterations, and a
    tile split in two has its first piece at the end of CTA p's range and the rest at the start of
    CTA p + 1's (the CTA that adds the partial sum is the one that waits for it)."""
    dp = (tiles // ctas - 1) * ctas
    units = (tiles - dp) * k_iters
    b = [stream_k_bound(p, units, ctas, k_iters) for p in range(ctas + 1)]
    assert b[0] == 0 and b[-1] == units and all(x < y for x, y in zip(b, b[1:]))
    owners = {}
    for p in range(ctas):
        for u in range(b[p], b[p + 1]):
            owners.setdefault(u // k_iters, []).append((p, u % k_iters))
    assert sorted(owners) == list(range(tiles - dp))
    for t, units_of in owners.items():
        ctas_of = sorted({p for p, _ in units_of})
        assert len(ctas_of) <= 2, (t, ctas_of)
        for p in ctas_of:
            assert sum(1 for q, _ in units_of if q == p) >= 2
        if len(ctas_of) == 2:
            head, tail = ctas_of
            assert tail == head + 1
            assert min(k for q, k in units_of if q == head) == 0 and max(k for q, k in units_of if q == tail) == k_iters - 1


def test_stream_k_builds():
    """``stream_k=True``: scratch workspace and flags are the last (runtime-supplied) parameters;
    the partial sum goes out with vector stores, the flags use release/acquire at GPU scope; off
    by default, and refused with clusters."""
    art = gemm.build(2048, 4864, 520, b_major="col", stream_k=True)   # 16 x 19 = 304 tiles on 132 CTAs
    args = {a["name"]: a for a in art.launch["args"]}
    assert args["W_"]["scratch"] and args["F_"]["scratch"] and not args["C_"].get("scratch")
    assert args["W_"]["shape"] == [132 * 2 * 64, 256] and args["F_"]["shape"] == [264]
    assert "st.release.gpu.global.b32" in art.ptx and "ld.acquire.gpu.global.b32" in art.ptx
    assert "st.global.v2" in art.ptx or "st.global.v4" in art.ptx
    assert "vector" in [r.chosen for r in art.records]
    # the flag wait is bounded: %globaltimer, then a report in memory and a trap instead of a hang,
    # with no call (which made ptxas serialize the wgmma, C7510)
    assert assert_bounded_waits(art, "axe_flag_take") == 1
    assert_call_free(art)
    off = gemm.build(2048, 4864, 520)
    assert "ld.acquire.gpu" not in off.ptx and {a["name"]: a for a in off.launch["args"]}["W_"]["shape"] == [1, 1]
    with pytest.raises(ValueError, match=r"range \(2 k-blocks\) must hold 4 to k_iters - 4"):
        gemm.make(512, 4864, 256, stream_k=True)       # fewer tiles than CTAs, spread: pieces of one k-block
    gemm.make(512, 4864, 520, stream_k=True)           # 76 tiles spread over 132 CTAs (5 k-blocks each) builds
    gemm.make(1024, 4864, 520, stream_k=True)          # one wave and a part (8 x 19 = 152 tiles) builds


def test_scratch_parameters_are_marked_and_checked():
    """``build(..., scratch=...)`` marks runtime-supplied parameters; it refuses an unknown name,
    a non-trailing scratch parameter and a scratch parameter without a static shape."""
    from axe.backends.cuda.build import BuildError, _mark_scratch

    def args():
        return [{"name": "A_", "kind": "tensor", "shape": [4, 4]}, {"name": "W_", "kind": "tensor", "shape": [8]},
                {"name": "n", "kind": "scalar"}]
    with pytest.raises(BuildError, match="must come after"):
        _mark_scratch(args(), ("W_",), "k")
    a = args()[:2]
    _mark_scratch(a, ("W_",), "k")
    assert a[1]["scratch"] and "scratch" not in a[0]
    with pytest.raises(BuildError, match="is not a parameter"):
        _mark_scratch(args(), ("X_",), "k")
    with pytest.raises(BuildError, match="static shape"):
        _mark_scratch([{"name": "W_", "kind": "tensor", "shape": ["M"]}], ("W_",), "k")


def test_stream_k_producer_loads_the_stream_k_tiles():
    """The producer has two loops of A loads with stream_k=True: the data-parallel waves and the
    stream-K k-iterations (a later edit once swallowed the second into the reduce-scatter branch)."""
    import axe.lang as Ax
    func, _ = Ax.build_func(gemm.make(8192, 4096, 1024, stream_k=True))
    assert func.script().count("address_of(A_map)") == 2
    func, _ = Ax.build_func(gemm.make(1024, 1024, 1024))
    assert func.script().count("address_of(A_map)") == 1


def test_gemm_rs_default_build_keeps_its_register_budgets():
    """The default fused GEMM + reduce-scatter (Llama-3.1-8B down, 2 GPUs, rs_push="forward"): the
    mesh waits are inline (no call: the call made ptxas ignore setmaxnreg, C7507, with 8 B of
    spills), and each forwarding warp copies its half-tile 4 rows per iteration of a rolled loop
    (unrolled whole, its 64 hoisted lane offsets overflowed the producer's registers: 596 B of
    spills), the 4 loads of an iteration issued before its stores in a producer warpgroup of 56
    registers; ``rs_push="bulk"``, which has no forwarding warps, likewise (and keeps 40)."""
    from kernels import gemm_rs
    art = gemm_rs.build(8192, 4096, 14336, 2)
    assert_call_free(art)
    assert "axe_wait_signal" in art.cuda_source and "ld.acquire.sys.global.b32" in art.ptx
    # 2 forwarding warps x 4 rows of 256 bf16 columns: 4 16-byte loads per lane each, looped
    assert art.ptx.count("ld.global.v4.u32") == 2 * 4, art.ptx.count("ld.global.v4.u32")
    assert "setmaxnreg.dec.sync.aligned.u32 56" in art.ptx and "setmaxnreg.inc.sync.aligned.u32 224" in art.ptx
    bulk = gemm_rs.build(8192, 4096, 14336, 2, rs_push="bulk")
    assert_call_free(bulk)
    assert "setmaxnreg.dec.sync.aligned.u32 40" in bulk.ptx
