"""``C = A·Bᵀ`` on Blackwell's ``tcgen05.mma`` (sm_100a) as
:func:`kernels.inferred.hand_tcgen05_gemm.gemm` (the same kernel around its tiles) with every
shared and register tile inferred: tcgen05.mma gives the shared tiles the K-major 128-byte
swizzle its descriptors read (which TMA also writes), tcgen05.mma gives the TMEM accumulator the
data-path layout it writes, tcgen05.ld gives the register tile its 32x32b fragment (thread t:
row t)."""

import axe.lang as Ax
from kernels.inferred.hand_tcgen05_gemm import BK, BM, BN, K, M, N, tiled_gemm


def _tiles():
    return (Ax.shared((BM, BK), "float16", Ax.INFER, name="As"), Ax.shared((BN, BK), "float16", Ax.INFER, name="Bs"),
            Ax.cuda.tmem((BM, BN), "float32", Ax.INFER, name="acc_t"), Ax.registers((BM, BN), "float32", name="acc"))


def make(m, n, k):
    """The kernel with inferred tiles at ``m×n×k`` (multiples of the 128×128×64 tile)."""
    return tiled_gemm(_tiles, "tcgen05_gemm", m, n, k)


gemm = make(M, N, K)
