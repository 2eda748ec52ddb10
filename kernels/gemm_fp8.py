"""Block-scaled FP8 GEMM for Hopper (sm_90a), DeepSeek-V3's recipe: ``C = (SA ⊙ A) · (SB ⊙ B)ᵀ``.

- A: M×K ``float8_e4m3fn``, row-major (activations); B: N×K e4m3 (an ``nn.Linear`` weight, so
  ``C = A·Bᵀ``); C: M×N bf16.
- SA: one fp32 scale per row and 128 elements of K, stored K-block-major as a ``(ceil(K/128), Mp)``
  array (``Mp``: M rounded up to 4, so rows are 16-byte aligned for TMA) — logically the
  ``(M, K/128)`` tensor with layout ``S[(M, KB):(1, Mp)]``, the layout DeepGEMM and cuBLAS use;
  SB: one fp32 scale per 128×128 block of B, ``(ceil(N/128), ceil(K/128))`` row-major.
- ``C[i, j] = Σ_kb SA[i, kb] · SB[j // 128, kb] · Σ_{k in kb} A[i, k] · B[j, k]``.

The kernel is a composition of :mod:`kernels.parts`: a tile scheduler
(:class:`~kernels.parts.schedulers.persistent.Persistent` over CTA pairs or single CTAs, or with
``stream_k`` :class:`~kernels.parts.mainloops.fp8_block_scaled.FP8StreamK`), the block-scaled mainloop
(:class:`~kernels.parts.mainloops.fp8_block_scaled.BlockScaled`: per-k-block wgmma into a partial
accumulator and fp32 promotion; B whole or multicast to CTA pairs) and the store epilogue through a
static buffer (:class:`~kernels.parts.epilogues.static_store.StaticStore`, with stream-K's one-site
hand-over; or with ``split_k`` :class:`~kernels.parts.mainloops.fp8_block_scaled.FP8SplitK` with
:class:`~kernels.parts.epilogues.one_site_split_k.OneSiteSplitK`).  Tile widths ``bn`` 128, 192 or
256, or 64 for decode-sized M (more tiles over N); ``cluster=2``: CTA pairs on vertically
neighbouring tiles sharing B; ``stream_k``: the last waves split over all CTAs in k-blocks;
``split_k=S``: every tile's k-blocks cut into S slices on different CTAs, fp32 partials added in
slice order (both bn 64, 128 or 256, no clusters); ``tile_m`` 16, 32 or 64: the transposed decode
tile (:class:`~kernels.parts.mainloops.fp8_transposed.TransposedBlockScaled` with
:class:`~kernels.parts.epilogues.static_transposed_store.StaticTransposedStore`: ``Cᵀ = B·Aᵀ``, 128
weight rows × tile_m rows of A, for M ≤ tile_m; split-K composes).  The configuration space and its selection by
shape: :mod:`kernels.gemm_fp8_select`.  Why each choice, with the measurements: ``docs/gemm_fp8.md``.

A run-time M (:func:`make_dynamic`, ``M=None``): one artifact for every row count, A, SA and C bound
at launch (their TMA maps encoded from the tensors, SA's row stride ``round_up(M, 4)`` included);
with ``max_rows`` the tile grid is scheduled statically for that many rows (so split-K and stream-K
serve it; rows past M load zeros and store nothing) and a launch with more is refused; without, the
persistent grid is ``min(sms, tiles)`` of the run-time tile count, or in CTA pairs ``sms`` CTAs over
the run-time count of pairs of block-rows (pairs past it get no tile; with an odd number of
block-rows the last pair's second CTA loads zeros past M and stores nothing, as a bounded M's rows
past M do).

Shapes need not be multiples of the tile: TMA zero-fills loads past M, N or K and clips stores.
K may be a single k-block (K = 128: SA's tensor map then has an extent-1 dimension, which gets the
packed stride the driver accepts, :func:`axe.backends.cuda.tensormap.packed_strides`); a static M, N
or K smaller than one tile is refused (a run-time M may be any count: A and C are declared through a
tile-high view).
"""

