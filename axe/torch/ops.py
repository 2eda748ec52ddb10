"""axe's kernels as ``torch.library`` custom ops: ``torch.ops.axe.rmsnorm``, ``.fused_add_rmsnorm``,
``.softmax``, ``.silu_and_mul``, ``.rotary_embedding``, ``.gemm``.

Each op allocates its output, launches an axe kernel through a :class:`~axe.torch.jit.JitKernel`
(built on the first call of a specialization, cached on disk) and has a fake implementation
(``register_fake``: output shape, dtype and device, and the same argument checks), so that
``torch.compile(fullgraph=True)`` traces through it without a graph break, and launches on the
current stream through torch's allocator so that CUDA graphs capture it (call it once before
capturing: the first call builds or loads the kernel).

- ``rmsnorm(x, weight, eps=1e-6)``: ``x`` (..., n) fp16/bf16 with ``n`` any multiple of 8,
  ``weight`` (n,): one artifact per (n, dtype) serves every number of rows
  (``kernels/rmsnorm.py:dynamic``);
- ``fused_add_rmsnorm(x, residual, weight, eps=1e-6)``: in place, returns nothing (vLLM's
  ``fused_add_rms_norm`` and FlashInfer's ``fused_add_rmsnorm``): ``residual`` becomes
  ``x + residual`` (rounded to the dtype), then ``x`` becomes ``rmsnorm(residual) * weight``
  (``kernels/rmsnorm.py:dynamic_add``).  The schema marks both as mutated
  (``Tensor(a!) x, Tensor(b!) residual``), so ``torch.compile`` functionalizes the call;
- ``softmax(x)``: over the last dimension (any multiple of 8), one artifact per (n, dtype)
  (``kernels/softmax.py:dynamic``);
- ``silu_and_mul(x)``: ``x`` (..., 2d) -> ``silu(x[..., :d]) * x[..., d:]`` (..., d), vLLM's
  convention, one artifact per (d, dtype) (``kernels/silu_mul.py:dynamic``);
- ``rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)``: vLLM's
  signature and semantics, ``query`` and ``key`` (``key`` may be None) rotated in place, returns
  nothing; ``cos_sin_cache`` (max_position, head_size) holds cos in its first half and sin in its
  second; NeoX (half-split) or GPT-J (interleaved) pairs; one artifact per (head_size, query
  heads, key heads, style, dtype, positions dtype) (``kernels/rotary.py:dynamic``);
- ``gemm(a, b, transpose_b=False)``: ``a @ b`` (``b`` (K, N)) or ``a @ b.T`` (``b`` (N, K)),
  fp16/bf16, through the dynamic-M GEMM of ``kernels/gemm.py`` (``make_dynamic``) — one artifact
  per (N, K, dtype, layout of b) and bucket of M (``kernels/gemm_select.py``: M ≤ 128 runs a
  decode configuration, larger M the persistent one) serves every M of its bucket; ``axe tune``
  measures the configurations (:mod:`axe.torch.tune`);
- ``gemm_silu_mul(x, w, transpose_b=True)``: the gated MLP's gate/up projection with its
  activation, ``silu(x @ w_gate.T) * (x @ w_up.T)`` (M, I), in one GEMM whose store applies the
  activation (``kernels/gemm.py`` ``act="silu_mul"``): ``w`` (2I, K) is the gate and up weights
  interleaved in blocks of 64 rows (:func:`interleave_gate_up`, done once when the model loads),
  I a multiple of 64; only ``transpose_b=True`` (an ``nn.Linear`` weight) is built.  The
  configuration is ``gemm``'s for the (2I, K) GEMM and M's bucket, made to compose with the
  fused store (``kernels/gemm_select.py:act_config``).

Inputs that are not contiguous, or whose data is not 16-byte aligned (a sliced view), are
copied first: the kernels load 16-byte vectors.  The in-place ops then copy their results back
into the caller's tensors.

**Host cost.**  The first call of a call signature (every tensor's dtype, shape, strides and
device, and the scalars) runs every check: the op's own (dtype, row length, shapes that must
agree), the jit's specialization lookup and the runtime's (:func:`axe.runtime.launcher.bind_arguments`
against the artifact's ``launch.json``), and keeps the signature's
:class:`~axe.runtime.plan.LaunchPlan` when the call needed no copy.  A later call of that
signature looks the plan up by one tuple of its tensors' properties, checks the data pointers'
alignment (a misaligned view takes the checked path, which copies it), allocates the output and
launches: no check is paid twice, and every error still names the argument (a new signature is
checked in full).  ``FAST_PATH = False`` sends every call down the checked path (the cost before
the plans: ``benchmarks/torch_ops.py --checked``).

**The compiled launcher.**  Where :mod:`axe.torch.fast_ops` builds and loads (a C++ compiler and
torch's headers; on the first import of this module on a machine, 10-30 s), every op gets its
C++ kernel for CPU and CUDA tensors: a call of a planned signature is looked up, launched and
answered in C++, without entering Python; any other call runs the Python implementation above,
registered as ``axe_checked::<op>``, which checks everything as before and hands its plan over.
``gemm``'s tensor maps follow their tensors there too (``cuTensorMapReplaceAddress``); a plan
with scratch (split-K) launches there only on the stream it was made on (another stream, or one
capturing a graph, takes the Python plan), and a configuration with clusters stays on the Python
plan.
:func:`launcher` says which path is in force and why; ``AXE_FAST_OPS=0`` keeps the Python one.
``FAST_PATH`` and :func:`clear_plans` govern both tables.
"""

