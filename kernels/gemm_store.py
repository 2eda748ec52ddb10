"""The store epilogue of a GEMM configuration (the GPU form of :mod:`kernels.gemm`): which part of
:mod:`kernels.parts.epilogues` stores a tile — by the problem's orientation (a transposed decode
tile), the activation fused into the store (``act``), the fused operands (``epilogue_ops``) — and
the hand-over that finishes a split tile (stream-K's or split-K's) around it.

Law: the part chosen stores exactly what :func:`kernels.gemm.reference` computes for the
configuration; a combination no part composes is a :class:`~kernels.parts.CompositionError`
naming both.
"""

import math

from kernels.gemm_config import EPILOGUE, FUSED_EPILOGUE
from kernels.parts import CompositionError
from kernels.parts.epilogues.elementwise import Elementwise
from kernels.parts.epilogues.handover import Handover, SplitKHandover, SpreadHandover
from kernels.parts.epilogues.silu_mul import SiluMulStore
from kernels.parts.epilogues.store import ChunkedStore
from kernels.parts.epilogues.transposed_silu_mul import PERIOD, TransposedSiluMul
from kernels.parts.epilogues.transposed_store import TransposedStore

__all__ = ["ACTS", "PERIOD", "store"]

#: the activations fused into the store (``act``): ``silu_mul`` stores ``silu(gate)·up`` of a weight
#: interleaved in periods of :data:`PERIOD` rows (``kernels.tp_shapes.interleave(gate, up, bn=PERIOD)``)
ACTS = ("silu_mul",)


def store(problem, main, sched, cfg, gen, act=None):
    """The epilogue of ``problem`` on mainloop ``main`` (family ``gen``) and scheduler ``sched`` for
    the configuration ``cfg`` (``act``: an activation of :data:`ACTS`, or None)."""
    if act is not None and cfg.epilogue_ops:
        raise CompositionError(f"act={act!r} and epilogue_ops={cfg.epilogue_ops!r} are two fused epilogues; "
                               "the GEMM composes one")
    if problem.swap:
        epi = (TransposedSiluMul if act else TransposedStore)(main, sched, problem.dtype)
    elif act:
        try:
            epi = SiluMulStore(main, sched, problem.dtype, cfg.epilogue or math.gcd(EPILOGUE[gen], cfg.bn),
                               cfg.epilogue_bufs, PERIOD)
            epi.out_cols(problem.N)         # the tile divides N: refused at composition, not at the build
        except ValueError as err:
            raise CompositionError(str(err).removeprefix("gemm: ")) from None
    elif cfg.epilogue_ops:
        epi = Elementwise(main, sched, problem.dtype, cfg.epilogue or FUSED_EPILOGUE[0],
                          cfg.epilogue_bufs or FUSED_EPILOGUE[1], cfg.epilogue_ops)
    else:
        chunk = cfg.bn if cfg.pingpong else math.gcd(EPILOGUE[gen], cfg.bn)
        epi = ChunkedStore(main, sched, problem.dtype, cfg.epilogue or chunk, cfg.epilogue_bufs)
    if cfg.stream_k:
        return SpreadHandover(epi, sched.split) if sched.split.spread else Handover(epi, main.k_iters)
    if cfg.split_k > 1:
        return SplitKHandover(epi, cfg.split_k)
    return epi
