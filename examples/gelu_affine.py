"""Fused GELU and affine over rows: ``Y = gelu(X) * G + B`` (tanh GELU), a memory-bound kernel.

X and Y are M x N bfloat16 (row-major), G and B are N-vectors; the arithmetic is float32. GELU's
tanh form is written as ``x * sigmoid(2u)`` (``0.5 x (1 + tanh u) == x / (1 + exp(-2u))``,
``u = sqrt(2/pi) (x + 0.044715 x^3)``) because NKI's elementwise forms have no tanh.

One source, two targets (the factory asks ``Ax.current_build().family``):

- sm_90a / sm_100a: one CTA per row, 256 threads x 8 contiguous elements, so every load and
  store is a 16-byte vector (``ld.global.v4``/``st.global.v4``); M is a shape variable, so one
  artifact serves any row count (docs/language.md section 8).
- trn1: 128 rows per step on the partitions, G and B broadcast from one partition; runs on axe's
  NumPy model of NKI on the CPU, which is how ``tests/test_examples_newcomer.py`` checks the numbers.
  Both builds compute in float32 and round to bf16 once (the trn1 emitter gives the operations the
  float32 casts widen ``dtype=nl.float32``; docs/newcomer-test.md, F7, fixed).

Build and inspect::

    export CUDA_PATH=/usr/local/cuda
    axe build examples/gelu_affine.py --target sm_90a -o build/examples
    axe explain examples/gelu_affine.py --target sm_90a
    python examples/gelu_affine.py          # builds both targets, runs trn1 on the NKI model
"""
import torch
from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import F, P, S, tx

N = 2048                                       # the row length, fixed per artifact
THREADS = 256
ROW = S[(THREADS, N // THREADS):(1 @ tx, 1)]   # thread t holds elements 8t .. 8t+7: one 16-byte vector
TRN_M = 256                                    # trn1's row count (static): 2 steps of 128 partitions
TRN_ROWS = S[(128, N):(1 @ P, 1 @ F)]          # rows on the partitions, columns on the free axis
TRN_ONE = S[(1, N):(1 @ P, 1 @ F)]             # G or B: one partition, broadcast by the elementwise


def gelu_affine_f32(x, g, b):
    """The per-element formula on float32 expressions (TIR in the kernel, numbers in the test)."""
    u2 = T.float32(-1.5957691216) * (x + T.float32(0.044715) * x * x * x)   # -2u
    return x / (T.float32(1) + T.exp(u2)) * g + b


def fused(v, g, b):
    f32 = lambda e: T.Cast("float32", e)
    return T.Cast("bfloat16", gelu_affine_f32(f32(v), f32(g), f32(b)))


def reference(X, G, B):
    """torch: what the kernel computes (G, B of shape (N,) or (1, N))."""
    y = torch.nn.functional.gelu(X.float(), approximate="tanh") * G.float().reshape(1, -1) + B.float().reshape(1, -1)
    return {"Y": y.to(torch.bfloat16)}


def inputs(device="cuda", m=37):
    return {"X": torch.randn(m, N, dtype=torch.bfloat16, device=device),
            "G": torch.randn(N, dtype=torch.bfloat16, device=device),
            "B": torch.randn(N, dtype=torch.bfloat16, device=device),
            "Y": torch.empty(m, N, dtype=torch.bfloat16, device=device)}


def cuda_body():
    @T.prim_func
    def gelu_affine(x: T.handle, g: T.handle, b: T.handle, y: T.handle):
        M = T.int32()                                          # the row count, read off X at launch
        X = T.match_buffer(x, (M, N), "bfloat16", align=16)
        Y = T.match_buffer(y, (M, N), "bfloat16", align=16)
        G_ = T.match_buffer(g, (N,), "bfloat16", align=16)
        B_ = T.match_buffer(b, (N,), "bfloat16", align=16)
        bx, _ = Ax.launch([M], THREADS)                        # one CTA per row
        Xrow = Ax.param(T.decl_buffer((1, N), "bfloat16", data=X.data, elem_offset=bx * N), name="Xrow")
        Yrow = Ax.param(T.decl_buffer((1, N), "bfloat16", data=Y.data, elem_offset=bx * N), name="Yrow")
        G, B = Ax.param(G_), Ax.param(B_)
        r = Ax.registers((1, N), "bfloat16", ROW, name="r")
        gr = Ax.registers((1, N), "bfloat16", ROW, name="gr")
        br = Ax.registers((1, N), "bfloat16", ROW, name="br")
        Ax.copy(r, Xrow)
        Ax.copy(gr, G)                                         # (N,) into a (1, N) tile
        Ax.copy(br, B)
        Ax.elementwise(r, fused, r, gr, br)
        Ax.copy(Yrow, r)
    return gelu_affine


def neuron_body():
    @T.prim_func
    def gelu_affine(X_: T.Buffer((TRN_M, N), "bfloat16"), G_: T.Buffer((1, N), "bfloat16"),
                    B_: T.Buffer((1, N), "bfloat16"), Y_: T.Buffer((TRN_M, N), "bfloat16")):
        Ax.neuron.core()
        X, G, B, Y = Ax.param(X_), Ax.param(G_), Ax.param(B_), Ax.param(Y_)
        for m in T.parallel(TRN_M // 128):
            x = Ax.neuron.sbuf((128, N), "bfloat16", TRN_ROWS, name="x")
            g = Ax.neuron.sbuf((1, N), "bfloat16", TRN_ONE, name="g")
            b = Ax.neuron.sbuf((1, N), "bfloat16", TRN_ONE, name="b")
            Ax.copy(x, X[m * 128:(m + 1) * 128, :])
            Ax.copy(g, G)                                      # a (128, N) tile from G is refused on trn1
            Ax.copy(b, B)
            Ax.elementwise(x, fused, x, g, b)                  # (1, N) sources broadcast over the partitions
            Ax.copy(Y[m * 128:(m + 1) * 128, :], x)
    return gelu_affine


@Ax.kernel(outputs=("Y",), reference=reference, inputs=inputs)
def gelu_affine():
    if Ax.current_build().family == "neuron":
        return neuron_body()
    return cuda_body()


if __name__ == "__main__":
    import ml_dtypes
    import numpy as np

    art = Ax.compile_kernel(gelu_affine, "sm_90a")
    print(art.launch["grid"], art.launch["block"], art.launch["symbols"])
    assert "ld.global.v4" in art.ptx and "st.global.v4" in art.ptx
    trn = Ax.compile_kernel(gelu_affine, "trn1")
    x = inputs("cpu", TRN_M)
    out, _ = trn.run(X=x["X"].float().numpy().astype(ml_dtypes.bfloat16),
                     G=x["G"].reshape(1, N).float().numpy().astype(ml_dtypes.bfloat16),
                     B=x["B"].reshape(1, N).float().numpy().astype(ml_dtypes.bfloat16))
    want = reference(x["X"], x["G"], x["B"])["Y"].float().numpy()
    err = np.abs(out["Y"].astype(np.float32) - want).max()
    print("trn1 on the NKI model: max |Y - torch| =", err)
