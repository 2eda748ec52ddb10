"""Blackwell tcgen05 schedules: TMEM allocation, tcgen05.mma / ld / cp chosen from the layouts and
declined with reasons elsewhere; sm_100a kernels build, ptxas accepts them, the PTX holds the
instructions; and the NumPy model of tcgen05 (tests/tcgen05_model.py, from the PTX ISA) checks the
descriptors, the fragments and a simulated run of the schedule's instructions against numpy."""

import os
import sys

import numpy as np
import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "gpu"))
sys.path.insert(0, HERE)

import tvm  # noqa: E402

import _kernels_tcgen05 as K  # noqa: E402
import axe.lang as Ax  # noqa: E402
import tcgen05_model as M  # noqa: E402
from _kernels_gemm_ops import swizzled_rows  # noqa: E402
from axe.backends.cuda import tmem as tmem_mod  # noqa: E402
from axe.backends.cuda.schedules import tcgen05 as tc  # noqa: E402
from axe.backends.cuda.smem_desc import descriptor_bits_sm100  # noqa: E402
from axe.layout import S, parse  # noqa: E402
from axe.layout.coord import tx as TX  # noqa: E402
from axe.ops.copy import copy as copy_op  # noqa: E402
from axe.ops.gemm import gemm  # noqa: E402
from axe.ops.scope import ExecScope  # noqa: E402
from axe.ops.tensor import Tensor  # noqa: E402
from axe.schedules.context import BuildContext  # noqa: E402

SM100 = BuildContext(target="sm_100a")


def _t(shape, layout, mem, dtype="float16", name="X"):
    L = parse(layout) if isinstance(layout, str) else layout
    return Tensor(None, L, tuple(shape), dtype, mem, name=name)


def _scope(kind="thread", threads=128):
    x = tvm.tirx.Var("tx", "int32")
    return ExecScope(kind, x, threads, 0, 1 if kind != "thread" else None, collective=kind != "thread")


def _operands(n=128, k=64, sw=128, b_major="K", m=128, pair=False):
    C = _t((m, n), tc.d_layout(n), "tmem", "float32", "acc")
    A = _t((m, k), swizzled_rows(m, k, sw), "shared", name="As")
    if b_major == "K":
        nb = n // 2 if pair else n
        B = Ax.permute(_t((nb, k), swizzled_rows(nb, k, sw), "shared", name="Bt"), (1, 0))
    else:
        nb = n // 2 if pair else n
        B = _t((k, nb), swizzled_rows(k, nb, sw), "shared", name="Bs")
    if pair:
        C = tc.pair(_t((128, n), tc.d_layout(n), "tmem", "float32", "acc"), 0)
        A = tc.pair(A, 0)
        B = tc.pair(B, 1)
    return C, A, B


def _plan(C, A, B, accumulate=False, **config):
    return tc.tcgen05_plan(gemm(C, A, B, accumulate, _scope(), **config), SM100)


# --- the PTX ISA's tables, re-typed, against axe's encoders ------------------------------------

def test_smem_descriptor_fields_match_table_40():
    for sw, mode in ((0, 0), (32, 6), (64, 4), (128, 2)):       # Table 40 bits 61-63
        d = descriptor_bits_sm100(1024 + 256, 16 * 5, 1024, sw)
        f = M.decode_smem_desc(d)
        assert (f["start"], f["lbo"], f["sbo"], f["swizzle"], f["base_offset"], f["lbo_mode"]) == (1280, 80, 1024, sw, 0, 0)
        assert d >> 61 == mode and (d >> 46) & 7 == 1
    with pytest.raises(ValueError, match="LBO 24 bytes is not a 16-byte multiple"):
        descriptor_bits_sm100(0, 24, 16, 0)
    with pytest.raises(M.ModelError, match="0b001"):            # the model refuses an sm_90 descriptor
        M.decode_smem_desc(descriptor_bits_sm100(0, 16, 16, 0) & ~(1 << 46))


