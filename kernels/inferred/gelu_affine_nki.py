"""``gelu(x) * g + b`` (bf16) on trn1/trn2 as :func:`examples.gelu_affine.neuron_body`, every SBUF
tile inferred (:mod:`axe.backends.neuron.proposals`): x's rows on the partitions, g and b on one
partition, broadcast by the elementwise."""

from tvm.script import tirx as T

import axe.lang as Ax
from examples.gelu_affine import N, TRN_M, fused, inputs, reference


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), targets=("trn1", "trn2"))
def gelu_affine_nki():
    @T.prim_func
    def gelu_affine_nki(X_: T.Buffer((TRN_M, N), "bfloat16"), G_: T.Buffer((1, N), "bfloat16"),
                    B_: T.Buffer((1, N), "bfloat16"), Y_: T.Buffer((TRN_M, N), "bfloat16")):
        Ax.neuron.core()
        X, G, B, Y = Ax.param(X_), Ax.param(G_), Ax.param(B_), Ax.param(Y_)
        for r in T.parallel(TRN_M // 128):
            x = Ax.neuron.sbuf((128, N), "bfloat16", Ax.INFER, name="x")
            g = Ax.neuron.sbuf((1, N), "bfloat16", Ax.INFER, name="g")
            b = Ax.neuron.sbuf((1, N), "bfloat16", Ax.INFER, name="b")
            Ax.copy(x, X[r * 128:(r + 1) * 128, :])
            Ax.copy(g, G)
            Ax.copy(b, B)
            Ax.elementwise(x, fused, x, g, b)
            Ax.copy(Y[r * 128:(r + 1) * 128, :], x)
    return gelu_affine_nki
