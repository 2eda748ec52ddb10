"""The hand-written twin of :mod:`kernels.inferred.tcgen05_gemm`: ``C = A·Bᵀ`` (A M×K, B N×K fp16,
C fp32) on Blackwell (sm_100a), one 128×128 tile of C per CTA of one warpgroup, a single-stage
k-loop: TMA loads the 128×64 tiles of A and B (K-major, 128-byte swizzle) on one mbarrier each,
one elected thread issues ``tcgen05.mma`` (M=128 N=128) into the TMEM accumulator and commits to a
third mbarrier, whose completion frees the tiles for the next loads; the warpgroup then reads the
accumulator with ``tcgen05.ld.32x32b.x128`` (thread t: row t) and stores it to C.

The layouts are written out here; the inferred twin declares none but TMEM's (tensor memory is
allocated with the data-path layout, which is the accumulator tcgen05.mma writes)."""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, Swizzle, SwizzledLayout
from axe.layout.coord import TCol, TLane
from kernels.inferred.hand_gemm import inputs, reference  # the same C = A·Bᵀ, fp16 in, fp32 out

M, N, K = 256, 256, 512           # the sizes of ``gemm``; ``make(m, n, k)`` builds others
BM, BN, BK, THREADS = 128, 128, 64, 128

#: the shared tiles: K-major rows of 64 fp16 (128 bytes) under TMA's 128-byte swizzle
SMEM_A = SwizzledLayout(S[(BM, BK)], Swizzle(3, 3, 3))
SMEM_B = SwizzledLayout(S[(BN, BK)], Swizzle(3, 3, 3))
#: the accumulator in tensor memory: the data path (row i in lane i, column j in column j)
TMEM = S[(BM, BN):(1 @ TLane, 1 @ TCol)]


def k_step(A, B, tiles, bars, m0, n0, kb, accumulate):
    """k-block kb: both tiles by TMA, wait for them, one thread's tcgen05.mma ``acc (+)= As·Bsᵀ``
    committed to ``bars[2]``, whose completion (the MMA has read the tiles) the CTA waits for."""
    As, Bs, acc_t, _ = tiles
    Ax.copy(As, A[m0:m0 + BM, kb * BK:(kb + 1) * BK], barrier=bars[0])
    Ax.copy(Bs, B[n0:n0 + BN, kb * BK:(kb + 1) * BK], barrier=bars[1])
    Ax.cuda.mbarrier_wait(bars, kb % 2, 0)
    Ax.cuda.mbarrier_wait(bars, kb % 2, 1)
    Ax.cuda.tcgen05_fence_after()
    with Ax.warps(0, 1):
        with Ax.cuda.elect_one():
            Ax.gemm(acc_t, As, Ax.permute(Bs, (1, 0)), accumulate=accumulate, barrier=bars[2])
    Ax.cuda.mbarrier_wait(bars, kb % 2, 2)


def tiled_gemm(tiles, name, m, n, k):
    """The ``m×n×k`` kernel around ``tiles()``, which declares ``(As, Bs, acc_t, acc)`` (acc_t the
    TMEM accumulator): the k-loop (the first k-block overwrites it), then the
    accumulator read into registers and stored to C, and TMEM freed."""
    @Ax.kernel(name=name, reference=reference, inputs=lambda device="cuda": inputs(device, m, n, k),
               outputs=("C",), grid=(n // BN, m // BM), threads=THREADS)
    def kernel():
        @T.prim_func
        def tcgen05_gemm(A_: T.Buffer((m, k), "float16"), B_: T.Buffer((n, k), "float16"),
                         C_: T.Buffer((m, n), "float32"), A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
            (bx, by), tx = Ax.launch([n // BN, m // BM], THREADS)
            A = Ax.param(A_, tensormap=A_map)
            B = Ax.param(B_, tensormap=B_map)
            C = Ax.param(C_)
            bars = Ax.cuda.mbarrier(count=1, stages=3)
            ts = tiles()
            k_step(A, B, ts, bars, by * BM, bx * BN, 0, False)
            for kb in T.serial(1, k // BK):
                k_step(A, B, ts, bars, by * BM, bx * BN, kb, True)
            Ax.cuda.tcgen05_fence_after()
            Ax.copy(ts[3], ts[2])
            Ax.copy(C[by * BM:(by + 1) * BM, bx * BN:(bx + 1) * BN], ts[3])
            Ax.cuda.tmem_free(ts[2])
        return tcgen05_gemm
    return kernel


def _tiles():
    return (Ax.shared((BM, BK), "float16", SMEM_A, name="As"), Ax.shared((BN, BK), "float16", SMEM_B, name="Bs"),
            Ax.cuda.tmem((BM, BN), "float32", TMEM, name="acc_t"),
            # the accumulator in registers as tcgen05.ld.32x32b.x128 loads it: thread t holds row t
            Ax.registers((BM, BN), "float32", Ax.cuda.tcgen05_fragment("32x32b", BN, BM), name="acc"))


def make(m, n, k):
    """The hand-written kernel at ``m×n×k`` (multiples of the 128×128×64 tile)."""
    return tiled_gemm(_tiles, "tcgen05_gemm", m, n, k)


gemm = make(M, N, K)
