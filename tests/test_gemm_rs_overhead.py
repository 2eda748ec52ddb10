"""GEMM + reduce-scatter's measurement aids for its local overhead (``benchmarks/gemm_rs_overhead.py``):
the owners' segments in row order (``rs_order="raster"``), the producer warpgroup's registers
(``rs_regs``), and the benchmark's sides and pairs.

Oracles: brute force over ranks, world sizes and scheduled block-rows (which owner's rows, whether
they are a peer's) and numpy slicing; the ``setmaxnreg`` instructions in the PTX of real builds
against the SM's register file split by hand; the benchmark's tables against each other.
"""

import os
import re
import sys
import types

import numpy as np
import pytest

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from kernels import gemm_rs  # noqa: E402
from kernels.parts.schedulers.owner_rows import OwnerRows  # noqa: E402
from kernels.parts.schedulers.owners import OwnerOrder  # noqa: E402

SMALL = (2 * 1024, 1024, 2 * 512, 2)       # M, N, K, world: 1024 rows per owner, 8 row blocks


@pytest.mark.parametrize("order", ["owners", "raster"])
@pytest.mark.parametrize("world,m_tiles", [(2, 3), (3, 2), (4, 2)])
def test_orders_visit_every_owner_once_and_peer_means_not_mine(order, world, m_tiles):
    """On both orders every rank visits each (owner, row block) once; ``peer`` holds exactly where
    the owner is another rank; the rank's own rows come last in the owners' order and in place
    ``rank`` in the raster; A's region is the owner's row block (numpy, both ways A is read)."""
    bm, depth, k = 128, 64, 128
    m = m_tiles * bm
    A3 = np.arange(world * m * k).reshape(world, m, k)
    for cls, A in ((OwnerOrder, A3), (OwnerRows, A3.reshape(world * m, k))):
        sched = cls(m, 512, bm, 256, 132, 16, world, order=order)
        for rank in range(world):
            visits, mesh = [], types.SimpleNamespace(rank=rank)
            for p in range(world * m_tiles):
                seg, j = sched.segment(p)
                owner = sched.owner(rank, seg)
                visits.append((owner, j))
                assert bool(sched.peer(rank, seg)) == (owner != rank), (cls, rank, p)
                got = sched.a_region(A, p, 1, bm, depth, mesh)
                assert np.array_equal(got.reshape(bm, depth), A3[owner, j * bm:(j + 1) * bm, depth:2 * depth])
            assert sorted(visits) == [(o, j) for o in range(world) for j in range(m_tiles)]
            own = [i // m_tiles for i, (o, _) in enumerate(visits) if o == rank]
            assert set(own) == {world - 1 if order == "owners" else rank}


def test_raster_and_register_refusals():
    """The raster order only without an exchange (the peers' partials would come late); names and
    register counts outside the lists are refused naming the keyword."""
    with pytest.raises(ValueError, match="rs_order='raster' is a measurement aid for rs_comm=False only"):
        gemm_rs.make(*SMALL, rs_order="raster")
    with pytest.raises(ValueError, match=r"rs_order must be one of \['owners', 'raster'\], got 'rows'"):
        gemm_rs.make(*SMALL, rs_comm=False, rs_order="rows")
    for bad in (20, 50, 136):
        with pytest.raises(ValueError, match=f"regs .* must be a multiple of 8 from 24 to 128, got {bad}"):
            gemm_rs.make(*SMALL, rs_regs=bad)


def _split(producer):
    """The consumer warpgroups' registers beside a producer warpgroup of ``producer``: the largest
    multiple of 8 that two warpgroups of 128 threads can hold from what the producer leaves of the
    SM's 65536, at most 232 (by hand, not the skeleton's function)."""
    best = 0
    for c in range(8, 257, 8):
        if 128 * (producer + 2 * c) <= 65536 and c <= 232:
            best = c
    return best


@pytest.fixture(scope="module")
def builds():
    kws = {"default": {}, "r48": {"rs_regs": 48}, "local": {"rs_comm": False}, "local_r56": {"rs_comm": False, "rs_regs": 56},
           "local_raster": {"rs_comm": False, "rs_order": "raster"}}
    return {n: gemm_rs.build(*SMALL, "bfloat16", "col", name=f"gemm_rs_ovh_{n}", **kw) for n, kw in kws.items()}


@pytest.mark.parametrize("name,producer", [("default", 56), ("r48", 48), ("local", 40), ("local_r56", 56),
                                          ("local_raster", 40)])
def test_register_split_is_what_was_asked(builds, name, producer):
    """``setmaxnreg``: the producer warpgroup gets ``rs_regs`` (default: 56 where its warps forward,
    the GEMM's 40 where nothing is exchanged), the consumers what is left; no build spills but the
    one asked for fewer registers than forwarding needs (not built here)."""
    ptx = builds[name].ptx
    assert re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+);", ptx) == [str(producer)]
    assert re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);", ptx) == [str(_split(producer))]
    r = builds[name].launch["resources"]
    assert r["spill_stores"] == r["spill_loads"] == 0, r


