"""GEMM in axe: ``C = A·B``, fp16 or bf16, fp32 accumulation, A row-major (M×K), B row-major (K×N)
or column-major (stored N×K, ``C = A·Bᵀ``), for Hopper (sm_90a), Blackwell (sm_100a) and Trainium
(trn1).  One kernel object (:func:`make`) builds for all three; the build's target picks the mainloop.

The kernel is a composition of :mod:`kernels.parts` chosen by the configuration (data, not code
paths): a tile scheduler (:class:`~kernels.parts.schedulers.persistent.Persistent`, with ``stream_k``
:class:`~kernels.parts.schedulers.stream_k.StreamKSchedule`, with ``split_k``
:class:`~kernels.parts.schedulers.split_k.SplitK`), a mainloop
(:class:`~kernels.parts.mainloops.tma_wgmma.Cooperative` or ``PingPong`` on sm_90a with B whole or
multicast to CTA pairs, :class:`~kernels.parts.mainloops.tcgen05.Tcgen05` on sm_100a,
:class:`~kernels.parts.mainloops.neuron.NeuronCore` on trn1) and an epilogue
(:class:`~kernels.parts.epilogues.store.ChunkedStore`, the fused ``Elementwise`` one, or for the
transposed decode tile ``TransposedStore``; wrapped by the stream-K or split-K hand-over), put
together by the warp-specialized skeleton (:mod:`kernels.parts.warp_specialized`).  Defaults:
persistent 128×256 tiles, 64-deep k-blocks, 4 stages, no wgmma group left in flight, two 128-column
store chunks per warpgroup; why each was chosen, with the measurements, is in ``docs/gemm.md``.
The configuration space is :mod:`kernels.gemm_config`; choosing a configuration by shape,
:mod:`kernels.gemm_select`.

Shapes need not be multiples of the tile (nor hold one: fewer rows than a tile are read through a
tile-high view): TMA fills out-of-bounds loads with zeros and clips the stores.  A runtime M (:func:`make_dynamic`) is one artifact for every row count: M is a TIR variable A
and C bind at launch, the persistent grid ``min(sms, tiles)`` an expression of it, A's and C's tensor
maps encoded from the tensors.
"""

import axe.lang as Ax
from kernels.gemm_config import (BK, BM, BN, MAX_BOUND, EPILOGUE, FUSED_EPILOGUE, GROUP, HALF, SMS, STAGES,  # noqa: F401
                                  PROGRAMMATIC_ROWS, TILE_N, Config)
from kernels.gemm_store import ACTS, PERIOD, store
from kernels.parts import CompositionError, Problem, compose
from kernels.parts.mainloops.neuron import NeuronCore
from kernels.parts.mainloops.tcgen05 import Tcgen05
from kernels.parts.mainloops.tma_wgmma import Cooperative, MulticastB, PingPong, WholeB
from kernels.parts.schedulers.persistent import Persistent
from kernels.parts.schedulers.split_k import SplitK
from kernels.parts.schedulers.stream_k import StreamKSchedule
from kernels.parts.warp_specialized import THREADS, kernel

#: trn1's block loop (its layouts carry the TensorE mapping)
TARGETS = {"trn1": NeuronCore()}
SMEM_LIMIT = 227 * 1024


def generation(target):
    """The mainloop family of a build target: ``trn1`` for Trainium, ``tcgen05`` on sm_100a-family,
    else ``wgmma``."""
    if Ax.target_family(target) == "neuron":
        return "trn1"
    return "tcgen05" if 100 <= Ax.target_arch(target) < 120 and target.endswith("a") else "wgmma"


