"""Inference rule 3 for mma.sync (issue 27 item 2): the gemm's register tiles take the m16n8k16
fragments, accepted only where the call then dispatches to mma.sync; the ldmatrix copies that fill
them then give the shared tiles their swizzle.

Oracles: the PTX ISA's fragment tables (written out here, independently of the schedule), a NumPy
model of mma.sync that runs the recorded gemm calls' plans on the inferred layouts, the hand-written
twin kernels/inferred/hand_mma_gemm.py (TIR and CUDA source), and the PTX."""

import collections
import os
import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from axe.layout import S, tile
from axe.layout.layout import all_indices

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
import kernels.inferred.hand_mma_gemm as hand  # noqa: E402
import kernels.inferred.mma_gemm as inferred  # noqa: E402
from axe.backends.cuda.schedules.mma import a_fragment, b_fragment, c_fragment, mma_plan  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_inferred_instructions import _kernel  # noqa: E402

SM90 = SimpleNamespace(arch=90, target="sm_90a")


def _fixed(k, target="sm_90a"):
    _, ctx = Ax.build_func(k, target)
    return {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}, ctx


# --- the PTX ISA's m16n8k16 fragments (g = lane // 4, t = lane % 4), per register i -----------------

def isa_a(lane, i):
    g, t = divmod(lane, 4)
    return g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)