from __future__ import annotations

import sys
import types

import torch

from . import fast_ops, tune
from .cache import kernels_root
from .jit import JitKernel

__all__ = ["rmsnorm", "fused_add_rmsnorm", "softmax", "silu_and_mul", "rotary_embedding", "gemm", "gemm_silu_mul",
           "interleave_gate_up", "KERNELS",
           "spec_rows", "spec_gemm", "spec_silu", "spec_rotary", "prebuild", "clear_plans", "PLANS", "FAST_PATH",
           "launcher"]

#: the folder that holds the ``kernels`` package (:func:`axe.torch.cache.kernels_root`): the
#: repository root in a checkout, ``axe/_kernels`` in an installed wheel
ROOT = kernels_root()
_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
_INT32 = 2**31 - 1

#: False: every call takes the checked path (a benchmark's "before"; see the module docstring)
FAST_PATH = True
#: call signatures remembered per op (then forgotten all at once: a server's shapes repeat)
PLAN_LIMIT = 1024
#: op name -> {call signature: (LaunchPlan, what the op's fast path needs besides, the compiled
#: launcher's record of the plan or None, what the record is made of)}
PLANS: dict = {}


def _sig(t) -> tuple:
    """What of tensor ``t`` its op's checks depend on, pointers aside: dtype, shape, strides,
    device (a plan's key holds one per tensor argument, with the scalars)."""
    return t.shape, t.stride(), t.dtype, t.device


def _remember(op: str, key, plan, extra=None, compiled=()):
    """Keep ``plan`` (None: the loader makes none; nothing is kept) for ``op``'s signature ``key``,
    and hand it to the compiled launcher where it takes ``op``: ``compiled`` is
    :func:`axe.torch.fast_ops.record`'s ``(sources, outputs, distinct)`` — which op argument or
    output each of the kernel's tensor arguments is, and with what alignment."""
    if plan is None or not FAST_PATH:
        return
    plans = PLANS.setdefault(op, {})
    if len(plans) >= PLAN_LIMIT:
        plans.clear()
    rec = fast_ops.record(plan, *compiled) if op in _COMPILED else None
    plans[key] = (plan, extra, rec, compiled)
    if rec is not None:
        _LAUNCHER.submit(op, *rec)


def _planned(op: str, hit):
    """The Python plan of ``hit`` (a :data:`PLANS` entry), handed to the compiled launcher first
    where it takes ``op``: a call that reaches a Python plan then is one whose plan the library
    lacks (made by a direct call of ``torch.ops.axe_checked``), or one it could not launch — a
    plan with scratch, on another stream than its record's: recorded again for this stream, so
    the table follows the stream the op is called on rather than the one of its first call."""
    rec = hit[2]
    if rec is not None and _LAUNCHER.pending():
        if rec[2]:          # the record holds a scratch set: the current stream's
            rec = fast_ops.record(hit[0], *hit[3])
        _LAUNCHER.submit(op, *rec)
    return hit[0]


def prebuild(specs, cache_dir, target: str = "sm_90a") -> int:
    """Build the artifacts of ``specs`` — ``(name in KERNELS, specialization)`` pairs — into the
    cache folder ``cache_dir`` (TVM + nvcc here; a GPU machine then loads them without TVM), with a
    progress display; every failure is reported and counted.  Returns the number that failed."""
    import traceback

    from axe.progress import Progress

    from .cache import ArtifactCache
    cache, failed = ArtifactCache(cache_dir, shipped=[]), 0
    with Progress(len(specs), "build") as p:
        for name, spec in specs:
            k = KERNELS[name]
            k._cache, k.progress = cache, False
            try:
                with p.step(f"{name} {spec}"):
                    k.artifact_path(target, spec)
            except Exception:  # noqa: BLE001 - report each, then fail
                failed += 1
                p.note(traceback.format_exc())
    print(f"cache {cache_dir}: {len(cache.entries())} entries")
    return failed


