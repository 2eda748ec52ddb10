"""Row-wise RMSNorm (fp16) as :func:`kernels.rmsnorm.rmsnorm`, every register tile inferred:
``y = x / sqrt(mean(x²) + eps) * w``, one CTA of 128 threads per row of ``N``."""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.rmsnorm import EPS, inputs, reference

ROWS, N, THREADS = 256, 1024, 128


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def rmsnorm():
    @T.prim_func
    def rmsnorm(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                Y_: T.Buffer((ROWS, N), "float16")):
        bx, _ = Ax.launch(ROWS, THREADS)
        X, W, Y = Ax.param(X_), Ax.param(W_), Ax.param(Y_)
        x = Ax.registers((1, N), "float16", name="x")
        w = Ax.registers((1, N), "float16", name="w")
        sq = Ax.registers((1, N), "float32", name="sq")
        ss = Ax.registers((1, 1), "float32", name="ss")
        Ax.copy(x, X[bx:bx + 1, :])
        Ax.copy(w, W[0:1, :])
        Ax.elementwise(sq, lambda v: T.Cast("float32", v) * T.Cast("float32", v), x)
        Ax.reduce(ss, sq, "sum", dims=1)
        Ax.elementwise(x, lambda v, s, g: T.Cast("float16", T.Cast("float32", v) * T.rsqrt(
            s * T.float32(1.0 / N) + T.float32(EPS)) * T.Cast("float32", g)), x, ss, w)
        Ax.copy(Y[bx:bx + 1, :], x)
    return rmsnorm
