"""The GEMM of kernels/gemm.py on sm_100a: the same source picks tcgen05 with a TMEM accumulator.

- it builds for sm_100a (fp16 and bf16, B row- and column-major), ptxas accepts it with no spills,
  and its PTX holds the Blackwell instructions (tcgen05.alloc/mma/commit/ld/wait/dealloc) and no
  wgmma; the sm_90a build of the same kernel object still uses wgmma and no tcgen05;
- ``axe explain`` shows the tcgen05 choices (M=128 N=256 MMAs, tcgen05.ld.16x256b);
- the tcgen05 schedule the kernel's own calls chose (the recorded operands and layouts) is run on
  the NumPy model of the PTX ISA (tests/tcgen05_model.py) over two k-blocks, then read back with
  the epilogue warpgroups' tcgen05.ld plans, and equals numpy's product;
- options that are sm_90a-only are refused on sm_100a, naming them.
"""

import os
import re
import sys

import numpy as np
import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import axe.lang as Ax  # noqa: E402
import tcgen05_model as M  # noqa: E402
from axe.backends.cuda.schedules import tcgen05 as tc  # noqa: E402
from kernels import gemm  # noqa: E402
from tcgen05_readback import ld_tile  # noqa: E402
from test_tcgen05 import B_AT, SM100, _desc, _smem_image  # noqa: E402

BLACKWELL = ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32", "tcgen05.relinquish_alloc_permit",
             "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit.cta_group::1.mbarrier::arrive::one",
             "tcgen05.ld.sync.aligned.16x256b.x16.b32", "tcgen05.wait::ld.sync.aligned",
             "tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync",
             "tcgen05.dealloc.cta_group::1.sync.aligned.b32")


