"""Fused all-gather + GEMM for tensor-parallel column-parallel layers (gate/up projections), on a
mesh of ``world`` GPUs.

Each rank holds ``A_r`` (M/w × K: its rows of the activations) and ``B_r`` (its rows of N of the
weight: N/w × K stored as an ``nn.Linear`` weight, ``b_major="col"``, or K × N/w); it computes
``C_r = all_gather(A) · B_rᵀ`` — every row, its N/w columns.  The signature is declared with DTensor
placements — A ``Shard(0)``, B ``Shard(0)`` over N (``Shard(1)`` for K × N), C ``Shard(1)`` — and
travels in ``launch.json``; the runtime checks every argument before launching.

This is the Hopper GEMM of ``kernels/gemm.py`` with two other parts: the same warp-specialized TMA +
wgmma mainloop (persistent 128×256 tiles, 4 stages), the gather order as tile scheduler
(:mod:`kernels.parts.schedulers.gather`: own rows first, read from ``A_r`` itself) and the
all-gather part in the epilogue's place (:mod:`kernels.parts.epilogues.all_gather`): the producer
warpgroup's idle warps push ``A_r`` into every peer's gathered buffer piece by piece while the
consumers compute the own rows, and the loads of a peer's rows wait for their pieces' signals.

Shapes: M a multiple of ``world`` with M/w a multiple of 128 (the tile's rows; smaller row counts
go through the non-fused path, :func:`axe.torch.distributed` picks), K a multiple of 64, N a
multiple of ``world`` with N/w a multiple of 8.
"""

import axe.lang as Ax
from kernels import gemm
from kernels.parts import CompositionError, Problem, compose
from kernels.parts.epilogues.all_gather import PIECE, AllGather
from kernels.parts.epilogues.silu_mul import SiluMulStore
from kernels.parts.epilogues.store import ChunkedStore
from kernels.parts.schedulers.gather import GatherOrder
from kernels.tp_shapes import ag_gemm_fits as fits

__all__ = ["make", "build", "reference", "fits"]


def reference(A_parts, B_parts, b_major="col", act=None, bn=256):
    """The fp32 result each rank should hold: ``cat(A_parts) · B_r`` for each rank's ``B_r``; with
    ``act="silu_mul"`` then silu(gate)·up of each ``bn``-column tile's halves."""
    import torch
    A = torch.cat([a.float() for a in A_parts])
    out = [A @ (b.float().t() if b_major == "col" else b.float()) for b in B_parts]
    if act == "silu_mul":
        h = bn // 2
        out = [torch.nn.functional.silu(c.reshape(c.shape[0], -1, 2, h)[:, :, 0]).mul(
               c.reshape(c.shape[0], -1, 2, h)[:, :, 1]).reshape(c.shape[0], -1) for c in out]
    return out


def parts(problem, cfg, world, m, push="sm", act=None):
    """``(scheduler, mainloop, epilogue)``: the gather order, :func:`kernels.gemm.mainloop`'s sm_90a
    mainloop, the all-gather part over the chunked store; composed, so a configuration that cannot
    work (stream-K, CTA pairs, ping-pong) is refused naming the parts."""
    main = gemm.mainloop(problem, cfg, "wgmma")
    pieces = cfg.bm // PIECE if push == "sm" else 0
    sched = GatherOrder(m, problem.N, cfg.bm, cfg.bn, cfg.ctas, cfg.band, world, pieces, stack=cfg.cluster)
    store = (SiluMulStore if act == "silu_mul" else ChunkedStore)(
        main, sched, problem.dtype, cfg.epilogue or gemm.EPILOGUE["wgmma"], cfg.epilogue_bufs)
    epi = AllGather(store, sched, m, problem.K, problem.N, world, problem.b_major, problem.b_shape, cfg.sms, push)
    return compose(sched, main, epi)


def make(M, N, K, world, dtype="bfloat16", b_major="col", name=None, push="sm", act=None, **config):
    """The fused kernel (an :class:`axe.lang.Kernel`) for global M × N × K on ``world`` GPUs;
    ``push``: ``"sm"`` (the producer warpgroup's idle warps push the rows) or ``"copy_engine"`` (the
    runtime stages them with ``cudaMemcpyAsync`` before the launch); ``act="silu_mul"``: the fused
    gate/up projection — B's rows interleaved by tile (:func:`kernels.tp_shapes.interleave`),
    C = silu(gate)·up with N/(2w) columns per rank; ``config``:
    :class:`kernels.gemm.Config`'s keywords (stream-K, split-K, CTA pairs and ping-pong are refused:
    the gather order is built for the cooperative tile)."""
    why = fits(M, N, K, world)
    if why:
        raise ValueError(f"ag_gemm: {why}")
    if act not in (None, "silu_mul"):
        raise ValueError(f"ag_gemm: act must be None or 'silu_mul', got {act!r}")
    gemm.check(M, N, K, dtype, b_major)
    m, n = M // world, N // world        # each rank: its rows of A, its columns of C
    cfg = gemm.Config.of(config, "ag_gemm")
    if cfg.stream_k or cfg.split_k > 1:
        raise ValueError("ag_gemm: stream-K and split-K are not built with the gather order")
    problem = Problem(M, n, K, dtype, b_major, a_shape=(m, K))
    try:
        epi = parts(problem, cfg, world, m, push, act)[2]
        epi.out_cols(problem.N)
    except CompositionError as err:
        raise ValueError(f"ag_gemm: {err}") from None
    return gemm.mesh_kernel("ag_gemm", name, world, problem, cfg, lambda: parts(problem, cfg, world, m, push, act),
                            "the gather order", gemm.gpu_sizes(None, n, K))


def build(M, N, K, world, dtype="bfloat16", b_major="col", name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact."""
    return Ax.compile_kernel(make(M, N, K, world, dtype, b_major, name, **kw), target)
