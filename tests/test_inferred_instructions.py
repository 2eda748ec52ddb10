"""Inference rule 3 (issue 27 items 2 and 4): schedules propose instruction layouts — ldmatrix /
stmatrix atoms with TMA's swizzle, wgmma fragments with the K-major swizzled operands — accepted
only where the call then dispatches to that instruction.

Checked against independent oracles: the PTX and launch metadata of the hand-written twins
(kernels/transpose.py, kernels/inferred/hand_gemm.py), the ldmatrix schedule's own check, and a
brute-force enumeration of which thread holds each element."""

import collections
import os
import re

import pytest

from axe.layout import S, Swizzle, SwizzledLayout, parse, tile
from axe.layout.infer import atom_tilings, tma_rows
from axe.layout.layout import all_indices

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules.ldmatrix import atom  # noqa: E402
from axe.backends.cuda.schedules.wgmma import d_fragment  # noqa: E402

INSTRUCTIONS = r"(?:ldmatrix|stmatrix|wgmma\.mma_async|cp\.async\.bulk\.tensor)[\w.:]*"


def _ptx_counts(ptx):
    return collections.Counter(re.findall(INSTRUCTIONS, ptx))


# --- the constructions, by brute force ------------------------------------------------------------

@pytest.mark.parametrize("shape,warps", [((64, 64), 4), ((32, 64), 4), ((16, 32), 1), ((64, 16), 2), ((8, 64), 8)])
def test_atom_tilings_place_whole_atoms_on_warps(shape, warps):
    """Each tiling holds every element once; a warp's 32 lanes hold whole 8×8 atoms, lane 4r+c
    holding row r, columns 2c and 2c+1 of each (the ldmatrix fragment); warps hold equal shares."""
    got = atom_tilings(shape, atom("tx"), (8, 8), warps)
    assert got
    for L in got:
        held, per_warp = {}, collections.Counter()
        for u in all_indices(shape):
            (c,) = L.map(u, shape)
            key = (c["tx"], c["m"])
            assert key not in held
            held[key] = u
            lane, (r, col) = c["tx"] % 32, (u[0] % 8, u[1] % 8)
            assert (lane // 4, 2 * (lane % 4) + c["m"] % 2) == (r, col), (L, u, c)
            per_warp[c["tx"] // 32] += 1
        assert set(per_warp) == set(range(warps)) and len(set(per_warp.values())) == 1


def test_tma_rows_is_tmas_swizzle_of_boxes_side_by_side():
    """Element (i, j) sits in box j // w (w columns of one swizzle width), row i of it; its byte
    address is TMA's swizzle of that (CUTLASS ``Swizzle<b,4,3>`` on bytes: 16-byte chunk bits
    XOR the 128-byte line bits), and the tile maps one-to-one onto its storage."""
    for shape, eb, sw in (((64, 64), 2, 128), ((64, 128), 2, 128), ((32, 64), 2, 64), ((16, 32), 4, 32)):
        L = tma_rows(shape, eb, sw)
        w, b = sw // eb, (sw // 16).bit_length() - 1
        seen = set()
        for i, j in all_indices(shape):
            (c,) = L.map((i, j), shape)
            byte = ((j // w) * shape[0] * w + i * w + j % w) * eb
            assert c["m"] * eb == byte ^ (((byte >> 7) & ((1 << b) - 1)) << 4), (shape, sw, (i, j))
            seen.add(c["m"])
        assert seen == set(range(shape[0] * shape[1]))
    assert tma_rows((64, 40), 2, 128) is None


# --- kernels --------------------------------------------------------------------------------------

def _fixed(k):
    _, ctx = Ax.build_func(k)
    return {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}, ctx


def test_the_inferred_transpose_builds_to_the_hand_kernels_instructions():
    """ldmatrix.x4.trans reads the TMA-loaded tile, stmatrix.x4 writes the other, as in
    kernels/transpose.py: the same instruction counts in the PTX, no per-element shared loads or
    stores, the same TMA swizzle in launch.json, the hand kernel's layouts."""
    import kernels.inferred.transpose as inferred
    import kernels.transpose as hand
    a, b = Ax.compile_kernel(inferred.transpose), Ax.compile_kernel(hand.transpose)
    got, want = _ptx_counts(a.ptx), _ptx_counts(b.ptx)
    assert got == want
    assert got["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"] > 0
    assert any(k.startswith("stmatrix.sync.aligned.m8n8.x4") for k in got)
    assert not re.search(r"\b(ld|st)\.shared\.(u|b|f)16\b", a.ptx)
    swz = lambda art: sorted((m["param"], m["swizzle"], tuple(m["box"])) for m in art.launch["tensormaps"])  # noqa: E731
    assert swz(a) == swz(b) and all(s == 128 for _, s, _ in swz(a))
    assert [r.chosen for r in a.records] == [r.chosen for r in b.records] == ["tma", "ldmatrix", "stmatrix", "tma_store"]
    fixed, _ = _fixed(inferred.transpose)
    assert fixed["tile"].layout == fixed["out"].layout == hand.SMEM
    assert fixed["R"].layout == tile(parse("S[(4,2,8):(1@tx,8,1)]"), (8, 8), atom("tx"), (8, 8))


def test_the_inferred_gemm_builds_to_the_hand_twins_instructions():
    """Every tile of kernels/inferred/gemm.py is inferred: the accumulator is wgmma's fragment, As
    and Bs the K-major 128-byte swizzle; PTX (wgmma.m64n128k16, TMA) and tensor maps as the twin's."""
    import kernels.inferred.gemm as inferred
    import kernels.inferred.hand_gemm as hand
    fixed, _ = _fixed(inferred.gemm)
    assert fixed["acc"].layout == d_fragment(hand.BN, "tx")
    assert fixed["As"].layout == hand.SMEM_A and fixed["Bs"].layout == hand.SMEM_B
    assert all(f.rule.startswith("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") for f in fixed.values())
    a, b = Ax.compile_kernel(inferred.gemm), Ax.compile_kernel(hand.gemm)
    got = _ptx_counts(a.ptx)
    assert got == _ptx_counts(b.ptx) and got["wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"] > 0
    assert a.launch["tensormaps"] == b.launch["tensormaps"]
    assert [r.chosen for r in a.records] == [r.chosen for r in b.records]


def test_explain_names_the_instruction_that_fixed_each_layout():
    import kernels.inferred.transpose as m
    text = Ax.explain(m.transpose)
    lines = {ln.split("[")[0].strip(): ln for ln in text.split("\n\n")[1].splitlines()[1:]}
    assert re.search(r"\(ldmatrix\.x4\.trans atom: copy at \S+transpose\.py:\d+, as dst, with src tile\.T\)", lines["R"])
    assert "16-byte rows of ldmatrix.x4.trans: copy at" in lines["tile"]
    assert "16-byte rows of stmatrix.x4: copy at" in lines["out"]


def _kernel(name, body, shape=(64, 64), dtype="float16", threads=128):
    @Ax.kernel(name=name)
    def k():
        @T.prim_func
        def k(A_: T.Buffer(shape, dtype), B_: T.Buffer(shape, dtype)):
            _bx, _tx = Ax.launch(1, threads)
            body(Ax.param(A_), Ax.param(B_))
        return k
    return k


def _through_shared(layout):
    """A kernel body: A to a shared tile declared ``layout``, read into an open register tile r,
    r stored to B."""
    def body(A, B):
        s = Ax.shared((64, 64), "float16", layout, name="s")
        r = Ax.registers((64, 64), "float16", name="r")
        Ax.copy(s, A)
        Ax.sync()
        Ax.copy(r, s)
        Ax.copy(B, r)
    return body


def test_a_proposal_is_accepted_only_where_the_copy_dispatches_to_it():
    """A declared shared tile whose swizzle moves 2-element units: no ldmatrix row is 16
    contiguous bytes, so the schedule declines the atom and the register tile keeps the vector
    rule; the same kernel with a plain tile takes the atom, and dispatch chooses ldmatrix."""
    fixed, ctx = _fixed(_kernel("odd_rows", _through_shared(SwizzledLayout(S[(64, 64)], Swizzle(3, 1, 3)))))
    assert "atom" not in fixed["r"].rule and fixed["r"].rule.startswith("16-byte vectors")
    assert "ldmatrix" not in [r.chosen for r in ctx.records]
    fixed, ctx = _fixed(_kernel("plain_rows", _through_shared(S[(64, 64)])))
    assert fixed["r"].rule == "ldmatrix.x4 atom" and "ldmatrix" in [r.chosen for r in ctx.records]


def test_two_proposals_that_conflict_name_both_operators_and_both_layouts():
    """r is read by ldmatrix in the CTA's 4 warps (atoms over warps) and written by stmatrix in
    warp 0 alone (every atom in one warp): neither layout serves the other copy."""
    def body(A, B):
        s = Ax.shared((64, 64), "float16", S[(64, 64)], name="s")
        o = Ax.shared((64, 64), "float16", S[(64, 64)], name="o")
        r = Ax.registers((64, 64), "float16", name="r")
        Ax.copy(s, A)
        Ax.sync()
        Ax.copy(r, s)
        with Ax.warps(0, 1):
            Ax.copy(o, r)
        Ax.sync()
        Ax.copy(B, o)
    with pytest.raises(Ax.KernelError) as err:
        Ax.build_func(_kernel("clash_atoms", body))
    msg = str(err.value)
    four, one = atom_tilings((64, 64), atom("tx"), (8, 8), 4)[0], atom_tilings((64, 64), atom("tx"), (8, 8), 1)[0]
    assert "tile r[64, 64]" in msg and msg.count("copy at") == 2
    assert str(four) in msg and str(one) in msg
    assert "ldmatrix.x4 atom" in msg and "stmatrix.x4 atom" in msg


# --- property: random chains through shared memory ------------------------------------------------

def _holders(L, shape, u):
    return {c["tx"] for c in L.map(u, shape)}


def _is_atom_tiling(L, shape):
    """Brute force: each element held once, by lane 4r + c/2 of its warp, in a register of
    parity c%2, where (r, c) is its place in its 8×8 atom (the ldmatrix fragment)."""
    seen = set()
    for u in all_indices(shape):
        (c,) = L.map(u, shape)
        if (c["tx"], c["m"]) in seen:
            return False
        seen.add((c["tx"], c["m"]))
        lane = c["tx"] % 32
        if (lane // 4, 2 * (lane % 4) + c["m"] % 2) != (u[0] % 8, u[1] % 8):
            return False
    return True


def _random_chain(rng, i):
    """A kernel: x (registers, open or declared) from global, through a shared tile s (open or
    declared plain; written from x or loaded from global) into an open y (through s's transposed
    view when square), z = y + x, a row sum of z broadcast back (only where z's rows can stay in
    one warp: z's layout is fixed before the reduce by the chain's copies, and a row spread over
    warps has no reduce schedule that keeps the other dim on threads; the reduction rule's own
    random chains are in ``test_random_chains_through_mma_sync_and_reductions_infer_what_they_claim``),
    the result stored directly or through an open shared tile."""
    from axe.layout.infer import vector_layout
    rows, cols = rng.choice((16, 32, 64)), rng.choice((16, 32, 64))
    threads = rng.choice((32, 64, 128))
    trans = rows == cols and rng.random() < 0.5
    warps = threads // 32
    choices = [None, vector_layout((rows, cols), 2, threads)] + atom_tilings((rows, cols), atom("tx"), (8, 8), warps)
    x_layout = rng.choice(choices)
    s_layout = rng.choice((Ax.INFER, S[(rows, cols)]))
    s_from_x, out_shared = rng.random() < 0.5, rng.random() < 0.5
    bands = atom_tilings((rows, cols), atom("tx"), (8, 8), warps)[:1] if (rows // 8) % warps == 0 else []
    reduce = bool(bands) and (x_layout is None or x_layout in bands)

    def body(A, B):
        x = Ax.registers((rows, cols), "float16", x_layout, name="x")
        s = Ax.shared((rows, cols), "float16", s_layout, name="s")
        y = Ax.registers((rows, cols), "float16", name="y")
        z = Ax.registers((rows, cols), "float16", name="z")
        rs = Ax.registers((rows, 1), "float16", name="rs") if reduce else None
        Ax.copy(x, A)
        Ax.copy(s, x if s_from_x else A)
        Ax.sync()
        Ax.copy(y, Ax.permute(s, (1, 0)) if trans else s)
        Ax.elementwise(z, lambda a, b: a + b, y, x)
        if reduce:
            Ax.reduce(rs, z, "sum", dims=1)
            Ax.elementwise(z, lambda a, b: a - b, z, rs)
        if out_shared:
            o = Ax.shared((rows, cols), "float16", Ax.INFER, name="o")
            Ax.sync()
            Ax.copy(o, z)
            Ax.sync()
            Ax.copy(B, o)
        else:
            Ax.copy(B, z)
    return _kernel(f"chain_smem{i}", body, (rows, cols), threads=threads)


def test_random_chains_through_shared_memory_infer_what_they_claim():
    """Brute force over random kernels: every elementwise reads its register sources in place
    (each holder of a dst element holds the source element it reads); every register tile an
    instruction fixed is an atom tiling and its copy dispatched to ldmatrix/stmatrix; every shared
    tile an instruction fixed serves 16-byte rows without bank conflicts."""
    import random

    from axe.layout.broadcast import broadcast_index
    from axe.layout.swizzle_search import cost, ldmatrix_accesses, storage_offsets
    rng = random.Random(11)
    claimed = 0
    for i in range(12):
        fixed, ctx = _fixed(_random_chain(rng, i))
        by_name = {r.call.operands[k].name: r for r in ctx.records if r.call.op == "copy" for k in ("dst", "src")}
        for rec in ctx.records:
            if rec.call.op != "elementwise":
                continue
            dst, *srcs = rec.call.operands.values()
            n = tuple(dst.shape)
            for s in srcs:
                assert all(_holders(dst.layout, n, u) <= _holders(s.layout, tuple(s.shape), broadcast_index(u, s.shape))
                           for u in all_indices(n)), rec.format()
        for name, f in fixed.items():
            if not f.instruction:
                continue
            claimed += 1
            v = next(t for t in ctx.infer.tiles.values() if t.name == name)
            if v.mem == "local":
                assert _is_atom_tiling(f.layout, v.shape), (name, f.describe())
                assert by_name[name].chosen in ("ldmatrix", "stmatrix") or any(
                    r.chosen in ("ldmatrix", "stmatrix") for r in ctx.records if r.call.op == "copy"
                    and name in {t.name for t in r.call.operands.values()}), (name, f.describe())
            else:
                offs = storage_offsets(f.layout, v.shape)
                assert cost(ldmatrix_accesses(v.shape), offs.__getitem__, 2).conflicts == 0, (name, f.describe())
    assert claimed >= 6          # the chains do exercise the instruction rule


def test_the_inferred_register_a_gemm_is_its_hand_twin():
    """kernels/inferred/gemm_rs.py against tests/gpu/_kernels_gemm_ops.wgmma_tile(a_regs=True):
    wgmma fixes acc, Ar (the A fragment tiling) and Bs; ldmatrix then fixes As; the layouts are
    the twin's declared ones, and the PTX has the same ldmatrix, wgmma and TMA instructions."""
    import importlib.util
    import kernels.inferred.gemm_rs as m
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu", "_kernels_gemm_ops.py")
    spec = importlib.util.spec_from_file_location("_kernels_gemm_ops", path)
    G = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(G)
    twin = G.wgmma_tile(b_major="K", K=64, N=128, a_regs=True)
    fixed, _ = _fixed(m.gemm_rs)
    _, ctx = Ax.build_func(twin)
    declared = {t.name: t.layout for r in ctx.records for t in r.call.operands.values()}
    for name in ("acc", "Ar", "As", "Bs"):
        assert fixed[name].layout == declared[name], name
    assert fixed["Ar"].rule.endswith("A fragment") and fixed["As"].rule == "16-byte rows of ldmatrix.x4"
    a, b = Ax.compile_kernel(m.gemm_rs), Ax.compile_kernel(twin)
    assert _ptx_counts(a.ptx) == _ptx_counts(b.ptx)
    assert [r.chosen for r in a.records] == [r.chosen for r in b.records] == ["tma", "tma", "ldmatrix", "wgmma", "vector"]


# --- property: random chains through mma.sync and reductions ---------------------------------------

def _mma_chain(rng, i):
    """A one-warp kernel: A (m×k) and Bᵀ (n×k) into open registers Ar, Br — straight from global or
    through open shared tiles and ldmatrix (Br through its (N, K) view) — an open acc = Ar·Br by
    mma.sync, then maybe a row sum of acc broadcast back, the result stored."""
    m, n, k = rng.choice((16, 32)), rng.choice((8, 16, 32)), rng.choice((16, 32))
    via_shared, reduce = rng.random() < 0.5, rng.random() < 0.5

    @Ax.kernel(name=f"mma_chain{i}")
    def kern():
        @T.prim_func
        def kern(A_: T.Buffer((m, k), "float16"), B_: T.Buffer((n, k), "float16"), C_: T.Buffer((m, n), "float32")):
            _bx, _tx = Ax.launch(1, 32)
            A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
            Ar = Ax.registers((m, k), "float16", name="Ar")
            Br = Ax.registers((k, n), "float16", name="Br")
            acc = Ax.registers((m, n), "float32", name="acc")
            if via_shared:
                As = Ax.shared((m, k), "float16", Ax.INFER, name="As")
                Bs = Ax.shared((n, k), "float16", Ax.INFER, name="Bs")
                Ax.copy(As, A)
                Ax.copy(Bs, B)
                Ax.sync()
                Ax.copy(Ar, As)
                Ax.copy(Ax.permute(Br, (1, 0)), Bs)
            else:
                Ax.copy(Ar, A)
                Ax.copy(Ax.permute(Br, (1, 0)), B)
            Ax.gemm(acc, Ar, Br, accumulate=False)
            if reduce:
                rs = Ax.registers((m, 1), "float32", name="rs")
                Ax.reduce(rs, acc, "sum", dims=1)
                Ax.elementwise(acc, lambda a, b: a - b, acc, rs)
            Ax.copy(C, acc)
        return kern
    return kern


def _reduce_chain(rng, i):
    """x (rows×cols, fp16 or fp32) from global in a CTA of 1-8 warps, its row max broadcast back."""
    rows, cols = rng.choice((1, 2, 4, 8, 16, 64)), rng.choice((16, 64, 256, 1024))
    threads, dtype = rng.choice((32, 64, 128, 256)), rng.choice(("float16", "float32"))

    def body(X, Y):
        x = Ax.registers((rows, cols), dtype, name="x")
        mx = Ax.registers((rows, 1), dtype, name="mx")
        Ax.copy(x, X)
        Ax.reduce(mx, x, "max", dims=1)
        Ax.elementwise(x, lambda a, b: a - b, x, mx)
        Ax.copy(Y, x)
    return _kernel(f"reduce_chain{i}", body, (rows, cols), dtype, threads), (rows, cols), threads


def _isa_c_lane(u):
    """The lane the PTX ISA's m16n8 accumulator table gives element u (g = row mod 8, t = col mod 8 / 2)."""
    return 4 * (u[0] % 8) + (u[1] % 8) // 2


def _isa_a_lane(u):
    return 4 * (u[0] % 8) + (u[1] % 8) // 2


def _isa_b_lane(u):          # (k, n): g = n mod 8, t = k mod 8 / 2
    return 4 * (u[1] % 8) + (u[0] % 8) // 2


def _row_warps(L, shape):
    """Brute force: the set of warps holding each row."""
    out = {}
    for u in all_indices(shape):
        for c in L.map(u, shape):
            out.setdefault(u[0], set()).add(c["tx"] // 32)
    return out


def test_random_chains_through_mma_sync_and_reductions_infer_what_they_claim():
    """Brute force over random kernels: mma.sync fixes acc, Ar and Br as the ISA's fragments (each
    element in the lane its table names) and the gemm dispatches to mma_sync; every elementwise
    reads in place; a reduction runs on a CUDA schedule, with no shared memory wherever whole rows
    can fill the warps — and then each row lies in one warp."""
    import random

    from axe.backends.cuda.schedules.proposals_reduce import row_reduction_layouts
    from axe.layout.broadcast import broadcast_index
    rng = random.Random(5)
    lanes = {"acc": _isa_c_lane, "Ar": _isa_a_lane, "Br": _isa_b_lane}
    for i in range(8):
        fixed, ctx = _fixed(_mma_chain(rng, i))
        assert [r.chosen for r in ctx.records if r.call.op == "gemm"] == ["mma_sync"]
        for name, lane in lanes.items():
            v = next(t for t in ctx.infer.tiles.values() if t.name == name)
            assert fixed[name].rule.startswith("mma.sync"), fixed[name].describe()
            for u in all_indices(v.shape):
                (c,) = fixed[name].layout.map(u, v.shape)
                assert c["tx"] == lane(u), (name, u, fixed[name].layout)
        for rec in ctx.records:
            if rec.call.op == "elementwise":
                dst, *srcs = rec.call.operands.values()
                n = tuple(dst.shape)
                for s in srcs:
                    assert all(_holders(dst.layout, n, u) <= _holders(s.layout, tuple(s.shape), broadcast_index(u, s.shape))
                               for u in all_indices(n)), rec.format()
            if rec.call.op == "reduce":
                assert rec.chosen == "warp_shuffle", rec.format()
    reduced = 0
    for i in range(12):
        k, shape, threads = _reduce_chain(rng, i)
        try:
            fixed, ctx = _fixed(k)
        except Ax.KernelError as err:        # only where no candidate fits the shape
            assert not row_reduction_layouts(shape, threads), err
            continue
        (rec,) = [r for r in ctx.records if r.call.op == "reduce"]
        assert rec.chosen in ("warp_shuffle", "cta_smem", "in_thread"), rec.format()
        rows_fit = shape[0] % max(1, threads // 32 * 32 // min(32, _runs(shape[1]))) == 0
        if rows_fit:
            assert rec.chosen != "cta_smem" or threads == 32, rec.format()
            assert all(len(w) == 1 for w in _row_warps(fixed["x"].layout, shape).values())
        reduced += 1
    assert reduced >= 8


def _runs(width):
    """Runs of up to 8 elements a row splits into (the reduction proposal's run), as lanes per row."""
    v = 8
    while width % v:
        v //= 2
    lanes = 32
    while (width // v) % lanes:
        lanes //= 2
    return lanes
