"""Fused GEMM + reduce-scatter for tensor-parallel down projections, on a mesh of ``world`` GPUs.

Each rank holds ``A_r`` (M × K/w, its K slice of the activations) and ``B_r`` (its K slice of the
weight: N × K/w stored as an ``nn.Linear`` weight, ``b_major="col"``, or K/w × N); the result
``C = Σ_r A_r·B_r`` is scattered by rows: rank r receives rows ``r·M/w … (r+1)·M/w − 1``.  The
signature is declared with DTensor placements — A and B ``Shard(1)`` (over K), C ``Shard(0)`` —
and travels in ``launch.json``; the runtime checks every argument (torch DTensors or per-rank
tensors) against it before launching.

This is the Hopper GEMM of ``kernels/gemm.py`` with two other parts: the same warp-specialized TMA +
wgmma mainloop (persistent 128×256 tiles, 4 stages), the owners' order as tile scheduler
(:mod:`kernels.parts.schedulers.owners`) and the reduce-scatter epilogue
(:mod:`kernels.parts.epilogues.reduce_scatter`), so the communication runs inside the kernel, tile by
tile:

- the output rows are cut by owner, and each rank walks the owners in order ``r+1, r+2, …, r``
  — its own rows last (the virtual grid of ``world · ⌈(M/w)/128⌉`` block-rows is the GEMM's
  grouped persistent schedule);
- a tile owned by a peer is cast to the output type and stashed locally, chunk by chunk, with
  one bulk copy (``cp.async.bulk``) of each 64×128 shared chunk into a local stash laid out as
  that chunk's image; the consumers go straight on to their next tile.  One warp of the producer
  warpgroup per consumer warpgroup (idle in the one-GPU GEMM) waits for the stashed half-tile,
  copies it into this rank's slot of the owner's symmetric staging buffer (``Ax.copy`` to a
  distributed tensor sliced at the owner's device index: 16-byte stores over NVLink), fences at
  system scope and signals the owner (one flag per tile half);
- a tile the rank owns is computed last: its epilogue waits for the flags of every peer
  (bounded by the mesh timeout), bulk-loads the peers' partial chunks into the free chunk
  buffer, ``ldmatrix``-es them into the accumulator's fragment layout, adds them in fp32 and
  stores the sum with TMA.

Every wait on a peer is bounded by the mesh timeout and is inline code, not a function call (a
call made ptxas ignore ``setmaxnreg``, C7507); the forwarding warps copy their half-tile 4 rows per
iteration of a rolled loop so that it fits the producer warpgroup's 56 registers (``rs_regs``; the
consumers keep 224).  The default build has no spills.

``rs_push="bulk"`` lets the consumers' bulk copies write the peer tiles straight into the owner's
memory instead: simpler, but the transfer then sits on the consumers' path (every CTA finishes its
tile at about the same time and all push at once; the README's GEMM + reduce-scatter table measures it).

Because peers compute a rank's rows before their own, the partials arrive while the owner still
computes other tiles, and the only work left after the last tile is its own epilogue.  The
partial sums travel in the output type (bf16/fp16), as with ``torch.mm`` followed by
``reduce_scatter_tensor``; the owner adds in fp32.  Staging holds ``world · M/w · N`` elements
per rank (padded to whole tiles), allocated once from the symmetric heap by the runtime.

Shapes: M and K multiples of ``world``; N and K/w multiples of 8 (TMA row pitch); M/w and N need
not be multiples of the tile (TMA zero-fills and clips).
"""

import axe.lang as Ax
from kernels import gemm
from kernels.parts import CompositionError, Problem, compose
from kernels.parts.epilogues.reduce_scatter import ReduceScatter
from kernels.parts.epilogues.store import ChunkedStore
from kernels.parts.schedulers.owner_rows import OwnerRows
from kernels.parts.schedulers.owners import OwnerOrder
from kernels.parts.schedulers.stream_k import StreamKSchedule
from kernels.tp_shapes import gemm_rs_fits

__all__ = ["make", "build", "reference"]


def reference(A_parts, B_parts, world, b_major="col"):
    """The fp32 result each rank should hold: ``Σ_r A_r·B_r`` split into ``world`` row blocks."""
    total = sum(a.float() @ (b.float().t() if b_major == "col" else b.float()) for a, b in zip(A_parts, B_parts))
    return total.chunk(world)


#: how the owners' order reads A (``rs_a``): one 3-D box per owner's row block of the (owner, rows, K)
#: tensor (any M), or the one-GPU GEMM's 2-D boxes over the (world · rows, K) matrix (M/world a
#: multiple of the 128-row tile)
A_READS = {"owners": OwnerOrder, "rows": OwnerRows}


