"""Inference weighs reductions (issue 27 item 2): a register tile reduced along its last dim takes
a layout whose reduction ``warp_shuffle`` (rows within warps) or ``cta_smem`` (rows over the CTA)
serves, its result replicated where the shuffles leave it.

Oracles: brute-force enumeration of the candidate layouts; a NumPy model of the butterfly reduction
(each thread's partial, XOR shuffles over the schedule's lane masks, the warps' partials combined)
run on the inferred layouts and checked against numpy's row sums; the same kernels inferred with
the reduction proposal removed (what the rules gave before), which choose a slower reduction or none."""

import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from axe.layout.layout import all_indices

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
import axe.schedules.infer as infer  # noqa: E402
from axe.backends.cuda.schedules import proposals_reduce as pr  # noqa: E402
from axe.backends.cuda.schedules.reduce import CtaSharedReduce, WarpShuffleReduce  # noqa: E402
from axe.layout.infer import replicated_for  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_inferred_instructions import _kernel  # noqa: E402

SM90 = SimpleNamespace(arch=90, target="sm_90a")


@pytest.mark.parametrize("shape,threads", [((4, 2048), 128), ((16, 64), 128), ((64, 16), 128), ((8, 256), 256),
                                           ((2, 512), 256), ((1, 1024), 128), ((1024,), 128), ((6, 256), 64)])