from math import gcd

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.fp8_blocks import reference, scale_shapes  # noqa: F401  (torch-only: the GPU side imports it)
from kernels.gemm_config import MAX_BOUND
from kernels.gemm_fp8_select import STAGES, TILE_M_STAGES
from kernels.parts import compose
from kernels.parts.epilogues.one_site_split_k import OneSiteSplitK
from kernels.parts.epilogues.static_store import OneSiteHandover, StaticStore
from kernels.parts.epilogues.static_transposed_store import StaticTransposedStore
from kernels.parts.mainloops.fp8_block_scaled import (BK, BM, FP8, PART, BlockScaled, FP8SplitK, FP8StreamK,  # noqa: F401
                                                      fp8_tile)
from kernels.parts.mainloops.fp8_transposed import TILE_M, TransposedBlockScaled
from kernels.parts.mainloops.tma_wgmma import HALF, MulticastB, WholeB
from kernels.parts.schedulers.persistent import Persistent
from kernels.parts.schedulers.stream_k import StreamK  # noqa: F401  (the split tests model)
from kernels.parts.tiles import rows_view, unbake_rows

SMS, GROUP = 132, 16
THREADS, PRODUCER_REGS, CONSUMER_REGS = 384, 40, 232


def check(M, N, K, bn, sms, cluster, stream_k, split_k=1, max_rows=None, tile_m=BM):
    """The configuration's and the sizes' conditions (``M`` None: a run-time M, at most ``max_rows``)."""
    if tile_m != BM:
        return check_transposed(M, N, K, bn, cluster, stream_k, max_rows, tile_m)
    if bn not in STAGES:
        raise ValueError(f"gemm_fp8: bn must be one of {sorted(STAGES)}, got {bn!r}")
    if cluster not in (1, 2) or sms % cluster:
        raise ValueError(f"gemm_fp8: cluster must be 1 or 2 and divide sms={sms}, got {cluster!r}")
    if max_rows is not None and not (M is None and 1 <= max_rows <= MAX_BOUND):
        raise ValueError(f"gemm_fp8: max_rows bounds a run-time M (make_dynamic) by 1..{MAX_BOUND}, got {max_rows!r}")
    if (M is not None and M < BM) or N < bn or K < BK:
        raise ValueError(f"gemm_fp8: {M}x{N}x{K} is smaller than one {BM}x{bn} tile and one {BK}-wide k-block "
                         "(a TMA box larger than its whole tensor is not built for a static size: no GPU case "
                         "covers it; a run-time M takes any row count)")
    if N % 8 or K % 16:
        raise ValueError(f"gemm_fp8: N={N} must be a multiple of 8 and K={K} of 16 (TMA: 16-byte row pitches)")
    if (stream_k or split_k > 1) and (bn % PART and PART % bn or cluster != 1):
        raise ValueError(f"gemm_fp8: stream_k and split_k are built for bn 64, 128 or 256 without clusters (a tile "
                         f"width the hand-over's {PART}-column partial chunks fit), got bn={bn}, cluster={cluster}")
    if stream_k and split_k > 1:
        raise ValueError("gemm_fp8: stream_k and split_k are two tile schedulers; pick one")
    if M is None and max_rows is None and (stream_k or split_k > 1):
        raise ValueError("gemm_fp8: a run-time M without max_rows runs the persistent schedule (single CTAs or CTA "
                         "pairs), its tile count an expression of M; stream-K and split-K plan their work over a tile "
                         f"grid fixed at build time (got stream_k={stream_k}, split_k={split_k}): bound it with max_rows")