def test_raster_is_another_order_of_the_same_work(builds):
    """The raster twin differs from the owners' twin in its tile order only: same registers, the same
    loads, stores and bulk copies in the PTX, different code."""
    a, b = builds["local"], builds["local_raster"]
    assert a.launch["resources"] == b.launch["resources"]
    for op in ("cp.async.bulk.tensor", "cp.async.bulk.global.shared::cta", "wgmma.mma_async", "stmatrix"):
        assert a.ptx.count(op) == b.ptx.count(op) > 0, op
    assert a.cuda_source.replace("gemm_rs_ovh_local", "K") != b.cuda_source.replace("gemm_rs_ovh_local_raster", "K")


def test_overhead_benchmark_sides_pairs_and_builds():
    """Every side's artifact is one the build makes; every pair names two sides; the default shapes are
    the three small ones and the control; a pair's figure is later over earlier."""
    import gemm_rs_overhead as ovh
    built = set(ovh.FUSED) | {"_gemm_dyn", "_gemm_static"}
    assert {x for _, x in ovh.SIDES.values() if x is not None} == built
    assert all(a in ovh.SIDES and b in ovh.SIDES for _, a, b in ovh.PAIRS)
    assert set(ovh.LOCAL_REF + ovh.SCATTERED_REF) <= set(ovh.SIDES)
    assert [s[0] for s in ovh.shapes(None, 2, (8192,))] == [m for m in ovh.MODELS if m in ovh.DEFAULT_MODELS]
    assert [s[0] for s in ovh.shapes(["4096x12288"], 2, (8192,))] == ["Qwen3-8B"]
    ms = {s: 1.0 + i / 100 for i, s in enumerate(ovh.SIDES)}
    got = ovh.pairs(ms)
    for x, a, b in ovh.PAIRS:
        assert got[f"{x}: {b} vs {a}"] == pytest.approx((ms[b] - ms[a]) / ms[a] * 100)
    assert ovh.pairs({**ms, "fused": None})["a: fused_r48 vs fused"] is None


def test_prime_is_gemm_rs_default_and_iters_at_least_two(monkeypatch):
    """gemm_rs and the overhead benchmark time primed by default (the first launch of a block is not
    timed), the other distributed benchmarks keep the unprimed law unless asked; a block needs two
    launches."""
    import importlib

    import dist_bench
    got = {}
    monkeypatch.setattr(dist_bench, "launch", lambda args, *rest: got.setdefault("launched", []).append(args.prime))
    for bench in ("gemm_rs", "gemm_rs_overhead"):
        importlib.import_module(bench).main(["run"])
    assert got.pop("launched") == [True, True]
    for prime in (True, False):
        dist_bench.cli(["run"], "doc", ("x",), (8192,), "b", None, lambda a: got.setdefault(prime, a.prime), prime=prime)
    assert got == {True: True, False: False}
    dist_bench.cli(["run", "--no-prime"], "doc", ("x",), (8192,), "b", None, lambda a: got.update(off=a.prime), prime=True)
    assert got["off"] is False
    with pytest.raises(SystemExit):
        dist_bench.cli(["run", "--iters", "1"], "doc", ("x",), (8192,), "b", None, lambda a: 0)


def test_epochs_seen_reads_the_exchanging_kernels_signals(monkeypatch):
    """The benchmark's GPU-side check that every launch carried its own epoch: the distinct nonzero
    signals of each exchanging kernel against its launch count; the nothing-exchanged aids are skipped."""
    import torch

    import gemm_rs_overhead as ovh
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)

    def kernel(epoch, flags):
        return types.SimpleNamespace(epoch=epoch, dist={"runtime": {"signals": "sig"}},
                                     _fill={"sig": torch.tensor(flags, dtype=torch.int32)})
    got = ovh.epochs_seen({"": kernel(7, [0, 7, 7, 0]), "_r48": kernel(7, [0, 6, 7, 0]), "_local": kernel(7, [0, 0])})
    assert got == {"": {"launches": 7, "signals": [7]}, "_r48": {"launches": 7, "signals": [6, 7]}}
