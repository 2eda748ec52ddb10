"""Copy and elementwise whose register sources are not where their consumers are: staged through
shared memory.

``per_thread`` reads a register source in place when every thread that computes an element
holds the source's element (its replica brings the value there; :mod:`axe.layout.broadcast`).
When a source is not so placed (a broadcast row held once, a tile spread over other threads),
this schedule moves it: each holder writes its elements to a row-major shared copy, the CTA
syncs, and the per-thread pass reads the copy; a second sync lets the buffer be reused (the
call may sit in a loop).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from axe.layout import S
from axe.ops.tensor import Tensor
from axe.schedules.generic import pointwise_check, pointwise_emit
from axe.schedules.registry import add_schedule

__all__ = ["StagedPlan"]

#: scopes whose threads are the whole CTA: one shared buffer and __syncthreads serve them
_CTA_WIDE = ("cta", "kernel", "cluster")


@dataclass
class StagedPlan:
    """``staged``: operand names moved through shared memory; ``main``: the per-thread plan of the
    call reading those copies."""

    staged: tuple
    main: object

    def describe(self) -> str:
        return (f"{', '.join(self.staged)} staged through shared memory (row-major, one CTA sync before "
                f"and after); then {self.main.describe()}")


def _shared_twin(t: Tensor, buffer=None) -> Tensor:
    """A row-major shared tile of ``t``'s shape and dtype (``buffer`` None: for planning only)."""
    return Tensor(buffer, S[tuple(t.shape)], tuple(t.shape), t.dtype, "shared", name=f"{t.name}_staged")


def _alone(call, name):
    """The call with dst and the one source ``name`` (does it pair in place on its own?)."""
    ops = {"dst": call.operands["dst"], name: call.operands[name]}
    return replace(call, operands=ops)


def _check(call, ctx):
    if call.scope.kind not in _CTA_WIDE:
        return (f"staging through shared memory needs a CTA-wide scope (one buffer, __syncthreads), "
                f"not {call.scope.describe()}")
    names = [n for n in list(call.operands)[1:] if call.operands[n].mem == "local"]
    moved = tuple(n for n in names if isinstance(pointwise_check(_alone(call, n)), str))
    if not moved:
        return "no register source needs to move (per_thread reads every one in place)"
    ops = {n: (_shared_twin(t) if n in moved else t) for n, t in call.operands.items()}
    main = pointwise_check(replace(call, operands=ops))
    if isinstance(main, str):
        return f"with {', '.join(moved)} staged in shared memory: {main}"
    return StagedPlan(moved, main)


def _emit(call, plan, ctx):
    from tvm.script import tirx as T
    ops = dict(call.operands)
    for n in plan.staged:
        src = ops[n]
        buf = T.alloc_buffer((prod(src.shape),), src.dtype, scope="shared")
        twin = _shared_twin(src, buf)
        write = replace(call, op="copy", operands={"dst": twin, "src": src}, attrs={})
        pointwise_emit(write, pointwise_check(write), lambda x: x)
        ops[n] = twin
    T.evaluate(T.tvm_storage_sync("shared"))
    fn = call.attrs["fn"] if call.op == "elementwise" else (lambda x: x)
    pointwise_emit(replace(call, operands=ops), plan.main, fn)
    T.evaluate(T.tvm_storage_sync("shared"))


for _op in ("copy", "elementwise"):
    add_schedule(_op, "smem_staged", "cuda", priority=-5,
                 requires="a CTA-wide scope; register sources that per_thread cannot read in place are written "
                          "to shared memory by their holders, then read by the threads that compute",
                 check=_check, emit=_emit, broadcasts=True)