def mainloop(problem, cfg, gen):
    """The GPU mainloop of mainloop family ``gen`` (``wgmma``: cooperative or ping-pong, B whole or
    multicast to CTA pairs; ``tcgen05``)."""
    k_iters = -(-problem.K // cfg.bk)
    if problem.swap:        # Cᵀ = B·Aᵀ: B's rows fill the 128-row side, A's rows (as a column-major B) the narrow one
        return Cooperative(problem.dtype, "col", BM, cfg.tile_m, cfg.bk, cfg.stages, k_iters, cfg.in_flight, WholeB())
    if gen == "tcgen05":
        return Tcgen05(problem.dtype, problem.b_major, BM, BN, BK, cfg.stages, k_iters, cfg.in_flight, cfg.cluster)
    b = MulticastB() if cfg.cluster > 1 else WholeB()
    if cfg.pingpong:
        return PingPong(problem.dtype, problem.b_major, cfg.bn, cfg.bk, cfg.stages, k_iters, cfg.in_flight, b)
    return Cooperative(problem.dtype, problem.b_major, BM, cfg.bn, cfg.bk, cfg.stages, k_iters, cfg.in_flight, b)


def gpu_parts(problem, cfg, gen, act=None):
    """``(scheduler, mainloop, epilogue)`` of the GPU form for mainloop family ``gen`` (``act``: an
    activation of :data:`ACTS` fused into the store, or None)."""
    main = mainloop(problem, cfg, gen)
    k_iters, group, ctas, bm, bn = main.k_iters, cfg.band, cfg.ctas, main.bm, main.bn
    # the tile grid the scheduler walks: C's rows and columns, or the transposed problem's
    rows, cols = (problem.N, problem.rows) if problem.swap else (problem.rows, problem.N)
    if cfg.stream_k:
        sched = StreamKSchedule(rows, cols, bm, bn, ctas, group, k_iters, HALF, bn, stack=cfg.cluster, spread=True)
    elif cfg.split_k > 1:
        sched = SplitK(rows, cols, bm, bn, ctas, group, k_iters, cfg.split_k, HALF)
    else:
        sched = Persistent(rows, cols, bm, bn, ctas, group, stack=cfg.cluster)
    return compose(sched, main, store(problem, main, sched, cfg, gen, act))


def check(M, N, K, dtype, b_major):
    """The problem's own conditions (any target)."""
    if b_major not in ("row", "col"):
        raise ValueError(f"gemm: b_major must be 'row' or 'col', got {b_major!r}")
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"gemm: dtype must be float16 or bfloat16, got {dtype!r}")
    if min(1 if M is None else M, N, K) < 1:
        raise ValueError(f"gemm: empty problem {M}x{N}x{K}")


def gpu_sizes(M, N, K, bn=BN, bk=BK):
    """What only the GPU form needs of the sizes (trn1 masks ragged edges at any size), or None.  Any
    M: fewer rows than a tile are read through a tile-high view."""
    if N % 8 or K % 8:
        return f"N={N} and K={K} must be multiples of 8 (TMA needs 16-byte row pitches)"
    if N < bn or K < bk:
        return f"N={N} or K={K} is smaller than one {bn}-column (tile_n), {bk}-deep (tile_k) tile"
    return None


