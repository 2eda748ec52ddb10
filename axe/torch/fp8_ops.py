"""``torch.ops.axe.gemm_fp8``: the block-scaled FP8 GEMM of ``kernels/gemm_fp8.py`` (DeepSeek-V3's
recipe) as a ``torch.library`` op.  Registered when this module is imported
(``import axe.torch.fp8_ops``).

``gemm_fp8(a, b, a_scale, b_scale) -> Tensor``: ``C = (a_scale ⊙ a) · (b_scale ⊙ b)ᵀ`` in bf16, i.e.
``C[i, j] = Σ_kb a_scale[i, kb] · b_scale[j // 128, kb] · Σ_{k in kb} a[i, k] · b[j, k]`` with fp32
accumulation:

- ``a`` (M, K) ``float8_e4m3fn`` (activations), ``b`` (N, K) e4m3 (an ``nn.Linear`` weight: ``C = a·bᵀ``);
- scales in **DeepGEMM's convention** (``deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)`` with fp32
  scales): ``a_scale`` logically (M, ceil(K/128)), one fp32 scale per row and 128 elements of K,
  stored MN-major and TMA-aligned — strides ``(1, round_up(M, 4))``, what
  ``deep_gemm``'s ``get_mn_major_tma_aligned_tensor`` returns (the transpose of a contiguous
  ``(ceil(K/128), round_up(M, 4))`` array); ``b_scale`` (ceil(N/128), ceil(K/128)) fp32 row-major,
  one scale per 128×128 block.  Not ``torch._scaled_mm``'s blockwise form, whose operand ``b`` is
  (K, N) column-major and whose scales are laid out for it.  Any other strides of an ``a_scale``
  of that logical shape are accepted and copied into the kernel's layout (small: M·K/128 floats);
- ``C`` (M, N) bf16.

One artifact per (N, K, bucket of M) serves every M of the bucket: the kernel takes M at run time
(``kernels.gemm_fp8.make_dynamic``), its configuration the bucket's pick measured by ``axe tune
gemm_fp8`` on this GPU (:mod:`axe.torch.tune`), else :func:`kernels.gemm_fp8_select.heuristic`'s (tile
width, split-K, and for a bucket of at most 1024 rows the bound it is scheduled for), memoized per
(device, N, K, bucket): a call costs one bisect and a dict lookup.  ``a`` and ``C`` are used as they
are (no padding to a bucket); ``a_scale`` in DeepGEMM's layout is passed as it is stored (the
``(ceil(K/128), round_up(M, 4))`` array its strides describe), any other layout is copied into one.

Refused (naming the argument and the condition): dtypes other than e4m3 / fp32, K below 128 or not
a multiple of 16, N below 128 or not a multiple of 8 (TMA's 16-byte row pitch; a tile no larger
than the tensor), operands on different devices, scale shapes that do not match.  The kernel runs
on sm_90a only (``kernels/gemm_fp8.py`` refuses other targets when it is built).
"""

from __future__ import annotations

import importlib
import sys

import torch

from .jit import JitKernel
from . import tune
from .ops import ROOT, _define, _device_name, _ready

__all__ = ["gemm_fp8", "KERNEL", "spec", "bucket", "check"]

BLOCK = 128
FP8 = torch.float8_e4m3fn
ALIGN = 64              # bytes: the tensor arguments' alignment in the artifacts' launch.json

#: the jit kernel behind the op (its ``loader``, ``cache`` and ``target`` may be replaced)
KERNEL = JitKernel(tune.GEMM_FP8.kernel, lambda A, B, SA, SB, C: spec(int(C.shape[0]), int(C.shape[1]),
                                                                int(A.shape[1]), _device_name(A.device)), path=ROOT)
#: the specs chosen per (device, N, K, bucket), emptied by :func:`axe.torch.tune.reload`
_PICKS: dict = tune.memo()
if str(ROOT) not in sys.path:           # the kernels package beside axe (pure Python: no TVM needed to pick)
    sys.path.insert(0, str(ROOT))
SELECT = importlib.import_module("kernels.gemm_fp8_select")


def bucket(M: int):
    """The bucket bound of M rows (:func:`kernels.gemm_select.bucket`; None: the unbounded last one)."""
    return SELECT.bucket(M)


def spec(M: int, N: int, K: int, device: str | None = None) -> dict:
    """``kernels.gemm_fp8.make_dynamic``'s keyword arguments (a run-time M) for a call with M rows:
    N, K and the configuration of M's bucket — ``axe tune gemm_fp8``'s measured pick for ``device``
    (the GPU's name; None: no table is read), else the heuristic's — memoized per (device, N, K,
    bucket): a call costs one bisect and a dict lookup.  A new pick takes effect after
    :func:`axe.torch.tune.reload` (the op keeps no plan)."""
    key = (device, N, K, SELECT.bucket(M))
    s = _PICKS.get(key)
    if s is None:
        s = _PICKS[key] = tune.choose(tune.GEMM_FP8, device, N, K, str(FP8)[6:], None, M)
    return s