def clear_plans():
    """Forget every op's plans, the compiled launcher's too (after :func:`axe.torch.tune.reload`,
    or a cleared jit kernel: the next call of each signature is checked and planned again)."""
    for plans in PLANS.values():
        plans.clear()
    if _LAUNCHER is not None:
        _LAUNCHER.clear()


class _Module(types.ModuleType):
    """This module's class: assigning ``FAST_PATH`` also switches the compiled launcher's table,
    which never enters Python to read the flag (the module's own functions read the global)."""

    @property
    def FAST_PATH(self):
        return self.__dict__["FAST_PATH"]

    @FAST_PATH.setter
    def FAST_PATH(self, on):
        self.__dict__["FAST_PATH"] = on
        if _LAUNCHER is not None:
            _LAUNCHER.enable(bool(on))


sys.modules[__name__].__class__ = _Module


def _dtype(op: str, name: str, t) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"axe::{op}: {name} has dtype {t.dtype}, expected float16 or bfloat16")
    return _DTYPES[t.dtype]


def _row_length(op: str, x, name: str = "x", multiple: int = 8) -> int:
    """The checked row length of ``x`` for a row-wise kernel (a positive multiple of
    ``multiple``: rows move in 16-byte chunks; every element index of the (M, n) view fits the
    kernel's int32 arithmetic)."""
    if x.dim() < 1:
        raise ValueError(f"axe::{op}: {name} must have at least one dimension, got a scalar")
    n = int(x.shape[-1])
    if n <= 0 or n % multiple:
        raise ValueError(f"axe::{op}: the last dimension of {name} is {n}; the axe kernel needs a positive "
                         f"multiple of {multiple}")
    _int32_elements(op, name, x)
    return n


def _int32_elements(op: str, name: str, t):
    if t.numel() > _INT32:
        raise ValueError(f"axe::{op}: {name} has {t.numel()} elements; the kernel indexes with int32 (at most {_INT32})")


def _same(op: str, name: str, t, like, like_name: str = "x", shape: bool = True):
    """``t`` agrees with ``like`` in dtype, device and (``shape``) shape, or an error naming both."""
    if shape and tuple(t.shape) != tuple(like.shape):
        raise ValueError(f"axe::{op}: {name} has shape {tuple(t.shape)}, {like_name} has {tuple(like.shape)}; "
                         "they must agree")
    if t.dtype != like.dtype:
        raise TypeError(f"axe::{op}: {name} has dtype {t.dtype}, {like_name} has {like.dtype}; they must agree")
    if t.device != like.device:
        raise ValueError(f"axe::{op}: {name} is on {t.device}, {like_name} on {like.device}")


def spec_rows(X, *rest) -> dict:
    """The specialization of a row-wise kernel: row length and dtype (the row count is read at
    launch)."""
    return {"n": int(X.shape[1]), "dtype": _DTYPES.get(X.dtype, str(X.dtype))}


_DEVICE_NAMES: dict = {}


def _device_name(device) -> str:
    """The GPU's name (what tuning picks are keyed by), looked up once per device; ``"cpu"`` else.
    The first look-up also tells :mod:`axe.torch.tune` the GPU's DRAM bandwidth (for the heuristic)."""
    name = _DEVICE_NAMES.get(device)
    if name is None:
        if device.type == "cuda":
            from axe.runtime.device import dram_bytes_per_s
            index = device.index if device.index is not None else torch.cuda.current_device()
            name = torch.cuda.get_device_name(device)
            tune.note_device(name, dram_bytes_per_s(index))
        else:
            name = device.type
        _DEVICE_NAMES[device] = name
    return name


def spec_gemm(b_major: str):
    """The dynamic-M GEMM's specialization for B stored ``b_major`` (``"row"``: K x N, ``"col"``:
    N x K): N, K, the dtype and the configuration of M's bucket (:func:`axe.torch.tune.spec_for`:
    the measured pick for this GPU, else the heuristic's); M itself is read at launch."""
    def spec(A, B, C) -> dict:
        return tune.spec_for(_device_name(A.device), int(C.shape[1]), int(A.shape[1]),
                             _DTYPES.get(A.dtype, str(A.dtype)), b_major, int(A.shape[0]))
    return spec


_ACT_SPECS = tune.memo()


def spec_silu_mul_for(device: str, N: int, K: int, dtype: str, M: int) -> dict:
    """The fused gate/up GEMM's specialization for M rows of an (N, K) weight on ``device`` (a GPU's
    name): ``gemm``'s (:func:`axe.torch.tune.spec_for`, B column-major) made to compose with the
    SiLU·up store (``kernels/gemm_select.py:act_config``), with ``act``; memoized per bucket."""
    key = (device, N, K, dtype, tune.select().bucket(M))
    s = _ACT_SPECS.get(key)
    if s is None:
        s = _ACT_SPECS[key] = {**tune.select().act_config(tune.spec_for(device, N, K, dtype, "col", M), N), "act": "silu_mul"}
    return s