@pytest.mark.parametrize("kernel", [
    lambda: gemm.gemm_fp16,                                    # what `axe build kernels/gemm.py` builds
    lambda: gemm.gemm_bf16_nt,
    lambda: gemm.make(1000, 1000, 1000, "float16", "col"),     # ragged: TMA zero-fills and clips
    lambda: gemm.make(384, 768, 72, "bfloat16", "row"),        # two k-blocks, the second ragged
], ids=["fp16_row", "bf16_col", "fp16_col_ragged", "bf16_row_k2"])
def test_gemm_builds_for_sm100a(kernel):
    k = kernel()
    art = Ax.compile_kernel(k, "sm_100a")
    assert art.cubin                                           # ptxas accepted the PTX for sm_100a
    ptx = art.ptx
    for ins in BLACKWELL:
        assert ins in ptx, ins
    assert "wgmma" not in ptx
    # 3 gemm calls (first, middle, last k-block) x 4 instructions (K=64 in k16 steps) of M=128 N=256;
    # nvcc may duplicate inlined code, so the PTX holds at least that many (the main loop's call is
    # dead code, and gone, with two k-blocks)
    plans = [tc.tcgen05_plan(r.call, SM100) for r in art.records if r.chosen == "tcgen05"]
    assert [len(list(p.steps())) for p in plans] == [4, 4, 4]
    live = min(-(-k.meta["K"] // gemm.BK), 3)
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16", ptx)) >= 4 * live
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert art.launch["block"][0] == gemm.THREADS
    chosen = [r.call.op + ":" + r.chosen for r in art.records]
    assert chosen.count("gemm:tcgen05") == 3 and chosen.count("copy:tcgen05_ld") == 2
    assert "gemm:wgmma" not in chosen and chosen.count("copy:stmatrix") == 2     # 2 chunks of 64 columns
    # the instruction descriptor, decoded by the model from Table 42's bits
    f = M.decode_idesc(plans[0].idesc)
    b_mn_major = k.meta["b_major"] == "row"                    # K×N row-major B: N contiguous
    ab = {"float16": "f16", "bfloat16": "bf16"}[k.meta["dtype"]]
    assert (f["m"], f["n"], f["ab"], f["trans_a"], f["trans_b"]) == (128, 256, ab, 0, int(b_mn_major))


def test_sm90a_build_of_the_same_kernel_is_unchanged_wgmma():
    """One kernel object builds for both targets: an sm_100a build in between leaves its sm_90a
    build identical (TIR) to a fresh object's, and that one runs wgmma, no tcgen05."""
    k = gemm.make(1024, 1024, 1024, epilogue=64)
    Ax.build_func(k, "sm_100a")
    func, ctx = Ax.build_func(k, "sm_90a")
    assert func.script() == Ax.build_func(gemm.make(1024, 1024, 1024, epilogue=64), "sm_90a")[0].script()
    chosen = [r.call.op + ":" + r.chosen for r in ctx.records]
    assert "gemm:wgmma" in chosen and not any("tcgen05" in c for c in chosen)


@pytest.fixture(scope="module", params=[1, 2], ids=["cta_group1", "cta_group2"])
def records(request):
    """The dispatch records of a 128·cluster × 256 × 192 sm_100a build (three k-blocks: the first,
    the main loop's one and the last gemm call each run once; one tile, or one pair of tiles)."""
    c = request.param
    return c, Ax.build_func(gemm.make(128 * c, 256, 192, "float16", "col", cluster=c), "sm_100a")[1].records


def test_explain_shows_the_tcgen05_choices():
    text = Ax.explain(gemm.gemm_bf16_nt, "sm_100a")
    assert "tcgen05        chosen: 4 x tcgen05.mma.cta_group::1.kind::f16 M=128 N=256 K=16 (ss" in text
    assert "commit → pipe_empty[" in text
    assert "tcgen05_ld     chosen: 2 x tcgen05.ld.sync.aligned.16x256b.x16.b32 per warp" in text
    assert "wgmma" not in text and text.count("+ tcgen05        chosen") == 3


def test_simulated_gemm_schedule_reproduces_numpy(records):
    """The kernel's recorded tcgen05.mma calls (k-blocks 0, 1, 2 of a K=192 tile) run on the
    model: each k-block's A and B written into each CTA's shared bytes where the kernel's (local)
    layouts put them — a pair: the odd CTA holds rows 128.. of A and columns 128.. of B — the
    plan's instructions (descriptors, instruction descriptor, enable-input-d, cta_group) executed,
    then each CTA's epilogue warpgroups' tcgen05.ld plans read their 128 columns into the kernel's
    register layout; every (row, column) must equal A·B."""
    cluster, recs = records
    rng = np.random.default_rng(1)
    mmas = [r.call for r in recs if r.chosen == "tcgen05"]
    lds = [r.call for r in recs if r.chosen == "tcgen05_ld"]
    assert [c.attrs["accumulate"] for c in mmas] == [False, True, True]     # k_iters = 3
    A_t, B_t = mmas[0].operands["A"], mmas[0].operands["B"]
    (BM, BK), BN = A_t.shape, B_t.shape[1]           # the pair's views: BM = 128 * cluster
    a_val = rng.standard_normal((BM, 3 * BK)).astype(np.float16)
    b_val = rng.standard_normal((3 * BK, BN)).astype(np.float16)
    tms = [M.Tmem() for _ in range(cluster)]
    for kb, call in enumerate(mmas):
        plan = tc.tcgen05_plan(call, SM100)
        assert not isinstance(plan, str), plan
        assert plan.cta_group == cluster and M.decode_idesc(plan.idesc)["m"] == 128 * cluster
        la, lb = plan.local["A"], plan.local["B"]
        ml, nl = la.shape[0], lb.shape[1]
        ks = slice(kb * BK, (kb + 1) * BK)
        smems = [_smem_image(_smem_image(np.zeros(2 * B_AT, np.uint8), la, a_val[r * ml:(r + 1) * ml, ks]),
                             lb, b_val[ks, r * nl:(r + 1) * nl], B_AT) for r in range(cluster)]
        for mi, ni, ki, dcol, (am, ak), (bn, bk), k in plan.steps():
            enable = bool(call.attrs["accumulate"] or k > 0)
            M.mma(tms, smems, dcol, _desc(plan.a, am, ak), _desc(plan.b, bn, bk, B_AT), plan.idesc, enable, cluster)
    got = np.full((BM, BN), np.nan, np.float32)
    for r, tm in enumerate(tms):                    # each CTA's epilogue reads its own TMEM
        for ld_call in lds:                         # one per epilogue warpgroup (static TMEM columns)
            ld = tc.ld_plan(ld_call, SM100)
            assert not isinstance(ld, str), ld
            tile = ld_tile(tm, ld, ld_call.operands["dst"])
            got[r * 128:r * 128 + tile.shape[0], ld.col0:ld.col0 + tile.shape[1]] = tile
    want = a_val.astype(np.float32) @ b_val.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_pair_gemm_builds_for_sm100a():
    """cluster=2 on sm_100a: CTA pairs run tcgen05.mma.cta_group::2 (M=256 over the pair, issued by
    the even CTA, committed by multicast to both CTAs), TMEM allocated and freed by both; an odd
    number of block-rows (7) leaves the last pair's odd CTA past M."""
    art = Ax.compile_kernel(gemm.make(896, 1000, 1000, "bfloat16", "col", cluster=2), "sm_100a")
    ptx = art.ptx
    for ins in ("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32", "tcgen05.relinquish_alloc_permit.cta_group::2",
                "tcgen05.mma.cta_group::2.kind::f16",
                "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64",
                "tcgen05.ld.sync.aligned.16x256b.x16.b32", "tcgen05.dealloc.cta_group::2.sync.aligned.b32",
                "mapa.shared::cluster.u32"):
        assert ins in ptx, ins
    assert "cta_group::1" not in ptx and "multicast::cluster" not in ptx.replace(
        "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster", "")   # no TMA multicast
    assert art.launch["cluster"] == [2, 1, 1]
    # the slot, relay and accumulator waits depend on the other CTA of the pair: bounded
    assert art.cuda_source.count("axe_mbarrier_wait_bounded(") >= 4 and "%globaltimer" in ptx and "trap;" in ptx
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res


@pytest.mark.parametrize("kw, named", [({"schedule": "pingpong"}, "got pingpong"), ({"stream_k": True}, "got stream_k"),
                                       ({"epilogue": 128}, "need 256 KiB of shared memory")])
def test_sm90a_only_options_are_refused_on_sm100a(kw, named):
    k = gemm.make(4096, 4096, 4096, **kw)
    with pytest.raises(Ax.KernelError, match=f"sm_100a.*{named}"):
        Ax.build_func(k, "sm_100a")
    Ax.build_func(k, "sm_90a")          # the same kernel object builds for sm_90a


# --- the GPU side: sm_100a artifacts are built, named, skipped and selected by arch ------------------

def test_gpu_runner_skips_artifacts_the_device_cannot_run():
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    import run_all
    assert run_all.capability_of("sm_100a") == (10, 0) and run_all.capability_of("sm_90a") == (9, 0)
    # arch-specific cubins run on exactly their capability; plain ones on later minors of the major
    table = {("sm_100a", (10, 0)): True, ("sm_100a", (9, 0)): False, ("sm_90a", (10, 0)): False,
             ("sm_90a", (9, 0)): True, ("sm_80", (8, 6)): True, ("sm_80", (9, 0)): False, ("sm_86", (8, 0)): False}
    for (arch, cap), ok in table.items():
        assert run_all.runs_on(arch, cap) is ok, (arch, cap)


def test_sm100_gpu_cases_and_benchmark_names():
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
    import cases_gemm
    import gemm as bench
    sm100 = [n for n in cases_gemm.BUILDS if n.startswith(("gemm_sm100_", "gemm_sm100c2_"))]
    assert len(sm100) == len(cases_gemm.SM100_CASES) == 28 and all(n in cases_gemm.CHECKS for n in sm100)
    # run_check reads B's layout from the name's end: the marker must not hide it
    assert all(n.endswith(("_row", "_col")) for n in sm100)
    assert bench.artifact_name("bfloat16", 4096, 14336, "sm_100a") == "gemm_bf16_4096x14336_sm100"
    assert bench.artifact_name("bfloat16", 4096, 14336) == "gemm_bf16_4096x14336"     # sm_90a names unchanged
