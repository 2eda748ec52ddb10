"""The fused all-gather + GEMM on the CPU: the gather order's law (brute force), the push schedule
(every piece of every rank's rows reaches every peer exactly once, in step order), the distributed
signature, what the build emits (peer stores, bounded waits, the proxy fence, two TMA sources), the
refusals, and the reference (GPU runs: tests/gpu/cases_dist.py, benchmarks/ag_gemm.py)."""

import itertools
import os

import numpy as np
import pytest

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from kernels import ag_gemm  # noqa: E402
from kernels.parts.epilogues.all_gather import FWD_WARPS, PIECE  # noqa: E402
from kernels.parts.schedulers.gather import GatherOrder  # noqa: E402


@pytest.mark.parametrize("world,m,ctas", [(2, 256, 5), (3, 384, 7), (4, 128, 132), (8, 1024, 132)])
def test_gather_order_visits_each_owner_block_once_own_first(world, m, ctas):
    s = GatherOrder(m, 700, 128, 256, ctas, 4, world, 128 // PIECE)
    for rank in range(world):
        seen, order = [], {}
        for c in range(ctas):
            for i in range(s.count(c)):
                p, n = s.coords(c, i)
                seg, j = s.segment(p)
                seen.append((s.owner(rank, seg), j, n))
                order[c + i * ctas] = seg
        assert sorted(seen) == sorted(itertools.product(range(world), range(s.m_tiles), range(s.n_tiles)))
        assert s.owner(rank, 0) == rank
        # the walk starts with the own rows: the whole bands of segment 0 are its first tiles
        own = (s.m_tiles - s.m_tiles % s.grid.group) * s.n_tiles
        assert all(order[t] == 0 for t in range(own))
    flags = {s.flag(src, j, q) for src in range(world) for j in range(s.m_tiles) for q in range(s.pieces)}
    assert flags == set(range(s.nsig))


def test_gather_order_alternates_halves_and_refuses_ragged_rows():
    s = GatherOrder(256, 512, 128, 256, 132, 16, 4, 4)
    rows = {(e, o): s.slot_row(e, o) for e in (1, 2) for o in range(4)}
    assert sorted(rows.values()) == [k * 256 for k in range(8)]      # 2 halves × 4 slots, disjoint
    with pytest.raises(ValueError, match="multiple of the tile's 128 rows"):
        GatherOrder(200, 512, 128, 256, 132, 16, 4, 4)


@pytest.mark.parametrize("world,m,sms", [(2, 128, 132), (4, 2048, 132), (8, 1024, 132), (3, 384, 7)])
def test_push_schedule_delivers_every_piece_once_in_step_order(world, m, sms):
    """The forwarding warps' item list (AllGather.push, re-derived here): item q of warp (cid, wi)."""
    pieces, m_tiles = 128 // PIECE, m // 128
    per_step = m_tiles * pieces
    items, warps = (world - 1) * per_step, FWD_WARPS * sms
    for me in range(world):
        got = []
        for cid in range(sms):
            for wi in range(FWD_WARPS):
                for t in range(-(-items // warps)):
                    q = t * warps + cid * FWD_WARPS + wi
                    if q < items:
                        peer = (me + world - 1 - q // per_step) % world
                        got.append((q // per_step, peer, q % per_step // pieces, q % pieces))
        assert sorted((p, j, x) for _, p, j, x in got) == sorted(
            itertools.product([p for p in range(world) if p != me], range(m_tiles), range(pieces)))
        # step s (0-based) serves rank me - s - 1: the peer that reads my rows in its segment s + 1
        assert all(peer == (me - step - 1) % world for step, peer, _, _ in got)


@pytest.fixture(scope="module")
def art():
    return ag_gemm.build(2 * 256, 2 * 1000, 576, 2, "bfloat16", "col", name="ag_gemm_test")


def test_ag_gemm_signature(art):
    d = art.launch["distributed"]
    p = d["params"]
    assert p["A_"]["placements"] == "(Shard(0))" and p["A_"]["local_shape"] == [256, 576]
    assert p["B_"]["placements"] == "(Shard(0))" and p["B_"]["local_shape"] == [1000, 576]
    assert p["C_"]["placements"] == "(Shard(1))" and p["C_"]["local_shape"] == [512, 1000]
    assert p["P_"]["scratch"] and p["P_"]["symmetric"] and p["P_"]["buffer_shape"] == [2 * 2 * 256, 576]
    maps = {m["param"]: m for m in art.launch["tensormaps"]}
    assert maps["P_map"]["tensor"] == "P_" and maps["P_map"]["shape"] == [576, 1024]     # the gathered rows
    assert maps["A_map"]["shape"] == [576, 256]                                          # own rows, read in place


def test_ag_gemm_emits_pushes_waits_and_fences(art):
    ptx, recs = art.ptx, art.records
    pushes = [r for r in recs if r.call.op == "copy" and r.call.operands["dst"].name == "P_"]
    assert pushes and all(r.chosen == "vector" and "memory of GPU" in r.plan and r.call.scope.threads == 32
                          for r in pushes)
    assert "st.release.sys.global.b32" in ptx and "ld.acquire.sys.global.b32" in ptx     # signal, bounded wait
    assert "fence.proxy.async.global" in ptx and "fence.acq_rel.sys" in ptx
    loads = [r for r in recs if r.chosen == "tma" and r.call.operands["dst"].mem == "shared"]
    assert {r.call.operands["src"].name for r in loads} >= {"A_", "P_", "B_"}
    assert all(r.call.operands["dst"].name == "C_" for r in recs if r.chosen == "tma_store")
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert "C7507" not in art.log and "C7510" not in art.log


@pytest.mark.parametrize("args,match", [
    ((2 * 100, 2048, 512, 2), "M/w=100 must be a multiple of 128"),
    ((3 * 128, 2048, 512, 3), "N=2048 must be multiples of world=3|multiples of world=3"),
    ((2 * 128, 2048, 520, 2), "K=520 must be a multiple of 64"),
    ((256, 2048, 512, 1), "world must be at least 2"),
])
def test_ag_gemm_refusals(args, match):
    with pytest.raises(ValueError, match=match):
        ag_gemm.make(*args)


def test_ag_gemm_refuses_split_k_and_cta_pairs():
    with pytest.raises(ValueError, match="stream-K and split-K"):
        ag_gemm.make(512, 2048, 512, 2, split_k=2)
    with pytest.raises(ValueError, match="gather order .* CTA pairs|clusters"):
        ag_gemm.make(512, 2048, 512, 2, cluster=2)


def test_ag_gemm_reference_is_the_gathered_product():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    A = [torch.randn(4, 8, generator=g) for _ in range(3)]
    B = [torch.randn(5, 8, generator=g) for _ in range(3)]
    full = np.concatenate([a.numpy() for a in A])
    for got, b in zip(ag_gemm.reference(A, B), B):
        np.testing.assert_allclose(got.numpy(), full @ b.numpy().T, rtol=1e-5, atol=1e-5)


def test_copy_engine_variant_declares_its_staging():
    art = ag_gemm.build(2 * 256, 2 * 1000, 576, 2, push="copy_engine", name="ag_gemm_ce_test")
    d = art.launch["distributed"]
    assert d["copies"] == [{"src": "A_", "dst": "P_", "rows": 256, "signal": 0}] and d["signals_used"] == 2
    assert "st.release.sys.global.b32" not in art.ptx          # no warp pushes or signals
    assert "ld.acquire.sys.global.b32" in art.ptx and "fence.proxy.async.global" in art.ptx
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    with pytest.raises(ValueError, match="push must be 'sm' or 'copy_engine'"):
        ag_gemm.make(512, 2048, 512, 2, push="dma")


def test_copy_stage_follows_its_law(monkeypatch):
    """CopyStage on CPU tensors (streams and the driver's signal write replaced by recorders): every
    peer receives the rank's rows in the epoch's half, in the order rank-1, rank-2, ..., each copy
    followed by its signal; a wrong source is refused naming the argument."""
    torch = pytest.importorskip("torch")
    import contextlib

    import axe.runtime.staging as staging
    events = []

    class Stream:
        cuda_stream = 7

        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            events.append(("wait",))

    class Driver:
        CUstream = CUdeviceptr = staticmethod(lambda v: v)

        class CUresult:
            CUDA_SUCCESS = 0

        def cuStreamWriteValue32(self, stream, addr, value, flags):
            events.append(("signal", addr, value))
            return (0,)

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(staging, "cuda_driver", lambda: Driver())
    world, rank, rows, cols = 4, 1, 3, 2

    class Sym:
        def __init__(self, shape, dtype):
            self.copies = [torch.zeros(shape, dtype=dtype) for _ in range(world)]

        def peer(self, g):
            return self.copies[g]

    heap = type("Heap", (), {"world": world, "rank": rank, "device": "cpu"})()
    sym = {"P_": Sym((2 * world * rows, cols), torch.float32), "sig": Sym((world,), torch.int32)}
    stage = staging.CopyStage("k", [{"src": "A_", "dst": "P_", "rows": rows, "signal": 0}], heap, sym, "sig")
    A = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + 1
    for epoch in (1, 2):
        events.clear()
        stage.before({"A_": A}, epoch, Stream())
        half = (epoch % 2) * world
        for p in range(world):
            got = sym["P_"].peer(p)[(half + rank) * rows:(half + rank + 1) * rows]
            assert torch.equal(got, A if p != rank else torch.zeros_like(A))
        order = [e[1] for e in events if e[0] == "signal"]
        assert order == [sym["sig"].peer((rank - s) % world).data_ptr() + 4 * rank for s in range(1, world)]
        assert all(e[2] == epoch for e in events if e[0] == "signal")
    with pytest.raises(Exception, match="'A_' is staged to the peers as 3 contiguous rows"):
        stage.before({"A_": A[:2]}, 3, Stream())


def test_silu_mul_variant_fuses_the_gate_up_activation():
    art = ag_gemm.build(2 * 256, 2 * 1024, 576, 2, act="silu_mul", name="ag_gemm_silu_test")
    p = art.launch["distributed"]["params"]
    assert p["C_"]["shape"] == [512, 1024] and p["C_"]["local_shape"] == [512, 512]   # half the GEMM's columns
    ew = [r for r in art.records if r.call.op == "elementwise"]
    assert ew and all(r.chosen == "per_thread" for r in ew)        # gate and up halves meet in each thread
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    with pytest.raises(ValueError, match="act must be None or 'silu_mul'"):
        ag_gemm.make(512, 2048, 512, 2, act="gelu")


def test_interleave_and_the_silu_reference_agree_with_the_unfused_mlp():
    torch = pytest.importorskip("torch")
    from kernels.tp_shapes import interleave
    g = torch.Generator().manual_seed(1)
    x = [torch.randn(3, 8, generator=g) for _ in range(2)]
    gate, up = torch.randn(256, 8, generator=g), torch.randn(256, 8, generator=g)
    W = interleave(gate, up)
    assert W.shape == (512, 8) and torch.equal(W[:128], gate[:128]) and torch.equal(W[128:256], up[:128])
    (got,) = ag_gemm.reference(x, [W], act="silu_mul")
    xf = torch.cat(x)
    want = torch.nn.functional.silu(xf @ gate.t()) * (xf @ up.t())
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="must match"):
        interleave(gate, up[:128])
