"""``C = A·Bᵀ`` on ``mma.sync`` as :func:`kernels.inferred.hand_mma_gemm.gemm` (the same kernel
around its tiles) with every tile inferred: mma.sync gives the accumulator and the A and B
registers their m16n8k16 fragments, ldmatrix then gives the shared tiles the swizzle its 16-byte
rows read without bank conflicts."""

import axe.lang as Ax
from kernels.inferred.hand_mma_gemm import BK, BM, BN, K, M, N, tiled_gemm


def _tiles():
    return (Ax.shared((BM, BK), "float16", Ax.INFER, name="As"), Ax.shared((BN, BK), "float16", Ax.INFER, name="Bs"),
            Ax.registers((BM, BK), "float16", name="Ar"), Ax.registers((BK, BN), "float16", name="Br"),
            Ax.registers((BM, BN), "float32", name="acc"))


def make(m, n, k):
    """The kernel with inferred tiles at ``m×n×k`` (multiples of the 32×32×32 tile)."""
    return tiled_gemm(_tiles, "mma_gemm", m, n, k)


gemm = make(M, N, K)

#: the pair ``benchmarks/inferred.py`` times: (size, hand, inferred, hand units, inferred units)
BENCH = ("4096x4096x4096 fp16 -> fp32, mma.sync",
         ("kernels.inferred.hand_mma_gemm", "make", (4096, 4096, 4096), {}),
         ("kernels.inferred.mma_gemm", "make", (4096, 4096, 4096), {}),
         ["SMEM", "REG_A", "REG_B", "ACC", "k_step", "tiled_gemm", "_tiles", "make"],
         ["kernels.inferred.hand_mma_gemm:k_step", "kernels.inferred.hand_mma_gemm:tiled_gemm", "_tiles", "make"])
