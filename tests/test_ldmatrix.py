"""ldmatrix / stmatrix schedules: chosen where the layouts match the 8×8 b16 atom, declined with
the reason elsewhere, built for sm_90a and sm_100a, and checked without a GPU by simulating the
instruction on the lane addresses the schedule emits."""

import os

import numpy as np
import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import tvm  # noqa: E402
import tvm.sym  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules.ldmatrix import lane_address, ldmatrix_plan  # noqa: E402
from axe.layout import S, Swizzle, SwizzledLayout, parse  # noqa: E402
from axe.ops.call import OpCall  # noqa: E402
from axe.ops.scope import ExecScope, thread_axis_values  # noqa: E402
from axe.ops.tensor import Tensor  # noqa: E402
from axe.schedules.context import BuildContext  # noqa: E402

SW128 = SwizzledLayout(S[(64, 64)], Swizzle(3, 3, 3))
#: 4 warps × 16 atoms: warp w holds atom rows 2w, 2w+1 (C = S[(4,2,8):(1@tx,8,1)])
REG_CTA = "S[(4,2,8,8,4,2):(32@tx,16,4@tx,2,1@tx,1)]"
#: one warp, 2×2 atoms of a 16×16 tile (the mma A fragment's shape)
REG_WARP = "S[(2,8,2,4,2):(4,4@lane,2,1@lane,1)]"


def _kernel(reg, smem, shape=(64, 64), threads=128, trans=False, store=False):
    M, N = shape

    @Ax.kernel(name="k")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((M, N), "float16"), B_: T.Buffer((M, N), "float16")):
            bx, tx_ = Ax.launch(1, threads)
            A = Ax.param(A_)
            B = Ax.param(B_)
            tile = Ax.shared((M, N), "float16", smem, name="tile")
            R = Ax.registers((M, N), "float16", reg, name="R")
            if store:
                Ax.copy(R, A)
                Ax.copy(tile, R)
                Ax.copy(B, tile)
            else:
                Ax.copy(tile, A)
                Ax.copy(R, Ax.permute(tile, (1, 0)) if trans else tile)
                Ax.copy(B, R)
        return k
    return k


def _matrix_record(ctx):
    (rec,) = [r for r in ctx.records if "shared" in {t.mem for t in r.call.operands.values()}
              and "local" in {t.mem for t in r.call.operands.values()}]
    return rec


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("case", ["load", "load_trans", "store", "store_trans"])
def test_builds_and_ptx_holds_the_instruction(case, target):
    trans, store = case.endswith("trans"), case.startswith("store")
    k = _kernel(REG_CTA, SW128, trans=trans) if not store else \
        _kernel(REG_CTA, SW128 if not trans else SwizzledLayout(S[(64, 64):(1, 64)], Swizzle(3, 3, 3)), store=True)
    art = Ax.compile_kernel(k, target)
    assert art.cubin
    rec = _matrix_record(art)
    assert rec.chosen == ("stmatrix" if store else "ldmatrix")
    ins = f"{'stmatrix' if store else 'ldmatrix'}.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    assert ins in art.ptx
    assert ("trans" in art.ptx) == trans


def test_x1_x2_x4_from_atoms_per_warp():
    # one warp, 16×16 = 4 atoms → one x4; 16×8 = 2 atoms → one x2; 8×8 → one x1
    for reg, shape, n in [(REG_WARP, (16, 16), 4), ("S[(2,8,4,2):(2,4@lane,1@lane,1)]", (16, 8), 2),
                          ("S[(8,4,2):(4@lane,1@lane,1)]", (8, 8), 1)]:
        art = Ax.compile_kernel(_kernel(reg, S[shape], shape=shape, threads=32), "sm_90a")
        assert f"ldmatrix.sync.aligned.m8n8.x{n}.shared.b16" in art.ptx
        assert "ldmatrix.sync.aligned.m8n8.x4" in art.ptx if n == 4 else "m8n8.x4" not in art.ptx


def test_explain_names_the_atom_and_lane_rows():
    text = Ax.explain(_kernel(REG_CTA, SW128, trans=True))
    assert "ldmatrix       chosen: 4 x ldmatrix.x4.trans per warp" in text
    assert "S[(4,2,8):(1@tx,8,1)] ⊗ S[(8,4,2):(4@tx,1@tx,1)]" in text