def check(a, b, a_scale, b_scale):
    """The op's conditions; returns ``(M, N, K)`` or raises naming the argument and the condition."""
    op = "axe::gemm_fp8"
    for name, t in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale)):
        if t.dim() != 2:
            raise ValueError(f"{op}: {name} must be a matrix, got shape {tuple(t.shape)}")
    for name, t, want in (("a", a, FP8), ("b", b, FP8), ("a_scale", a_scale, torch.float32),
                          ("b_scale", b_scale, torch.float32)):
        if t.dtype != want:
            raise TypeError(f"{op}: {name} has dtype {t.dtype}, expected {want}")
        if t.device != a.device:
            raise ValueError(f"{op}: {name} is on {t.device}, a on {a.device}")
    M, K = a.shape[0], int(a.shape[1])
    N = int(b.shape[0])
    if b.shape[1] != K:
        raise ValueError(f"{op}: a is (M, K) = {tuple(a.shape)}, b (N, K) = {tuple(b.shape)}: K differs")
    if K < BLOCK or K % 16:
        raise ValueError(f"{op}: K={K}; the kernel needs K >= {BLOCK} (one k-block) and a multiple of 16 "
                         "(TMA's 16-byte row pitch)")
    if N < BLOCK or N % 8:
        raise ValueError(f"{op}: b has N={N} rows; the kernel needs N >= {BLOCK} (one tile) and a multiple of 8")
    kb, nb = -(-K // BLOCK), -(-N // BLOCK)
    if a_scale.shape[0] != M or a_scale.shape[1] != kb:
        raise ValueError(f"{op}: a_scale has shape {tuple(a_scale.shape)}, expected (M, ceil(K/128)) = ({M}, {kb}) "
                         "(DeepGEMM's per-row, per-128-column scales)")
    if tuple(b_scale.shape) != (nb, kb):
        raise ValueError(f"{op}: b_scale has shape {tuple(b_scale.shape)}, expected (ceil(N/128), ceil(K/128)) = "
                         f"({nb}, {kb}) (one scale per 128x128 block of b)")
    return M, N, K


def _stored_scale(a_scale, M, kb):
    """The ``(kb, round_up(M, 4))`` fp32 array the kernel reads: ``a_scale``'s own storage where it is
    in DeepGEMM's layout (strides ``(1, round_up(M, 4))``, aligned as the artifact's arguments are,
    the padding columns inside its storage), else a copy into a fresh one."""
    Mp = -(-M // 4) * 4
    st = a_scale.stride()
    in_place = ((st[0] == 1 or M == 1) and (st[1] == Mp or kb == 1) and a_scale.data_ptr() % ALIGN == 0
                and a_scale.untyped_storage().nbytes() >= (a_scale.storage_offset() + kb * Mp) * 4)
    if in_place:
        return torch.as_strided(a_scale, (kb, Mp), (Mp, 1))
    SA = torch.zeros((kb, Mp), dtype=torch.float32, device=a_scale.device)
    SA[:, :M] = a_scale.t()
    return SA


def _gemm_fp8(a, b, a_scale, b_scale):
    M, N, K = check(a, b, a_scale, b_scale)
    if M == 0:
        return torch.empty((0, N), dtype=torch.bfloat16, device=a.device)
    c = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    SA = _stored_scale(a_scale, M, a_scale.shape[1])
    KERNEL.load(a.device, spec(M, N, K, _device_name(a.device)))(_ready(a), _ready(b), SA, _ready(b_scale), c)
    return c


def _gemm_fp8_fake(a, b, a_scale, b_scale):
    M, N, _ = check(a, b, a_scale, b_scale)
    return a.new_empty((M, N), dtype=torch.bfloat16)


def reference(a, b, a_scale, b_scale):
    """fp32 ``C`` of the dequantized operands (the GPU check's and the CPU tests' reference)."""
    M, K = a.shape
    N = b.shape[0]
    af = a.float() * a_scale.float().repeat_interleave(BLOCK, 1)[:, :K]
    bf = b.float() * b_scale.float().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:N, :K]
    return af @ bf.t()


def deepgemm_scales(scale):
    """``scale`` (M, KB) as DeepGEMM lays it out: the same values with strides ``(1, round_up(M, 4))``."""
    M, kb = scale.shape
    store = torch.zeros((kb, -(-M // 4) * 4), dtype=torch.float32, device=scale.device)
    store[:, :M] = scale.t()
    return store[:, :M].t()


#: defined in ops.py's ``axe`` library, like the other ops
gemm_fp8 = _define("gemm_fp8(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> Tensor",
                   _gemm_fp8, _gemm_fp8_fake)
