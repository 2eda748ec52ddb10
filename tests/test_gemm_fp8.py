"""Block-scaled FP8 GEMM (kernels/gemm_fp8.py) and what it is built from: the ``gemm`` operator
with e4m3 operands, wgmma e4m3 k32 chosen from the layouts (MN-major fp8 declined with the PTX
ISA's reason, mma.sync and tcgen05 declining the dtype), fp8 shared-memory descriptors checked
against an independent model of the PTX ISA's canonical layouts for every swizzle mode, TMA maps
whose extent-1 dimensions obey the driver's stride rules (K = 128: one k-block), and
``scale_accumulate``, whose scale-per-element derivation is checked by brute force over the
layouts.  Builds pass ptxas with no spills and the PTX holds the fp8 wgmma and the promotion's
FMAs."""

import os
import re

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules.wgmma import d_fragment, wgmma_plan  # noqa: E402
from axe.layout import S, Swizzle, SwizzledLayout, parse  # noqa: E402
from axe.ops.block_scale import scale_accumulate  # noqa: E402
from axe.ops.gemm import gemm  # noqa: E402
from axe.ops.call import OpError  # noqa: E402
from axe.ops.scope import ExecScope  # noqa: E402
from axe.ops.tensor import Tensor  # noqa: E402
from axe.schedules.block_scale import refine_shape, scale_plan  # noqa: E402
from axe.schedules.context import BuildContext  # noqa: E402
from axe.schedules.dispatch import DispatchError, dispatch  # noqa: E402
from axe.schedules.emit import mem_offset  # noqa: E402
from kernels import fp8_blocks as Q  # noqa: E402
from kernels import gemm_fp8 as G  # noqa: E402

FP8 = "float8_e4m3fn"


def _t(shape, layout, mem, dtype=FP8, name="X"):
    L = parse(layout) if isinstance(layout, str) else layout
    return Tensor(None, L, tuple(shape), dtype, mem, name=name)


def _wg(tx=None):
    return ExecScope("warpgroup", tx if tx is not None else tvm.tirx.Var("tx", "int32"), 384, 1, 2)


# --- wgmma fp8: dispatch from the layouts ----------------------------------------------------------

def _fp8_operands(b_major="K", n=128, k=128):
    C = _t((64, n), d_fragment(n, "tx"), "local", "float32", "part")
    A = _t((64, k), G.fp8_tile(64), "shared", name="As")
    if b_major == "K":      # stored N×K, 128-byte rows of K: the K×N operand is its transpose
        B = Ax.permute(_t((n, k), G.fp8_tile(n), "shared", name="Bs"), (1, 0))
    else:                   # stored K×N with N contiguous: MN-major
        B = _t((k, n), SwizzledLayout(S[(k, n)], Swizzle(3, 4, 3)), "shared", name="Bs")
    return C, A, B


def test_wgmma_fp8_plan_is_k32_e4m3_k_major():
    plan = wgmma_plan(gemm(*_fp8_operands(), scope=_wg()), BuildContext(target="sm_90a"))
    assert not isinstance(plan, str), plan
    assert plan.instruction() == "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
    assert (plan.k_tiles, plan.k_inst, plan.a.major, plan.b.major, plan.b.swizzle) == (4, 32, "K", "K", 128)
    # 8 rows of 128 bytes between core-matrix groups along N: SBO 1024 bytes
    assert plan.b.sbo == 1024 and plan.a.sbo == 1024


def test_wgmma_fp8_declines_mn_major_with_the_reason():
    call = gemm(*_fp8_operands("MN"), scope=_wg())
    why = wgmma_plan(call, BuildContext(target="sm_90a"))
    assert isinstance(why, str) and "K-major A and B only" in why and "MN-major" in why
    with pytest.raises(DispatchError) as err:      # the reason reaches the user (axe explain's record)
        dispatch(call, BuildContext(target="sm_90a"))
    assert "K-major A and B only" in str(err.value)


