"""The dynamic-M GEMM (``kernels/gemm.py:make_dynamic``): one artifact for every number of rows.

Oracles: the runtime's own ``bind_arguments`` and ``tiled_args`` on CPU tensors (what a launch
evaluates), a brute-force walk of the tile schedule (every tile of C exactly once by the CTAs the
grid launches), ptxas's report (no spills) and the instructions in the static build's PTX.
"""

import os
import re

import pytest

pytest.importorskip("tvm")
torch = pytest.importorskip("torch")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.artifact import eval_expr  # noqa: E402
from axe.runtime import LaunchError, bind_arguments  # noqa: E402
from axe.backends.cuda.tensormap import tiled_args  # noqa: E402
from kernels import gemm  # noqa: E402

N, K = 512, 256                 # two block-columns, four k-blocks: small builds, every code path
MS = (1, 127, 128, 1000, 8192)
#: the tensor-core and TMA instructions whose kinds the dynamic build must share with the static one
INSTRUCTIONS = re.compile(r"\b(wgmma\.[\w.:]+|tcgen05\.[\w.:]+|cp\.async\.bulk\.tensor\.[\w.:]+|"
                          r"cp\.async\.bulk\.commit_group|cp\.async\.bulk\.wait_group[\w.]*|stmatrix\.[\w.:]+)")

BUILDS = {}


def built(target, dynamic, schedule="cooperative"):
    """One build per (target, dynamic, schedule) for the whole module (each takes seconds)."""
    key = (target, dynamic, schedule)
    if key not in BUILDS:
        k = (gemm.make_dynamic(N, K, "float16", "row", schedule=schedule) if dynamic else
             gemm.make(1000, N, K, "float16", "row", schedule=schedule))
        BUILDS[key] = Ax.compile_kernel(k, target)
    return BUILDS[key]


def operands(art, M, Mc=None):
    """CPU tensors for the artifact's call signature (A: M x K, C: Mc x N, scratch zeros)."""
    shapes = {"A_": (M, K), "B_": (K, N), "C_": (Mc or M, N)}
    return [torch.zeros(shapes.get(a["name"], a["shape"]), dtype=getattr(torch, a["dtype"]))
            for a in art.launch["args"]]


def tiles_of(M, bm=gemm.BM):
    """The tiles of C by brute force: the distinct (block-row, block-column) of its elements."""
    return {(r // bm, c // gemm.BN) for r in range(M) for c in range(0, N, 8)}


@pytest.mark.parametrize("schedule,bm", [("cooperative", gemm.BM), ("pingpong", gemm.HALF)])
def test_one_artifact_binds_every_m(schedule, bm):
    art = built("sm_90a", True, schedule)
    L = art.launch
    assert L["symbols"] == {"M": {"arg": "A_", "dim": 0}}
    shapes = {a["name"]: a["shape"] for a in L["args"]}
    assert shapes["A_"] == ["M", K] and shapes["C_"] == ["M", N] and shapes["B_"] == [K, N]
    for M in MS:
        b = bind_arguments(L, operands(art, M), device_type="cpu")
        assert b.env["M"] == M
        tiles = tiles_of(M, bm)
        assert b.grid == (min(gemm.SMS, len(tiles)), 1, 1), (M, b.grid)
        # the schedule the kernel runs: CTAs 0..grid-1 cover every tile once; none is left to
        # the CTAs the grid leaves out (the kernel's TileSchedule, evaluated on ints)
        m_tiles = -(-M // bm)
        sched = Ax.TileSchedule(m_tiles, -(-N // gemm.BN), gemm.SMS, max(gemm.GROUP * (gemm.BM // bm), 1))
        walked = [sched.coords(sched.tile(c, i)) for c in range(b.grid[0]) for i in range(sched.count(c))]
        assert sorted(walked) == sorted(tiles) and len(walked) == len(tiles)
        assert all(sched.count(c) <= 0 for c in range(b.grid[0], gemm.SMS))
        # the kernel's scalar parameters are expressions of M alone
        for p in L["params"]:
            if p["kind"] == "scalar":
                assert eval_expr(p["value"], {"M": M}) in (m_tiles, m_tiles * sched.n_tiles), p


def test_tensor_maps_take_m_from_the_tensor():
    art = built("sm_90a", True)
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert specs["A_map"]["shape"] is None and specs["C_map"]["shape"] is None
    assert specs["B_map"]["shape"] == [N, K]          # B's extents are the specialization
    for M in MS:
        args = dict(zip((a["name"] for a in art.launch["args"]), operands(art, M)))
        for param, t, cols in (("A_map", args["A_"], K), ("C_map", args["C_"], N)):
            dims, strides, box, _ = tiled_args(specs[param], t.data_ptr(), tuple(t.shape), t.stride(),
                                               t.element_size(), "float16")
            assert dims == [cols, M] and strides == [cols * 2], (param, M, dims)
            assert box[1] == (gemm.BM if param == "A_map" else gemm.HALF)


def test_mismatched_rows_are_refused_by_name():
    art = built("sm_90a", True)
    with pytest.raises(LaunchError, match=r"'C_' has shape \(999, 512\), expected \(1000, 512\)"):
        bind_arguments(art.launch, operands(art, 1000, Mc=999), device_type="cpu")


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_ptxas_and_instructions_match_the_static_build(target):
    dyn, static = built(target, True), built(target, False)
    for art in (dyn, static):
        r = art.launch["resources"]
        assert r.get("spill_stores", 0) == 0 and r.get("spill_loads", 0) == 0, (art.name, r)
    kinds = [set(INSTRUCTIONS.findall(a.ptx)) for a in (dyn, static)]
    assert kinds[0] == kinds[1], f"{target}: only dynamic {kinds[0] - kinds[1]}, only static {kinds[1] - kinds[0]}"
    want = "wgmma.mma_async" if target == "sm_90a" else "tcgen05.mma"
    assert any(k.startswith(want) for k in kinds[0]) and any(k.startswith("cp.async.bulk.tensor") for k in kinds[0])
    assert dyn.launch["dynamic_smem"] == static.launch["dynamic_smem"]
    assert dyn.launch["block"] == static.launch["block"]


@pytest.mark.parametrize("kw,named", [({"stream_k": True}, "stream_k"), ({"cluster": 2}, "cluster>1"),
                                      ({"split_k": 4}, "split_k")])
def test_dynamic_refusals_name_the_option(kw, named):
    with pytest.raises(ValueError, match=f"runtime M .*{re.escape(named)}"):
        gemm.make_dynamic(N, K, **kw)
