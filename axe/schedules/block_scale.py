"""``scale_accumulate`` on a register accumulator: each thread scales the elements it holds.

Which scale belongs to which element is derived from the layouts, never from a tile shape: D's
shape is refined so that every scale's block is a union of whole dims (dim d of extent n with
blocks b₁ | b₂ | … becomes ``(n/b_r, …, b₂/b₁, b₁)``); in that shape a scale is an ordinary
broadcast (extent 1 on the dims inside its block), so :func:`~axe.schedules.plan.pair_dims`
pairs D, P and every scale into common dims, each one ``(stride, axis)`` per operand.  D's thread
dims fix which elements a thread holds; the remaining register dims are looped over.

The law (checked by brute force over the layouts in tests/test_gemm_fp8.py): the element that
D's layout puts at (thread t, register r) is ``(i, j)``; the thread reads scale k at
``f_{S_k}(i // b0, j // b1)[m]``.

Emission, per thread: first a table of the distinct scale products it needs (one per value of
the register dims that some scale varies over: 2 for a wgmma m64 fragment with per-row and
per-128-column scales), then the caller's ``before_apply`` hook (e.g. the wait for the
asynchronous MMA that writes P: the scale loads overlap it), then one multiply-add per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.ops.scope import thread_axis_values

from .emit import guard, loops, mem_offset
from .plan import pair_dims
from .pointwise import distribute
from .registry import register

__all__ = ["ScalePlan", "scale_plan", "refine_shape"]


def refine_shape(shape, blocks):
    """``(fine, per_operand)``: D's ``shape`` split so every block of ``blocks`` (one tuple per
    scale) is whole dims, and each scale's shape in it (1 inside its block); or a reason when a
    dimension's blocks do not nest (each must divide the next)."""
    fine, per = [], [[] for _ in blocks]
    for d, n in enumerate(shape):
        bs = sorted({b[d] for b in blocks} | {n})
        if any(hi % lo for lo, hi in zip(bs, bs[1:])):
            return f"dimension {d}: scale blocks {sorted({b[d] for b in blocks})} of extent {n} do not nest"
        factors = [hi // lo for lo, hi in zip(bs, bs[1:])][::-1] + [bs[0]]   # outermost first
        inner = [prod(factors[i + 1:]) for i in range(len(factors))]        # elements inside factor i
        fine.extend(factors)
        for k, b in enumerate(blocks):
            per[k].extend(f if inner[i] >= b[d] else 1 for i, f in enumerate(factors))
    return tuple(fine), [tuple(p) for p in per]


@dataclass
class ScalePlan:
    dims: list            # paired dims: operand 0 = D, 1 = P, 2.. = scales
    dist: object          # D's thread distribution
    table: list           # loop dims some scale varies over (the product table's digits)
    blocks: tuple

    @property
    def table_size(self) -> int:
        return prod(self.dims[i].extent for i in self.table)

    def table_index(self, digits):
        """The product table's slot of an element: its table digits in mixed radix."""
        idx, w = 0, 1
        for i in reversed(self.table):
            idx = idx + digits[i] * w
            w *= self.dims[i].extent
        return idx

    def describe(self) -> str:
        per = prod(self.dims[i].extent for i in self.dist.loop_dims)
        bl = ", ".join(f"S{k} blocks {'x'.join(map(str, b))}" for k, b in enumerate(self.blocks))
        return (f"{self.table_size} scale products per thread ({bl}), then {per} multiply-adds per thread; "
                f"{self.dist.describe(self.dims)}")


def scale_plan(call):
    """A :class:`ScalePlan`, or the reason the call's layouts do not pair."""
    ops = list(call.operands.values())
    D, P = ops[0], ops[1]
    for name, t in (("D", D), ("P", P)):
        if t.mem != "local":
            return f"{name} ({t.name}) is in {t.mem} memory; the scaled accumulator lives in registers"
    blocks = call.attrs["blocks"]
    got = refine_shape(D.shape, blocks)
    if isinstance(got, str):
        return got
    fine, per = got
    dims = pair_dims(fine, [(D.layout, fine), (P.layout, fine)] + [(s.layout, sk) for s, sk in zip(ops[2:], per)])
    if isinstance(dims, str):
        return dims
    for k, s in enumerate(ops[2:], start=2):
        if any(d.axis(k) not in ("m", None) for d in dims):
            return f"scale S{k - 2} ({s.layout}) names thread axes; scales are read from memory"
    dist = distribute(dims, ops[:2], call.scope, thread_axis_values(call.scope))
    if isinstance(dist, str):
        return dist
    if dist.round_robin:
        return "D's layout names no threads of the scope"
    table = [i for i in dist.loop_dims if any(dims[i].axis(k) is not None for k in range(2, len(ops)))]
    return ScalePlan(dims, dist, table, blocks)


def _emit(call, plan: ScalePlan, ctx):
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    ops = list(call.operands.values())
    D, P, scales = ops[0], ops[1], ops[2:]
    d, f32 = plan.dims, "float32"
    F = T.alloc_buffer((plan.table_size,), f32, scope="local")
    with guard(plan.dist.predicate):
        with loops([d[i].extent for i in plan.table]) as vs:
            digits = dict(plan.dist.thread_dims)
            digits.update(zip(plan.table, vs))
            value = None
            for k, s in enumerate(scales, start=2):
                x = s.flat()[mem_offset(s, d, k, digits)]
                x = x if s.dtype == f32 else T.Cast(f32, x)
                value = x if value is None else value * x
            IRB.buffer_store(F, value, [plan.table_index(digits)])
    hook = call.config.get("before_apply")
    if hook is not None:        # every thread of the scope: the hook may be collective (wgmma.wait_group)
        hook()
    with guard(plan.dist.predicate):
        with loops([d[i].extent for i in plan.dist.loop_dims]) as vs:
            digits = dict(plan.dist.thread_dims)
            digits.update(zip(plan.dist.loop_dims, vs))
            at = mem_offset(D, d, 0, digits)
            term = P.flat()[mem_offset(P, d, 1, digits)] * F[plan.table_index(digits)]
            IRB.buffer_store(D.flat(), D.flat()[at] + term if call.attrs["accumulate"] else term, [at])


def _check(call, ctx):
    hook = call.config.get("before_apply")
    if hook is not None and not callable(hook):
        return f"before_apply={hook!r} is not callable"
    return scale_plan(call)


@register("scale_accumulate", "per_thread", priority=0,
          requires="D and P in registers pairing dim by dim; scales in memory whose blocks nest in D's shape")
class ScaleAccumulate:
    """Each thread loads the scale products of the elements it holds, then multiply-adds."""

    check = staticmethod(_check)
    emit = staticmethod(_emit)
