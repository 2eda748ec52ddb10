"""Reductions on trn1 in axe: the maximum of each row of a 128x300 fp32 tile (VectorE, along the
free axis) and the sum of each column (TensorE: a ones column times the tile, along the
partitions).  An example for the tests and the API check.
"""

from tvm.script import tirx as T

import axe.lang as Ax


def nki_reductions():
    """Row maxima on VectorE (free axis) and column sums on TensorE (partitions) of a 128x300 tile."""
    @Ax.kernel(name="red", outputs=("R", "Cs"), targets=("trn1",))
    def k():
        @T.prim_func
        def red(X_: T.Buffer((128, 300), "float32"), R_: T.Buffer((128, 1), "float32"),
                Cs_: T.Buffer((1, 300), "float32")):
            Ax.neuron.core()
            X, R, Cs = Ax.param(X_), Ax.param(R_), Ax.param(Cs_)
            x = Ax.neuron.sbuf((128, 300), "float32", name="x")
            Ax.copy(x, X[0:128, 0:300])
            r = Ax.neuron.sbuf((128, 1), "float32", name="r")
            Ax.reduce(r, x, "max", dims=1)
            Ax.copy(R[0:128, 0:1], r)
            cs = Ax.neuron.psum((1, 300), "float32", name="cs")
            Ax.reduce(cs, x, "sum", dims=0)
            Ax.copy(Cs[0:1, 0:300], cs)
        return red
    return k


reductions = nki_reductions()
