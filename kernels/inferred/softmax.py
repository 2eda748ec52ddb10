"""Row-wise softmax (fp16) as :func:`kernels.softmax.softmax`, every register tile inferred:
``y = exp(x - max(x)) / sum(exp(x - max(x)))``, one CTA of 128 threads per row of ``N``."""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.softmax import inputs, reference

ROWS, N, THREADS = 256, 1024, 128


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def softmax():
    @T.prim_func
    def softmax(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        bx, _ = Ax.launch(ROWS, THREADS)
        X, Y = Ax.param(X_), Ax.param(Y_)
        x = Ax.registers((1, N), "float16", name="x")
        xf = Ax.registers((1, N), "float32", name="xf")
        e = Ax.registers((1, N), "float32", name="e")
        mx = Ax.registers((1, 1), "float32", name="mx")
        sm = Ax.registers((1, 1), "float32", name="sm")
        Ax.copy(x, X[bx:bx + 1, :])
        Ax.cast(xf, x)
        Ax.reduce(mx, xf, "max", dims=1)
        Ax.elementwise(e, lambda v, m: T.exp(v - m), xf, mx)
        Ax.reduce(sm, e, "sum", dims=1)
        Ax.elementwise(x, lambda v, s: T.Cast("float16", v * (T.float32(1) / s)), e, sm)
        Ax.copy(Y[bx:bx + 1, :], x)
    return softmax
