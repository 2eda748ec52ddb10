"""Target-independent schedules: scalar owner-computes copy, elementwise and in-thread reduce."""

from __future__ import annotations

from dataclasses import dataclass

from axe.ops.scope import thread_axis_values

from .emit import mem_offset
from .plan import THREAD_AXES, pair_dims
from .pointwise import distribute, iterate
from .registry import add_schedule, register

__all__ = ["PointwisePlan", "squeezed", "operand_shapes", "pointwise_check", "pointwise_emit"]


def _tir():
    import tvm
    return tvm.tirx


def squeezed(shape):
    return tuple(e for e in shape if e != 1) or (1,)


def operand_shapes(call):
    """(common shape, [(layout, shape_k)]) for the call's operands, dst first.

    Elementwise sources and a broadcasting copy's source are right-aligned to dst's rank (numpy's
    rule: 1 where they broadcast); a plain copy compares shapes with extent-1 dims dropped."""
    from axe.layout.broadcast import aligned_shape
    ts = list(call.operands.values())
    if call.op == "elementwise" or call.attrs.get("broadcast"):
        shape = ts[0].shape
        return shape, [(t.layout, aligned_shape(t.shape, len(shape))) for t in ts]
    shape = squeezed(ts[0].shape)
    return shape, [(t.layout, squeezed(t.shape)) for t in ts]


@dataclass
class PointwisePlan:
    dims: list
    dist: object

    def describe(self) -> str:
        return f"{len(self.dims)} paired dims {[d.extent for d in self.dims]}; {self.dist.describe(self.dims)}"


def pointwise_check(call):
    ts = list(call.operands.values())
    shape, ops = operand_shapes(call)
    dims = pair_dims(shape, ops)
    if isinstance(dims, str):
        return dims
    shapes = [sk for _, sk in ops]
    # the driver computes each element once: dst, else an operand of the full shape (a broadcast
    # source as driver would make its replicas compute the same elements again)
    prefer = [0] + [k for k, sk in enumerate(shapes) if tuple(sk) == tuple(shape)]
    dist = distribute(dims, ts, call.scope, thread_axis_values(call.scope), prefer=prefer, shapes=shapes)
    if isinstance(dist, str):
        return dist
    return PointwisePlan(dims, dist)


def pointwise_emit(call, plan, value_fn):
    from tvm.script.ir_builder import tirx as IRB
    ts = list(call.operands.values())
    av = thread_axis_values(call.scope)
    with iterate(plan.dims, plan.dist, call.scope, av) as digits:
        loads = [t.flat()[mem_offset(t, plan.dims, k, digits)] for k, t in enumerate(ts) if k > 0]
        dst = ts[0]
        IRB.buffer_store(dst.flat(), value_fn(*loads), [mem_offset(dst, plan.dims, 0, digits)])


def _elementwise_emit(call, plan, ctx):
    """Fused elementwise pass: one loop nest computes fn(src…) into dst per element."""
    pointwise_emit(call, plan, call.attrs["fn"])


# the fallbacks: each element moved (or computed) by the thread that owns it
add_schedule("copy", "per_thread", priority=0,
             requires="any layouts whose shards refine to common dims; each element moved by its owner thread",
             check=lambda call, ctx: pointwise_check(call),
             emit=lambda call, plan, ctx: pointwise_emit(call, plan, lambda x: x), broadcasts=True)
add_schedule("elementwise", "per_thread", priority=0,
             requires="dst and sources pair dim by dim; register operands agree on thread placement",
             check=lambda call, ctx: pointwise_check(call), emit=_elementwise_emit, broadcasts=True)


def reduce_init(kind, dtype):
    t = _tir()
    if kind == "sum":
        return t.const(0, dtype)
    return t.min_value(dtype) if kind == "max" else t.max_value(dtype)


def reduce_combine(kind, a, b):
    t = _tir()
    return a + b if kind == "sum" else (t.max(a, b) if kind == "max" else t.min(a, b))