def spec_gemm_silu_mul(A, B, C) -> dict:
    """The fused gate/up GEMM's specialization for a call (:func:`spec_silu_mul_for`)."""
    return spec_silu_mul_for(_device_name(A.device), int(B.shape[0]), int(A.shape[1]), _DTYPES.get(A.dtype, str(A.dtype)),
                             int(A.shape[0]))


def spec_silu(X, Y) -> dict:
    """SiLU-and-multiply's specialization: ``d`` (the output's row length) and the dtype."""
    return {"d": int(Y.shape[1]), "dtype": _DTYPES.get(Y.dtype, str(Y.dtype))}


def spec_rotary(is_neox: bool):
    """The rotary kernel's specialization for one style: the head size (the cache's row), the
    query and key heads, the dtype and the positions' dtype (the token count is read at launch)."""
    def spec(P, Q, *rest) -> dict:
        K, C = rest if len(rest) == 2 else (None, rest[0])
        hs = int(C.shape[1])
        return {"head_size": hs, "q_heads": int(Q.shape[1]) // hs, "kv_heads": 0 if K is None else int(K.shape[1]) // hs,
                "is_neox": is_neox, "dtype": _DTYPES.get(Q.dtype, str(Q.dtype)), "pos_dtype": str(P.dtype)[6:]}
    return spec


#: the jit kernels behind the ops (their ``loader``, ``cache`` and ``target`` may be replaced)
KERNELS = {
    "rmsnorm": JitKernel("kernels.rmsnorm:dynamic", spec_rows, path=ROOT),
    "fused_add_rmsnorm": JitKernel("kernels.rmsnorm:dynamic_add", spec_rows, path=ROOT),
    "softmax": JitKernel("kernels.softmax:dynamic", spec_rows, path=ROOT),
    "silu_and_mul": JitKernel("kernels.silu_mul:dynamic", spec_silu, path=ROOT),
    "rotary_neox": JitKernel("kernels.rotary:dynamic", spec_rotary(True), path=ROOT),
    "rotary_gptj": JitKernel("kernels.rotary:dynamic", spec_rotary(False), path=ROOT),
    "gemm": JitKernel("kernels.gemm:make_dynamic", spec_gemm("row"), path=ROOT),
    "gemm_nt": JitKernel("kernels.gemm:make_dynamic", spec_gemm("col"), path=ROOT),
    "gemm_silu_mul": JitKernel("kernels.gemm:make_dynamic", spec_gemm_silu_mul, path=ROOT),
}


#: the ``axe`` op namespace.  Ops are defined at the dispatcher level (``define`` + per-device
#: ``impl`` + ``register_fake``) rather than with ``torch.library.custom_op``, whose per-call Python
#: wrappers (autograd shim, dynamo-disable frame, aliasing check) cost ~20 µs of host time per call
#: on an H200 host (measured with ``tests/gpu/run_torch.py``'s profile): more than the launch itself.
_LIB = torch.library.Library("axe", "DEF")
#: the checked Python implementations of the ops the compiled launcher takes (its misses call them)
_CHECKED_NS = "axe_checked"
_CHECKED = None
#: the loaded :class:`axe.torch.fast_ops.Launcher`, and the ops registered through it
_LAUNCHER = None
_COMPILED: set = set()
_WHY = None


def launcher() -> dict:
    """Which launch path the ops take here: ``{"path": "compiled" or "python", "why": the built
    library's file, or why it is not in force (AXE_FAST_OPS=0, no compiler, the compiler's error),
    "compiled": ops the C++ kernel launches, "python": ops launched from Python}``."""
    python = sorted(n for n in _DEFINED if n not in _COMPILED)
    return {"path": "compiled" if _COMPILED else "python", "why": _WHY, "compiled": sorted(_COMPILED), "python": python}


def _compiled():
    """The compiled launcher, built and loaded on the first op that asks (None where it cannot
    be; :func:`launcher` says why)."""
    global _LAUNCHER, _CHECKED, _WHY
    if _WHY is None:
        try:
            _LAUNCHER = fast_ops.load()
            _LAUNCHER.set_limit(PLAN_LIMIT)
            _LAUNCHER.enable(FAST_PATH)
            _CHECKED = torch.library.Library(_CHECKED_NS, "DEF")
            _WHY = str(_LAUNCHER.path)
        except fast_ops.BuildError as e:
            _WHY = str(e)
        except Exception as e:  # noqa: BLE001 - any failure leaves today's Python path, and says why
            _LAUNCHER, _WHY = None, f"{type(e).__name__}: {e}"
    return _LAUNCHER


