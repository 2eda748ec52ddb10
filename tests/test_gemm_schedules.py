"""gemm schedules: wgmma (warpgroup, sm_90a) and mma.sync (warp) chosen from the operand layouts,
declined with the reason elsewhere; kernels build and ptxas accepts them; the fragments are the
PTX ISA's; and a numpy simulation of wgmma's descriptor addressing (the documented canonical
layouts per swizzle mode) reads exactly the elements the shared layouts say."""

import os
import sys

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))

import tvm  # noqa: E402

import _kernels_gemm_ops as G  # noqa: E402
import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules import mma as mma_mod  # noqa: E402
from axe.backends.cuda.schedules.wgmma import d_fragment, smem_operand, wgmma_plan  # noqa: E402
from axe.layout import S, parse, tile  # noqa: E402
from axe.ops.call import OpError  # noqa: E402
from axe.ops.gemm import gemm  # noqa: E402
from axe.ops.scope import ExecScope  # noqa: E402
from axe.ops.tensor import Tensor  # noqa: E402
from axe.schedules.context import BuildContext  # noqa: E402

swizzled_rows = G.swizzled_rows


def _t(shape, layout, mem, dtype="float16", name="X"):
    L = parse(layout) if isinstance(layout, str) else layout
    return Tensor(None, L, tuple(shape), dtype, mem, name=name)


def _transposed(t):
    return Ax.permute(t, (1, 0))


def _call(C, A, B, kind="warpgroup", threads=128, accumulate=True, **config):
    tx = tvm.tirx.Var("tx", "int32")
    scope = ExecScope(kind, tx, threads, 0, 1) if kind != "cta" else ExecScope("cta", tx, threads)
    return gemm(C, A, B, accumulate, scope, **config)


def _wg_operands(n=128, k=64, c_layout=None, a_layout=None):
    C = _t((64, n), c_layout or d_fragment(n, "tx"), "local", "float32", "acc")
    A = _t((64, k), a_layout or swizzled_rows(64, k), "shared", name="As")
    B = _transposed(_t((n, k), swizzled_rows(n, k), "shared", name="Bs"))
    return C, A, B


# --- kernels build, ptxas accepts, the PTX holds the instruction -------------------------------

@pytest.mark.parametrize("args", [dict(b_major="K"), dict(b_major="MN", K=128), dict(a_regs=True),
                                  dict(b_major="MN", sw=64, N=128), dict(b_major="K", sw=0, K=32, N=64)])
def test_wgmma_kernels_build_for_sm90a(args):
    art = Ax.compile_kernel(G.wgmma_tile(**args), "sm_90a")
    assert art.cubin
    rec = [r for r in art.records if r.call.op == "gemm"][0]
    assert rec.chosen == "wgmma"
    assert "wgmma.mma_async.sync.aligned.m64n" in art.ptx
    assert "wgmma.fence.sync.aligned" in art.ptx and "wgmma.commit_group.sync.aligned" in art.ptx
    assert "wgmma.wait_group.sync.aligned 0" in art.ptx
    trans_b = ", 1;" if args.get("b_major") == "MN" else ", 0;"
    assert [ln for ln in art.ptx.splitlines() if "wgmma.mma_async" in ln][0].rstrip().endswith(trans_b + " }")


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_mma_sync_kernel_builds_for_both_targets(target):
    art = Ax.compile_kernel(G.mma_tile(), target)
    assert art.cubin
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in art.ptx
    assert [r.chosen for r in art.records if r.call.op == "gemm"] == ["mma_sync"]


def test_wgmma_declines_on_sm100a_and_explain_says_why():
    call = _call(*_wg_operands())
    why = wgmma_plan(call, BuildContext(target="sm_100a"))
    assert isinstance(why, str) and "wgmma exists only on sm_90a" in why and "sm_100a" in why
    with pytest.raises(Exception) as err:    # the warpgroup gemm has no other schedule there
        Ax.build_func(G.wgmma_tile(), "sm_100a")
    assert "wgmma exists only on sm_90a" in str(err.value)


def test_explain_shows_the_choice():
    text = Ax.explain(G.wgmma_tile(b_major="MN", K=128))
    line = [ln for ln in text.splitlines() if "wgmma          chosen" in ln][0]
    assert "8 x wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 (ss" in line
    assert "As) K-major 128B swizzle" in line and "Bs) MN-major 128B swizzle" in line
    assert "LBO 16384 B, SBO 1024 B" in line      # 64-column N blocks 8192 elements apart
    text = Ax.explain(G.mma_tile())
    assert "wgmma          declined: wgmma is issued by one warpgroup; the scope is warps [0, 1)" in text
    assert "mma_sync       chosen: 1 x mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in text


def test_wait_config():
    plan = wgmma_plan(_call(*_wg_operands(), wait=False), BuildContext())
    assert plan.wait is False and "no wait" in plan.describe()
    assert "wait=9" in wgmma_plan(_call(*_wg_operands(), wait=9), BuildContext())