def fp8_k_major(rows, cols, sw, k_fastest=False):
    """A (rows, cols) fp8 tile, K contiguous, as wgmma's K-major atoms tile it: ``sw``-byte
    swizzled rows in column blocks of ``sw`` bytes (``Swizzle(log2(sw/16), 4, 3)``: 16-byte chunks
    of 1-byte elements), or (``sw=0``) 8×16-byte core matrices — column blocks of 16 bytes one
    after the other, or with ``k_fastest`` the core matrices of one 8-row group side by side."""
    if sw:
        L = S[(rows, sw)] if cols == sw else S[(rows, cols // sw, sw):(sw, rows * sw, 1)]
        return SwizzledLayout(L, Swizzle(sw.bit_length() - 5, 4, 3))
    if k_fastest:
        return S[(rows // 8, 8, cols // 16, 16):(cols * 8, 16, 128, 1)]
    return S[(rows, cols // 16, 16):(16, rows * 16, 1)]


def test_schedules_without_fp8_decline_naming_the_dtype():
    """mma.sync (m16n8k16, 16-bit) and tcgen05.mma (kind::f16) have no fp8 instruction here: each
    declines naming the dtype, and the dispatcher's error (what ``axe explain`` shows) carries it."""
    from axe.backends.cuda.schedules import mma, tcgen05
    x = tvm.tirx.Var("tx", "int32")
    warp = ExecScope("warp", x, 32, 0, 1)
    Cw = _t((16, 8), mma.c_fragment(), "local", "float32", "acc")
    Ar, Br = _t((16, 16), mma.a_fragment(), "local", name="Ar"), _t((16, 8), mma.b_fragment(), "local", name="Br")
    call = gemm(Cw, Ar, Br, scope=warp)
    why = "mma.sync m16n8k16 multiplies float16 or bfloat16; A and B are float8_e4m3fn"
    assert mma.mma_plan(call, BuildContext(target="sm_90a")) == why
    with pytest.raises(DispatchError, match=why):
        dispatch(call, BuildContext(target="sm_90a"))
    thread = ExecScope("thread", x, 128, 0, None, collective=False)
    Ct = _t((128, 128), tcgen05.d_layout(128), "tmem", "float32", "acc")
    A = _t((128, 128), G.fp8_tile(128), "shared", name="As")
    B = Ax.permute(_t((128, 128), G.fp8_tile(128), "shared", name="Bs"), (1, 0))
    call = gemm(Ct, A, B, scope=thread)
    why = tcgen05.tcgen05_plan(call, BuildContext(target="sm_100a"))
    assert why == ("tcgen05.mma kind::f16 multiplies float16 or bfloat16; A and B are float8_e4m3fn "
                   "(kind::f8f6f4 is not emitted)")
    with pytest.raises(DispatchError, match=r"kind::f16 multiplies .* float8_e4m3fn"):
        dispatch(call, BuildContext(target="sm_100a"))


def _model_byte(op, start, mn, k):
    """The byte wgmma reads for element (mn, k) of one instruction's slice of a K-major operand of
    1-byte elements (T = 16 elements per 16 bytes), from the descriptor alone, per the PTX ISA's
    canonical K-major layouts (the "Shared Memory Matrix Layout" table of the matrix descriptor):
    none ``((8,m),(T,2k)):((1T,SBO),(1,LBO))`` — row r of a core matrix 16 bytes on, core matrix j
    along K at j·LBO, 8-row group g at g·SBO; W-byte swizzle ``((8,m),(T,2k)):((W/16·T,SBO),(1,T))``
    — rows of W bytes, 8-row groups at SBO — after which the swizzle XORs address bits [4, 4+b)
    with bits [7, 7+b) of the absolute address, b = log2(W/16).  One instruction spans 2T = 32
    elements of K."""
    assert op.major == "K" and 0 <= k < 32
    g, r = divmod(mn, 8)
    if not op.swizzle:
        j, e = divmod(k, 16)
        return start + g * op.sbo + j * op.lbo + r * 16 + e
    addr = start + g * op.sbo + r * op.swizzle + k
    return addr ^ ((addr >> 3) & ((op.swizzle // 16 - 1) << 4))


def _simulate_fp8(plan, operand, t, shift=0):
    """How many (mn, k) of all the instructions' slices the model, reading from the descriptors,
    puts at another byte than the layout does (0: the descriptors address exactly the layout)."""
    op, mn_inst = (plan.a, 64) if operand == "A" else (plan.b, plan.n)
    mn_total, k_total = (t.shape[0], t.shape[1]) if operand == "A" else (t.shape[1], t.shape[0])
    bad = 0
    for mn0 in range(0, mn_total, mn_inst):
        for k0 in range(0, k_total, plan.k_inst):
            start = op.start(mn0, k0) + shift
            for mn in range(mn_inst):
                for k in range(plan.k_inst):
                    u = (mn0 + mn, k0 + k) if operand == "A" else (k0 + k, mn0 + mn)
                    (c,) = t.layout.map(u, t.shape)
                    bad += _model_byte(op, start, mn, k) != c["m"]
    return bad


def _fp8_plan(sw, k=128, n=128, k_fastest=False):
    C = _t((64, n), d_fragment(n, "tx"), "local", "float32", "part")
    A = _t((64, k), fp8_k_major(64, k, sw, k_fastest), "shared", name="As")
    B = Ax.permute(_t((n, k), fp8_k_major(n, k, sw, k_fastest), "shared", name="Bs"), (1, 0))
    plan = wgmma_plan(gemm(C, A, B, scope=_wg()), BuildContext(target="sm_90a"))
    assert not isinstance(plan, str), plan
    return plan, A, B


@pytest.mark.parametrize("sw,k_fastest", [(0, False), (0, True), (32, False), (64, False), (128, False)])
def test_fp8_descriptors_address_the_layouts_elements(sw, k_fastest):
    """Every swizzle mode of K-major fp8 tiles: the descriptors count K in bytes (32 per k32
    instruction: two 16-byte core matrices, LBO apart when unswizzled), and the model reading from
    them finds exactly the layouts' bytes for every element of every instruction, A and B; a start
    address 16 bytes off is caught."""
    plan, A, B = _fp8_plan(sw, k_fastest=k_fastest)
    assert plan.instruction() == "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
    assert (plan.k_inst, plan.k_tiles, plan.a.swizzle, plan.b.swizzle) == (32, 4, sw, sw)
    assert _simulate_fp8(plan, "A", A) == 0
    assert _simulate_fp8(plan, "B", B) == 0
    assert _simulate_fp8(plan, "B", B, shift=16) > 0


def _fp8_tile_kernel(sw, k=64, n=128):
    """One warpgroup: fp8 A (64×k) and B (n×k, K-major) copied into ``sw``-swizzled (or core-matrix)
    shared tiles, ``Ax.gemm`` into a 64×n fp32 accumulator, stored."""
    @Ax.kernel(name=f"wgmma_fp8_sw{sw}")
    def kern():
        @T.prim_func
        def kern(A_: T.Buffer((64, k), FP8), B_: T.Buffer((n, k), FP8), C_: T.Buffer((64, n), "float32")):
            bx, tx = Ax.launch(1, 128)
            A, B, Cg = Ax.param(A_), Ax.param(B_), Ax.param(C_)
            As = Ax.shared((64, k), FP8, fp8_k_major(64, k, sw), name="As")
            Bs = Ax.shared((n, k), FP8, fp8_k_major(n, k, sw), name="Bs")
            Ax.copy(As, A)
            Ax.copy(Bs, B)
            T.evaluate(T.ptx.fence.proxy.async_.shared__cta())
            Ax.sync()
            with Ax.warpgroups(0):
                acc = Ax.registers((64, n), "float32", d_fragment(n, "tx"), name="acc")
                Ax.gemm(acc, As, Ax.permute(Bs, (1, 0)), accumulate=False)
                Ax.copy(Cg, acc)
        return kern
    return kern


@pytest.mark.parametrize("sw", [0, 32, 64])
def test_fp8_wgmma_of_every_swizzle_builds_for_sm90a(sw):
    """Unswizzled and 32/64-byte swizzled fp8 tiles (128 bytes: the kernel's) reach wgmma k32;
    ptxas accepts the kernel."""
    art = Ax.compile_kernel(_fp8_tile_kernel(sw), "sm_90a")
    assert [r.chosen for r in art.records if r.call.op == "gemm"] == ["wgmma"]
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3", art.ptx)) == 2
    assert art.launch["resources"]["spill_stores"] == 0


def test_fp8_unswizzled_descriptor_fields_and_the_k16_count_caught():
    """Unswizzled fp8 K-major: SBO is the distance of 8-row groups (128 bytes when core matrices
    run down the column block, 8 rows of the tile when they run along K) and LBO that of the two
    core matrices one k32 instruction reads (a column block: rows·16 bytes; or 128 bytes).  A
    descriptor that counted 16 elements of K per instruction would leave LBO unset (one core
    matrix): the model catches it."""
    plan, A, B = _fp8_plan(0)
    assert (plan.a.sbo, plan.a.lbo, plan.b.sbo, plan.b.lbo) == (128, 64 * 16, 128, 128 * 16)
    plan_k, _, _ = _fp8_plan(0, k_fastest=True)
    assert (plan_k.a.sbo, plan_k.a.lbo) == (128 * 8, 128)
    plan.b.lbo = 16
    assert _simulate_fp8(plan, "B", B) > 0


def test_gemm_admits_e4m3_with_its_signature_checks():
    """One ``gemm`` call record for 16-bit and fp8 operands: e4m3 A and B with a float32 C pass;
    mixed dtypes, e5m2 (not admitted), a non-fp32 C and a wrong C shape are refused by name."""
    C, A, B = _fp8_operands()
    call = gemm(C, A, B, scope=_wg())
    assert call.op == "gemm" and call.operands["A"].dtype == FP8
    with pytest.raises(OpError, match="share one dtype .* got A float16, B float8_e4m3fn"):
        gemm(C, _t((64, 128), G.fp8_tile(64), "shared", "float16"), B, scope=_wg())
    e5 = Ax.permute(_t((128, 128), G.fp8_tile(128), "shared", "float8_e5m2", "Bs"), (1, 0))
    with pytest.raises(OpError, match="got A float8_e5m2, B float8_e5m2"):
        gemm(C, _t((64, 128), G.fp8_tile(64), "shared", "float8_e5m2"), e5, scope=_wg())
    with pytest.raises(OpError, match="C accumulates in float32, got bfloat16"):
        gemm(_t((64, 128), d_fragment(128, "tx"), "local", "bfloat16"), A, B, scope=_wg())
    with pytest.raises(OpError, match="C is 64x64, A·B is 64x128"):
        gemm(_t((64, 64), d_fragment(64, "tx"), "local", "float32"), A, B, scope=_wg())


# --- TMA maps: an extent-1 dimension gets a stride the driver accepts ----------------------------------

_ESIZE = {"float8_e4m3fn": 1, "float16": 2, "bfloat16": 2, "float32": 4}


def _driver_rules_hold(spec):
    """``cuTensorMapEncodeTiled``'s documented stride rules (cuda.h) on a spec, read literally:
    every ``globalStrides[i]`` is a nonzero multiple of 16 below 2**40, and the strides are those
    of a tensor padded dimension by dimension — ``globalStrides[0] = globalDim[0]·esize +
    padding[0]``, ``globalStrides[i] = globalStrides[i-1]·(globalDim[i] + padding[i])`` with every
    padding >= 0 (so each stride is a whole multiple of the one inside it)."""
    dims, st, esize = spec["shape"], spec["strides_bytes"], _ESIZE[spec["dtype"]]
    if any(x % 16 or not 0 < x < 2**40 for x in st) or st[0] < dims[0] * esize:
        return False
    return all(st[i] % st[i - 1] == 0 and st[i] // st[i - 1] >= dims[i] for i in range(1, len(st)))


def _tma_box(shape, dtype, region):
    """A kernel loading the box ``region`` (per dimension ``(start, stop)``) of a ``shape`` tensor
    by TMA into an unswizzled shared tile."""
    box = tuple(b - a for a, b in region)
    box_of = lambda A: A[tuple(slice(a, b) for a, b in region)]  # noqa: E731

    @Ax.kernel(name="tma_box")
    def k():
        @T.prim_func
        def k(A_: T.Buffer(shape, dtype), A_map: T.handle("tensormap")):
            bx, tx = Ax.launch(1, 128)
            A = Ax.param(A_, tensormap=A_map)
            bar = Ax.cuda.mbarrier(count=1)
            t = Ax.shared(box, dtype, name="t")
            Ax.copy(t, box_of(A), barrier=bar)
        return k
    return k


#: (shape, dtype, region, strides_bytes): an extent-1 dimension's stride is the bytes of the
#: dimension inside it (rounded up to 16: 20 fp16 elements are 40 bytes, so 48)
EXTENT_1 = [((1, 64), "float16", ((0, 1), (0, 64)), [128]),
            ((1, 20), "float16", ((0, 1), (8, 16)), [48]),
            ((2, 1, 24), "float32", ((1, 2), (0, 1), (0, 24)), [96, 96]),
            ((1, 1, 8, 40), "bfloat16", ((0, 1), (0, 1), (0, 8), (0, 40)), [80, 640, 640]),
            ((3, 1, 1, 16), FP8, ((2, 3), (0, 1), (0, 1), (0, 16)), [16, 16, 16])]


@pytest.mark.parametrize("shape,dtype,region,strides", EXTENT_1)
def test_tma_map_of_extent_1_dimensions_obeys_the_driver_rules(shape, dtype, region, strides):
    """The TMA schedule's map of a tensor with extent-1 dimensions: the packed stride for each,
    accepted by check_spec and by the driver's rules; the stride 0 the layout algebra gives such a
    dimension (what the map held before) breaks both."""
    from axe.backends.cuda.tensormap import TensorMapError, check_spec
    _, ctx = Ax.build_func(_tma_box(shape, dtype, region))
    (spec,) = ctx.tensormaps
    assert spec["shape"] == list(reversed(shape)) and spec["strides_bytes"] == strides
    check_spec(spec)
    assert _driver_rules_hold(spec)
    zero = dict(spec, strides_bytes=[0 if d == 1 else x for d, x in zip(spec["shape"][1:], strides)])
    assert not _driver_rules_hold(zero)
    with pytest.raises(TensorMapError, match="must be a positive multiple of 16"):
        check_spec(zero)


def test_check_spec_and_tiled_args_enforce_nesting():
    """A stride below the bytes of the dimension inside it is refused with the dimension named,
    by check_spec (extents known) and by tiled_args (a torch-strided tensor); a torch tensor's
    size-1 dimension of any stride gets the packed one."""
    from axe.backends.cuda.tensormap import TensorMapError, check_spec, tiled_args
    spec = {"param": "m", "tensor": "A", "dtype": "float16", "shape": [64, 8, 4], "strides_bytes": [128, 1024],
            "box": [64, 8, 1], "elem_strides": [1, 1, 1]}
    check_spec(spec)
    assert _driver_rules_hold(spec)
    with pytest.raises(TensorMapError, match=r"strides_bytes\[1\] = 1024 is below the 2048 bytes of dimension 1"):
        check_spec(dict(spec, shape=[64, 16, 4]))
    assert not _driver_rules_hold(dict(spec, shape=[64, 16, 4]))
    bare = dict(spec, shape=None, strides_bytes=None)
    with pytest.raises(TensorMapError, match="byte stride of dim 1 = 64 is below the 128 bytes of dimension 0"):
        tiled_args(bare, 1024, [4, 8, 64], [512, 32, 1], 2, "float16")
    dims, sb, _, _ = tiled_args(bare, 1024, [4, 1, 64], [64, 7, 1], 2, "float16")   # size 1, stride 7
    assert dims == [64, 1, 4] and sb == [128, 128]


# --- scale_accumulate: which scale goes with which accumulator element ------------------------------

def _int(x):
    return int(tvm.sym.Analyzer().simplify(x)) if not isinstance(x, int) else x


def _plan_pairs(D, P, scales, threads=128):
    """{(thread, D register offset): [scale memory offsets]} as the plan reads them, per thread."""
    got = {}
    for t in range(threads):
        tx = tvm.tirx.IntImm("int32", 128 + t)          # the second warpgroup of the CTA
        plan = scale_plan(scale_accumulate(D, P, scales, scope=_wg(tx)))
        assert not isinstance(plan, str), plan
        assert plan.dist.predicate is None or _int(plan.dist.predicate)
        dims = plan.dims
        loops = plan.dist.loop_dims
        for flat in range(int(np.prod([dims[i].extent for i in loops]))):
            digits = {i: _int(v) for i, v in plan.dist.thread_dims.items()}
            for i in reversed(loops):
                digits[i], flat = flat % dims[i].extent, flat // dims[i].extent
            key = (t, _int(mem_offset(D, dims, 0, digits)))
            assert key not in got, f"element {key} visited twice"
            got[key] = [_int(mem_offset(x, dims, k, digits)) for k, x in enumerate([P] + scales, start=1)]
    return got, plan


def _brute_force(D, P, scales):
    """The same map from the layouts' definitions: D's layout places element (i, j) at (tx, m);
    the same thread holds P's (i, j) in register f_P(i, j); scale k of block (b0, b1) is read at
    f_{S_k}(i // b0, j // b1)."""
    want = {}
    m, n = D.shape
    for i in range(m):
        for j in range(n):
            (c,) = D.layout.map((i, j), D.shape)
            (cp,) = P.layout.map((i, j), P.shape)
            assert cp["tx"] == c["tx"]
            offs = [cp["m"]]
            for s in scales:
                b0, b1 = m // s.shape[0], n // s.shape[1]
                (cs,) = s.layout.map((i // b0, j // b1), s.shape)
                offs.append(cs["m"] + _int(s.base))
            want[(c["tx"], c["m"])] = offs
    return want


def _kernel_operands(h=1, slot=2, wg=1, nb=5, kb=3):
    """The fp8 kernel's operands of one promotion: half h of a 64×256 accumulator, the SA slot's
    rows of warpgroup wg seen as (64, 1), and SB[nb, kb] of a (17, 56) weight-scale array."""
    acc = _t((64, 256), d_fragment(256, "tx"), "local", "float32", "acc")
    D = acc[:, h * 128:(h + 1) * 128]
    P = _t((64, 128), d_fragment(128, "tx"), "local", "float32", "part")
    sa = _t((4, 128), S[(4, 128)], "shared", "float32", "sa")
    SA = Ax.permute(sa[slot:slot + 1, wg * 64:(wg + 1) * 64], (1, 0))
    SB = _t((17, 56), S[(17, 56)], "global", "float32", "SB")[nb:nb + 1, kb:kb + 1]
    return D, P, [SA, SB]


def test_scale_accumulate_matches_brute_force_on_the_kernel_operands():
    D, P, scales = _kernel_operands()
    got, plan = _plan_pairs(D, P, scales)
    assert got == _brute_force(D, P, scales)
    assert plan.table_size == 2          # rows lane/4 and lane/4 + 8: one SA·SB product each


def test_scale_accumulate_matches_brute_force_on_other_layouts():
    """Column-major activation scales over a (64, 128) tile with 64-column weight blocks."""
    P = _t((64, 128), d_fragment(128, "tx"), "local", "float32", "part")
    SA = _t((64, 1), parse("S[(64,1):(1,1)]"), "global", "float32", "SAg")      # one scale per row
    SB = _t((1, 2), parse("S[(1,2):(2,7)]"), "shared", "float32", "SBs")        # (1, 2) at stride 7
    got, plan = _plan_pairs(P, P, [SA, SB])
    assert got == _brute_force(P, P, [SA, SB])
    assert plan.table_size == 4


def test_scale_accumulate_matches_brute_force_on_two_stacked_fragments():
    """A 128×256 accumulator of two m64n256 fragments (C_out ⊗ D fragment, as a warpgroup holding
    128 rows would) with per-row scales over 128 rows and 128×128 weight blocks: 2 × 2 column
    blocks, 4 rows per thread."""
    from axe.layout import tile
    L = tile(S[(2, 1):(1, 1)], (2, 1), d_fragment(256, "tx"), (64, 256))
    D = _t((128, 256), L, "local", "float32", "acc2")
    SA = _t((128, 1), parse("S[(128,1):(1,1)]"), "shared", "float32", "sa")
    SB = _t((1, 2), parse("S[(1,2):(1,3)]"), "global", "float32", "sb")
    got, plan = _plan_pairs(D, D, [SA, SB])
    assert got == _brute_force(D, D, [SA, SB])
    assert plan.table_size == 8


def test_scale_accumulate_matches_brute_force_on_the_staged_192_tile():
    """bn = 192: the whole 64×192 partial with SB staged per 64-column group in shared memory
    (row 3 of the (4, 3) buffer: warpgroup 1, odd slot) — 6 SA·SB products per thread."""
    D = _t((64, 192), d_fragment(192, "tx"), "local", "float32", "acc")
    P = _t((64, 192), d_fragment(192, "tx"), "local", "float32", "part")
    sa = _t((4, 128), S[(4, 128)], "shared", "float32", "sa")
    SA = Ax.permute(sa[2:3, 64:128], (1, 0))
    SB = _t((4, 3), S[(4, 3)], "shared", "float32", "sbg")[3:4, :]
    got, plan = _plan_pairs(D, P, [SA, SB])
    assert got == _brute_force(D, P, [SA, SB])
    assert plan.table_size == 6


@pytest.mark.parametrize("N", [2112, 400, 576, 7168])
def test_staged_sb_groups_pick_each_columns_block(N):
    """The kernel's staging law for bn = 192 (group g of tile n_blk reads SB block
    ``min((n_blk·192 + 64 g) // 128, NB − 1)``) against the definition, every column j < N of
    every tile: ``SB[j // 128]``; groups of 96 columns would cross blocks (the oracle can fail)."""
    nb = -(-N // 128)

    def misses(bn, group):
        bad = 0
        for n_blk in range(-(-N // bn)):
            for c in range(bn):
                j = n_blk * bn + c
                if j < N:
                    bad += min((n_blk * bn + (c // group) * group) // 128, nb - 1) != j // 128
        return bad
    assert G.gcd(192, G.PART) == 64 and misses(192, 64) == 0
    assert misses(192, 96) > 0


def test_refine_shape_nests_blocks_and_declines_otherwise():
    assert refine_shape((64, 128), [(1, 128), (64, 128)]) == ((64, 1, 128), [(64, 1, 1), (1, 1, 1)])
    assert refine_shape((64, 128), [(16, 64)]) == ((4, 16, 2, 64), [(4, 1, 2, 1)])
    why = refine_shape((64, 96), [(64, 48), (64, 32)])
    assert isinstance(why, str) and "do not nest" in why


def test_scale_accumulate_signature_checks():
    D, P, scales = _kernel_operands()
    with pytest.raises(OpError, match="does not divide"):
        scale_accumulate(D, P, [_t((64, 3), S[(64, 3)], "global", "float32")], scope=_wg())
    with pytest.raises(OpError, match="float32"):
        scale_accumulate(_t((64, 128), d_fragment(128, "tx"), "local", "bfloat16"), P, scales, scope=_wg())


# --- the kernel: builds, ptxas, PTX -------------------------------------------------------------------

#: (M, N, K, bn, cluster): ragged M, an odd number of 128-column blocks (bn=256's last half
#: skipped), K of DeepSeek-V3's projections; a square bn=128 build; CTA pairs (B multicast) with an
#: odd number of block-rows (the last pair's second CTA lies past M)
BUILDS = {"ragged_256": (1000, 2112, 7168, 256, 1), "square_128": (1024, 1024, 1024, 128, 1),
          "ragged_128": (777, 576, 1536, 128, 1), "ragged_256_c2": (777, 2112, 1536, 256, 2),
          # bn = 192 (SB staged per 64 columns): a last tile past N (400 = 2·192 + 16), CTA pairs
          "ragged_192": (777, 400, 1536, 192, 1), "ds_192_c2": (1000, 2112, 1536, 192, 2),
          # small K: one k-block (SA's map has an extent-1 dimension), and a ragged second one with pairs
          "k128": (256, 512, 128, 128, 1), "k144_c2": (300, 520, 144, 256, 2)}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request):
    M, N, K, bn, cluster = BUILDS[request.param]
    return BUILDS[request.param], G.build(M, N, K, bn, name=f"gemm_fp8_{request.param}", cluster=cluster)


def test_fp8_gemm_builds_without_spills(built):
    (M, N, K, bn, cluster), art = built
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0
    assert res["registers"] <= G.CONSUMER_REGS
    assert art.launch["dynamic_smem"] + res["static_smem"] <= 232448
    maps = {m["param"]: m for m in art.launch["tensormaps"]}
    assert maps["A_map"]["dtype"] == FP8 and maps["A_map"]["box"] == [128, 128] and maps["A_map"]["swizzle"] == 128
    assert maps["B_map"]["box"] == [128, bn // cluster]        # a pair's CTAs load half of B each
    assert art.launch["cluster"] == (None if cluster == 1 else [cluster, 1, 1])
    assert maps["SA_map"]["shape"] == [Q.scale_shapes(M, N, K)[0][1], -(-K // 128)] and maps["SA_map"]["box"] == [128, 1]


def test_fp8_gemm_tensor_maps_obey_the_driver_rules(built):
    """Every map of every build passes check_spec and the driver's documented stride rules; SA's
    k-block stride is a row of Mp fp32 scales also where there is one k-block (extent 1)."""
    from axe.backends.cuda.tensormap import check_spec
    (M, N, K, bn, cluster), art = built
    for spec in art.launch["tensormaps"]:
        check_spec(spec)
        assert _driver_rules_hold(spec), spec
    (sa,) = [m for m in art.launch["tensormaps"] if m["param"] == "SA_map"]
    assert sa["strides_bytes"] == [4 * Q.scale_shapes(M, N, K)[0][1]]


def test_fp8_gemm_ptx_holds_wgmma_e4m3_k32_and_the_promotion(built):
    (M, N, K, bn, cluster), art = built
    part_n = 192 if bn == 192 else 128      # bn = 192: one partial spans the tile
    wg = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{part_n}k32\.f32\.e4m3\.e4m3", art.ptx)
    assert wg, "no fp8 wgmma in the PTX"
    assert "wgmma.mma_async.sync.aligned.m64n256k16" not in art.ptx
    # each promotion: 64 fp32 multiply-adds per thread and 128-column half (the build flushes
    # denormals: fma.rn.ftz.f32), where there is a second k-block; the first k-block multiplies
    assert (len(re.findall(r"\bfma\.rn(\.ftz)?\.f32\b", art.ptx)) >= 64) == (K > 128)
    assert len(re.findall(r"\bmul(\.rn)?(\.ftz)?\.f32\b", art.ptx)) >= 64
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in art.ptx
    assert "stmatrix" in art.ptx
    # B multicast to both CTAs of a pair, releases on both CTAs' barriers, a cluster barrier at the end
    assert ("multicast::cluster" in art.ptx) == (cluster > 1)
    assert ("barrier.cluster.arrive" in art.ptx) == (cluster > 1)
    # a pair's waits on barriers the peer completes are bounded and inline (a lost peer reports, never hangs)
    assert ("axe_mbarrier_wait_bounded(" in art.cuda_source) == (cluster > 1)
    if cluster > 1:     # (nvcc may unroll a short k-loop: the PTX can hold a wait site more than once)
        from test_gemm_kernel import assert_call_free
        assert_call_free(art)
        assert art.cuda_source.count("axe_mbarrier_wait_bounded((") >= 2 and "%globaltimer" in art.ptx and "trap;" in art.ptx


def test_fp8_gemm_binds_the_quantizers_output(built):
    """The runtime's own argument binding and tensor-map arguments (CPU tensors) accept what
    kernels/fp8_blocks.py produces: fp8 A and B, SA (KB, Mp), SB (NB, KB), bf16 C."""
    torch = pytest.importorskip("torch")
    from axe.runtime import bind_arguments
    from axe.backends.cuda.tensormap import tiled_args
    (M, N, K, bn, cluster), art = built
    A, SA = Q.quantize_rows(torch.randn(M, K))
    B, SB = Q.quantize_blocks(torch.randn(N, K))
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    b = bind_arguments(art.launch, [A, B, SA, SB, C], device_type="cpu")
    assert b.grid == (G.SMS, 1, 1) and b.block == (G.THREADS, 1, 1)
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    for param, t in (("A_map", A), ("B_map", B), ("SA_map", SA), ("C_map", C)):
        dims, strides, box, _ = tiled_args(specs[param], t.data_ptr(), tuple(t.shape), t.stride(),
                                           t.element_size(), str(t.dtype).removeprefix("torch."))
        assert dims == list(reversed(t.shape)) and strides == [t.shape[1] * t.element_size()], param


def test_fp8_gemm_refuses_bad_sizes():
    with pytest.raises(ValueError, match="bn must be"):
        G.make(1024, 1024, 1024, bn=160)
    with pytest.raises(ValueError, match="multiple of 8"):
        G.make(1024, 1020, 1024)
    with pytest.raises(ValueError, match="smaller than one"):
        G.make(64, 1024, 1024)
    with pytest.raises(ValueError, match="smaller than one 128x128 tile and one 128-wide k-block"):
        G.make(1024, 1024, 64)
    G.make(1024, 1024, 128)             # one k-block: SA's map has an extent-1 dimension, built


# --- stream-K: the piece assignment (a CPU model of the kernel's loops), builds, PTX ----------------

def _sk_violations(sk, tiles):
    """Where the stream-K split ``sk`` of ``tiles`` tiles breaks what the kernel relies on, as a list
    of lines (empty: none), walking its loops as :meth:`kernels.gemm_fp8.StreamK.pieces` models them:
    CTA p first takes whole tiles p, p + ctas, ... for ``dp_waves`` waves (the kernel's
    ``TileSchedule.tile``), then its stream-K pieces.  Every (tile, k-block) is computed exactly once;
    a tile is in at most two pieces, each of at least two k-blocks; a split tile's head (k-blocks
    from 0) is the last piece of some CTA p, which waits on CTA p + 1's flag, and its tail (to the
    last k-block) is the first stream-K piece of CTA p + 1 (computed before that CTA waits on
    anything), starting where the head ends; no piece lies strictly inside a tile."""
    k, ctas = sk.k_iters, sk.ctas
    sched = Ax.TileSchedule(1, tiles, ctas)          # only tile(): CTA p's it-th tile is p + it * ctas
    bad, pieces = [], {}
    for p in range(ctas):
        for it in range(sk.dp_waves):
            pieces.setdefault(sched.tile(p, it), []).append((0, k, p, "whole"))
        mine = sk.pieces(p)
        for n, (t, k0, k1) in enumerate(mine):
            role = "head" if k0 == 0 and k1 < k else "tail" if k0 > 0 and k1 == k else "whole" if (k0, k1) == (0, k) else None
            if role is None:
                bad.append(f"CTA {p}: piece [{k0}, {k1}) lies inside tile {t}")
            elif role == "head" and n != len(mine) - 1 or role == "tail" and n != 0:
                bad.append(f"CTA {p}: {role} of tile {t} is its piece {n} of {len(mine)}")
            pieces.setdefault(t, []).append((k0, k1, p, role))
    if sorted(pieces) != list(range(tiles)):
        bad.append(f"tiles computed: {len(pieces)} distinct of {tiles}, range {min(pieces)}..{max(pieces)}")
    for t, ps in sorted(pieces.items()):
        ps.sort()
        if ps[0][0] != 0 or ps[-1][1] != k or any(a[1] != b[0] for a, b in zip(ps, ps[1:])):
            bad.append(f"tile {t}: pieces {ps} do not cover [0, {k}) exactly once")
        if len(ps) > 2 or any(k1 - k0 < 2 for k0, k1, _, _ in ps):
            bad.append(f"tile {t}: pieces {ps} (more than two, or one of fewer than 2 k-blocks)")
        if len(ps) == 2 and [(r, p - ps[0][2]) for _, _, p, r in ps] != [("head", 0), ("tail", 1)]:
            bad.append(f"tile {t}: pieces {ps} are not CTA p's head and CTA p + 1's tail")
    return bad


def _sk_cases():
    """(tiles, k_iters, ctas): the GPU cases' and the benchmark's stream-K shapes on 132 CTAs, and
    small grids — exact multiples of the CTAs, one tile more or less, the fewest k-blocks (4)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
    import cases_gemm_fp8 as cases
    bench = _bench_module()
    shapes = [cases.SHAPES[n][:4] for n in sorted(cases.STREAM_K)]
    shapes += [sh[3:] + (v[0],) for sh in bench.shapes() for v in bench.VARIANTS if v[2] and bench.built_for(*sh[3:5], *v)]
    out = [(-(-m // G.BM) * -(-n // bn), -(-k // G.BK), G.SMS) for m, n, k, bn in shapes]
    out += [(tiles, k, ctas) for ctas in (8, 10, 132) for k in (4, 5, 7, 16, 33)
            for tiles in (ctas, ctas + 1, 2 * ctas - 1, 2 * ctas, 2 * ctas + 3, 5 * ctas + ctas // 2)]
    return out


def test_stream_k_pieces_cover_every_k_block_once():
    """The split the kernel walks (StreamK's bound, tiles and piece, as its loops call them), for
    every GPU case, every benchmark build and small grids: see :func:`_sk_violations`."""
    cases = _sk_cases()
    assert len(cases) > 100
    for tiles, k, ctas in cases:
        sk = G.StreamK(tiles, k, ctas)
        assert sk.dp_tiles + sk.units // k == tiles and 0 <= sk.dp_waves
        assert _sk_violations(sk, tiles) == [], (tiles, k, ctas)


def test_stream_k_model_catches_a_wrong_split():
    """The model can fail: an even split without stream_k_bound's shift off a tile's second and
    last k-blocks leaves one-k-block pieces, and a tile range one short leaves k-blocks undone."""
    class Even(G.StreamK):
        def bound(self, p, select=None):
            return p * self.units // self.ctas

    class Short(G.StreamK):
        def tiles(self, b0, b1):
            first, stop = super().tiles(b0, b1)
            return first, stop - 1
    assert any("fewer than 2" in line for line in _sk_violations(Even(200, 11, 132), 200))
    assert any("exactly once" in line for line in _sk_violations(Short(200, 11, 132), 200))


def test_stream_k_refusals_name_the_condition():
    with pytest.raises(ValueError, match="stream_k and split_k are built for bn 64, 128 or 256 without clusters .*, got bn=192"):
        G.make(1000, 6200, 1536, bn=192, stream_k=True)
    with pytest.raises(ValueError, match="without clusters .*, got bn=256, cluster=2"):
        G.make(1000, 6200, 1536, bn=256, cluster=2, stream_k=True)
    with pytest.raises(ValueError, match="at least 4 k-blocks .* got 3 k-blocks"):
        G.make(1000, 6200, 384, bn=256, stream_k=True)
    with pytest.raises(ValueError, match="at least one tile per CTA .132., got 4 k-blocks and 64 tiles"):
        G.make(1024, 1024, 512, bn=128, stream_k=True)


def test_stream_k_producer_loads_the_stream_k_blocks():
    """The producer has two loops of A loads with stream_k=True (the whole-tile waves, then the
    stream-K k-blocks) and one without."""
    func, _ = Ax.build_func(G.make(1000, 6200, 1536, 256, stream_k=True))
    assert func.script().count("address_of(A_map)") == 2
    func, _ = Ax.build_func(G.make(1000, 6200, 1536, 256))
    assert func.script().count("address_of(A_map)") == 1


#: stream-K builds (M, N, K, bn) on 132 CTAs: the GPU cases of 2.3 waves with a ragged last k-block
#: (bn 128) and of 1.5 waves with the last tiles' second half past N (bn 256), and a benchmark shape
#: (DeepSeek-V3's 7168x2048 at M = 4096) that spilled 24 B while heads and whole tiles had one
#: epilogue each (each store site's hoisted stmatrix addresses cost consumer registers)
SK_BUILDS = {"sk_b128_w23": (2000, 2392, 1008, 128), "sk_b256_w15": (1000, 6200, 1536, 256),
             "sk_ds_7168x2048": (4096, 7168, 2048, 256)}


@pytest.fixture(scope="module", params=sorted(SK_BUILDS))
def sk_built(request):
    M, N, K, bn = SK_BUILDS[request.param]
    return SK_BUILDS[request.param], G.build(M, N, K, bn, name=f"gemm_fp8_{request.param}", stream_k=True)


def test_stream_k_builds_call_free_with_the_flag_wait_and_workspace(sk_built):
    """ptxas keeps the wgmma asynchronous and setmaxnreg honoured (no C7510/C7507/C7508), nothing
    spills, no stack, no call; the flag wait is inline (%globaltimer, the report, a trap); the
    flags are set and taken with release/acquire at GPU scope; the workspace and flags are the
    trailing scratch parameters, and each consumer thread stores and loads its bn / 2 fp32 of the
    64×bn partial as bn / 4 8-byte vectors."""
    from test_gemm_kernel import assert_bounded_waits, assert_call_free
    (M, N, K, bn), art = sk_built
    assert_call_free(art)
    assert assert_bounded_waits(art, "axe_flag_take") == 1
    assert "st.release.gpu.global.b32" in art.ptx and "ld.acquire.gpu.global.b32" in art.ptx
    args = {a["name"]: a for a in art.launch["args"]}
    assert [a["name"] for a in art.launch["args"]][-2:] == ["W_", "F_"]
    assert args["W_"]["scratch"] and args["F_"]["scratch"] and not args["C_"].get("scratch")
    assert args["W_"]["shape"] == [G.SMS * 2 * G.HALF, bn] and args["F_"]["shape"] == [2 * G.SMS]
    assert art.ptx.count("st.global.v2.u32") == bn // 4 and art.ptx.count("ld.global.v2.u32") == bn // 4
    assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3", art.ptx)


def test_stream_k_build_binds_with_its_scratch(sk_built):
    """The launcher's own scratch (zero-filled W and F appended to the caller's five tensors) binds
    against the artifact's signature, with the grid of 132 persistent CTAs."""
    torch = pytest.importorskip("torch")
    import axe.runtime as rt
    from axe.runtime import bind_arguments
    (M, N, K, bn), art = sk_built
    A, SA = Q.quantize_rows(torch.randn(M, K))
    B, SB = Q.quantize_blocks(torch.randn(N, K))
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    args = rt.Kernel(art)._with_scratch((A, B, SA, SB, C), 0, 0, device="cpu")
    assert len(args) == 7 and not args[5].any() and not args[6].any()
    b = bind_arguments(art.launch, list(args), device_type="cpu")
    assert b.grid == (G.SMS, 1, 1) and b.block == (G.THREADS, 1, 1)


def test_stream_k_leaves_the_default_build_without_workspace():
    """Without stream-K the workspace and flags leave the signature and no flag or workspace code
    is emitted."""
    art = G.build(2000, 2392, 1008, 128, name="gemm_fp8_sk_off")
    assert [a["name"] for a in art.launch["args"]] == ["A_", "B_", "SA_", "SB_", "C_"]
    assert "ld.acquire.gpu" not in art.ptx and "st.global.v2" not in art.ptx and "axe_flag" not in art.cuda_source


def test_reference_dequantizes_blocks():
    """The torch reference against an explicit loop over scale blocks (numpy, float64)."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    M, N, K = 130, 136, 272
    A = torch.randn(M, K, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(N, K, generator=g).to(torch.float8_e4m3fn)
    (kb, mp), (nb, _) = Q.scale_shapes(M, N, K)
    assert (kb, mp, nb) == (3, 132, 2)
    SA = torch.rand(kb, mp, generator=g) + 0.5
    SB = torch.rand(nb, kb, generator=g) + 0.5
    C = Q.reference(A, B, SA, SB)["C"].numpy()
    a, b, sa, sb = A.float().numpy(), B.float().numpy(), SA.numpy(), SB.numpy()
    want = np.zeros((M, N), np.float64)
    for k0 in range(kb):
        ks = slice(k0 * 128, (k0 + 1) * 128)
        part = a[:, ks].astype(np.float64) @ b[:, ks].T.astype(np.float64)
        want += part * sa[k0, :M, None] * np.repeat(sb[:, k0], 128)[None, :N]
    assert np.allclose(C, want, rtol=1e-5, atol=1e-3)


def test_quantizers_hold_blocks_within_e4m3():
    """Each block's largest element maps to ±448 (e4m3's largest finite); dequantized values are
    within e4m3's half-ulp (2^-4 relative) of the input."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(70, 300, generator=g) * torch.logspace(-3, 3, 300)[None, :]
    w = torch.randn(200, 300, generator=g)
    xq, sa = Q.quantize_rows(x)
    wq, sb = Q.quantize_blocks(w)
    assert sa.shape == (3, 72) and sb.shape == (2, 3) and xq.dtype == torch.float8_e4m3fn
    assert torch.all(sa[:, 70:] == 0)
    a, b = Q.dequantize(xq, wq, sa, sb)
    assert torch.all((a - x).abs() <= x.abs() * 2 ** -4 + sa[:, :70].t().repeat_interleave(128, 1)[:, :300] * 2 ** -9)
    assert torch.all((b - w).abs() <= w.abs() * 2 ** -4 + sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :300] * 2 ** -9)
    assert xq.float().abs().amax() == 448


# --- the benchmark's CPU-side pieces ------------------------------------------------------------------

def _bench_module():
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_gemm_fp8", os.path.join(root, "benchmarks", "gemm_fp8.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("M,K", [(256, 1024), (250, 1408)])
def test_cublas_scale_views_meet_atens_blockwise_conditions(M, K):
    """ATen's is_blockwise_1x128_scaling (scale_a (M, K/128), strides (1, M)) and
    is_blockwise_128x128_scaling on scale_b.t() ((N/128, K/128), row stride K/128 or K/128 rounded
    up to 4, unit column stride), re-typed from ScaledBlas.cpp as the oracle."""
    torch = pytest.importorskip("torch")
    bench = _bench_module()
    N = 384
    A, SA = Q.quantize_rows(torch.randn(M, K))
    W, SB = Q.quantize_blocks(torch.randn(N, K))
    sa, sb = bench.Cublas.views(A, SA, SB)
    kb, nb = -(-K // 128), -(-N // 128)
    assert sa.shape == (M, kb) and sa.stride() == (1, M)
    assert torch.equal(sa, SA[:, :M].t())
    st = sb.t()
    assert st.shape == (nb, kb) and st.stride()[1] == 1 and st.stride()[0] in (kb, -(-kb // 4) * 4)
    assert torch.equal(st, SB)


def test_benchmark_summary_and_table_from_rows():
    bench = _bench_module()
    rows = [{"set": "mlp", "model": "m", "proj": "up", "M": 8192, "N": 4096, "K": 4096,
             "tflops": {"axe": 1000.0, "cublas": 1100.0, "triton": 900.0},
             "correct": {"axe": True, "cublas": True, "triton": False}, "best_peer": "cublas", "axe_vs_best": 1000 / 1100},
            {"set": "deepseek", "model": "DeepSeek-V3", "proj": "2112x7168", "M": 4096, "N": 2112, "K": 7168,
             "tflops": {}, "correct": {}, "errors": {"axe_bn128": "x"}}]
    s = bench.summarize(rows)
    assert s["mlp"]["compared"] == 1 and s["mlp"]["meets_0.95"] == 0 and s["mlp"]["best_peer_counts"]["cublas"] == 1
    assert s["deepseek"]["compared"] == 0
    text = bench.table(rows)
    assert "900!" in text and "0.909" in text
    names = {bench.artifact_name(*sh[3:], *v) for sh in bench.shapes() for v in bench.VARIANTS
             if bench.built_for(*sh[3:5], *v)}
    # bn=192: 15 pairs, N=2112 alone too; stream-K (bn=256): the 17 shapes whose last wave leaves > 2% idle
    assert len(bench.shapes()) == 22 and len(names) == 88 + 16 + 17
    assert sum(n.endswith("_bn256_sk") for n in names) == 17


def test_counted_columns_against_brute_force():
    """The wave model against dealing tiles round-robin to 132 SMs one by one."""
    bench = _bench_module()
    for m, n, bn in [(4096, 2112, 256), (4096, 2112, 192), (8192, 4096, 256), (777, 400, 192)]:
        per_sm = [0] * 132
        for t in range(-(-m // 128) * -(-n // bn)):
            per_sm[t % 132] += bn
        assert bench.counted_columns(m, n, bn) == max(per_sm)
    assert bench.built_for(4096, 2112, 192, 1) and not bench.built_for(4096, 7168, 192, 2)
    # stream-K: 896 tiles in 7 waves idle 3% of the slots, 3072 in 24 waves 3%, 13312 in 101 waves 0.2%
    assert bench.built_for(4096, 7168, 256, 1, True) and bench.built_for(8192, 12288, 256, 1, True)
    assert not bench.built_for(8192, 53248, 256, 1, True)
    assert not bench.built_for(4096, 7168, 128, 1, True) and not bench.built_for(4096, 7168, 256, 2, True)
    assert bench.variant_name(256, 1, True) == "bn256_sk" and bench.artifact_name(1, 2, 3, 256) == "gemm_fp8_1x2x3_bn256"
    assert bench.GROUP == G.GROUP and bench.variant_name(256, 2, False, bench.GROUP) == "bn256_c2"
    assert bench.artifact_name(1, 2, 3, 256, 1, False, 8) == "gemm_fp8_1x2x3_bn256_g8"


def test_benchmark_control_flow_on_cpu(tmp_path, monkeypatch):
    """benchmarks/gemm_fp8.py end to end on CPU tensors with stand-in axe artifacts (the
    reference, rounded to bf16) for bn=128 and for the stream-K build, none for the other variants:
    the row records the missing artifacts and every unavailable peer's error, the right output
    passes the check, the faster stand-in (stream-K, where 3 "SMs" leave its 4 tiles a partial
    second wave) is reported as axe's figure, and the JSON and table are written."""
    torch = pytest.importorskip("torch")
    import json

    import axe.runtime as rt
    bench = _bench_module()
    timed = {}      # the stand-in kernel that ran last sets its time
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "SMS", 3)
    monkeypatch.setattr(bench, "bench", lambda fn: (fn(), timed.pop("ms", 1.0))[1])
    monkeypatch.setattr(bench, "shapes", lambda: [("mlp", "toy", "up", 256, 384, 512),
                                                  ("deepseek", "DeepSeek-V3", "256x384", 128, 256, 384)])

    def load(path):
        if not path.endswith(("_bn128", "_bn256_sk")):
            raise FileNotFoundError(path)

        def kern(A, W, SA, SB, C):
            C.copy_(Q.reference(A, W, SA, SB)["C"].to(C.dtype))
            timed["ms"] = 0.5 if path.endswith("_sk") else 1.0
        return kern
    monkeypatch.setattr(rt, "load", load)
    out = tmp_path / "r.json"
    assert bench.main(["--json", str(out), "--wheels", str(tmp_path), "--artifacts", str(tmp_path)]) == 0
    res = json.loads(out.read_text())
    assert [r["M"] for r in res["figures"]] == [256, 128]
    # 2 x 2 tiles of 256 on 3 SMs: a partial second wave (stream-K built); 1 x 1: fewer tiles than SMs
    assert [r["axe_config"] for r in res["figures"]] == ["axe_bn256_sk", "axe_bn128"]
    assert res["figures"][0]["correct"]["axe_bn256_sk"] and "axe_bn256_sk" not in res["figures"][1]["ms"]
    for r in res["figures"]:
        assert r["correct"]["axe_bn128"] and r["rel_err"]["axe"] < 4e-3
        assert {"axe_bn256", "axe_bn128_c2", "axe_bn256_c2"} <= set(r["errors"])
        assert "deepgemm" in r["errors"] and "triton" in r["errors"]
        assert "cublas" in r["errors"] or r["correct"].get("cublas")
    # --rounds: axe's chosen variant and the peers timed again round robin, the figure their median
    timed.clear()
    out2 = tmp_path / "r2.json"
    assert bench.main(["--json", str(out2), "--wheels", str(tmp_path), "--artifacts", str(tmp_path),
                       "--rounds", "3"]) == 0
    first = json.loads(out2.read_text())["figures"][0]
    assert first["ms_rounds"]["axe"] == [0.5, 0.5, 0.5] and first["ms"]["axe"] == 0.5
    assert set(first["ms_rounds"]) == {"axe"} | {p for p in ("cublas", "triton") if first["correct"].get(p)}
