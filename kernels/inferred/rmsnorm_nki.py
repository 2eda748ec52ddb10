"""Row-wise RMSNorm (fp16) on trn1/trn2 as the trn1 body of :func:`kernels.rmsnorm.rmsnorm`,
every SBUF tile inferred (:mod:`axe.backends.neuron.proposals`): 128 rows a step on the
partitions, the (1, N) weights on one partition broadcast by the scaling,
``y = x / sqrt(mean(x²) + eps) * w``."""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.rmsnorm import EPS, N, ROWS, inputs, reference


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), targets=("trn1", "trn2"))
def rmsnorm_nki():
    @T.prim_func
    def rmsnorm_nki(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                    Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X, W, Y = Ax.param(X_), Ax.param(W_), Ax.param(Y_)
        for r in T.parallel(ROWS // 128):
            x = Ax.neuron.sbuf((128, N), "float16", Ax.INFER, name="x")
            w = Ax.neuron.sbuf((1, N), "float16", Ax.INFER, name="w")
            sq = Ax.neuron.sbuf((128, N), "float32", Ax.INFER, name="sq")
            ss = Ax.neuron.sbuf((128, 1), "float32", Ax.INFER, name="ss")
            Ax.copy(x, X[r * 128:(r + 1) * 128, :])
            Ax.copy(w, W[0:1, :])
            Ax.elementwise(sq, lambda v: T.Cast("float32", v) * T.Cast("float32", v), x)
            Ax.reduce(ss, sq, "sum", dims=1)
            Ax.elementwise(x, lambda v, s, g: T.Cast("float16", T.Cast("float32", v) * T.rsqrt(
                s * T.float32(1.0 / N) + T.float32(EPS)) * T.Cast("float32", g)), x, ss, w)
            Ax.copy(Y[r * 128:(r + 1) * 128, :], x)
    return rmsnorm_nki