_DEFINED: list = []


def _define(schema: str, impl, fake, compiled: bool = False):
    """Define ``axe::<schema>`` with ``impl`` for CPU and CUDA tensors and ``fake`` for fake and
    meta tensors; returns the op (``torch.ops.axe.<name>``).  ``compiled``: where the compiled
    launcher loads, its C++ kernel is the op's and ``impl`` runs on its misses (as
    ``axe_checked::<name>``); ``impl`` must then hand its plans over (:func:`_remember`)."""
    global _WHY
    name = schema.split("(", 1)[0]
    _LIB.define(schema)
    _DEFINED.append(name)
    torch.library.register_fake(f"axe::{name}", fake, lib=_LIB)
    if compiled and _compiled() is not None:
        try:
            _CHECKED.define(schema)
            for key in ("CPU", "CUDA"):
                _CHECKED.impl(name, impl, key)
            _LAUNCHER.register(name, _CHECKED_NS)
            _COMPILED.add(name)
            return getattr(torch.ops.axe, name)
        except (RuntimeError, fast_ops.BuildError) as e:
            _WHY = f"{_WHY}; axe::{name} stays on the Python path: {e}"
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, impl, key)
    return getattr(torch.ops.axe, name)


def _ready(t, align: int = 16):
    """``t`` itself when contiguous and ``align``-byte aligned, else a fresh contiguous copy
    (torch's allocator aligns fresh tensors to far more than 64 bytes)."""
    if t.is_contiguous() and t.data_ptr() % align == 0:
        return t
    return t.contiguous() if not t.is_contiguous() else t.clone()


# --- rmsnorm ---------------------------------------------------------------------------------

def _check_rmsnorm(x, weight, op="rmsnorm"):
    n = _row_length(op, x)
    dt = _dtype(op, "x", x)
    if tuple(weight.shape) != (n,):
        raise ValueError(f"axe::{op}: weight has shape {tuple(weight.shape)}, expected ({n},) (x's last dimension)")
    _same(op, "weight", weight, x, shape=False)
    return n, dt


_RMS_PLANS = PLANS.setdefault("rmsnorm", {})


def _rmsnorm(x, weight, eps=1e-6):
    """``x / sqrt(mean(x², -1) + eps) * weight`` over the last dimension (fp32 inside)."""
    key = (_sig(x), _sig(weight), eps)
    hit = _RMS_PLANS.get(key) if FAST_PATH else None
    if hit is not None:
        xp, wp = x.data_ptr(), weight.data_ptr()
        if not (xp | wp) & 15:
            y = torch.empty_like(x)
            _planned("rmsnorm", hit)((xp, wp, y.data_ptr()))
            return y
    n, _ = _check_rmsnorm(x, weight)
    xr, wr = _ready(x), _ready(weight)
    rows = xr.reshape(-1, n)
    y = torch.empty_like(rows)
    args = (rows, wr.reshape(1, n), y, float(eps))
    if xr is x and wr is weight:       # kernel (X_, W_, Y_) = (x, weight, the output shaped like x)
        _remember("rmsnorm", key, KERNELS["rmsnorm"].plan(*args),
                  compiled=(((0, 16), (1, 16), (-1, 16)), ((0, tuple(x.shape)),)))
    KERNELS["rmsnorm"](*args)
    return y.view(x.shape)


def _rmsnorm_fake(x, weight, eps=1e-6):
    _check_rmsnorm(x, weight)
    return x.new_empty(x.shape)


rmsnorm = _define("rmsnorm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor", _rmsnorm, _rmsnorm_fake, compiled=True)


# --- fused_add_rmsnorm ----------------------------------------------------------------------

def _check_fused_add(x, residual, weight):
    n, _ = _check_rmsnorm(x, weight, "fused_add_rmsnorm")
    _same("fused_add_rmsnorm", "residual", residual, x)
    return n


def _writable(t):
    """``(t itself, False)`` when the kernel can write it in place (contiguous, 16-byte aligned),
    else ``(a contiguous copy, True)``: the caller copies the result back into ``t``."""
    r = _ready(t)
    return r, r is not t


_ADD_PLANS = PLANS.setdefault("fused_add_rmsnorm", {})