# --- declines with reasons ---------------------------------------------------------------------

def test_shared_layout_not_a_tile_of_any_atom_declines():
    # row-major 64×64 unswizzled: no 16-byte core matrix is 128 contiguous bytes, nor is M contiguous
    C, A, B = _wg_operands(a_layout=S[(64, 64)])
    why = wgmma_plan(_call(C, A, B), BuildContext())
    assert isinstance(why, str) and why.startswith("A (As): ")
    assert "K-major: " in why and "MN-major: " in why and "is not a tiling C ⊗ S[(8,8):(8,1)]" in why


def test_swizzle_that_is_not_a_wgmma_mode_declines():
    bad = Ax.SwizzledLayout(S[(64, 64)], Ax.Swizzle(3, 2, 3))
    why = wgmma_plan(_call(*_wg_operands(a_layout=bad)), BuildContext())
    assert "A (As): swizzle Swizzle(3,2,3) is not a TMA mode" in why


def test_register_c_that_is_not_the_d_fragment_declines():
    C, A, B = _wg_operands(c_layout="S[(8,16,8,8):(8,8@tx,1@tx,1)]")
    why = wgmma_plan(_call(C, A, B), BuildContext())
    assert "no N in 8..256 fits" in why and "N=128: C (acc) register layout" in why
    assert "is not a tiling C ⊗ S[(4,2,8,16,4,2):(32@tx,2,4@tx,4,1@tx,1)]" in why


def test_n_is_chosen_from_the_layouts():
    # two 64×128 fragments 128 registers apart: a tiling of D(128) but not of D(256)
    C, A, B = _wg_operands(n=256, c_layout=tile(S[2:2], (1, 2), d_fragment(128, "tx"), (64, 128)))
    plan = wgmma_plan(_call(C, A, B), BuildContext())
    assert not isinstance(plan, str), plan
    assert plan.n == 128 and plan.n_tiles == 2 and "m64n128k16" in plan.describe()
    C, A, B = _wg_operands(n=256)
    assert wgmma_plan(_call(C, A, B), BuildContext()).n == 256


def test_scope_and_memory_declines():
    C, A, B = _wg_operands()
    assert "issued by one warpgroup" in wgmma_plan(_call(C, A, B, kind="cta"), BuildContext())
    Cs = _t((64, 128), swizzled_rows(64, 128), "shared", "float32", "Cs")
    assert "accumulator lives in registers" in wgmma_plan(_call(Cs, A, B), BuildContext())
    ctx = BuildContext()
    Cw = _t((16, 8), mma_mod.c_fragment(), "local", "float32", "acc")
    As = _t((16, 16), S[(16, 16)], "shared", name="As")
    Br = _t((16, 8), mma_mod.b_fragment(), "local", name="Br")
    why = mma_mod.mma_plan(_call(Cw, As, Br, kind="warp", threads=32), ctx)
    assert "A (As) is in shared memory; mma.sync takes registers" in why


def test_mma_register_layout_not_a_fragment_declines():
    Cw = _t((16, 8), mma_mod.c_fragment(), "local", "float32", "acc")
    Ar = _t((16, 16), "S[(2,8,2,4,2):(4,4@lane,2,1@lane,1)]", "local", name="Ar")  # ldmatrix order, not mma's
    Br = _t((16, 8), mma_mod.b_fragment(), "local", name="Br")
    why = mma_mod.mma_plan(_call(Cw, Ar, Br, kind="warp", threads=32), BuildContext())
    assert "A (Ar) register layout" in why and "is not a tiling C ⊗ S[(2,8,2,4,2):(2,4@lane,4,1@lane,1)]" in why
    plan = mma_mod.mma_plan(_call(Cw, _t((16, 16), mma_mod.a_fragment(), "local", name="Ar"), Br,
                                  kind="warp", threads=32), BuildContext())
    assert plan.tiles == (1, 1, 1)


def test_signature_errors_name_the_operands():
    C, A, B = _wg_operands()
    with pytest.raises(OpError, match="gemm: A is 64x64 but B is 32x128"):
        gemm(C, A, _t((32, 128), S[(32, 128)], "shared"), True, None)
    with pytest.raises(OpError, match="gemm: C accumulates in float32, got float16"):
        gemm(_t((64, 128), d_fragment(128), "local", "float16"), A, B, True, None)


# --- the fragments are the PTX ISA's (enumerated) ----------------------------------------------

def _at(L, u, shape):
    (c,) = L.map(u, shape)
    return c