def reduce_dims(call):
    """Pair src with a dst broadcast over the reduced dims: (dims, reduced dim indices) or reason."""
    dst, src = call.operands["dst"], call.operands["src"]
    red = call.attrs["dims"]
    dshape = tuple(1 if i in red else e for i, e in enumerate(src.shape))
    from axe.ops.tensor import Tensor  # noqa: F401  (dst's layout is over its own squeezed shape)
    dims = pair_dims(src.shape, [(src.layout, src.shape), (dst.layout, dshape)])
    if isinstance(dims, str):
        return dims
    reduced = [i for i, d in enumerate(dims) if d.axis(1) is None]
    return dims, reduced


@dataclass
class ReducePlan:
    dims: list
    reduced: list
    dist: object
    cross: list          # reduced dims spread over threads (warp shuffle / CTA)

    def describe(self) -> str:
        red = [f"{self.dims[i].extent}@{self.dims[i].axis(0)}" for i in self.reduced]
        return f"reduce over {red}; {self.dist.describe(self.dims)}"


def reduce_plan(call):
    got = reduce_dims(call)
    if isinstance(got, str):
        return got
    dims, reduced = got
    src, dst = call.operands["src"], call.operands["dst"]
    cross = [i for i in reduced if dims[i].axis(0) in THREAD_AXES]
    # thread placement is the source's: the dst follows it on kept dims
    kept_thread = [i for i, d in enumerate(dims) if i not in reduced and d.axis(0) in THREAD_AXES]
    for i in kept_thread:
        if dims[i].parts[1] != dims[i].parts[0] and dst.mem == "local":
            return (f"dst {dst.layout} keeps dim {i} on {dims[i].axis(1)} but src holds it on "
                    f"{dims[i].axis(0)}")
    from .emit import thread_digits
    av = thread_axis_values(call.scope)
    if any(d.axis(0) in THREAD_AXES for d in dims):
        digits, pred, why = thread_digits(dims, 0, src.layout, av)
        if why:
            return why
        from .pointwise import Distribution
        loop = [i for i in range(len(dims)) if i not in digits]
        dist = Distribution(0, digits, loop, pred)
    else:
        from .pointwise import Distribution
        if call.scope.threads > 1 and not (src.mem == "local" and dst.mem == "local"):
            return f"src {src.layout} names no threads: a {call.scope.kind}-wide reduce of memory needs a layout that spreads it"
        dist = Distribution(None, {}, list(range(len(dims))), None)
    return ReducePlan(dims, reduced, dist, cross)


def emit_thread_reduce(call, plan):
    """dst[kept] = reduce over this thread's share of the reduced dims (register loops)."""
    from tvm.script.ir_builder import tirx as IRB
    from .emit import guard, loops
    dst, src = call.operands["dst"], call.operands["src"]
    kind = call.attrs["kind"]
    dims, dist = plan.dims, plan.dist
    kept = [i for i in dist.loop_dims if i not in plan.reduced]
    red = [i for i in dist.loop_dims if i in plan.reduced]
    with guard(dist.predicate):
        with loops([dims[i].extent for i in kept]) as kv:
            digits = dict(dist.thread_digits) if hasattr(dist, "thread_digits") else dict(dist.thread_dims)
            digits.update(zip(kept, kv))
            for i in plan.reduced:
                digits.setdefault(i, 0)
            d_off = mem_offset(dst, dims, 1, digits)
            IRB.buffer_store(dst.flat(), reduce_init(kind, dst.dtype), [d_off])
            with loops([dims[i].extent for i in red]) as rv:
                dg = dict(digits)
                dg.update(zip(red, rv))
                cur = dst.flat()[d_off]
                IRB.buffer_store(dst.flat(), reduce_combine(kind, cur, src.flat()[mem_offset(src, dims, 0, dg)]), [d_off])


@register("reduce", "in_thread", priority=0,
          requires="every reduced dim lies in one thread's registers (or memory it reads alone)")
class InThreadReduce:
    """Each thread reduces the elements it holds; no data crosses threads."""

    @staticmethod
    def check(call, ctx):
        plan = reduce_plan(call)
        if isinstance(plan, str):
            return plan
        if plan.cross:
            d = plan.dims[plan.cross[0]]
            return f"reduced dim of extent {d.extent} lies on thread axis {d.axis(0)} (needs a cross-thread reduce)"
        return plan

    @staticmethod
    def emit(call, plan, ctx):
        emit_thread_reduce(call, plan)
