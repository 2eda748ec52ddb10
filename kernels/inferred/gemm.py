"""``C = A·Bᵀ`` as :func:`kernels.inferred.hand_gemm.gemm` (the same kernel around its tiles) with
every tile inferred: wgmma gives the accumulator its fragment and the shared tiles the K-major
128-byte swizzle its descriptors read, which TMA also writes."""

import axe.lang as Ax
from kernels.inferred.hand_gemm import BK, BM, BN, K, M, N, tiled_gemm


def _tiles():
    return (Ax.shared((BM, BK), "float16", Ax.INFER, name="As"), Ax.shared((BN, BK), "float16", Ax.INFER, name="Bs"),
            Ax.registers((BM, BN), "float32", name="acc"))


def make(m, n, k):
    """The kernel with inferred tiles at ``m×n×k`` (multiples of the 64×128×64 tile)."""
    return tiled_gemm(_tiles, "gemm", m, n, k)


gemm = make(M, N, K)