def test_row_reduction_layouts_by_brute_force(shape, threads):
    """Each candidate holds every element once on threads < ``threads``; the first keeps each row
    in one warp on a power-of-two group of consecutive lanes with the row's runs contiguous in a
    lane's registers; a CTA candidate spreads every row over all threads."""
    rows, width = (1, shape[0]) if len(shape) == 1 else shape
    cands = pr.row_reduction_layouts(shape, threads)
    assert cands
    for n, L in enumerate(cands):
        held, row_threads = {}, {}
        for u in all_indices(shape):
            (c,) = L.map(u, shape)
            assert 0 <= c["tx"] < threads and (c["tx"], c["m"]) not in held
            held[(c["tx"], c["m"])] = u
            row_threads.setdefault(u[0] if len(shape) == 2 else 0, set()).add(c["tx"])
        assert len(held) == rows * width
        for r, ts in row_threads.items():
            if len(ts) < threads:                      # rows within warps
                lo = min(ts)
                assert len({t // 32 for t in ts}) == 1 and ts == set(range(lo, lo + len(ts)))
                assert len(ts) & (len(ts) - 1) == 0 and lo % len(ts) == 0
            else:
                assert n == len(cands) - 1 or rows == 1
        for (t, m), u in held.items():                 # runs: consecutive registers, consecutive elements
            nxt = held.get((t, m + 1))
            if nxt is not None and m % pr.RUN != pr.RUN - 1 and u[-1] + 1 < width and nxt[:-1] == u[:-1]:
                assert nxt[-1] == u[-1] + 1


def test_no_candidate_where_rows_share_unevenly():
    """3 rows of 96 over 2 warps: no pass of whole rows fills the warps (4 lanes a row, 16 rows a
    pass), and 96 is no multiple of 64 threads: inference leaves the tile to the other rules."""
    assert pr.row_reduction_layouts((3, 96), 64) == []


def _normalize(shape, dtype):
    """x from memory, its rows' sums broadcast back: y = x - rowsum(x)."""
    def body(X, Y):
        x = Ax.registers(shape, dtype, name="x")
        s = Ax.registers((shape[0], 1), dtype, name="s")
        y = Ax.registers(shape, dtype, name="y")
        Ax.copy(x, X)
        Ax.reduce(s, x, "sum", dims=1)
        Ax.elementwise(y, lambda a, b: a - b, x, s)
        Ax.copy(Y, y)
    return body


def _build(k, with_rule=True, monkeypatch=None):
    if not with_rule:
        monkeypatch.setattr(infer, "_PROPOSALS", [p for p in infer._PROPOSALS if p.op != "reduce" or p.family != "cuda"])
    _, ctx = Ax.build_func(k)
    fixed = {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}
    return fixed, ctx


def _simulate(call, x):
    """The reduction as the chosen schedule runs it, on NumPy: each thread's partial of every row
    it holds, XOR shuffles over the plan's lane masks within each warp, then (cta_smem) the sum of
    the warps' lane-0 partials; returns {(thread, row): value}."""
    src = call.operands["src"]
    shape = tuple(src.shape)
    plan = WarpShuffleReduce.check(call, SM90)
    if isinstance(plan, str):
        plan = CtaSharedReduce.check(call, SM90)
    assert not isinstance(plan, str), plan
    threads = call.scope.threads
    part = np.zeros((threads, shape[0]))
    for u in all_indices(shape):
        (c,) = src.layout.map(u, shape)
        part[c["tx"], u[0]] += x[u]
    for m in plan.masks:
        part = part + part[np.arange(threads) ^ m]
    if plan.warp_dims:
        part = np.tile(part.reshape(threads // 32, 32, -1)[:, 0].sum(axis=0), (threads, 1))
    return {(t, r): part[t, r] for t in range(threads) for r in range(shape[0])
            if any(c["tx"] == t for j in range(shape[1]) for c in src.layout.map((r, j), shape))}


@pytest.mark.parametrize("shape,dtype,threads,before", [
    ((4, 2048), "float16", 128, "cta_smem"),      # the vector rule's rows straddle the 4 warps
    ((2, 512), "float32", 256, None),             # ... and the kept rows lie on threads: no schedule
])
def test_the_rule_picks_the_reduction_the_schedules_serve(shape, dtype, threads, before, monkeypatch):
    """With the rule, the first case's rows each fill one warp (warp_shuffle: no shared memory, no
    barrier) and the second's spread over the CTA with the rows in registers (cta_smem); without
    it the vector rule's layout gives cta_smem, resp. no reduction schedule at all."""
    k = _kernel(f"norm_{shape[0]}x{shape[1]}", _normalize(shape, dtype), shape, dtype, threads)
    fixed, ctx = _build(k)
    rec = next(r for r in ctx.records if r.call.op == "reduce")
    assert rec.chosen == ("warp_shuffle" if before else "cta_smem")
    assert fixed["x"].layout == pr.row_reduction_layouts(shape, threads)[0 if before else -1]
    assert fixed["s"].layout == replicated_for(fixed["x"].layout, shape, (shape[0], 1))
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 9, shape).astype(float)
    got = _simulate(rec.call, x)
    assert got and all(v == x[r].sum() for (t, r), v in got.items())
    # the same kernel without the rule
    if before is None:
        with pytest.raises(Ax.KernelError, match="reduce"):
            _build(k, False, monkeypatch)
        return
    fixed0, ctx0 = _build(k, False, monkeypatch)
    assert fixed0["x"].rule.startswith("16-byte vectors")
    assert next(r for r in ctx0.records if r.call.op == "reduce").chosen == before


def test_the_model_catches_a_wrong_lane_mask():
    """The oracle can fail: a plan whose masks miss one lane bit leaves partial sums."""
    shape = (4, 2048)
    k = _kernel("norm_mask", _normalize(shape, "float16"), shape)
    _, ctx = _build(k)
    call = next(r.call for r in ctx.records if r.call.op == "reduce")
    real = WarpShuffleReduce.check
    x = np.random.default_rng(1).integers(-8, 9, shape).astype(float)

    def short(c, t):
        p = real(c, t)
        p.masks = p.masks[:-1]
        return p
    WarpShuffleReduce.check = staticmethod(short)
    try:
        got = _simulate(call, x)
    finally:
        WarpShuffleReduce.check = staticmethod(real)
    assert any(v != x[r].sum() for (t, r), v in got.items())


def test_explain_names_the_shuffle_that_fixed_the_row():
    shape = (4, 2048)
    text = Ax.explain(_kernel("norm_explain", _normalize(shape, "float16"), shape))
    head = text.split("\n\n")[1].splitlines()
    lines = {ln.split("[")[0].strip(): ln for ln in head[1:]}
    assert "(shfl.sync.bfly reduction over 32 lanes: reduce at" in lines["x"]
    assert "(result of the shfl.sync.bfly reduction over 32 lanes: reduce at" in lines["s"]
    assert "follows its source" in lines["y"]


def test_a_reduce_and_an_ldmatrix_copy_that_want_one_tile_conflict():
    """x is filled by ldmatrix in warp 0 alone (every atom in warp 0) and reduced by the CTA's four
    warps, whose result is declared as the rows-within-warps reduction leaves it: ldmatrix's
    layout covers one warp, which no reduction of the CTA serves; the error names both."""
    shape = (32, 64)
    rows = pr.row_reduction_layouts(shape, 128)[0]

    def body(X, Y):
        sm = Ax.shared(shape, "float16", name="sm")
        x = Ax.registers(shape, "float16", name="x")
        s = Ax.registers((32, 1), "float16", replicated_for(rows, shape, (32, 1)), name="s")
        Ax.copy(sm, X)
        Ax.sync()
        with Ax.warps(0, 1):
            Ax.copy(x, sm)
        Ax.reduce(s, x, "sum", dims=1)
    with pytest.raises(Ax.KernelError) as err:
        Ax.build_func(_kernel("clash_reduce", body, shape))
    msg = str(err.value)
    assert "tile x[32, 64]" in msg and "copy at" in msg and "reduce at" in msg
    assert "ldmatrix.x4 atom" in msg and "shfl.sync.bfly reduction" in msg and str(rows) in msg


def test_a_gemm_accumulator_keeps_its_fragment_and_is_reduced_as_it_lies():
    """An mma.sync accumulator reduced along its rows: the fragment (priority above the
    reduction) stays, and its rows (4 lanes, 2 registers per fragment) reduce by warp shuffles."""
    def body(X, Y):
        a = Ax.registers((16, 16), "float16", name="a")
        b = Ax.registers((16, 8), "float16", name="b")
        c = Ax.registers((16, 8), "float32", name="c")
        s = Ax.registers((16, 1), "float32", name="s")
        Ax.copy(a, X)
        Ax.copy(b, X[:, 0:8])
        Ax.gemm(c, a, b, accumulate=False)
        Ax.reduce(s, c, "sum", dims=1)
        o = Ax.registers((16, 8), "float16", name="o")
        Ax.elementwise(o, lambda u, v: T.Cast("float16", u - v), c, s)
        Ax.copy(Y[:, 0:8], o)
    fixed, ctx = _build(_kernel("acc_rows", body, (16, 16), threads=32))
    from axe.backends.cuda.schedules.mma import c_fragment
    from axe.layout import S, tile
    assert fixed["c"].layout == tile(S[(1, 1)], (1, 1), c_fragment("tx"), (16, 8))
    assert fixed["c"].rule.endswith("accumulator fragment")
    assert [r.chosen for r in ctx.records if r.call.op in ("gemm", "reduce")] == ["mma_sync", "warp_shuffle"]
    x = np.random.default_rng(2).integers(-8, 9, (16, 8)).astype(float)
    got = _simulate(next(r.call for r in ctx.records if r.call.op == "reduce"), x)
    assert all(v == x[r].sum() for (t, r), v in got.items())
