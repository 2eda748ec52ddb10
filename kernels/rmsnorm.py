"""Fused row-wise RMSNorm in axe: ``y = x / sqrt(mean(x²) + eps) * w``, one CTA per row.

Each of 128 threads holds 8 contiguous fp16 of the row (16-byte loads), squares in fp32 (a
fused cast + multiply), the CTA sums the squares (warp shuffles + shared memory), and one
fused elementwise pass scales, casts back and the row leaves with 16-byte stores.

Two builds share the row's body (:func:`_normalize_row`):

- ``rmsnorm`` (module level): the static example, ``ROWS x N`` fp16, ``eps`` compiled in — what
  ``axe demo`` and ``tests/test_kernels.py`` build;
- :func:`dynamic` ``(n, dtype)``: one artifact for every number of rows ``M`` (read off ``X`` at
  launch; the grid is ``M``), ``eps`` a runtime ``float32`` argument; ``n`` (a multiple of
  1024, threads then hold ``n / 128`` values in 16-byte chunks) and ``dtype`` are the
  specialization.  ``axe.torch.ops.rmsnorm`` calls it.

The static ``rmsnorm`` is one source for sm_90a, sm_100a and trn1: what differs per target is
in :data:`TARGETS` — rows per step, where the on-chip tiles live and their layouts — and the
entry (a CTA per row on a GPU, a loop over 128-row blocks on the one NeuronCore).  On trn1 the
weights sit on one partition and the scaling broadcasts them to all 128.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, tx

ROWS, N, THREADS, EPS = 256, 1024, 128, 1e-6
ROW = S[(THREADS, N // THREADS):(1 @ tx, 1)]      # over shape (1, N)
VEC = 8                                           # 16-byte chunks of fp16/bf16

#: per target family: rows per step, the on-chip tile allocator and the layouts of a row tile,
#: of the weights and of a per-row scalar (None: the allocator's plain tile, rows on partitions)
TARGETS = {
    "cuda": dict(rows=1, tile=Ax.registers, row=ROW, weights=ROW, one="S[1:1]"),
    "neuron": dict(rows=128, tile=Ax.neuron.sbuf, row=None, weights=None, one=None),
}


def row_layout(n: int, kernel: str = "rmsnorm"):
    """The register layout of one row of ``n`` values over shape ``(1, n)``: thread ``t`` holds
    chunks ``t, t + 128, ...`` of 8 contiguous values (every 16-byte load of a warp is
    coalesced).  ``n == 1024`` gives :data:`ROW`."""
    if n <= 0 or n % (THREADS * VEC):
        raise ValueError(f"{kernel}: row length n={n} must be a positive multiple of {THREADS * VEC}")
    if n == THREADS * VEC:
        return ROW
    return S[(n // (THREADS * VEC), THREADS, VEC):(VEC, 1 @ tx, 1)]


def row_params(n: int, dtype: str, **handles):
    """Inside a kernel over any number of rows ``M``: match each handle (keyword = buffer name)
    to an ``(M, n)`` tensor (16-byte aligned; ``M`` becomes the launch symbol read off the
    first), launch one CTA of :data:`THREADS` per row, and return each tensor's current row as
    a ``(1, n)`` :func:`axe.lang.param` at element offset ``row * n``."""
    from tvm.script.ir_builder import IRBuilder
    M = IRBuilder.name("M", T.int32())     # named as TVMScript names an assignment's target
    bufs = [IRBuilder.name(name, T.match_buffer(h, (M, n), dtype, align=16)) for name, h in handles.items()]
    bx, _ = Ax.launch([M], THREADS)
    return [Ax.param(T.decl_buffer((1, n), dtype, data=b.data, elem_offset=bx * n), name=name.rstrip("_"))
            for b, name in zip(bufs, handles)]


def reference(X, W):
    import torch
    xf = X.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * W.float()
    return {"Y": y.half()}


def inputs(device="cuda"):
    import torch
    return {"X": torch.randn(ROWS, N, dtype=torch.float16, device=device),
            "W": torch.randn(1, N, dtype=torch.float16, device=device),
            "Y": torch.zeros(ROWS, N, dtype=torch.float16, device=device)}


def _normalize_row(X, W, Y, row, n, dtype, eps, layout, rows=1, tile=Ax.registers, weights=None, one="S[1:1]"):
    """Normalize rows ``[row, row + rows)`` of ``X`` into ``Y`` (``eps`` a constant or a float32
    argument; tiles from ``tile``; ``weights``: the layout of the (1, n) weights, default ``layout``)."""
    x = tile((rows, n), dtype, layout, name="x")
    w = tile((1, n), dtype, layout if weights is None and rows == 1 else weights, name="w")
    sq = tile((rows, n), "float32", layout, name="sq")
    ss = tile((rows, 1), "float32", one, name="ss")
    Ax.copy(x, X[row:row + rows, :])
    Ax.copy(w, W)
    Ax.elementwise(sq, lambda v: T.Cast("float32", v) * T.Cast("float32", v), x)
    Ax.reduce(ss, sq, "sum", dims=1)
    Ax.elementwise(x, lambda v, s, g: T.Cast(dtype, T.Cast("float32", v)
                                             * T.rsqrt(s * T.float32(1.0 / n) + eps)
                                             * T.Cast("float32", g)), x, ss, w)
    Ax.copy(Y[row:row + rows, :], x)


def _trn1():
    cfg = TARGETS["neuron"]

    @T.prim_func
    def rmsnorm(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X = Ax.param(X_)
        W = Ax.param(W_)
        Y = Ax.param(Y_)
        for r in T.parallel(ROWS // cfg["rows"]):
            _normalize_row(X, W, Y, r * cfg["rows"], N, "float16", T.float32(EPS), cfg["row"], cfg["rows"],
                           cfg["tile"], cfg["weights"], cfg["one"])
    return rmsnorm


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def rmsnorm():
    if Ax.current_build().family == "neuron":   # the build's target, known while the kernel is parsed
        return _trn1()

    @T.prim_func
    def rmsnorm(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                Y_: T.Buffer((ROWS, N), "float16")):
        bx, tx_ = Ax.launch(ROWS, THREADS)
        X = Ax.param(X_)
        W = Ax.param(W_)
        Y = Ax.param(Y_)
        _normalize_row(X, W, Y, bx, N, "float16", T.float32(EPS), ROW)
    return rmsnorm


def dynamic(n: int = N, dtype: str = "float16"):
    """The RMSNorm kernel for rows of ``n`` ``dtype`` values and any number of rows ``M``:
    ``rmsnorm_dyn(X: (M, n), W: (1, n), Y: (M, n), eps: float32)``, grid ``M``.  Each CTA sees
    its row as a ``(1, n)`` buffer at element offset ``row * n`` of ``X`` / ``Y``, so the row's
    operators are those of the static build."""
    layout = row_layout(n)
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"rmsnorm: dtype {dtype!r} must be float16 or bfloat16")

    @Ax.kernel(name="rmsnorm_dyn", outputs=("Y",), threads=THREADS, dynamic=("M",))
    def rmsnorm_dyn():
        @T.prim_func
        def rmsnorm_dyn(x_: T.handle, w_: T.handle, y_: T.handle, eps: T.float32):
            W_ = T.match_buffer(w_, (1, n), dtype, align=16)
            X, Y = row_params(n, dtype, X_=x_, Y_=y_)
            W = Ax.param(W_, name="W")
            _normalize_row(X, W, Y, 0, n, dtype, eps, layout)
        return rmsnorm_dyn
    return rmsnorm_dyn