def test_register_layout_not_a_tile_of_the_atom_declines():
    # each thread holds 2 contiguous elements, but lanes run along the row: not the atom
    _, ctx = Ax.build_func(_kernel("S[(4,16,8,8):(8,8@tx,1@tx,1)]", SW128), "sm_90a")
    rec = _matrix_record(ctx)
    assert rec.chosen != "ldmatrix"
    why = dict(rec.verdicts)["ldmatrix"]
    assert "is not a tiling C ⊗ S[(8,4,2):(4@tx,1@tx,1)]" in why and "R:" in why


def test_unaligned_shared_rows_decline():
    # rows padded to 65 elements: row starts are not 16-byte aligned
    _, ctx = Ax.build_func(_kernel(REG_CTA, S[(64, 64):(65, 1)]), "sm_90a")
    rec = _matrix_record(ctx)
    why = dict(rec.verdicts)["ldmatrix"]
    assert rec.chosen != "ldmatrix" and "stride 65" in why and "16-byte" in why


def test_column_major_shared_without_transposed_view_uses_trans():
    # a column-major shared tile read as is: its atom columns are contiguous → .trans
    art = Ax.compile_kernel(_kernel(REG_CTA, S[(64, 64):(1, 64)]), "sm_90a")
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in art.ptx


def test_neither_rows_nor_columns_contiguous_declines():
    smem = S[(8, 8, 8, 8):(16, 512, 1, 128)]   # pairs of elements only: no 8-element run
    _, ctx = Ax.build_func(_kernel(REG_CTA, smem), "sm_90a")
    why = dict(_matrix_record(ctx).verdicts)["ldmatrix"]
    assert "shared rows:" in why and "transposed (.trans):" in why


def test_stmatrix_needs_sm90():
    call, ctx = _call(REG_CTA, SW128, store=True, target="sm_80")
    assert ldmatrix_plan(call, ctx, store=True) == "stmatrix needs sm_90+, target is sm_80"


# --- the simulation oracle: ldmatrix's documented semantics on the emitted lane addresses ------

def _call(reg, smem, shape=(64, 64), threads=128, store=False, trans_view=False, target="sm_90a"):
    R = Tensor(None, parse(reg) if isinstance(reg, str) else reg, shape, "float16", "local", name="R")
    Sm = Tensor(None, smem, shape, "float16", "shared", name="tile")
    if trans_view:
        Sm = Ax.permute(Sm, (1, 0))
    tx = tvm.tirx.Var("tx", "int32")
    ops = {"dst": Sm, "src": R} if store else {"dst": R, "src": Sm}
    return OpCall("copy", ops, ExecScope("cta", tx, threads)), BuildContext(target=target)


def _addresses(call, plan, group, threads):
    """Shared element offset each thread supplies, evaluated from the emitted expression."""
    out = []
    for t in range(threads):
        scope = ExecScope("cta", tvm.tirx.IntImm("int32", t), threads)
        expr = lane_address(call, plan, group, thread_axis_values(scope))
        out.append(_eval(tvm.sym.Analyzer().simplify(expr)))
    return out


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b, "EQ": lambda a, b: a == b,
           "BitwiseXor": lambda a, b: a ^ b, "BitwiseAnd": lambda a, b: a & b,
           "ShiftRight": lambda a, b: a >> b, "ShiftLeft": lambda a, b: a << b}


def _eval(e):
    """A constant TIR integer expression's value (the analyzer leaves XOR/shifts unfolded)."""
    kind = type(e).__name__
    if kind == "IntImm":
        return int(e)
    if kind in _BINARY:
        return _BINARY[kind](_eval(e.a), _eval(e.b))
    if kind == "Select":
        return _eval(e.true_value) if _eval(e.condition) else _eval(e.false_value)
    raise TypeError(f"cannot evaluate {kind}: {e}")


def _holders(reg, shape):
    """(thread in the scope, register) of every logical element, from the register layout."""
    L = parse(reg)
    where = {}
    for x in range(shape[0] * shape[1]):
        (c,) = L.map(x)
        where[divmod(x, shape[1])] = (c["tx"] + 32 * c["warp"] + c["lane"], c["m"])
    return where