def _fused_add_rmsnorm(x, residual, weight, eps=1e-6):
    """In place: ``residual = x + residual`` (fp32 sum rounded to the dtype), then ``x =
    residual / sqrt(mean(residual², -1) + eps) * weight`` from the rounded residual; returns
    nothing."""
    key = (_sig(x), _sig(residual), _sig(weight), eps)
    hit = _ADD_PLANS.get(key) if FAST_PATH else None
    if hit is not None:
        xp, rp, wp = x.data_ptr(), residual.data_ptr(), weight.data_ptr()
        if not (xp | rp | wp) & 15 and xp != rp:
            _planned("fused_add_rmsnorm", hit)((xp, wp, rp))
            return
    n = _check_fused_add(x, residual, weight)
    if x.numel() and x.data_ptr() == residual.data_ptr():
        raise ValueError("axe::fused_add_rmsnorm: x and residual are the same memory; they must be distinct tensors")
    xw, x_copied = _writable(x)
    rw, r_copied = _writable(residual)
    wr = _ready(weight)
    args = (xw.view(-1, n), wr.view(1, n), rw.view(-1, n), float(eps))
    if not (x_copied or r_copied) and wr is weight:      # kernel (X_, W_, R_) = (x, weight, residual)
        _remember("fused_add_rmsnorm", key, KERNELS["fused_add_rmsnorm"].plan(*args),
                  compiled=(((0, 16), (2, 16), (1, 16)), (), ((0, 1),)))
    KERNELS["fused_add_rmsnorm"](*args)
    if x_copied:
        x.copy_(xw)
    if r_copied:
        residual.copy_(rw)


def _fused_add_rmsnorm_fake(x, residual, weight, eps=1e-6):
    _check_fused_add(x, residual, weight)


fused_add_rmsnorm = _define("fused_add_rmsnorm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps=1e-06) -> ()",
                            _fused_add_rmsnorm, _fused_add_rmsnorm_fake, compiled=True)


# --- softmax ---------------------------------------------------------------------------------

_SOFTMAX_PLANS = PLANS.setdefault("softmax", {})


def _softmax(x):
    """``softmax(x, dim=-1)`` (fp32 inside, the result in x's dtype)."""
    key = _sig(x)
    hit = _SOFTMAX_PLANS.get(key) if FAST_PATH else None
    if hit is not None:
        xp = x.data_ptr()
        if not xp & 15:
            y = torch.empty_like(x)
            _planned("softmax", hit)((xp, y.data_ptr()))
            return y
    n = _row_length("softmax", x)
    _dtype("softmax", "x", x)
    xr = _ready(x)
    rows = xr.reshape(-1, n)
    y = torch.empty_like(rows)
    if xr is x:
        _remember("softmax", key, KERNELS["softmax"].plan(rows, y), compiled=(((0, 16), (-1, 16)), ((0, tuple(x.shape)),)))
    KERNELS["softmax"](rows, y)
    return y.view(x.shape)


def _softmax_fake(x):
    _row_length("softmax", x)
    _dtype("softmax", "x", x)
    return x.new_empty(x.shape)


softmax = _define("softmax(Tensor x) -> Tensor", _softmax, _softmax_fake, compiled=True)


# --- silu_and_mul ---------------------------------------------------------------------------

def _check_silu(x):
    two_d = _row_length("silu_and_mul", x, multiple=16)      # each half a multiple of 8
    _dtype("silu_and_mul", "x", x)
    return two_d // 2


_SILU_PLANS = PLANS.setdefault("silu_and_mul", {})


