"""The tensor-parallel benchmarks' per-row picks (``benchmarks/dist_bench.py``): the tuned selection
over this run's sides of the op's three paths, the op's own choice (from a fake table, or the
heuristic) timed by its side, the fields the rows kept, and the goal's misses.  Oracles: the argmin
of the sides' figures written out, and ratios computed from the figures by hand."""

import os
import sys

import pytest

pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from axe.torch import tp_tune, tune  # noqa: E402
from benchmarks import dist_bench  # noqa: E402

DEV = "NVIDIA H200"
KEPT = ("axe_fused", "axe_pick", "axe_pick_ms", "axe_vs_nccl", "axe_vs_symm_mem", "axe_over_bare_pct", "exposed_ms",
        "pick_vs_nccl", "pick_vs_symm_mem")


@pytest.fixture
def table_dir(tmp_path, monkeypatch):
    """An empty cache folder as the op's table folder, this 'GPU' named DEV."""
    for name, value in (("AXE_CACHE_DIR", str(tmp_path)), ("AXE_SHIPPED_DIRS", "")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(dist_bench, "_device_name", lambda: DEV)
    tune.reload()
    yield tmp_path
    tune.reload()


def row_for(M, ms, op="matmul_reduce_scatter"):
    row = {"op": op, "model": "Llama-3.1-8B", "M": M, "N": 4096, "K": 14336, "world": 2}
    return dist_bench.summarize(row, ms, 5)


def test_the_pick_is_the_tuned_selection_over_the_ops_paths(table_dir):
    # the fused variant axe_regs is the fastest side, but the op builds only axe's default: not a path
    ms = {"bare": 0.05, "nccl": 0.07, "symm_mem": 0.28, "axe": 0.30, "axe_regs": 0.01, "axe_nccl": 0.078,
          "axe_gemm": 0.051}
    r = row_for(512, ms)
    assert set(KEPT) <= set(r)
    assert (r["axe_pick"], r["axe_pick_ms"], r["axe_pick_side"]) == ("nccl+cublas", 0.07, "nccl")
    assert r["tuned"] == {"pick": "nccl+cublas", "ms": {"fused": 0.30, "nccl+axe": 0.078, "nccl+cublas": 0.07},
                          "rows": [512], "rounds": 5}
    assert r["pick_vs_nccl"] == 1.0 and r["pick_vs_symm_mem"] == pytest.approx(0.28 / 0.07)
    assert r["axe_fused"] == "axe_regs" and r["axe_vs_nccl"] == pytest.approx(7.0)      # fused variants, as before
    # no table: the op's heuristic (M < 4096: nccl+axe), timed by its side
    assert (r["op_path"], r["op_source"], r["op_ms"]) == ("nccl+axe", "heuristic", 0.078)
    assert r["op_vs_nccl"] == pytest.approx(0.07 / 0.078)
    g = dist_bench.goal([r])
    assert not g["met"] and g["misses"] == [f"Llama-3.1-8B M=512 4096x14336: op_vs_nccl {0.07 / 0.078:.3f}"]


def test_the_ops_choice_follows_its_table(table_dir):
    ms = {"bare": 0.6, "nccl": 0.78, "symm_mem": 0.71, "axe": 0.65, "axe_nccl": 0.79, "axe_gemm": 0.61}
    key = tp_tune.key(DEV, 2, "matmul_reduce_scatter", "bfloat16", "col", 4096, 14336, 8192)
    tune.record({key: tp_tune.entry({"fused": 0.6, "nccl+axe": 0.8, "nccl+cublas": 0.7}, [8192], 7)},
                name=tp_tune.TABLE)
    r = row_for(8192, ms)
    assert (r["axe_pick"], r["op_path"], r["op_source"], r["op_ms"]) == ("fused", "fused", "tuned", 0.65)
    assert r["op_vs_nccl"] == pytest.approx(0.78 / 0.65) and r["axe_over_bare_pct"] == pytest.approx(100 * (0.65 / 0.6 - 1))
    g = dist_bench.goal([r])
    assert g["misses"] == [f"Llama-3.1-8B M=8192 4096x14336: axe_over_bare_pct {100 * (0.65 / 0.6 - 1):.3f}"]


def test_rows_without_the_paths_sides():
    """Sides not run (``--sides``) leave the picks empty and the goal says which are missing."""
    r = row_for(128, {"bare": 0.02, "symm_mem": 0.25}, op="all_gather_matmul")
    assert (r["axe_pick"], r["tuned"], r["pick_vs_nccl"], r["op_ms"]) == (None, None, None, None)
    assert r["op_path"] == "nccl+axe"
    assert [m.split(": ")[1] for m in dist_bench.goal([r])["misses"]] == ["op_vs_nccl missing", "pick_vs_symm_mem missing"]