def _smem_addr(L, shape):
    return {divmod(x, shape[1]): next(iter(L.map(x)))["m"] if not isinstance(L, SwizzledLayout)
            else L.swizzle(next(iter(L.inner.map(x)))["m"]) for x in range(shape[0] * shape[1])}


@pytest.mark.parametrize("reg,smem,shape,threads,trans_view", [
    (REG_CTA, SW128, (64, 64), 128, False),
    (REG_CTA, SW128, (64, 64), 128, True),
    (REG_WARP, S[(16, 16)], (16, 16), 32, False),
    ("S[(2,8,4,2,4,2):(4,4@lane,1@warp,2,1@lane,1)]", SwizzledLayout(S[(16, 64)], Swizzle(3, 3, 3)),
     (16, 64), 128, False),
    ("S[(2,2,8,2,4,2):(2@warp,2,4@lane,1@warp,1@lane,1)]", S[(32, 16):(1, 32)], (32, 16), 128, False),
], ids=["cta-swizzled", "cta-swizzled-trans", "warp-16x16", "warp-per-warp-rows", "warp-axis-colmajor"])
def test_simulated_ldmatrix_fills_every_register_as_the_layout_says(reg, smem, shape, threads, trans_view):
    call, ctx = _call(reg, smem, shape, threads, trans_view=trans_view)
    plan = ldmatrix_plan(call, ctx, store=False)
    assert not isinstance(plan, str), plan
    view = call.operands["src"]
    addr_of = _smem_addr(view.layout, shape)          # logical element of the (viewed) tile → address
    memory = np.full(max(addr_of.values()) + 1, -1)
    for ij, a in addr_of.items():
        memory[a] = ij[0] * shape[1] + ij[1]
    nreg = max(m for _, m in _holders(reg, shape).values()) + 2
    regs = np.full((threads, nreg), -1)
    for group in plan.groups:
        addrs = _addresses(call, plan, group, threads)
        for w in range(threads // 32):
            lanes = addrs[32 * w:32 * w + 32]
            for q, off in enumerate(group):
                rows = [lanes[8 * q + r] for r in range(8)]      # row r of matrix q: lane 8q + r
                for t in range(32):
                    if plan.trans:   # thread t gets stored rows 2(t%4), 2(t%4)+1 at column t//4
                        got = [memory[rows[2 * (t % 4) + e] + t // 4] for e in (0, 1)]
                    else:            # thread t gets row t//4, columns 2(t%4), 2(t%4)+1
                        got = [memory[rows[t // 4] + 2 * (t % 4) + e] for e in (0, 1)]
                    regs[32 * w + t, off:off + 2] = got
    for (i, j), (t, m) in _holders(reg, shape).items():
        assert regs[t, m] == i * shape[1] + j, f"thread {t} register {m}: want element {(i, j)}"


def test_simulated_stmatrix_writes_every_element_where_the_shared_layout_says():
    smem = SwizzledLayout(S[(64, 64):(1, 64)], Swizzle(3, 3, 3))
    call, ctx = _call(REG_CTA, smem, store=True)
    plan = ldmatrix_plan(call, ctx, store=True)
    assert not isinstance(plan, str) and plan.trans
    holders = _holders(REG_CTA, (64, 64))
    regs = np.full((128, 32), -1)
    for (i, j), (t, m) in holders.items():
        regs[t, m] = i * 64 + j
    memory = np.full(64 * 64, -1)
    for group in plan.groups:
        addrs = _addresses(call, plan, group, 128)
        for w in range(4):
            lanes = addrs[32 * w:32 * w + 32]
            for q, off in enumerate(group):
                rows = [lanes[8 * q + r] for r in range(8)]
                for t in range(32):
                    for e in (0, 1):   # .trans: thread t's pair goes to stored rows 2(t%4)+e, column t//4
                        memory[rows[2 * (t % 4) + e] + t // 4] = regs[32 * w + t, off + e]
    addr_of = _smem_addr(smem, (64, 64))
    for (i, j), a in addr_of.items():
        assert memory[a] == i * 64 + j, f"element {(i, j)} at shared {a}"