def test_instruction_descriptor_matches_table_42():
    # kind::f16, f16 inputs, K-major A and B, M=128, N=256: D F32 (bit 4), N>>3=32 at 17, M>>4=8 at 24
    assert tc.instr_descriptor("float16", 128, 256, 0, 0) == (1 << 4) | (32 << 17) | (8 << 24)
    for dt, ab in (("float16", "f16"), ("bfloat16", "bf16")):
        for ta in (0, 1):
            for tb in (0, 1):
                for m, n in ((128, 16), (128, 256), (256, 32), (256, 144)):
                    f = M.decode_idesc(tc.instr_descriptor(dt, m, n, ta, tb))
                    assert f == {"d": "f32", "ab": ab, "trans_a": ta, "trans_b": tb, "n": n, "m": m}


def test_ld_fragments_are_the_isa_data_path_layouts():
    """Every register of every thread of ld_fragment lands where the ISA's fragment figures say."""
    for shape in tc.LD_SHAPES:
        for num in (1, 2, 4):
            for rows in ((128, 64) if shape == "32x32b" else (64, 128)):
                w = tc.LD_SHAPES[shape] * num
                L = tc.ld_fragment(shape, num, rows)
                per = M.REGS_PER_NUM[shape] * num
                seen = set()
                for r in range(rows):
                    for c in range(w):
                        (x,) = L.map((r, c), (rows, w))
                        t, reg = x["tx"], x["m"]
                        warp, lane = divmod(t, 32)
                        half, reg_in = divmod(reg, per)
                        row, col = M.fragment_position(shape, lane, reg_in)
                        slab = 32 * warp + (16 * half if shape != "32x32b" else 0)
                        assert (slab + row, col) == (r if shape == "32x32b" or rows == 128 else 32 * (r // 16) + r % 16, c)
                        seen.add((t, reg))
                assert len(seen) == rows * w


# --- choices and reasons ---------------------------------------------------------------------

def test_gemm_plan_cta_group_1():
    plan = _plan(*_operands(n=256, k=64))
    assert not isinstance(plan, str), plan
    assert (plan.cta_group, plan.n, plan.k_tiles, plan.ts) == (1, 256, 4, False)
    assert "tcgen05.mma.cta_group::1.kind::f16 M=128 N=256" in plan.describe()
    C, A, B = _operands(n=128, k=64, b_major="MN", sw=64)
    plan = _plan(C, A, B)
    assert plan.b.major == "MN" and M.decode_idesc(plan.idesc)["trans_b"] == 1


def test_gemm_plan_reads_the_pair_from_the_layouts():
    plan = _plan(*_operands(n=256, k=64, pair=True), barrier=("bar",), multicast=0b11)
    assert not isinstance(plan, str), plan
    assert (plan.cta_group, plan.n, plan.m) == (2, 256, 256)
    assert M.decode_idesc(plan.idesc)["m"] == 256
    assert plan.local["B"].shape == (64, 128) and plan.local["A"].shape == (128, 64)
    why = _plan(*_operands(n=256, k=64, pair=True), barrier=("bar",))
    assert "multicast=0b11" in why
    C, A, B = _operands(n=256, k=64, pair=True)
    why = _plan(_t((256, 256), "S[(2,128,256):(256@TCol,1@TLane,1@TCol)]", "tmem", "float32", "acc"), A, B)
    assert isinstance(why, str) and "all split over the CTA pair" in why


def test_gemm_declines_with_reasons():
    C, A, B = _operands()
    call = gemm(C, A, B, False, _scope())
    assert "tcgen05 exists only on sm_100a" in tc.tcgen05_plan(call, BuildContext(target="sm_90a"))
    assert "issued by one thread" in tc.tcgen05_plan(gemm(C, A, B, False, _scope("warpgroup")), SM100)
    Cr = _t((128, 128), "S[(128,128):(1@tx,1)]", "local", "float32", "acc")
    assert "lives in tensor memory" in _plan(Cr, A, B)
    Cbad = _t((128, 128), "S[(128,128):(1@TCol,128@TCol)]", "tmem", "float32", "acc")
    assert "is not a tiling C ⊗ S[(128,128):(1@TLane,1@TCol)]" in _plan(Cbad, A, B)
    Am = _t((64, 64), swizzled_rows(64, 64), "shared", name="As")
    assert "M=64 (per CTA)" in _plan(_t((64, 128), tc.d_layout(128, 64), "tmem", "float32", "acc"), Am, B)


def test_ld_plan_chooses_shape_from_register_layout():
    acc = _t((128, 64), tc.d_layout(64), "tmem", "float32", "acc")
    wg = _scope("warpgroup")
    rows = _t((128, 64), S[(128, 64):(1 @ TX, 1)], "local", "float32", "R")
    p = tc.ld_plan(copy_op(rows, acc, wg), SM100)
    assert (p.shape, p.num, p.store) == ("32x32b", 64, False)
    frag = _t((128, 64), Ax.parse(str(tc.ld_fragment("16x256b", 8, 128))), "local", "float32", "R")
    p = tc.ld_plan(copy_op(frag, acc, wg), SM100)
    assert (p.shape, p.num) == ("16x256b", 8)
    p = tc.ld_plan(copy_op(acc, frag, wg), SM100)
    assert p.store and p.instruction() == "tcgen05.st.sync.aligned.16x256b.x8.b32"
    bad = _t((128, 64), S[(128, 64):(1, 128 @ TX)], "local", "float32", "R")
    why = tc.ld_plan(copy_op(bad, acc, wg), SM100)
    assert "no tiling C ⊗ its fragment" in why
    assert "must be 1-4 warps" in tc.ld_plan(copy_op(rows, acc, _scope("thread")), SM100)


def test_tmem_allocation_size_from_layout():
    assert tmem_mod.columns_for(tc.d_layout(256), "float32") == 256
    assert tmem_mod.columns_for(tc.d_layout(24), "float32") == 32
    assert tmem_mod.columns_for(tc.d_layout(136), "float32") == 256
    assert tmem_mod.columns_for(tc.d_layout(64), "float16") == 32          # two 16-bit per column
    assert tmem_mod.columns_for(parse("S[(2,128,128):(128@TCol,1@TLane,1@TCol)]"), "float32") == 256
    assert "TMEM has 512" in tmem_mod.check_layout(tc.d_layout(1024), (128, 1024), "float32")
    assert "only TLane and TCol" in tmem_mod.check_layout(parse("S[(128,8):(1@TLane,1)]"), (128, 8), "float32")


# --- the model: descriptors address the layouts' elements; a simulated GEMM --------------------

B_AT = 1 << 16      # byte offset of B's tile in the model's shared memory (A's is 0)


def _smem_image(img, t, values, at=0):
    """Write ``values`` (the tensor's logical elements) into shared bytes ``img`` where ``t``'s
    layout puts them, ``at`` bytes in."""
    L = t.layout
    for u in np.ndindex(*t.shape):
        (c,) = L.map(u, t.shape)
        b = 2 * c["m"] + at
        img[b:b + 2] = np.asarray([values[u]], np.float16).view(np.uint8)
    return img


def _desc(op, mn0, k0, at=0):
    return (2 * op.start(mn0, k0) + at) >> 4 | op.high_bits(100)


def _simulate(C, A, B, a_shared=None):
    """Run the plan's instructions on the model; read C back through the ld plan; compare to numpy."""
    rng = np.random.default_rng(0)
    plan = _plan(C, A, B, False)
    assert not isinstance(plan, str), plan
    g = plan.cta_group
    (Mt, Kt), Nt = A.shape, B.shape[1]
    a_val = rng.standard_normal((Mt, Kt)).astype(np.float16)
    b_val = rng.standard_normal((Kt, Nt)).astype(np.float16)
    la, lb = plan.local["A"], plan.local["B"]
    mloc, nloc = la.shape[0], lb.shape[1]
    a_tmem = a_shared is not None
    smems = [_smem_image(_smem_image(np.zeros(2 * B_AT, np.uint8), a_shared or la, a_val[r * mloc:(r + 1) * mloc]),
                         lb, b_val[:, r * nloc:(r + 1) * nloc], B_AT) for r in range(g)]
    tm = [M.Tmem() for _ in range(g)]
    a_col = 256
    if a_tmem:      # shared → TMEM first (tcgen05.cp), the ts form then reads lanes/columns
        cp = tc.cp_plan(copy_op(la, a_shared, _scope()), SM100)
        assert not isinstance(cp, str), cp
        for ki in range(cp.k_tiles):
            M.cp_128x256b(tm[0], smems[0], a_col + ki * 8, _desc(cp.src, 0, ki * 16))
    for mi, ni, ki, dcol, (am, ak), (bn, bk), k in plan.steps():
        a = ((0 << 16) | (a_col + ak // 2)) if a_tmem else _desc(plan.a, am, ak)
        M.mma(tm, smems, dcol, a, _desc(plan.b, bn, bk, B_AT), plan.idesc, k > 0, g, a_in_tmem=a_tmem)
    # each CTA's warpgroup reads its 128 rows with the ld plan's instructions
    rows = _t((128, Nt), S[(128, Nt):(1 @ TX, 1)], "local", "float32", "R")
    got = np.zeros((Mt, Nt), np.float32)
    for r in range(g):
        ld = tc.ld_plan(copy_op(rows, plan.local["C"], _scope("warpgroup")), SM100)
        for w in range(4):
            regs = np.zeros((32, Nt), np.float32)
            for base, dl, col in ld.steps():
                regs[:, base:base + ld.per_instr] = M.ld(tm[r], ld.shape, ld.num, w, ((32 * w + dl) << 16) | col)
            for lane in range(32):
                for j in range(Nt):
                    (x,) = rows.layout.map((32 * w + lane, j), rows.shape)
                    got[r * 128 + 32 * w + lane, j] = regs[lane, x["m"]]
    want = a_val.astype(np.float32) @ b_val.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    return plan


@pytest.mark.parametrize("sw", [0, 32, 64, 128])
@pytest.mark.parametrize("b_major", ["K", "MN"])
def test_simulated_gemm_cta_group_1(sw, b_major):
    k = 32 if sw == 0 else 64
    plan = _simulate(*_operands(n=64, k=k, sw=sw, b_major=b_major))
    assert plan.b.swizzle == sw and plan.b.major == b_major


def test_simulated_gemm_from_tmem_a():
    C, A, B = _operands(n=32, k=32, sw=64, b_major="MN")
    At = _t((128, 32), tc.d_layout(32), "tmem", "float16", "At")
    plan = _simulate(C, At, B, a_shared=A)
    assert plan.ts and "(ts;" in plan.describe()


def test_simulated_gemm_cta_group_2():
    plan = _simulate(*_operands(n=64, k=64, sw=128, b_major="K", pair=True))
    assert plan.cta_group == 2 and M.decode_idesc(plan.idesc)["m"] == 256


def test_model_catches_a_wrong_descriptor():
    """The simulation is not vacuous: swapping LBO and SBO of an MN-major B is caught."""
    C, A, B = _operands(n=64, k=32, sw=64, b_major="MN")
    plan = _plan(C, A, B)
    plan.b.lbo, plan.b.sbo = plan.b.sbo, plan.b.lbo
    f = M.decode_smem_desc(_desc(plan.b, 0, 0))
    want = [2 * next(iter(B.layout.map((kk, nn), B.shape)))["m"] for nn in range(64) for kk in range(16)]
    got = [M.canonical_byte(f, "MN", nn, kk) for nn in range(64) for kk in range(16)]
    assert got != want


# --- kernels build for sm_100a; ptxas accepts; the PTX holds the instructions ------------------

@pytest.mark.parametrize("args", [dict(), dict(b_major="MN", sw=64), dict(a_tmem=True, sw=128, b_major="MN")])
def test_tcgen05_kernels_build_for_sm100a(args):
    art = Ax.compile_kernel(K.tcgen05_tile(**args), "sm_100a")
    assert art.cubin
    ptx = art.ptx
    for ins in ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32", "tcgen05.relinquish_alloc_permit",
                "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit.cta_group::1.mbarrier::arrive::one",
                "tcgen05.ld.sync.aligned.32x32b.x128.b32", "tcgen05.wait::ld.sync.aligned",
                "tcgen05.dealloc.cta_group::1.sync.aligned.b32"):
        assert ins in ptx, ins
    if args.get("a_tmem"):
        assert "tcgen05.cp.cta_group::1.128x256b" in ptx
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0
    chosen = {r.call.op + ":" + r.chosen for r in art.records}
    assert "gemm:tcgen05" in chosen and "copy:tcgen05_ld" in chosen


def test_explain_shows_the_tcgen05_choice():
    text = Ax.explain(K.tcgen05_tile(), "sm_100a")
    line = [ln for ln in text.splitlines() if "tcgen05        chosen" in ln][0]
    assert "4 x tcgen05.mma.cta_group::1.kind::f16 M=128 N=128 K=16 (ss" in line and "commit → " in line
    assert "tcgen05_ld     chosen: 1 x tcgen05.ld.sync.aligned.32x32b.x128.b32" in text
