"""GEMM for Trainium (trn1) in axe: ``C = A·B``, fp16/bf16 in, fp32 accumulation in PSUM, C in
the input dtype.  One 512×1024 block of C per (m, n) (512×512 when N <= 512); K in steps of 128.

The layouts carry the whole TensorE mapping (the Axe paper §3.4): A's tile holds K on the
partitions and M on the free axis (so the DMA transposes it), B's tile K on the partitions, and
the accumulator splits its 512 rows into 4 partition blocks of 128, each BN fp32 wide (two PSUM
banks for BN = 1024: all 8 banks).  ``Ax.gemm`` intersects the iters and issues 4 × BN/512
``nc_matmul`` (K=128, M=128, N=512) per k-step; ragged edges are masked loads into zeroed tiles.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import F, P, S

BM, BK = 512, 128
A_TILE = S[(BM, BK):(1 @ F, 1 @ P)]                          # A[m, k]: k on partitions


def tiles(N):
    """The target configuration, in one place: C's block width and the B and C tile layouts."""
    bn = 1024 if N > 512 else 512                            # wider blocks load A half as often
    b_tile = S[(BK, bn):(1 @ P, 1 @ F)]                      # B[k, n]: k on partitions
    c_tile = S[(BM // 128, 128, bn):(bn @ F, 1 @ P, 1 @ F)]  # C[m, n]: 4 x 128 rows, bn/512 banks each
    return bn, b_tile, c_tile


def _cdiv(a, b):
    return -(-a // b)


def reference(A, B):
    import numpy as np
    return {"C": (A.astype(np.float32) @ B.astype(np.float32))}


def nki_gemm(M=1024, N=1024, K=1024, dtype="float16"):
    """The kernel for an M×K by K×N product (any sizes; ragged edges masked)."""
    BN, B_TILE, C_TILE = tiles(N)
    MT, NT, KT = _cdiv(M, BM), _cdiv(N, BN), _cdiv(K, BK)

    @Ax.kernel(name="nki_gemm", reference=reference, outputs=("C",), shape=(M, N, K), dtype=dtype,
               targets=("trn1",))
    def kernel():
        @T.prim_func
        def nki_gemm(A_: T.Buffer((M, K), dtype), B_: T.Buffer((K, N), dtype), C_: T.Buffer((M, N), dtype)):
            Ax.neuron.core()
            A, B, C = Ax.neuron.hbm(A_, (BM, BK)), Ax.neuron.hbm(B_, (BK, BN)), Ax.neuron.hbm(C_, (BM, BN))
            for m in T.parallel(MT):
                for n in T.parallel(NT):
                    acc = Ax.neuron.psum((BM, BN), "float32", C_TILE, name="acc")
                    for k in T.parallel(KT):
                        a = Ax.neuron.sbuf((BM, BK), dtype, A_TILE, name="a")
                        b = Ax.neuron.sbuf((BK, BN), dtype, B_TILE, name="b")
                        Ax.copy(a, A[m * BM:(m + 1) * BM, k * BK:(k + 1) * BK])
                        Ax.copy(b, B[k * BK:(k + 1) * BK, n * BN:(n + 1) * BN])
                        Ax.gemm(acc, a, b)
                    out = Ax.neuron.sbuf((BM, BN), dtype, C_TILE, name="out")
                    Ax.cast(out, acc)
                    Ax.copy(C[m * BM:(m + 1) * BM, n * BN:(n + 1) * BN], out)
        return nki_gemm
    return kernel


gemm_1024 = nki_gemm()