def test_fragments_match_the_ptx_isa():
    n = 24
    for r in range(64):
        for col in range(n):
            c = _at(d_fragment(n), (r, col), (64, n))
            rr = r % 16
            assert (c["warp"], c["lane"], c["m"]) == (r // 16, (rr % 8) * 4 + (col % 8) // 2,
                                                      (col // 8) * 4 + (rr // 8) * 2 + col % 2)
    for r in range(16):
        for k in range(16):
            c = _at(mma_mod.a_fragment(), (r, k), (16, 16))
            assert (c["lane"], c["m"]) == ((r % 8) * 4 + (k % 8) // 2, (k // 8) * 4 + (r // 8) * 2 + k % 2)
        for col in range(8):
            c = _at(mma_mod.c_fragment(), (r, col), (16, 8))
            assert (c["lane"], c["m"]) == ((r % 8) * 4 + col // 2, (r // 8) * 2 + col % 2)
            c = _at(mma_mod.b_fragment(), (r, col), (16, 8))      # r is k here
            assert (c["lane"], c["m"]) == (col * 4 + (r % 8) // 2, (r // 8) * 2 + r % 2)


# --- the simulation oracle: wgmma's canonical shared layouts, addressed from the descriptor -----

def _hw_byte(op, start, mn, k):
    """Byte address wgmma reads for (mn, k) of one instruction's slice (16-bit elements), per the
    PTX ISA's canonical layouts (8×16-byte core matrices; T = 8 elements per 16 bytes):
    K-major none ((8,m),(T,2k)):((1T,SBO),(1,LBO)); K-major W-byte swizzle rows of W bytes, 8-row
    groups at SBO; MN-major none ((T,m),(8,k)):((1,SBO),(1T,LBO)); MN-major swizzled
    ((W/2,m),(8,k)):((1,LBO),(W,SBO)); the swizzle XORs address bits [4,4+b) with [7,7+b)."""
    W = op.swizzle
    if op.major == "K":
        g, r = divmod(mn, 8)
        j, e = divmod(k, 8)
        off = g * op.sbo + (j * op.lbo + r * 16 if not W else r * W + j * 16) + e * 2
    else:
        g, r = divmod(k, 8)
        if not W:
            c, e = divmod(mn, 8)
            off = c * op.sbo + g * op.lbo + r * 16 + e * 2
        else:
            b, rest = divmod(mn, W // 2)
            c, e = divmod(rest, 8)
            off = b * op.lbo + g * op.sbo + r * W + c * 16 + e * 2
    addr = start + off
    if W:
        addr ^= (addr >> 3) & ((W // 16 - 1) << 4)
    return addr


def _layout_byte(t, u):
    (c,) = t.layout.map(u, t.shape)
    return 2 * c["m"]


def _simulate(t, operand, mn_inst, major):
    op = smem_operand(t, operand, mn_inst)
    assert not isinstance(op, str), op
    assert op.major == major, op.describe()
    mn_total, k_total = (t.shape[0], t.shape[1]) if operand == "A" else (t.shape[1], t.shape[0])
    checked = 0
    for mn0 in range(0, mn_total, mn_inst):
        for k0 in range(0, k_total, 16):
            start = 2 * op.start(mn0, k0)
            assert start % 16 == 0
            for mn in range(mn_inst):
                for k in range(16):
                    u = (mn0 + mn, k0 + k) if operand == "A" else (k0 + k, mn0 + mn)
                    assert _hw_byte(op, start, mn, k) == _layout_byte(t, u), (operand, major, op.describe(), u)
                    checked += 1
    assert checked == mn_total * k_total
    return op


@pytest.mark.parametrize("sw", [0, 32, 64, 128])
def test_descriptor_addresses_the_layouts_elements(sw):
    K = 64
    # A K-major (M×K, K contiguous) and A M-major (the transposed view of a K×M tile)
    a_k = _t((64, K), swizzled_rows(64, K, sw), "shared", name="As")
    assert _simulate(a_k, "A", 64, "K").swizzle == sw
    a_mn = _transposed(_t((K, 64), swizzled_rows(K, 64, sw), "shared", name="Ast"))
    _simulate(a_mn, "A", 64, "MN")
    for n_inst in (64, 128):
        # B K-major (the transposed view of N×K) and B N-major (K×N as is)
        b_k = _transposed(_t((128, K), swizzled_rows(128, K, sw), "shared", name="Bt"))
        op = _simulate(b_k, "B", n_inst, "K")
        assert op.trans == 0
        b_mn = _t((K, 128), swizzled_rows(K, 128, sw), "shared", name="Bs")
        op = _simulate(b_mn, "B", n_inst, "MN")
        assert op.trans == 1


def test_oracle_catches_a_wrong_descriptor():
    """The simulation is not vacuous: swapping LBO and SBO of an MN-major operand is caught."""
    b_mn = _t((64, 128), swizzled_rows(64, 128, 64), "shared", name="Bs")
    op = smem_operand(b_mn, "B", 128)
    assert op.lbo != op.sbo
    op.lbo, op.sbo = op.sbo, op.lbo
    start = 2 * op.start(0, 0)
    assert any(_hw_byte(op, start, mn, k) != _layout_byte(b_mn, (k, mn)) for mn in range(128) for k in range(16))