def isa_b(lane, i):          # (k, n)
    g, t = divmod(lane, 4)
    return 2 * t + i % 2 + 8 * (i // 2), g


def isa_c(lane, i):
    g, t = divmod(lane, 4)
    return g + 8 * (i // 2), 2 * t + i % 2


ISA = {"A": (isa_a, 8, (16, 16)), "B": (isa_b, 4, (16, 8)), "C": (isa_c, 4, (16, 8))}


def _holds_fragments_in_ptx_order(L, shape, key):
    """Brute force: the element (i, j) of fragment (fi, fj) (row-major over the tile's fragments)
    sits in lane ``l`` at register ``f·span + r`` exactly where the ISA table puts it."""
    isa, span, (fr, fc) = ISA[key]
    grid_c = shape[1] // fc
    where = {}
    for u in all_indices(shape):
        (c,) = L.map(u, shape)
        assert (c["tx"], c["m"]) not in where.values()
        where[u] = (c["tx"], c["m"])
    for (fi, fj) in all_indices((shape[0] // fr, grid_c)):
        for lane in range(32):
            for r in range(span):
                i, j = isa(lane, r)
                assert where[(fi * fr + i, fj * fc + j)] == (lane, (fi * grid_c + fj) * span + r), (key, L, fi, fj, lane, r)
    return True


def test_the_inferred_tiles_are_the_isa_fragments_and_the_hand_twins_layouts():
    fixed, _ = _fixed(inferred.gemm)
    assert _holds_fragments_in_ptx_order(fixed["acc"].layout, (hand.BM, hand.BN), "C")
    assert _holds_fragments_in_ptx_order(fixed["Ar"].layout, (hand.BM, hand.BK), "A")
    assert _holds_fragments_in_ptx_order(fixed["Br"].layout, (hand.BK, hand.BN), "B")
    want = {"As": hand.SMEM, "Bs": hand.SMEM, "Ar": hand.REG_A, "Br": hand.REG_B, "acc": hand.ACC}
    assert {k: f.layout for k, f in fixed.items()} == want
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert [fixed[k].rule for k in ("acc", "Ar", "Br")] == [f"{mma} accumulator fragment", f"{mma} A fragment",
                                                           f"{mma} B fragment"]
    assert fixed["As"].rule == fixed["Bs"].rule == "16-byte rows of ldmatrix.x4"


def test_the_inferred_build_is_the_hand_build():
    """Same TIR (printed), same CUDA source, same PTX instructions: ldmatrix.x4 for both operands,
    2·4·2 mma.sync per k-block, no 16-bit shared loads."""
    f_inf, c_inf = Ax.build_func(inferred.gemm)
    f_hand, c_hand = Ax.build_func(hand.gemm)
    assert f_inf.script() == f_hand.script()
    assert [r.chosen for r in c_inf.records] == [r.chosen for r in c_hand.records]
    a, b = Ax.compile_kernel(inferred.gemm), Ax.compile_kernel(hand.gemm)
    assert a.cuda_source == b.cuda_source
    count = collections.Counter(re.findall(r"(?:ldmatrix|mma\.sync)[\w.:]*", a.ptx))
    assert count["ldmatrix.sync.aligned.m8n8.x4.shared.b16"] >= 4
    assert count["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"] >= 16
    assert not re.search(r"\b(ld|st)\.shared\.(u|b|f)16\b", a.ptx)


def _run_mma_model(call, values, rng, plan_of=None):
    """NumPy model of the recorded gemm ``call``: the operands' registers filled from ``values``
    through their layouts, the plan's mma.sync instructions executed as the ISA tables define
    them (``accumulate=False``: C starts at zero), the accumulator read back through its layout.
    ``plan_of``: plan the instructions for this call's layouts instead (a mismatch)."""
    plan = mma_plan(plan_of or call, SM90)
    assert not isinstance(plan, str), plan
    regs = {}
    for key, t in call.operands.items():
        r = np.full((32, t.layout.span("m")), np.nan)
        for u in all_indices(t.shape):
            for c in t.layout.map(u, tuple(t.shape)):
                r[c["tx"] % 32, c["m"]] = values[key][u] if key != "C" else rng.standard_normal()
        regs[key] = r
    mt, nt, kt = plan.tiles
    for mi, ni in all_indices((mt, nt)):
        (cd,) = plan.outer["C"].map((mi, ni), (mt, nt))
        for ki in range(kt):
            (ca,) = plan.outer["A"].map((mi, ki), (mt, kt))
            (cb,) = plan.outer["B"].map((ki, ni), (kt, nt))
            a, b, d = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
            for lane in range(32):
                for i in range(8):
                    a[isa_a(lane, i)] = regs["A"][lane, ca["m"] * 8 + i]
                for i in range(4):
                    b[isa_b(lane, i)] = regs["B"][lane, cb["m"] * 4 + i]
                    d[isa_c(lane, i)] = regs["C"][lane, cd["m"] * 4 + i] if (ki or call.attrs["accumulate"]) else 0
            d = a @ b + d
            for lane in range(32):
                for i in range(4):
                    regs["C"][lane, cd["m"] * 4 + i] = d[isa_c(lane, i)]
    C = call.operands["C"]
    out = np.zeros(C.shape)
    for u in all_indices(C.shape):
        (c,) = C.layout.map(u, tuple(C.shape))
        out[u] = regs["C"][c["tx"] % 32, c["m"]]
    return out


def test_the_inferred_gemm_calls_compute_the_product_on_a_model_of_mma_sync():
    """The first k-block's recorded gemm (accumulate=False), operands with their inferred layouts,
    on the model: equals A·B (exact in float64 for small integers)."""
    rng = np.random.default_rng(0)
    _, ctx = Ax.build_func(inferred.gemm)
    call = next(r.call for r in ctx.records if r.chosen == "mma_sync")
    A = rng.integers(-4, 5, (hand.BM, hand.BK)).astype(float)
    B = rng.integers(-4, 5, (hand.BK, hand.BN)).astype(float)
    np.testing.assert_array_equal(_run_mma_model(call, {"A": A, "B": B}, rng), A @ B)


def test_the_model_catches_a_plan_for_another_layout():
    """The oracle can fail: registers filled as the twin's B layout, instructions planned for B's
    fragments placed column-major over the tile, give a wrong product."""
    from dataclasses import replace
    rng = np.random.default_rng(1)
    _, ctx = Ax.build_func(hand.gemm)
    call = next(r.call for r in ctx.records if r.chosen == "mma_sync")
    A = rng.integers(-4, 5, (hand.BM, hand.BK)).astype(float)
    B = rng.integers(-4, 5, (hand.BK, hand.BN)).astype(float)
    swapped = tile(S[(2, 4):(1, 2)], (2, 4), b_fragment("tx"), (16, 8))
    other = replace(call, operands={**call.operands, "B": replace(call.operands["B"], layout=swapped)})
    assert not np.array_equal(_run_mma_model(call, {"A": A, "B": B}, rng, plan_of=other), A @ B)


def test_explain_names_mma_sync_and_ldmatrix():
    text = Ax.explain(inferred.gemm)
    head = text.split("\n\n")[1].splitlines()
    assert head[0] == "inferred layouts" and len(head) == 6
    lines = {ln.split("[")[0].strip(): ln for ln in head[1:]}
    for name in ("acc", "Ar", "Br"):
        assert re.search(r"\(mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32 \w+ fragment: gemm at \S+:\d+",
                         lines[name]), lines[name]
    for name in ("As", "Bs"):
        assert "(16-byte rows of ldmatrix.x4: copy at" in lines[name]


def test_the_proposal_is_refused_where_mma_sync_does_not_serve():
    """fp8 operands: mma.sync (f16/bf16 here) declines every fragment, so the gemm fixes nothing
    and the tiles are named as unfixed (nothing else touches them)."""
    def body(A, B):
        a = Ax.registers((16, 16), "float8_e4m3fn", name="a")
        b = Ax.registers((16, 8), "float8_e4m3fn", name="b")
        c = Ax.registers((16, 8), "float32", name="c")
        Ax.gemm(c, a, b, accumulate=False)

    with pytest.raises(Ax.KernelError, match=r"tile \w\[16, (16|8)\] \(local\): no operator fixes its layout"):
        Ax.build_func(_kernel("mma_fp8", body, (16, 16), threads=32))


def test_two_gemms_that_want_one_tile_as_a_and_as_b_conflict():
    """r is A of the first gemm and B (K × N) of the second, whose other tiles are declared: the
    A fragment tiling and the B one differ, and the error names both gemms and both layouts."""
    a_tiling = tile(S[(1, 1)], (1, 1), a_fragment("tx"), (16, 16))
    b_tiling = tile(S[(1, 2)], (1, 2), b_fragment("tx"), (16, 8))

    def body(A, B):
        r = Ax.registers((16, 16), "float16", name="r")
        b = Ax.registers((16, 16), "float16", b_tiling, name="b")
        a = Ax.registers((16, 16), "float16", a_tiling, name="a")
        c1 = Ax.registers((16, 16), "float32", tile(S[(1, 2)], (1, 2), c_fragment("tx"), (16, 8)), name="c1")
        c2 = Ax.registers((16, 16), "float32", tile(S[(1, 2)], (1, 2), c_fragment("tx"), (16, 8)), name="c2")
        Ax.copy(r, A)
        Ax.copy(a, A)
        Ax.copy(b, A)
        Ax.gemm(c1, r, b, accumulate=False)
        Ax.gemm(c2, a, r, accumulate=False)

    with pytest.raises(Ax.KernelError) as err:
        Ax.build_func(_kernel("mma_clash", body, (16, 16), threads=32))
    msg = str(err.value)
    assert "tile r[16, 16]" in msg and msg.count("gemm at") == 2
    assert str(a_tiling) in msg and str(b_tiling) in msg
    assert "A fragment" in msg and "B fragment" in msg


def test_a_four_warp_cta_gets_no_mma_fragment():
    """mma.sync is one warp's: in a 128-thread scope the gemm proposal offers nothing, and the
    build fails as the hand-written one would, naming the scope."""
    def body(A, B):
        a = Ax.registers((16, 16), "float16", name="a")
        b = Ax.registers((16, 8), "float16", name="b")
        c = Ax.registers((16, 8), "float32", name="c")
        Ax.gemm(c, a, b, accumulate=False)
    with pytest.raises(Ax.KernelError, match="no operator fixes its layout"):
        Ax.build_func(_kernel("mma_cta", body, (16, 16)))


def test_each_warp_of_a_cta_gets_its_own_fragments():
    """Ax.each_warp() in a 128-thread CTA: every warp's gemm is mma.sync's, its tiles take the
    fragments (tx within the warp), and the cast's result follows the accumulator."""
    def body(A, B):
        with Ax.each_warp():
            a = Ax.registers((16, 16), "float16", name="a")
            b = Ax.registers((16, 16), "float16", name="b")
            c = Ax.registers((16, 16), "float32", name="c")
            o = Ax.registers((16, 16), "float16", name="o")
            Ax.copy(a, A)
            Ax.copy(Ax.permute(b, (1, 0)), B)
            Ax.gemm(c, a, b, accumulate=False)
            Ax.cast(o, c)
            Ax.copy(B, o)
    fixed, ctx = _fixed(_kernel("mma_each_warp", body, (16, 16)))
    assert fixed["c"].layout == fixed["o"].layout == tile(S[(1, 2)], (1, 2), c_fragment("tx"), (16, 8))
    assert fixed["a"].layout == tile(S[(1, 1)], (1, 1), a_fragment("tx"), (16, 16))
    assert fixed["b"].layout == tile(S[(1, 2)], (1, 2), b_fragment("tx"), (16, 8))
    assert "mma_sync" in [r.chosen for r in ctx.records]


def test_the_inferred_kernel_also_builds_for_sm100a_with_mma_sync():
    """On sm_100a (tcgen05 needs a TMEM accumulator) the register gemm is still mma.sync's and
    ptxas accepts the kernel."""
    fixed, ctx = _fixed(inferred.gemm, "sm_100a")
    assert fixed["acc"].layout == hand.ACC
    art = Ax.compile_kernel(inferred.gemm, "sm_100a")
    assert art.cubin and "mma.sync.aligned.m16n8k16" in art.ptx
