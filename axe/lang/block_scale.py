"""Block-scaled operators as written in a kernel body (``from axe.lang.block_scale import ...``):
the fp8 ``gemm`` and ``scale_accumulate`` (semantics in :mod:`axe.ops.block_scale`)."""

from __future__ import annotations

from axe.ops import block_scale as _ops

from .operators import _run
from .scopes import scope_or_cta

__all__ = ["gemm_fp8", "scale_accumulate"]


def gemm_fp8(C, A, B, accumulate: bool = True, **config):
    """``C (+)= A·B`` with fp8 (e4m3) A and B, C float32: the ``gemm`` operator (same schedules and
    keywords as :func:`axe.lang.gemm`)."""
    _run(_ops.gemm_fp8(C, A, B, accumulate, scope_or_cta(), **config))


def scale_accumulate(D, P, *scales, accumulate: bool = True, **config):
    """``D = (D if accumulate else 0) + P ⊙ ∏ up(S)``: each scale holds one value per block of D
    (its shape divides D's).  ``before_apply=fn``: called between the scale loads and the
    multiply-adds (put the wait for the MMA writing P there, so the loads overlap it)."""
    _run(_ops.scale_accumulate(D, P, scales, accumulate, scope_or_cta(), **config))
