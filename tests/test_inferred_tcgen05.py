"""Inference rule 3 for Blackwell (issue 27 item 2): tcgen05.mma proposes the shared tiles its
descriptors read (TMA's swizzled K- or MN-major tilings) and the TMEM accumulator its data path
writes; tcgen05.ld proposes the register fragments it fills; each is accepted only where the call
then dispatches to tcgen05 (sm_100a).

Oracles: the hand-written twin kernels/inferred/hand_tcgen05_gemm.py (TIR, CUDA source, PTX);
ptxas for sm_100a; the NumPy model of the PTX ISA's tcgen05.mma and tcgen05.ld
(tests/tcgen05_model.py) running the inferred build's recorded calls against numpy's product;
brute-force enumeration of the proposed layouts' laws."""

import os
import re
import sys
from dataclasses import replace

import numpy as np
import pytest

from axe.layout.layout import all_indices

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import axe.lang as Ax  # noqa: E402
import kernels.inferred.hand_tcgen05_gemm as hand  # noqa: E402
import kernels.inferred.tcgen05_gemm as inferred  # noqa: E402
import tcgen05_model as TM  # noqa: E402
from axe.backends.cuda.schedules import proposals_tcgen05 as pt  # noqa: E402
from axe.backends.cuda.schedules import tcgen05 as tc  # noqa: E402
from axe.backends.cuda.tmem import default_layout  # noqa: E402
from axe.backends.cuda.schedules.proposals_tma import tma_tiles  # noqa: E402
from tcgen05_readback import ld_tile  # noqa: E402
from test_tcgen05 import B_AT, SM100, _desc, _smem_image  # noqa: E402

MMA = "tcgen05.mma.cta_group::1.kind::f16"


def _fixed(k, target="sm_100a"):
    _, ctx = Ax.build_func(k, target)
    return {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}, ctx


def test_the_inferred_tiles_are_the_hand_twins_and_name_their_instruction():
    fixed, _ = _fixed(inferred.gemm)
    assert {k: f.layout for k, f in fixed.items()} == {"As": hand.SMEM_A, "Bs": hand.SMEM_B,
                                                      "acc_t": default_layout((hand.BM, hand.BN)),
                                                      "acc": tc.ld_fragment("32x32b", hand.BN, hand.BM)}
    assert MMA in fixed["acc_t"].rule                      # the accumulator's layout: what the MMA writes
    assert fixed["As"].rule == f"{MMA} A K-major 128-byte swizzle descriptor"
    assert fixed["Bs"].rule == f"{MMA} B K-major 128-byte swizzle descriptor"
    assert fixed["acc"].rule == "tcgen05.ld.sync.aligned.32x32b.x128.b32 fragment"


def test_the_inferred_build_is_the_hand_build_and_ptxas_accepts_it():
    f_inf, c_inf = Ax.build_func(inferred.gemm, "sm_100a")
    f_hand, c_hand = Ax.build_func(hand.gemm, "sm_100a")
    assert f_inf.script() == f_hand.script()
    assert [r.chosen for r in c_inf.records] == [r.chosen for r in c_hand.records] == \
        ["tma", "tma", "tcgen05", "tma", "tma", "tcgen05", "tcgen05_ld", "vector"]
    a, b = Ax.compile_kernel(inferred.gemm, "sm_100a"), Ax.compile_kernel(hand.gemm, "sm_100a")
    assert a.cubin and a.cuda_source == b.cuda_source                # ptxas accepted it for sm_100a
    for ins in (MMA, "tcgen05.ld.sync.aligned.32x32b.x128.b32", "tcgen05.commit.cta_group::1",
                "cp.async.bulk.tensor.2d"):
        assert ins in a.ptx, ins
    assert "wgmma" not in a.ptx and a.launch["tensormaps"] == b.launch["tensormaps"]
    assert {m["swizzle"] for m in a.launch["tensormaps"]} == {128}
    res = a.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res


def test_the_inferred_calls_compute_the_product_on_the_tcgen05_model():
    """Every k-block's recorded tcgen05.mma of the inferred build (the shared tiles in the inferred
    layouts, descriptors from the plan) runs on the model's TMEM, then the recorded tcgen05.ld reads
    it into the inferred register layout: equals A·Bᵀ over K = 2·BK."""
    _, ctx = Ax.build_func(inferred.make(hand.BM, hand.BN, 2 * hand.BK), "sm_100a")
    mmas = [r.call for r in ctx.records if r.chosen == "tcgen05"]
    (ld_call,) = [r.call for r in ctx.records if r.chosen == "tcgen05_ld"]
    rng = np.random.default_rng(3)
    a_val = rng.standard_normal((hand.BM, 2 * hand.BK)).astype(np.float16)
    b_val = rng.standard_normal((2 * hand.BK, hand.BN)).astype(np.float16)
    tm = TM.Tmem()
    assert [c.attrs["accumulate"] for c in mmas] == [False, True]
    for kb, call in enumerate(mmas):
        plan = tc.tcgen05_plan(call, SM100)
        assert not isinstance(plan, str), plan
        ks = slice(kb * hand.BK, (kb + 1) * hand.BK)
        img = _smem_image(np.zeros(2 * B_AT, np.uint8), plan.local["A"], a_val[:, ks])
        img = _smem_image(img, plan.local["B"], b_val[ks, :], B_AT)
        for mi, ni, ki, dcol, (am, ak), (bn, bk), k in plan.steps():
            TM.mma([tm], [img], dcol, _desc(plan.a, am, ak), _desc(plan.b, bn, bk, B_AT), plan.idesc,
                   bool(call.attrs["accumulate"] or k > 0), 1)
    ld = tc.ld_plan(ld_call, SM100)
    got = ld_tile(tm, ld, ld_call.operands["dst"])
    np.testing.assert_allclose(got, a_val.astype(np.float32) @ b_val.astype(np.float32), rtol=1e-5, atol=1e-4)


