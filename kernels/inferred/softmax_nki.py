"""Row-wise softmax (fp16) on trn1/trn2 as the trn1 body of :func:`kernels.softmax.softmax`,
every SBUF tile inferred (:mod:`axe.backends.neuron.proposals`): 128 rows a step on the
partitions, ``y = exp(x - max(x)) / sum(exp(x - max(x)))``."""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.softmax import N, ROWS, inputs, reference


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), targets=("trn1", "trn2"))
def softmax_nki():
    @T.prim_func
    def softmax_nki(X_: T.Buffer((ROWS, N), "float16"), Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X, Y = Ax.param(X_), Ax.param(Y_)
        for r in T.parallel(ROWS // 128):
            x = Ax.neuron.sbuf((128, N), "float16", Ax.INFER, name="x")
            xf = Ax.neuron.sbuf((128, N), "float32", Ax.INFER, name="xf")
            e = Ax.neuron.sbuf((128, N), "float32", Ax.INFER, name="e")
            mx = Ax.neuron.sbuf((128, 1), "float32", Ax.INFER, name="mx")
            sm = Ax.neuron.sbuf((128, 1), "float32", Ax.INFER, name="sm")
            Ax.copy(x, X[r * 128:(r + 1) * 128, :])
            Ax.cast(xf, x)
            Ax.reduce(mx, xf, "max", dims=1)
            Ax.elementwise(e, lambda v, m: T.exp(v - m), xf, mx)
            Ax.reduce(sm, e, "sum", dims=1)
            Ax.elementwise(x, lambda v, s: T.Cast("float16", v * (T.float32(1) / s)), e, sm)
            Ax.copy(Y[r * 128:(r + 1) * 128, :], x)
    return softmax_nki