def make(M, N, K, dtype="float16", b_major="row", name=None, max_rows=None, programmatic=False, act=None, **config):
    """The GEMM kernel (an :class:`axe.lang.Kernel`) for static sizes (``M=None``: a runtime M, see
    :func:`make_dynamic`, at most ``max_rows``); ``config``: :class:`Config`'s keywords.  ``act``
    (:data:`ACTS`): ``"silu_mul"`` stores ``silu(A·B_gate)·(A·B_up)``, C of N/2 columns, B interleaved
    in periods of :data:`PERIOD` (see :func:`reference`); on sm_90a only.  A configuration
    the GPU form cannot compose is refused here; one a target lacks, when building for it (``TargetError``).
    ``programmatic``: the GPU form is launched programmatically (:mod:`kernels.parts.warp_specialized`)."""
    cfg = Config.of(config)
    dyn = M is None
    if max_rows is not None and not (dyn and 1 <= max_rows <= MAX_BOUND):
        raise ValueError(f"gemm: max_rows bounds a runtime M (make_dynamic) by 1..{MAX_BOUND}, got {max_rows!r}")
    if dyn and max_rows is None and (cfg.stream_k or cfg.split_k > 1 or cfg.cluster > 1):
        raise ValueError("gemm: a runtime M (make_dynamic) without max_rows is built for one GPU without stream_k, split_k "
                         "or clusters (got " + ", ".join(o for o in cfg.options() if o != "pingpong") + ")")
    check(M, N, K, dtype, b_major)
    if cfg.bn % 64 and b_major != "col":
        raise ValueError(f"gemm: tile_n={cfg.bn} (not a multiple of 64) needs column-major B (b_major='col', stored "
                         f"N×K: its swizzle runs along K); with b_major={b_major!r} B's tile is whole 64-column swizzle "
                         f"blocks, tile_n one of {TILE_N}")
    if act not in (None,) + ACTS:
        raise ValueError(f"gemm: act must be None or one of {ACTS}, got {act!r}")
    swap = cfg.tile_m < BM
    rows = max_rows if dyn else M               # the most rows a launch may have (None: unbounded)
    if swap and (b_major != "col" or rows is None or rows > cfg.tile_m):
        raise ValueError(f"gemm: the decode tile (tile_m={cfg.tile_m}) needs B column-major (an nn.Linear weight) and "
                         f"at most tile_m rows (a static M or max_rows), got b_major={b_major!r}, M={M}, max_rows={max_rows}")
    if dyn:                 # a TIR variable: A (M, K) and C (M, N) bind it at launch
        import tvm
        M = tvm.tirx.Var("M", "int32")
    problem = Problem(M, N, K, dtype, b_major, rows=max_rows, swap=swap)
    try:        # the sm_90a composition is checked now: its refusals name the parts
        gpu_parts(problem, cfg, "wgmma", act)
    except CompositionError as err:
        raise ValueError(f"gemm: {err}") from None
    sizes = gpu_sizes(None if dyn else M, N, K, cfg.bn, cfg.bk)

    def factory():
        target = Ax.current_build().target
        gen = generation(target)
        if gen == "trn1":
            gpu_only = ["a runtime M"] * dyn + [f"act={act}"] * bool(act) + cfg.options()
            if gpu_only:
                raise Ax.TargetError(f"gemm on {target}: {', '.join(gpu_only)} belong to the GPU form")
            return TARGETS["trn1"].kernel(M, N, K, dtype, b_major)
        if sizes:
            raise Ax.TargetError(f"gemm on {target}: {sizes}")
        if max_rows is not None:        # scheduled for max_rows: a launch with more rows is refused
            Ax.current_build().symbol_max["M"] = max_rows
        if gen == "tcgen05" and (cfg.pingpong or cfg.stream_k or cfg.split_k > 1 or cfg.bn != BN or cfg.bk != BK):
            raise Ax.TargetError("gemm on sm_100a: only the cooperative 128x256 schedule without stream_k, split_k "
                                 "or reduce-scatter is built for tcgen05 so far (got " + ", ".join(
                                     o for o in cfg.options() if o != "cluster>1") + ")")
        if gen == "tcgen05" and act:
            raise Ax.TargetError(f"gemm on sm_100a: act={act!r} is built for sm_90a's wgmma tiles only so far")
        sched, main, epi = gpu_parts(problem, cfg, gen, act)
        smem = (main.smem + epi.smem) * 2 + epi.operand_bytes
        if gen == "tcgen05" and smem > SMEM_LIMIT:
            raise Ax.TargetError(f"gemm on sm_100a: {cfg.stages} stages and {epi.bufs} x {epi.rows}x{epi.epilogue} "
                                 f"epilogue buffers per warpgroup (and the fused operands' slices) need {smem // 1024} KiB of shared memory, more than 227 KiB")
        return kernel(problem, sched, main, epi, cfg.sms, programmatic)

    ref = reference if act is None else (lambda A, B, b_major="row", **kw: reference(A, B, b_major, act=act, **kw))
    return Ax.Kernel(name or f"gemm_{dtype}_{b_major}" + (f"_{act}" if act else ""), factory, reference=ref, outputs=("C",),
                     meta={"M": None if dyn else M, "N": N, "K": K, "dtype": dtype, "b_major": b_major, "act": act,
                           "grid": (cfg.sms,), "threads": THREADS, "cluster": cfg.cluster})