def parts(problem, cfg, world, rs_comm, rs_push, rs_add="chunks", rs_a="owners", rs_regs=None, rs_order="owners"):
    """``(scheduler, mainloop, epilogue)``: the owners' order (reading A as :data:`A_READS` says, its
    segments in ``rs_order``), :func:`kernels.gemm.mainloop`'s sm_90a mainloop, the reduce-scatter
    epilogue over its chunked store (its producer warpgroup given ``rs_regs`` registers); composed,
    so a configuration that cannot work (stream-K, CTA pairs, ping-pong, 2-D boxes over ragged
    owners) is refused naming the parts."""
    main = gemm.mainloop(problem, cfg, "wgmma")
    if cfg.stream_k:
        sched = StreamKSchedule(problem.M, problem.N, cfg.bm, cfg.bn, cfg.ctas, cfg.band, main.k_iters, gemm.HALF, cfg.bn)
    else:
        sched = A_READS[rs_a](problem.M, problem.N, cfg.bm, cfg.bn, cfg.ctas, cfg.band, world, stack=cfg.cluster,
                              order=rs_order)
    store = ChunkedStore(main, sched, problem.dtype, cfg.epilogue or gemm.EPILOGUE["wgmma"], cfg.epilogue_bufs)
    epi = ReduceScatter(store, sched, problem.M, problem.K, problem.N, world, problem.b_major, problem.b_shape,
                        rs_comm, rs_push, rs_add, rs_regs)
    return compose(sched, main, epi)


def make(M, N, K, world, dtype="bfloat16", b_major="col", name=None, rs_comm=True, rs_push="forward", rs_add="chunks",
         rs_a="owners", rs_regs=None, rs_order="owners", **config):
    """The fused kernel (an :class:`axe.lang.Kernel`) for global M × N × K on ``world`` GPUs;
    ``config``: :class:`kernels.gemm.Config`'s keywords; ``rs_push``: ``"forward"`` or ``"bulk"``;
    ``rs_add``: ``"chunks"`` or ``"registers"`` (how an owner adds the peers' partials: the epilogue's);
    ``rs_a``: ``"owners"`` or ``"rows"`` (how A's k-blocks are loaded: :data:`A_READS`);
    ``rs_regs``: the producer warpgroup's registers, a multiple of 8 (None: 56 where its warps
    forward, else the GEMM's 40; the two consumer warpgroups get the rest, at most 232 each);
    ``rs_comm=False`` / ``"nowait"``: the measurement aids (wrong results: nothing exchanged, or
    pushed without the owners waiting); ``rs_order="raster"``: the owners' segments in row order on
    every rank instead of each rank's own rows last, only with ``rs_comm=False`` (a measurement aid:
    the plain GEMM's tile order)."""
    why = gemm_rs_fits(M, N, K, world)
    if why:
        raise ValueError(f"gemm_rs: {why}")
    gemm.check(M, N, K, dtype, b_major)
    if rs_a not in A_READS:
        raise ValueError(f"gemm_rs: rs_a must be one of {sorted(A_READS)}, got {rs_a!r}")
    if rs_order == "raster" and rs_comm is not False:       # an order outside ORDERS: refused by the scheduler
        raise ValueError(f"gemm_rs: rs_order={rs_order!r} is a measurement aid for rs_comm=False only (with an "
                         "exchange, each rank's own rows come last so that the peers' partials arrive in time)")
    m, k = M // world, K // world        # each rank: its K slice of every owner's M/world rows
    cfg = gemm.Config.of(config, "gemm_rs")
    problem = Problem(m, N, k, dtype, b_major, a_shape=(world, m, k) if rs_a == "owners" else (world * m, k))

    def composed():
        return parts(problem, cfg, world, rs_comm, rs_push, rs_add, rs_a, rs_regs, rs_order)
    try:
        composed()
    except CompositionError as err:
        raise ValueError(f"gemm_rs: {err}") from None
    return gemm.mesh_kernel("gemm_rs", name, world, problem, cfg, composed, "the reduce-scatter epilogue",
                            gemm.gpu_sizes(None, N, K))


def build(M, N, K, world, dtype="bfloat16", b_major="col", name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact."""
    return Ax.compile_kernel(make(M, N, K, world, dtype, b_major, name, **kw), target)


#: the example ``axe build kernels/gemm_rs.py`` and ``axe demo`` build: Llama-3.1-8B's down
#: projection at M = 8192 on 2 GPUs
gemm_rs_llama8b_down_w2 = make(8192, 4096, 14336, 2, name="gemm_rs_llama8b_down_w2")