def test_explain_names_tcgen05_for_each_layout():
    text = Ax.explain(inferred.gemm, "sm_100a")
    head = text.split("\n\n")[1].splitlines()
    lines = {ln.split("[")[0].strip(): ln for ln in head[1:]}
    assert re.search(rf"\({re.escape(MMA)} A K-major 128-byte swizzle descriptor: gemm at \S+:\d+, as A", lines["As"])
    assert re.search(rf"\({re.escape(MMA)} B K-major 128-byte swizzle descriptor: gemm at \S+:\d+, as B", lines["Bs"])
    assert "(tcgen05.ld.sync.aligned.32x32b.x128.b32 fragment: copy at" in lines["acc"]


def test_on_sm90a_tcgen05_proposes_in_vain():
    """The same proposals on sm_90a: dispatch never chooses tcgen05, so no tile takes its
    descriptors' swizzle and nothing fixes the TMEM accumulator: the refusal names it.  With the
    accumulator's layout written out, the one-thread gemm on TMEM has no schedule there, and the
    refusal says why tcgen05 declined."""
    with pytest.raises(Ax.KernelError) as err:
        _fixed(inferred.gemm, "sm_90a")
    msg = str(err.value)
    assert "acc_t[128, 128] (tmem): no operator fixes its layout" in msg
    assert str(hand.SMEM_A) not in msg
    with pytest.raises(Ax.KernelError) as err:
        _fixed(hand.gemm, "sm_90a")
    msg = str(err.value)
    assert "no schedule fits gemm on sm_90a" in msg
    assert "tcgen05        declined: tcgen05 exists only on sm_100a-family targets" in msg


@pytest.mark.parametrize("shape", [(128, 64), (128, 256), (256, 128)])
def test_tmem_accumulator_is_the_data_path_and_tcgen05_takes_it(shape):
    """Brute force: element (r, c) in lane r mod 128, column (r div 128)·n + c, each TMEM cell
    once; put in place of the hand build's accumulator (with A of as many rows), the recorded
    gemm still dispatches to tcgen05 with M/128 row tiles."""
    (L,) = pt.tmem_accumulator(shape)
    cells = set()
    for r, c in all_indices(shape):
        (x,) = L.map((r, c), shape)
        assert (x["TLane"], x["TCol"]) == (r % 128, (r // 128) * shape[1] + c)
        cells.add((x["TLane"], x["TCol"]))
    assert len(cells) == shape[0] * shape[1]
    assert pt.tmem_accumulator((64, 64)) == [] and pt.tmem_accumulator((128,)) == []
    _, ctx = Ax.build_func(hand.gemm, "sm_100a")
    call = next(r.call for r in ctx.records if r.chosen == "tcgen05")
    A = call.operands["A"]
    a_rows = replace(A, shape=(shape[0], A.shape[1]), layout=tma_tiles((shape[0], A.shape[1]), 2)[0])
    C = replace(call.operands["C"], shape=shape, layout=L)
    B = call.operands["B"]
    Bn = replace(B, shape=(B.shape[0], shape[1]), layout=tma_tiles((shape[1], B.shape[0]), 2)[0])
    from axe.schedules.infer import _permuted
    Bn = replace(Bn, layout=Bn.layout.with_inner(_permuted(Bn.layout.inner, (shape[1], B.shape[0]), (1, 0))))
    plan = tc.tcgen05_plan(replace(call, operands={"C": C, "A": a_rows, "B": Bn}), SM100)
    assert not isinstance(plan, str), plan
    assert plan.m_tiles == shape[0] // 128 and plan.n_tiles * plan.n == shape[1]


@pytest.mark.parametrize("shape", [(128, 128), (128, 32), (64, 64), (32, 16)])
def test_ld_tilings_are_the_fragments_tcgen05_ld_loads(shape):
    """Each proposed register tiling is C ⊗ ld_fragment with C on registers: tile_of recovers C,
    every element is held once; 32x32b comes first where the rows allow it (thread t: row t)."""
    from axe.layout import tile_of
    cands = pt.ld_tilings(shape)
    assert cands
    rows, cols = shape
    for L in cands:
        held = set()
        for u in all_indices(shape):
            (x,) = L.map(u, shape)
            assert (x["tx"], x["m"]) not in held
            held.add((x["tx"], x["m"]))
        assert len(held) == rows * cols
    (first,) = cands[:1]
    (x,) = first.map((rows - 1, 0), shape)
    assert x["tx"] == rows - 1                                   # 32x32b: row r in thread r
    for L, (name, w) in zip(cands, [(n, w) for n, w in tc.LD_SHAPES.items() if n == "32x32b" or rows in (64, 128)]):
        num = next(n for n in (128, 64, 32, 16, 8, 4, 2, 1) if cols % (w * n) == 0 and tc._REGS_PER_NUM[name] * n <= 128)
        C = tile_of(L, shape, tc.ld_fragment(name, num, rows), (rows, w * num))
        assert C is not None and set(C.axes()) <= {"m"}, (L, name, num)
