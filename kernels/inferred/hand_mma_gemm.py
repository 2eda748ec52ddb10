"""The hand-written twin of :mod:`kernels.inferred.mma_gemm`: ``C = A·Bᵀ`` (A M×K, B N×K fp16, C
fp32) on ``mma.sync.m16n8k16`` (sm_80+, built here for sm_90a), one warp per CTA and one 32×32
tile of C each: per 32-wide k-block the warp copies A's and B's tiles into shared memory in
16-byte vectors, ``ldmatrix.x4`` fills the A and B fragments (B through its (N, K) view), and
eight m16n8 accumulators take 2×4×2 ``mma.sync``; the fragments are stored to C.

The layouts are written out here; the inferred twin declares none and gets these."""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout, tx
from kernels.inferred.hand_gemm import inputs, reference  # the same C = A·Bᵀ, fp16 in, fp32 out

M, N, K = 256, 256, 256           # the sizes of ``gemm``; ``make(m, n, k)`` builds others
BM, BN, BK, THREADS = 32, 32, 32, 32

#: the shared tiles: rows of 32 fp16 (64 bytes) under the 64-byte swizzle (ldmatrix's 8 rows of an
#: atom fall in distinct banks)
SMEM = SwizzledLayout(S[(BM, BK)], Swizzle(2, 3, 3))
#: the register tiles: the m16n8k16 fragments (PTX ISA: lane 4g + t holds rows g and g + 8, columns
#: 2t, 2t + 1 (+ 8 for A's second half) of each), the fragments row-major in the warp's registers:
#: A 2×2 fragments of 16×16 (8 registers each), B (K × N) 2×4 of 16×8 and C 2×4 of 16×8 (4 each)
REG_A = S[(2, 2, 8, 2, 2, 4, 2):(16, 2, 4 @ tx, 8, 4, 1 @ tx, 1)]
REG_B = S[(2, 2, 4, 2, 4, 8):(16, 2, 1 @ tx, 1, 4, 4 @ tx)]
ACC = S[(2, 2, 8, 4, 4, 2):(16, 2, 4 @ tx, 4, 1 @ tx, 1)]


def k_step(A, B, tiles, m0, n0, kb, accumulate):
    """k-block kb: A's and B's tiles to shared memory, the fragments by ldmatrix, ``acc (+)= Ar·Br``;
    the barriers keep the next block's stores from overwriting tiles ldmatrix still reads."""
    As, Bs, Ar, Br, acc = tiles
    Ax.copy(As, A[m0:m0 + BM, kb * BK:(kb + 1) * BK])
    Ax.copy(Bs, B[n0:n0 + BN, kb * BK:(kb + 1) * BK])
    Ax.sync()
    Ax.copy(Ar, As)
    Ax.copy(Ax.permute(Br, (1, 0)), Bs)
    Ax.gemm(acc, Ar, Br, accumulate=accumulate)
    Ax.sync()


def tiled_gemm(tiles, name, m, n, k):
    """The ``m×n×k`` kernel around ``tiles()``, which declares ``(As, Bs, Ar, Br, acc)``: the
    k-loop (the first k-block overwrites acc), then acc stored to C."""
    @Ax.kernel(name=name, reference=reference, inputs=lambda device="cuda": inputs(device, m, n, k),
               outputs=("C",), grid=(n // BN, m // BM), threads=THREADS)
    def kernel():
        @T.prim_func
        def mma_gemm(A_: T.Buffer((m, k), "float16"), B_: T.Buffer((n, k), "float16"),
                     C_: T.Buffer((m, n), "float32")):
            (bx, by), tx = Ax.launch([n // BN, m // BM], THREADS)
            A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
            ts = tiles()
            k_step(A, B, ts, by * BM, bx * BN, 0, False)
            for kb in T.serial(1, k // BK):
                k_step(A, B, ts, by * BM, bx * BN, kb, True)
            Ax.copy(C[by * BM:(by + 1) * BM, bx * BN:(bx + 1) * BN], ts[4])
        return mma_gemm
    return kernel


def _tiles():
    return (Ax.shared((BM, BK), "float16", SMEM, name="As"), Ax.shared((BN, BK), "float16", SMEM, name="Bs"),
            Ax.registers((BM, BK), "float16", REG_A, name="Ar"), Ax.registers((BK, BN), "float16", REG_B, name="Br"),
            Ax.registers((BM, BN), "float32", ACC, name="acc"))


def make(m, n, k):
    """The hand-written kernel at ``m×n×k`` (multiples of the 32×32×32 tile)."""
    return tiled_gemm(_tiles, "mma_gemm", m, n, k)


gemm = make(M, N, K)