def mesh_kernel(op, name, world, problem, cfg, parts, built_for, sizes):
    """The :class:`axe.lang.Kernel` of a distributed GEMM ``op`` on ``world`` GPUs: ``parts()`` composed
    on the warp-specialized skeleton, built only for wgmma targets (other targets are refused
    naming ``built_for``, the part that needs it) and where TMA takes the sizes (``sizes``: why not,
    or None); the per-rank problem is the kernel's ``meta``."""
    def factory():
        target = Ax.current_build().target
        if generation(target) != "wgmma":
            raise Ax.TargetError(f"{op} on {target}: {built_for} is built for sm_90a's wgmma mainloop")
        if sizes:
            raise Ax.TargetError(f"{op} on {target}: {sizes}")
        return kernel(problem, *parts(), cfg.sms)

    short = "bf16" if problem.dtype == "bfloat16" else "f16"
    return Ax.Kernel(name or f"{op}_{short}_w{world}", factory, reference=reference, outputs=("C",),
                     meta={"M": problem.M, "N": problem.N, "K": problem.K, "dtype": problem.dtype,
                           "b_major": problem.b_major, "grid": (cfg.sms,), "threads": THREADS, "cluster": cfg.cluster})


def reference(A, B, b_major="row", row_scale=None, col_scale=None, bias=None, residual=None, act=None):
    """fp32 ``A·B`` (B as stored: K×N for ``"row"``, N×K for ``"col"``), then the fused operands
    (``epilogue_ops``): ``· row_scale[m] · col_scale[n] + bias[n] + residual[m, n]``; or with
    ``act="silu_mul"`` ``silu(G)·U`` of the product's columns G and U, which each period of
    :data:`PERIOD` columns holds as its first and second halves (C: N/2 columns)."""
    C = A.float() @ (B if b_major == "row" else B.t()).float()
    if act == "silu_mul":
        G, U = C.reshape(C.shape[0], -1, 2, PERIOD // 2).unbind(2)
        return {"C": (G * G.sigmoid() * U).reshape(C.shape[0], -1)}
    for v, f in ((row_scale, lambda c, v: c * v.float().reshape(-1, 1)), (col_scale, lambda c, v: c * v.float().reshape(1, -1)),
                 (bias, lambda c, v: c + v.float().reshape(1, -1)), (residual, lambda c, v: c + v.float())):
        C = C if v is None else f(C, v)
    return {"C": C}


def build(M, N, K, dtype="float16", b_major="row", name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact (CUDA source, PTX, cubin, launch.json)."""
    return Ax.compile_kernel(make(M, N, K, dtype, b_major, name, **kw), target)


def make_dynamic(N, K, dtype="float16", b_major="row", name=None, max_rows=None, act=None, **kw):
    """The GEMM for any number of rows M, read off A at launch (one artifact for every M; N, K, dtype
    and B's layout are the specialization): tile counts ``ceil(M / 128)`` computed in the kernel, the
    persistent grid ``min(sms, tiles)``, A's and C's TMA maps encoded from the tensors.  ``max_rows``
    (at most 128: one block-row) instead schedules statically for that many rows — so split-K,
    stream-K and CTA pairs work — and the runtime refuses a launch with more.  ``kw``: :func:`make`'s
    options (without ``max_rows``: not stream_k, split_k or cluster).  A decode bucket's kernel
    (``max_rows`` at most :data:`~kernels.gemm_config.PROGRAMMATIC_ROWS`) is launched
    programmatically: its launch and set-up overlap the kernel before it in the stream."""
    programmatic = max_rows is not None and max_rows <= PROGRAMMATIC_ROWS
    return make(None, N, K, dtype, b_major, name or f"gemm_dyn_{dtype}_{b_major}" + (f"_{act}" if act else ""), max_rows,
                programmatic=programmatic, act=act, **kw)


def build_dynamic(N, K, dtype="float16", b_major="row", name=None, target="sm_90a", max_rows=None, **kw):
    """Build :func:`make_dynamic`'s kernel into an artifact."""
    return Ax.compile_kernel(make_dynamic(N, K, dtype, b_major, name, max_rows, **kw), target)


#: the examples ``axe build kernels/gemm.py`` and ``axe demo`` build (any size works through
#: :func:`make`): fp16 with row-major B and bf16 with column-major B (C = A·Bᵀ)
gemm_fp16 = make(4096, 4096, 4096, "float16", "row", name="gemm_fp16")
gemm_bf16_nt = make(4096, 4096, 4096, "bfloat16", "col", name="gemm_bf16_nt")