def check_transposed(M, N, K, bn, cluster, stream_k, max_rows, tile_m):
    """The decode tile's conditions (``tile_m`` < 128: computed transposed, 128 weight rows × tile_m
    rows of A)."""
    if tile_m not in TILE_M:
        raise ValueError(f"gemm_fp8: tile_m must be {BM} or one of {TILE_M} (the transposed decode tile), got {tile_m!r}")
    rows = max_rows if M is None else M
    if rows is None or not 1 <= rows <= tile_m:
        raise ValueError(f"gemm_fp8: the decode tile (tile_m={tile_m}) holds at most tile_m rows of A: it needs a static "
                         f"M or max_rows in 1..{tile_m}, got M={M}, max_rows={max_rows}")
    if max_rows is not None and M is not None:
        raise ValueError(f"gemm_fp8: max_rows bounds a run-time M (make_dynamic), got M={M}, max_rows={max_rows}")
    if bn != PART or cluster != 1 or stream_k:
        raise ValueError(f"gemm_fp8: the decode tile (tile_m={tile_m}) is {PART} weight rows wide (bn={PART}) on single "
                         f"CTAs without stream-K (split_k composes), got bn={bn}, cluster={cluster}, stream_k={stream_k}")
    if N < BM or K < BK:
        raise ValueError(f"gemm_fp8: the decode tile needs N={N} >= {BM} weight rows and K={K} >= one {BK}-wide k-block")
    if N % 8 or K % 16:
        raise ValueError(f"gemm_fp8: N={N} must be a multiple of 8 and K={K} of 16 (TMA: 16-byte row pitches)")


