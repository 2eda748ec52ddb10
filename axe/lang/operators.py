"""The operators as written in a kernel body: build the call record, dispatch at the call site."""

from __future__ import annotations

from axe import ops
from axe.schedules.dispatch import run as _run

from .scopes import scope_or_cta

__all__ = ["copy", "reduce", "elementwise", "unary", "binary", "cast", "sync", "gemm"]


def copy(dst, src, **config):
    """``dst = src`` in the current scope; keywords: ``schedule=``, ``barrier=`` (TMA), …"""
    _run(ops.copy(dst, src, scope_or_cta(), **config))


def reduce(dst, src, kind: str = "sum", dims=-1, **config):
    """``dst = kind-reduce of src over dims`` (sum, max, min)."""
    _run(ops.reduce(dst, src, kind, dims, scope_or_cta(), **config))


def elementwise(dst, fn, *srcs, **config):
    """``dst = fn(*srcs)`` per element, fused in one pass (sources broadcast)."""
    _run(ops.elementwise(dst, fn, *srcs, scope=scope_or_cta(), **config))


def unary(dst, src, name: str, **config):
    """``dst = name(src)`` elementwise (a name of :data:`axe.ops.elementwise.UNARY`) in the current scope."""
    _run(ops.unary(dst, src, name, scope_or_cta(), **config))


def binary(dst, a, b, name: str, **config):
    """``dst = name(a, b)`` elementwise (a name of :data:`axe.ops.elementwise.BINARY`) in the current scope."""
    _run(ops.binary(dst, a, b, name, scope_or_cta(), **config))


def cast(dst, src, **config):
    """``dst = src`` converted to ``dst``'s dtype, elementwise, in the current scope."""
    _run(ops.cast(dst, src, scope_or_cta(), **config))


def sync():
    """Barrier for the CTA's threads (shared memory visibility)."""
    from tvm.script import tirx as T
    T.evaluate(T.tvm_storage_sync("shared"))


def gemm(C, A, B, accumulate: bool = True, **config):
    """``C += A·B`` (``accumulate=False``: ``C = A·B``); A M×K, B K×N fp16/bf16 (or float8_e4m3fn,
    which wgmma takes on sm_90a; block scales are ``scale_accumulate``'s), C fp32.

    Keywords go to the schedule: ``schedule=`` ("wgmma", "mma_sync"), and for wgmma
    ``wait=`` (groups left in flight after commit, default 0; ``False``: no wait) and
    ``fence=``/``commit=`` (default True).
    """
    from axe.ops.gemm import gemm as _gemm
    _run(_gemm(C, A, B, accumulate, scope_or_cta(), **config))

