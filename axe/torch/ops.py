"""axe's kernels as ``torch.library`` custom ops: ``torch.ops.axe.rmsnorm``, ``.softmax``, ``.gemm``.

Each op allocates its output, launches an axe kernel through a :class:`~axe.torch.jit.JitKernel`
(built on the first call of a specialization, cached on disk) and has a fake implementation
(``register_fake``: output shape, dtype and device, and the same argument checks), so that
``torch.compile(fullgraph=True)`` traces through it without a graph break, and launches on the
current stream through torch's allocator so that CUDA graphs capture it (call it once before
capturing: the first call builds or loads the kernel).

- ``rmsnorm(x, weight, eps=1e-6)``: ``x`` (..., n) fp16/bf16, ``weight`` (n,): one artifact per
  (n, dtype) serves every number of rows (``kernels/rmsnorm.py:dynamic``);
- ``softmax(x)``: over the last dimension, one artifact per (n, dtype)
  (``kernels/softmax.py:dynamic``);
- ``gemm(a, b, transpose_b=False)``: ``a @ b`` (``b`` (K, N)) or ``a @ b.T`` (``b`` (N, K)),
  fp16/bf16, through the dynamic-M GEMM of ``kernels/gemm.py`` (``make_dynamic``) — one artifact
  per (N, K, dtype, layout of b) and bucket of M (``kernels/gemm_select.py``: M ≤ 128 runs a
  decode configuration, larger M the persistent one) serves every M of its bucket; ``axe tune``
  measures the configurations (:mod:`axe.torch.tune`).

Inputs that are not contiguous, or whose data is not 16-byte aligned (a sliced view), are
copied first: the kernels load 16-byte vectors.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import tune
from .jit import JitKernel

__all__ = ["rmsnorm", "softmax", "gemm", "KERNELS", "spec_rows", "spec_gemm"]

#: the repository root, where ``kernels/`` lives (not an installed package)
ROOT = Path(__file__).resolve().parents[2]
_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_INT32 = 2**31 - 1


def _dtype(op: str, name: str, t) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"axe::{op}: {name} has dtype {t.dtype}, expected float16 or bfloat16")
    return _DTYPES[t.dtype]


def _row_length(op: str, x) -> int:
    """The checked row length of ``x`` for a row-wise kernel (a multiple of 1024; every element
    index of the (M, n) view fits the kernel's int32 arithmetic)."""
    if x.dim() < 1:
        raise ValueError(f"axe::{op}: x must have at least one dimension, got a scalar")
    n = int(x.shape[-1])
    if n <= 0 or n % 1024:
        raise ValueError(f"axe::{op}: the last dimension of x is {n}; the axe kernel needs a positive "
                         "multiple of 1024")
    if x.numel() > _INT32:
        raise ValueError(f"axe::{op}: x has {x.numel()} elements; the kernel indexes with int32 (at most {_INT32})")
    return n


def spec_rows(X, *rest) -> dict:
    """The specialization of a row-wise kernel: row length and dtype (the row count is read at
    launch)."""
    return {"n": int(X.shape[1]), "dtype": _DTYPES.get(X.dtype, str(X.dtype))}


_DEVICE_NAMES: dict = {}


def _device_name(device) -> str:
    """The GPU's name (what tuning picks are keyed by), looked up once per device; ``"cpu"`` else."""
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return name


def spec_gemm(b_major: str):
    """The dynamic-M GEMM's specialization for B stored ``b_major`` (``"row"``: K x N, ``"col"``:
    N x K): N, K, the dtype and the configuration of M's bucket (:func:`axe.torch.tune.spec_for`:
    the measured pick for this GPU, else the heuristic's); M itself is read at launch."""
    def spec(A, B, C) -> dict:
        return tune.spec_for(_device_name(A.device), int(C.shape[1]), int(A.shape[1]),
                             _DTYPES.get(A.dtype, str(A.dtype)), b_major, int(A.shape[0]))
    return spec


#: the jit kernels behind the ops (their ``loader``, ``cache`` and ``target`` may be replaced)
KERNELS = {
    "rmsnorm": JitKernel("kernels.rmsnorm:dynamic", spec_rows, path=ROOT),
    "softmax": JitKernel("kernels.softmax:dynamic", spec_rows, path=ROOT),
    "gemm": JitKernel("kernels.gemm:make_dynamic", spec_gemm("row"), path=ROOT),
    "gemm_nt": JitKernel("kernels.gemm:make_dynamic", spec_gemm("col"), path=ROOT),
}


#: the ``axe`` op namespace.  Ops are defined at the dispatcher level (``define`` + per-device
#: ``impl`` + ``register_fake``) rather than with ``torch.library.custom_op``, whose per-call Python
#: wrappers (autograd shim, dynamo-disable frame, aliasing check) cost ~20 µs of host time per call
#: on an H200 host (measured with ``tests/gpu/run_torch.py``'s profile): more than the launch itself.
_LIB = torch.library.Library("axe", "DEF")


def _define(schema: str, impl, fake):
    """Define ``axe::<schema>`` with ``impl`` for CPU and CUDA tensors and ``fake`` for fake and
    meta tensors; returns the op (``torch.ops.axe.<name>``)."""
    name = schema.split("(", 1)[0]
    _LIB.define(schema)
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, impl, key)
    torch.library.register_fake(f"axe::{name}", fake, lib=_LIB)
    return getattr(torch.ops.axe, name)