def parts(M, N, K, bn, stages, sms, group, cluster, stream_k, split_k=1, rows=None, tile_m=BM):
    """``(scheduler, mainloop, epilogue)``: new objects (they keep a build's state).  ``rows``: the
    row count the tile grid is planned for (default M; a bound on a run-time M).  ``tile_m`` below 128:
    the transposed decode tile (:func:`transposed_parts`)."""
    rows = M if rows is None else rows
    sa_shape, sb_shape = scale_shapes(M, N, K)
    k_iters = sa_shape[0]
    # split-K's slices are all L long: the last one may walk past K (the mainloop clamps SB there)
    k_loaded = -(-k_iters // split_k) * split_k
    if tile_m != BM:
        return transposed_parts(N, rows, k_iters, sb_shape[0], k_loaded, tile_m, stages, sms, group, split_k)
    main = BlockScaled(bn, stages, k_iters, sb_shape[0], MulticastB() if cluster > 1 else WholeB(), k_loaded)
    if stream_k:
        sched = FP8StreamK(rows, N, BM, bn, sms, group, k_iters, HALF, bn)
    elif split_k > 1:
        sched = FP8SplitK(rows, N, BM, bn, sms, group, k_iters, split_k, HALF)
    else:       # a pair's CTAs take block-rows 2p and 2p + 1 (the second past M when they are odd)
        sched = Persistent(rows, N, BM, bn, sms // cluster, max(group // cluster, 1), stack=cluster)
    # the epilogue's chunk: the widest dividing both the tile and an SB block (its TMA box's width)
    epi = StaticStore(main, sched, "bfloat16", gcd(bn, PART), PART)
    if stream_k:
        epi = OneSiteHandover(epi, k_iters)
    elif split_k > 1:
        epi = OneSiteSplitK(epi, split_k)
    return compose(sched, main, epi)


def transposed_parts(N, rows, k_iters, n_blocks, k_loaded, tile_m, stages, sms, group, split_k):
    """The decode tile's ``(scheduler, mainloop, epilogue)``: the tile grid of ``Cᵀ`` (N weight rows
    by ``rows`` rows of A) in 128 × ``tile_m`` tiles, cut in ``split_k`` slices of K where asked (the
    partials handed over as the 128-row tile's split-K does)."""
    main = TransposedBlockScaled(tile_m, stages, k_iters, n_blocks, k_loaded)
    if split_k > 1:
        sched = FP8SplitK(N, rows, BM, tile_m, sms, group, k_iters, split_k, HALF)
    else:
        sched = Persistent(N, rows, BM, tile_m, sms, group)
    epi = StaticTransposedStore(main, sched, "bfloat16")
    if split_k > 1:
        epi = OneSiteSplitK(epi, split_k)
    return compose(sched, main, epi)


def kernel(M, N, K, sched, main, epi, sms):
    """The ``tvm.tirx`` PrimFunc of the composition on ``sms`` persistent CTAs (without a split of K
    the workspace and flags leave the signature).  A run-time ``M`` (a TIR variable): A, SA and C are
    declared through tile-high views and their TMA maps take M, and SA's row stride, from the tensors;
    so are they for the transposed decode tile, whose A tile may be taller than M."""
    sa_shape, sb_shape = scale_shapes(M, N, K)
    k_iters, bn, acc_layout, part_layout = main.k_iters, main.bn, main.acc_layout(), main.part_layout()
    narrow = not isinstance(M, int) or isinstance(main, TransposedBlockScaled)
    grid = sched.launch_grid(sms)

    @T.prim_func
    def gemm_fp8_kernel(A_: T.Buffer((M, K), FP8), B_: T.Buffer((N, K), FP8), SA_: T.Buffer(sa_shape, "float32"),
                        SB_: T.Buffer(sb_shape, "float32"), C_: T.Buffer((M, N), "bfloat16"),
                        A_map: T.handle("tensormap"), B_map: T.handle("tensormap"),
                        SA_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
                        W_: T.Buffer(sched.workspace, "float32"), F_: T.Buffer(sched.flags(sms), "int32")):
        Ax.cuda.min_blocks_per_sm(1)
        cid, tx = main.launch(grid, THREADS)
        A = Ax.param(rows_view(A_, narrow), tensormap=A_map)
        B = Ax.param(B_, tensormap=B_map)
        SA = Ax.param(rows_view(SA_, narrow, axis=1), tensormap=SA_map)
        SB = Ax.param(SB_)
        C = Ax.param(rows_view(C_, narrow), tensormap=C_map)
        epi.declare_scratch(W_, F_)
        pool = Ax.cuda.dynamic_shared(main.smem, FP8)
        main.setup()
        cbuf = epi.shared()
        pipe = main.pipeline()
        with Ax.cuda.role(0, 1, regs=PRODUCER_REGS):
            with Ax.warps(0, 1):
                for it in T.serial(sched.trips(sched.count(cid))):
                    m_blk, n_blk = sched.coords(cid, it, main.rank)
                    for kb in T.serial(k_iters):
                        i = it * k_iters + kb
                        main.load(pool, pipe, A, B, SA, i, m_blk, n_blk, kb)
                sched.produce_rest(cid, lambda i, m_blk, n_blk, kb:
                                   main.load(pool, pipe, A, B, SA, i, m_blk, n_blk, kb))
        with Ax.cuda.role(1, 3, regs=CONSUMER_REGS, each=True):
            wg = Ax.cuda.warpgroup_index()
            leader = tx % 128 == 0
            acc = Ax.registers((HALF, bn), "float32", acc_layout, name="acc")
            part = Ax.registers((HALF, main.part_n), "float32", part_layout, name="part")
            out = Ax.registers((HALF, bn), "bfloat16", acc_layout, name="out")
            for j in T.serial(sched.trips(sched.count(cid))):
                m_blk, n_blk = sched.coords(cid, j, main.rank)
                main.consume(pool, SB, pipe, acc, part, wg, j, m_blk, n_blk)
                epi.store(acc, out, cbuf, C, None, wg, leader, m_blk, n_blk)
            sched.consume_rest(cid, lambda base, k0, k1, m_blk, n_blk: main.k_range(pool, SB, pipe, acc, part, wg,
                                                                                    base, k0, k1, m_blk, n_blk),
                               lambda m_blk, n_blk, k0, k1: epi.finish(acc, out, cbuf, C, cid, wg, leader,
                                                                       m_blk, n_blk, k0, k1, part))
            Ax.cuda.tma_store_wait(0, pred=leader)
        main.teardown()
    if narrow:
        unbake_rows(Ax.current_build().tensormaps, ("A_map", "C_map", "SA_map"), vectors=("SA_map",))
    return gemm_fp8_kernel if sched.hands_over else Ax.without_params(gemm_fp8_kernel, ("W_", "F_"))


def make(M, N, K, bn=128, stages=None, sms=SMS, group=GROUP, name=None, cluster=1, stream_k=False, split_k=1,
         max_rows=None, tile_m=BM):
    """The block-scaled FP8 GEMM kernel; ``M`` None: a run-time M (:func:`make_dynamic`), scheduled
    for ``max_rows`` rows where given.  ``bn``: tile columns (64, 128, 192 or 256); ``cluster=2``: CTA
    pairs on vertically neighbouring tiles, each loading half of the B tile with a TMA multicast to
    both (B's L2 traffic per CTA halved, as in kernels/gemm.py); ``stream_k``: split the last waves'
    tiles over all CTAs in k-blocks; ``split_k=S``: cut every tile's K into S slices on different
    CTAs (both bn 128 or 256, no clusters); ``tile_m`` 16, 32 or 64: the transposed decode tile (128
    weight rows × tile_m rows of A, for at most tile_m rows: a static M or ``max_rows``; bn 128, split_k
    composes)."""
    check(M, N, K, bn, sms, cluster, stream_k, split_k, max_rows, tile_m)
    stages = stages or (STAGES[bn] if tile_m == BM else TILE_M_STAGES[tile_m])
    dyn = M is None
    if dyn:                 # a TIR variable: A (M, K), SA (KB, round_up(M, 4)) and C (M, N) bind it at launch
        import tvm
        M = tvm.tirx.Var("M", "int32")
    config = (M, N, K, bn, stages, sms, group, cluster, stream_k, split_k, max_rows, tile_m)
    parts(*config)          # refusals now, not at build time

    def factory():
        target = Ax.current_build().target
        if Ax.target_family(target) != "cuda" or Ax.target_arch(target) != 90:
            raise Ax.TargetError(f"gemm_fp8 on {target}: the FP8 block-scaled mainloop is built for sm_90a's wgmma "
                                 "(no tcgen05 or trn1 form yet)")
        if max_rows is not None:        # scheduled for max_rows: a launch with more is refused
            Ax.current_build().symbol_max["M"] = max_rows
        return kernel(M, N, K, *parts(*config), sms)

    default = f"gemm_fp8_dyn_{N}x{K}" if dyn else f"gemm_fp8_{M}x{N}x{K}"
    return Ax.Kernel(name or default, factory, reference=reference, outputs=("C",),
                     meta={"M": None if dyn else M, "N": N, "K": K, "bn": bn, "stages": stages, "grid": (sms,),
                           "threads": THREADS, "cluster": cluster, "stream_k": stream_k, "split_k": split_k,
                           "max_rows": max_rows, "tile_m": tile_m})


def build(M, N, K, bn=128, name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact (CUDA source, PTX, cubin, launch.json)."""
    return Ax.compile_kernel(make(M, N, K, bn, name=name, **kw), target)


def make_dynamic(N, K, bn=128, max_rows=None, name=None, **kw):
    """The FP8 GEMM for any number of rows M, read off A at launch (one artifact per bucket of M):
    scheduled statically for ``max_rows`` (≤ :data:`~kernels.gemm_config.MAX_BOUND`) rows where
    given — split-K and stream-K need that — else the persistent grid over the run-time tile count,
    on single CTAs or CTA pairs (``cluster=2``).  ``kw``: :func:`make`'s options."""
    return make(None, N, K, bn, name=name, max_rows=max_rows, **kw)


def build_dynamic(N, K, bn=128, max_rows=None, name=None, target="sm_90a", **kw):
    """Build :func:`make_dynamic`'s kernel into an artifact."""
    return Ax.compile_kernel(make_dynamic(N, K, bn, max_rows, name, **kw), target)


#: the example ``axe build kernels/gemm_fp8.py`` builds: DeepSeek-V3's attention output projection
#: shape at M = 4096 (N=7168, K=2048)
gemm_fp8_example = make(4096, 7168, 2048, name="gemm_fp8_4096x7168x2048")
