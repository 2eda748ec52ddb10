"""Entering execution scopes in a kernel body: the launch, warp/warpgroup slices, a thread."""

from __future__ import annotations

import contextlib

from axe.ops.scope import ExecScope, current_scope, enter_launch, pop_scope, push_scope, scope_or_cta
from axe.schedules.context import current_context

__all__ = ["launch", "warps", "warpgroups", "each_warp", "thread", "cta", "scope_or_cta"]


def launch(grid, threads: int):
    """Emit the kernel entry, the CTA index and the thread index; enter the CTA scope.

    ``grid``: an int or a list of ints (CTA extents).  Returns ``(cta index, tx)``; the CTA
    index is a list for a multi-dimensional grid.
    """
    from tvm.script import tirx as T
    T.device_entry()
    grid = [grid] if isinstance(grid, int) else list(grid)
    bx = T.cta_id(grid)
    tx = T.thread_id([threads])
    current_context("Ax.launch").grid = (bx, tuple(grid))
    enter_launch(ExecScope("cta", tx, threads))
    return bx, tx


@contextlib.contextmanager
def _sliced(kind: str, lo: int, hi: int, per: int, collective: bool = True):
    from tvm.script.ir_builder import tirx as IRB
    import tvm
    outer = scope_or_cta()
    tx = outer.tx
    if hi * per > outer.cta_threads:
        raise ValueError(f"{kind}s [{lo}, {hi}) need {hi * per} threads; the CTA has {outer.cta_threads}")
    push_scope(ExecScope(kind, tx, outer.cta_threads, lo, hi, collective))
    try:
        if lo == 0 and hi * per == outer.cta_threads:
            yield
        else:
            with IRB.If(tvm.tirx.And(tx >= lo * per, tx < hi * per)):
                with IRB.Then():
                    yield
    finally:
        pop_scope()


def warps(lo: int, hi: int):
    """Warps ``[lo, hi)`` of the CTA acting together (e.g. producer warps 0–3)."""
    return _sliced("warp", lo, hi, 32)


def warpgroups(lo: int, hi: int | None = None):
    """Warpgroups ``[lo, hi)`` (one warpgroup when hi is omitted) acting together."""
    return _sliced("warpgroup", lo, lo + 1 if hi is None else hi, 128)


@contextlib.contextmanager
def _entered(kind: str, collective: bool):
    """Enter a scope of ``kind`` over the enclosing scope's threads (no guard is emitted)."""
    outer = scope_or_cta()
    push_scope(ExecScope(kind, outer.tx, outer.cta_threads, 0, None, collective=collective))
    try:
        yield
    finally:
        pop_scope()


def each_warp():
    """Every warp runs the operators on its own data (warp-level operators)."""
    return _entered("warp", collective=False)


def thread():
    """Each thread runs the operators on its own (per-thread tensors, example 7's form)."""
    return _entered("thread", collective=False)


def cta():
    """Back to the whole CTA (inside a slice this is still guarded by the slice's condition)."""
    return _entered("cta", collective=True)
