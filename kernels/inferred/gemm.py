"""``C = A·Bᵀ`` as :func:`kernels.inferred.hand_gemm.gemm` (the same kernel around its tiles) with
every tile inferred: wgmma gives the accumulator its fragment and the shared tiles the K-major
128-byte swizzle its descriptors read, which TMA also writes."""

import axe.lang as Ax
from kernels.inferred.hand_gemm import BK, BM, BN, KERNEL, tiled_gemm


def _tiles():
    return (Ax.shared((BM, BK), "float16", Ax.INFER, name="As"), Ax.shared((BN, BK), "float16", Ax.INFER, name="Bs"),
            Ax.registers((BM, BN), "float32", name="acc"))


@Ax.kernel(**KERNEL)
def gemm():
    return tiled_gemm(_tiles)