def _ready(t, align: int = 16):
    """``t`` itself when contiguous and ``align``-byte aligned, else a fresh contiguous copy
    (torch's allocator aligns fresh tensors to far more than 64 bytes)."""
    if t.is_contiguous() and t.data_ptr() % align == 0:
        return t
    return t.contiguous() if not t.is_contiguous() else t.clone()


# --- rmsnorm ---------------------------------------------------------------------------------

def _check_rmsnorm(x, weight):
    n = _row_length("rmsnorm", x)
    dt = _dtype("rmsnorm", "x", x)
    if tuple(weight.shape) != (n,):
        raise ValueError(f"axe::rmsnorm: weight has shape {tuple(weight.shape)}, expected ({n},) (x's last dimension)")
    if weight.dtype != x.dtype:
        raise TypeError(f"axe::rmsnorm: weight has dtype {weight.dtype}, x has {x.dtype}; they must agree")
    if weight.device != x.device:
        raise ValueError(f"axe::rmsnorm: weight is on {weight.device}, x on {x.device}")
    return n, dt


def _rmsnorm(x, weight, eps=1e-6):
    """``x / sqrt(mean(x², -1) + eps) * weight`` over the last dimension (fp32 inside)."""
    n, _ = _check_rmsnorm(x, weight)
    rows = _ready(x).reshape(-1, n)
    y = torch.empty_like(rows)
    KERNELS["rmsnorm"](rows, _ready(weight).reshape(1, n), y, float(eps))
    return y.view(x.shape)


def _rmsnorm_fake(x, weight, eps=1e-6):
    _check_rmsnorm(x, weight)
    return x.new_empty(x.shape)


rmsnorm = _define("rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor", _rmsnorm, _rmsnorm_fake)


# --- softmax ---------------------------------------------------------------------------------

def _softmax(x):
    """``softmax(x, dim=-1)`` (fp32 inside, the result in x's dtype)."""
    n = _row_length("softmax", x)
    _dtype("softmax", "x", x)
    rows = _ready(x).reshape(-1, n)
    y = torch.empty_like(rows)
    KERNELS["softmax"](rows, y)
    return y.view(x.shape)


def _softmax_fake(x):
    _row_length("softmax", x)
    _dtype("softmax", "x", x)
    return x.new_empty(x.shape)


softmax = _define("softmax(Tensor x) -> Tensor", _softmax, _softmax_fake)


# --- gemm ------------------------------------------------------------------------------------

def _gemm_shape(a, b, transpose_b: bool):
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"axe::gemm: a and b must be matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    _dtype("gemm", "a", a)
    if b.dtype != a.dtype:
        raise TypeError(f"axe::gemm: b has dtype {b.dtype}, a has {a.dtype}; they must agree")
    M, K = a.shape
    Kb, N = (b.shape[1], b.shape[0]) if transpose_b else tuple(b.shape)
    if Kb != K:
        raise ValueError(f"axe::gemm: a is {M}x{K} but b{'.T' if transpose_b else ''} is {Kb}x{N}: the inner "
                         "dimensions differ")
    return int(M), int(N)


def _gemm(a, b, transpose_b=False):
    """``a @ b`` (or ``a @ b.T`` with ``transpose_b``), fp32 accumulation, output in a's dtype."""
    M, N = _gemm_shape(a, b, transpose_b)
    c = a.new_empty((M, N))
    if not (M and N and a.shape[1]):
        return c.zero_()               # an empty product (no grid to launch, no tensor map of 0 rows)
    # the GEMM's tensor maps want 64-byte aligned operands (its launch.json says so)
    KERNELS["gemm_nt" if transpose_b else "gemm"](_ready(a, 64), _ready(b, 64), c)
    return c


def _gemm_fake(a, b, transpose_b=False):
    M, N = _gemm_shape(a, b, transpose_b)
    return a.new_empty((M, N))


gemm = _define("gemm(Tensor a, Tensor b, bool transpose_b=False) -> Tensor", _gemm, _gemm_fake)
