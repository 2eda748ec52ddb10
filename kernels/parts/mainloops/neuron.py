"""Trainium's block loop (trn1): the GEMM on one NeuronCore is a loop over ``bm``×``bn`` blocks of C,
each accumulated in PSUM over ``bk``-deep k-steps on TensorE.  The layouts of the on-chip tiles carry
the whole TensorE mapping (the Axe paper §3.4): ``Ax.gemm`` intersects their iters and issues
``bm/128 × bn/512`` ``nc_matmul`` (K=128, M=128, N=512) per k-step; masked DMAs into fresh tiles
handle ragged edges, and NKI's compiler overlaps a loop's DMA and TensorE work by itself (tiles
allocated in an ``affine_range`` body rotate through buffers it assigns), so there is no
producer/consumer ring to write — which is why this is a mainloop of its own, not the GPU one.

Law: C's block (m, n) = Σ_k A's block (m, k) · B's block (k, n), each product of a k-step accumulated
in fp32 PSUM, then cast once; B is read as stored (K×N) or through a transposing DMA (N×K).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import F, P, S
from kernels.parts.tiles import b_block, block


class NeuronCore:
    """trn1's block sizes and on-chip tile layouts."""

    name = "NeuronCore block loop"
    mma, accumulator, bm, bk = "tensore", "psum", 512, 128

    def bn(self, N):
        """C's block width: 1024 (two PSUM banks per 128-row block, all 8 banks) when N > 512, so
        A's tile is loaded half as often; else 512."""
        return 1024 if N > 512 else 512

    def a_tile(self):
        """A[m, k] with k on the partitions and m on the free axis (the DMA transposes it)."""
        return S[(self.bm, self.bk):(1 @ F, 1 @ P)]

    def b_tile(self, bn, b_major):
        """B's k-step with k on the partitions: B[k, n] as stored (``row``), or B stored [n, k]
        (``col``) through a transposing DMA, so that both feed the same matmul."""
        if b_major == "row":
            return S[(self.bk, bn):(1 @ P, 1 @ F)]
        return S[(bn, self.bk):(1 @ F, 1 @ P)]

    def c_tile(self, bn):
        """C[m, n] in PSUM (and its cast in SBUF): ``bm/128`` blocks of 128 rows on the partitions,
        each ``bn`` fp32 wide (``bn/512`` PSUM banks)."""
        return S[(self.bm // 128, 128, bn):(bn @ F, 1 @ P, 1 @ F)]

    def kernel(self, M, N, K, dtype, b_major):
        """The PrimFunc: a loop over C's blocks, each accumulated in PSUM over k-steps."""
        bm, bk, bn = self.bm, self.bk, self.bn(N)
        b_shape = (K, N) if b_major == "row" else (N, K)
        b_box = (bk, bn) if b_major == "row" else (bn, bk)
        cfg = self

        def k_by_n(b):      # the matmul's K×N operand
            return b if b_major == "row" else Ax.permute(b, (1, 0))

        @T.prim_func
        def gemm(A_: T.Buffer((M, K), dtype), B_: T.Buffer(b_shape, dtype), C_: T.Buffer((M, N), dtype)):
            Ax.neuron.core()
            A, B, C = Ax.neuron.hbm(A_, (bm, bk)), Ax.neuron.hbm(B_, b_box), Ax.neuron.hbm(C_, (bm, bn))
            for m in T.parallel(-(-M // bm)):
                for n in T.parallel(-(-N // bn)):
                    acc = Ax.neuron.psum((bm, bn), "float32", cfg.c_tile(bn), name="acc")
                    for k in T.parallel(-(-K // bk)):
                        a = Ax.neuron.sbuf((bm, bk), dtype, cfg.a_tile(), name="a")
                        b = Ax.neuron.sbuf(b_box, dtype, cfg.b_tile(bn, b_major), name="b")
                        Ax.copy(a, block(A, m, k, bm, bk))
                        Ax.copy(b, b_block(B, b_major, n * bn, k * bk, bn, bk))
                        Ax.gemm(acc, a, k_by_n(b))
                    out = Ax.neuron.sbuf((bm, bn), dtype, cfg.c_tile(bn), name="out")
                    Ax.cast(out, acc)
                    Ax.copy(block(C, m, n, bm, bn), out)
        return gemm