def _silu_and_mul(x):
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` (..., 2d): fp32 inside, the result in x's dtype."""
    key = _sig(x)
    hit = _SILU_PLANS.get(key) if FAST_PATH else None
    if hit is not None:
        xp = x.data_ptr()
        if not xp & 15:
            y = torch.empty(hit[1], dtype=x.dtype, device=x.device)
            _planned("silu_and_mul", hit)((xp, y.data_ptr()))
            return y
    d = _check_silu(x)
    xr = _ready(x)
    rows = xr.reshape(-1, 2 * d)
    y = x.new_empty((rows.shape[0], d))
    if xr is x:
        shape = (*x.shape[:-1], d)
        _remember("silu_and_mul", key, KERNELS["silu_and_mul"].plan(rows, y), shape,
                  compiled=(((0, 16), (-1, 16)), ((0, shape),)))
    KERNELS["silu_and_mul"](rows, y)
    return y.view(*x.shape[:-1], d)


def _silu_and_mul_fake(x):
    d = _check_silu(x)
    return x.new_empty((*x.shape[:-1], d))


silu_and_mul = _define("silu_and_mul(Tensor x) -> Tensor", _silu_and_mul, _silu_and_mul_fake, compiled=True)


# --- rotary_embedding -----------------------------------------------------------------------

_ROTARY_HEAD_SIZES = (64, 128, 256)


def _heads(name: str, t, tokens: int, head_size: int) -> int:
    """How many heads of ``head_size`` each of ``tokens`` tokens has in ``t`` (checked)."""
    if tokens == 0:
        return 0
    per = tokens * head_size
    if t.numel() % per:
        raise ValueError(f"axe::rotary_embedding: {name} has shape {tuple(t.shape)} ({t.numel()} elements), not "
                         f"{tokens} tokens (positions.numel()) of whole heads of head_size={head_size}")
    return t.numel() // per


def _check_rotary(positions, query, key, head_size, cos_sin_cache):
    op = "rotary_embedding"
    if positions.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"axe::{op}: positions has dtype {positions.dtype}, expected int64 or int32")
    _dtype(op, "query", query)
    if head_size not in _ROTARY_HEAD_SIZES:
        raise ValueError(f"axe::{op}: head_size={head_size}; the axe kernel supports {_ROTARY_HEAD_SIZES}")
    if cos_sin_cache.dim() != 2:
        raise ValueError(f"axe::{op}: cos_sin_cache has shape {tuple(cos_sin_cache.shape)}, expected "
                         "(max_position, rot_dim)")
    if cos_sin_cache.shape[1] != head_size:
        raise ValueError(f"axe::{op}: cos_sin_cache rows hold rot_dim={cos_sin_cache.shape[1]} values; the axe kernel "
                         f"rotates whole heads (rot_dim == head_size={head_size})")
    _same(op, "cos_sin_cache", cos_sin_cache, query, "query", shape=False)
    if positions.device != query.device:
        raise ValueError(f"axe::{op}: positions is on {positions.device}, query on {query.device}")
    tokens = positions.numel()
    hq = _heads("query", query, tokens, head_size)
    if tokens and not hq:
        raise ValueError(f"axe::{op}: query has no heads")
    hk = 0
    if key is not None:
        _same(op, "key", key, query, "query", shape=False)
        hk = _heads("key", key, tokens, head_size)
    for name, t in (("query", query), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        if t is not None:
            _int32_elements(op, name, t)
    return tokens, hq, hk


_ROTARY_PLANS = PLANS.setdefault("rotary_embedding", {})


def _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    """vLLM's ``rotary_embedding``: rotates ``query`` and ``key`` (if not None) in place by the
    angles of ``cos_sin_cache[positions]``; returns nothing."""
    sig = (_sig(positions), _sig(query), None if key is None else _sig(key), head_size, _sig(cos_sin_cache), is_neox)
    hit = _ROTARY_PLANS.get(sig) if FAST_PATH else None
    if hit is not None:
        pp, qp, cp = positions.data_ptr(), query.data_ptr(), cos_sin_cache.data_ptr()
        if hit[1]:                     # the plan rotates a key too
            kp = key.data_ptr()
            if not (qp | kp | cp) & 15 and not pp % positions.element_size():
                _planned("rotary_embedding", hit)((pp, qp, kp, cp))
                return
        elif not (qp | cp) & 15 and not pp % positions.element_size():
            _planned("rotary_embedding", hit)((pp, qp, cp))
            return
    tokens, hq, hk = _check_rotary(positions, query, key, head_size, cos_sin_cache)
    if tokens == 0:
        return
    qw, q_copied = _writable(query)
    pr = _ready(positions.reshape(-1), positions.element_size())
    args = [pr, qw.view(tokens, hq * head_size)]
    copied = q_copied or pr.data_ptr() != positions.data_ptr()
    key = key if hk else None          # an empty key has nothing to turn: the build without one
    if key is not None:
        kw, k_copied = _writable(key)
        args.append(kw.view(tokens, hk * head_size))
        copied = copied or k_copied
    cr = _ready(cos_sin_cache)
    args.append(cr)
    jk = KERNELS["rotary_neox" if is_neox else "rotary_gptj"]
    if not copied and cr is cos_sin_cache and (key is not None or sig[2] is None):
        # kernel (P_, Q_[, K_], C_) = (positions, query[, key], cos_sin_cache)
        sources = ((0, positions.element_size()), (1, 16), *(((2, 16),) if key is not None else ()), (4, 16))
        _remember("rotary_embedding", sig, jk.plan(*args), key is not None, compiled=(sources,))
    jk(*args)
    if q_copied:
        query.copy_(qw)
    if key is not None and k_copied:
        key.copy_(kw)


def _rotary_embedding_fake(positions, query, key, head_size, cos_sin_cache, is_neox):
    _check_rotary(positions, query, key, head_size, cos_sin_cache)


rotary_embedding = _define("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
                           "Tensor cos_sin_cache, bool is_neox) -> ()", _rotary_embedding, _rotary_embedding_fake,
                           compiled=True)


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


PLANS.setdefault("gemm", {})


def _gemm_call(op: str, kernel: str, a, b, transpose_b: bool, shape):
    """A GEMM-shaped op's call: the planned launch of its signature where its pointers allow, else
    ``shape(a, b, transpose_b)`` (the checked (M, N) of the output) and the checked launch of
    ``KERNELS[kernel]`` on (a, b, a fresh M×N output), planned for the next call."""
    key = (_sig(a), _sig(b), transpose_b)
    hit = PLANS[op].get(key) if FAST_PATH else None
    if hit is not None:
        ap, bp = a.data_ptr(), b.data_ptr()
        if not (ap | bp) & 63:
            c = torch.empty(hit[1], dtype=a.dtype, device=a.device)
            _planned(op, hit)((ap, bp, c.data_ptr()))
            return c
    M, N = shape(a, b, transpose_b)
    c = a.new_empty((M, N))
    if not (M and N and a.shape[1]):
        return c.zero_()               # an empty product (no grid to launch, no tensor map of 0 rows); silu(0)·0 = 0
    # the GEMM's tensor maps want 64-byte aligned operands (its launch.json says so)
    ar, br = _ready(a, 64), _ready(b, 64)
    jk = KERNELS[kernel]
    if ar is a and br is b:            # kernel (A_, B_, C_[, scratch]) = (a, b, the output)
        _remember(op, key, jk.plan(ar, br, c), (M, N), compiled=(((0, 64), (1, 64), (-1, 64)), ((0, (M, N)),)))
    jk(ar, br, c)
    return c


def _gemm(a, b, transpose_b=False):
    """``a @ b`` (or ``a @ b.T`` with ``transpose_b``), fp32 accumulation, output in a's dtype."""
    return _gemm_call("gemm", "gemm_nt" if transpose_b else "gemm", a, b, transpose_b, _gemm_shape)


def _gemm_fake(a, b, transpose_b=False):
    M, N = _gemm_shape(a, b, transpose_b)
    return a.new_empty((M, N))


gemm = _define("gemm(Tensor a, Tensor b, bool transpose_b=False) -> Tensor", _gemm, _gemm_fake, compiled=True)


# --- gemm_silu_mul ---------------------------------------------------------------------------

def _gate_up_period() -> int:
    """Rows of one interleave period of the fused gate/up weight (``kernels.tp_shapes.GATE_UP_PERIOD``)."""
    return tune._module("tp_shapes").GATE_UP_PERIOD


def interleave_gate_up(w_gate, w_up):
    """The weight :func:`gemm_silu_mul` takes for ``nn.Linear`` weights ``w_gate`` and ``w_up``
    (I, K each, I a multiple of 64): (2I, K), each block of 128 rows 64 gate rows then the same 64
    up rows (``kernels.tp_shapes.interleave(w_gate, w_up, bn=128)``).  Law:
    ``gemm_silu_mul(x, interleave_gate_up(g, u), True) == silu(x @ g.T) * (x @ u.T)``."""
    return tune._module("tp_shapes").interleave(w_gate, w_up, bn=_gate_up_period())


def _gemm_silu_mul_shape(a, b, transpose_b: bool):
    op = "gemm_silu_mul"
    if not transpose_b:
        raise ValueError(f"axe::{op}: only transpose_b=True is built (w an nn.Linear weight, (2I, K), interleaved "
                         "by axe.torch.ops.interleave_gate_up)")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"axe::{op}: x and w must be matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    _dtype(op, "x", a)
    _same(op, "w", b, a, shape=False)
    if b.shape[1] != a.shape[1]:
        raise ValueError(f"axe::{op}: x is {a.shape[0]}x{a.shape[1]} but w is {b.shape[0]}x{b.shape[1]}: w's rows "
                         "must be as long as x's")
    period = _gate_up_period()
    if b.shape[0] % period:
        raise ValueError(f"axe::{op}: w has {b.shape[0]} rows; the interleaved gate/up weight has a multiple of "
                         f"{period} (gate and up rows in blocks of {period // 2})")
    return int(a.shape[0]), int(b.shape[0]) // 2


PLANS.setdefault("gemm_silu_mul", {})


def _gemm_silu_mul(x, w, transpose_b=True):
    """``silu(x @ w_gate.T) * (x @ w_up.T)`` of the interleaved ``w`` (fp32 inside, rounded once)."""
    return _gemm_call("gemm_silu_mul", "gemm_silu_mul", x, w, transpose_b, _gemm_silu_mul_shape)


def _gemm_silu_mul_fake(a, b, transpose_b=True):
    M, I = _gemm_silu_mul_shape(a, b, transpose_b)
    return a.new_empty((M, I))


gemm_silu_mul = _define("gemm_silu_mul(Tensor x, Tensor w, bool transpose_b=True) -> Tensor", _gemm_silu_mul,
                        _gemm_silu_mul_fake, compiled=True)
