"""The production GEMM (:mod:`kernels.gemm`: persistent, warp-specialized, TMA + wgmma in a
``stages``-deep ring, cast + stmatrix + TMA store) with its shared tiles inferred: the same
scheduler, epilogue and kernel skeleton around :class:`~kernels.parts.mainloops.inferred.Inferred`,
whose stage tiles and store buffers are open views of the shared pool.  The hand twin is
``kernels.gemm.make`` at the same configuration; their TIR and CUDA source are compared by
``tests/test_inferred_pipelined.py``.

Configurations: the cooperative one-GPU mainloop with the chunked store (``tile_n``, ``tile_k``,
``stages``, ``in_flight``, ``epilogue``, ``epilogue_bufs``, ``group``, ``sms``); the others (ping-pong,
CTA pairs, stream-K, split-K, fused operands, the decode tile) are refused by name."""

import math

import axe.lang as Ax
from kernels import gemm
from kernels.gemm_config import BM, EPILOGUE, Config
from kernels.parts import Problem, compose
from kernels.parts.epilogues.store import ChunkedStore
from kernels.parts.mainloops.inferred import Inferred
from kernels.parts.schedulers.persistent import Persistent
from kernels.parts.warp_specialized import THREADS, kernel

M = N = K = 4096


def make(m, n, k, dtype="bfloat16", b_major="row", name=None, **config):
    """The kernel at ``m×n×k`` (static sizes) with ``config`` (:class:`~kernels.gemm_config.Config`'s keywords)."""
    cfg = Config.of(config)
    other = [o for o in cfg.options() if o not in ("tile_n", "tile_k")]
    if other:
        raise ValueError(f"pipelined_gemm: the inferred twin is the cooperative one-GPU GEMM with the chunked store; "
                         f"{', '.join(other)} are kernels/gemm.py's")
    gemm.check(m, n, k, dtype, b_major)
    problem = Problem(m, n, k, dtype, b_major)

    def factory():
        target = Ax.current_build().target
        sizes = gemm.gpu_sizes(m, n, k, cfg.bn, cfg.bk)
        if gemm.generation(target) != "wgmma" or sizes:
            raise Ax.TargetError(f"pipelined_gemm on {target}: built for sm_90a's wgmma mainloop{': ' + sizes if sizes else ''}")
        main = Inferred(dtype, b_major, BM, cfg.bn, cfg.bk, cfg.stages, -(-k // cfg.bk), cfg.in_flight)
        sched = Persistent(m, n, BM, cfg.bn, cfg.ctas, cfg.band)
        epi = ChunkedStore(main, sched, dtype, cfg.epilogue or math.gcd(EPILOGUE["wgmma"], cfg.bn), cfg.epilogue_bufs)
        return kernel(problem, *compose(sched, main, epi), cfg.sms)

    return Ax.Kernel(name or f"pipelined_gemm_{dtype}_{b_major}", factory, reference=gemm.reference, outputs=("C",),
                     meta={"M": m, "N": n, "K": k, "dtype": dtype, "b_major": b_major, "grid": (cfg.sms,),
                           "threads": THREADS, "cluster": 1})


pipelined_gemm = make(M, N, K)
