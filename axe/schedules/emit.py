"""Writing TIR for a plan: loops, thread digits, addresses (target-independent)."""

from __future__ import annotations

import contextlib

from axe.layout import SwizzledLayout

from .plan import THREAD_AXES, inner_layout

__all__ = ["thread_digits", "mem_offset", "loops", "swizzle_expr", "is_zero"]


def _tir():
    import tvm
    return tvm.tirx


def is_zero(x) -> bool:
    import tvm
    return isinstance(x, int) and x == 0 or isinstance(x, tvm.tirx.IntImm) and int(x) == 0


def swizzle_expr(x, sw):
    """``x ^ ((x >> S) & ((2^B − 1) << M))`` on a TIR integer expression."""
    t = _tir()
    mask = ((1 << sw.bits) - 1) << sw.base
    return t.bitwise_xor(x, t.bitwise_and(t.shift_right(x, sw.shift), mask))


def thread_digits(dims, k, layout, axis_values):
    """For dims whose operand-k axis is a thread axis: digit expressions from the thread index.

    Returns ``(digits: {dim index: expr}, predicate expr or None, reason or None)``.  The
    predicate holds exactly for the threads whose coordinate the shard reaches (replicas on a
    thread axis are folded when their stride is the shard's span there).
    """
    t = _tir()
    inner = inner_layout(layout)
    digits, pred, used = {}, [], {}
    spans = {}
    for i, dim in enumerate(dims):
        a = dim.axis(k)
        if a in THREAD_AXES:
            spans[a] = spans.get(a, 1) + dim.stride(k) * (dim.extent - 1)
        elif a not in ("m", None):
            return None, None, f"axis {a} of {layout} is not a thread or memory axis"
    rel, interleaved = {}, {}
    for a in spans:
        v = axis_values[a] - inner.offset[a]
        reps = [r for r in inner.replica if r[2] == a]
        if reps and len(reps) == 1 and reps[0][1] == spans[a]:     # copies of the shard side by side
            pred.append(v < spans[a] * reps[0][0])
            v = t.floormod(v, spans[a])
        elif reps:
            # replicas between the shard's digits (a broadcast source replicated onto its readers):
            # the thread's coordinate splits into shard and replica digits when all nest
            its = sorted([(dims[i].stride(k), dims[i].extent) for i in range(len(dims)) if dims[i].axis(k) == a]
                         + [(r[1], r[0]) for r in reps])
            if any(s2 % (s1 * e1) for (s1, e1), (s2, _) in zip(its, its[1:])):
                return None, None, f"replica {reps} on {a} interleaves the shard's iters without nesting"
            interleaved[a] = reps
        rel[a] = v
    for i, dim in enumerate(dims):
        a = dim.axis(k)
        if a in spans:
            digits[i] = t.floormod(t.floordiv(rel[a], dim.stride(k)), dim.extent)
            used.setdefault(a, []).append(i)
    sizes = axis_values.get("_sizes", {})
    for a, idx in used.items():
        if _complete(sorted((dims[i].stride(k), dims[i].extent) for i in idx), sizes.get(a)) \
                and inner.offset[a] == 0 and not [r for r in inner.replica if r[2] == a]:
            continue   # the shard enumerates exactly the scope's threads on this axis
        total = sum(digits[i] * dims[i].stride(k) for i in idx)
        for _e, rs, _a in interleaved.get(a, ()):
            total = total + t.floormod(t.floordiv(rel[a], rs), _e) * rs
        pred.append(total == rel[a])
    cond = None
    for p in pred:
        cond = p if cond is None else t.And(cond, p)
    return digits, cond, None


def _complete(stride_extents, size) -> bool:
    """Iters with strides 1, e1, e1·e2, … whose product is ``size``: every thread exactly once."""
    w = 1
    for s, e in stride_extents:
        if s != w:
            return False
        w *= e
    return size is not None and w == size


def mem_offset(tensor, dims, k, digits):
    """The element offset of ``tensor`` (operand k) at the given dim digits (memory axis)."""
    L = tensor.layout
    inner = inner_layout(L)
    off = inner.offset["m"]
    for i, dim in enumerate(dims):
        if dim.axis(k) == "m" and i in digits:
            off = off + digits[i] * dim.stride(k)
    if isinstance(L, SwizzledLayout):
        off = swizzle_expr(off, L.swizzle) + L.base["m"]
    if not is_zero(tensor.base):
        off = off + tensor.base
    return off


@contextlib.contextmanager
def loops(extents, unroll=True):
    """Nested loops over ``extents``; yields the loop variables (outermost first)."""
    from tvm.script.ir_builder import tirx as IRB
    with contextlib.ExitStack() as stack:
        vs = []
        for e in extents:
            frame = IRB.unroll(0, e) if unroll else IRB.serial(0, e)
            vs.append(stack.enter_context(frame))
        yield vs


def computed_once(value, dtype="int32"):
    """``value`` computed here, once, and read back where it is used: stored to a one-element
    local cell whose load the simplifier cannot substitute (it does substitute a ``Bind``'s value
    into every use, so run-time expressions built from selects nest and are recomputed in loops).
    Python ints pass through unchanged.  Law: the result equals ``value`` at this point of the
    program, and reading it costs one load however often it is used.  Kernels write it as
    ``Ax.computed_once``."""
    if isinstance(value, int):
        return value
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    cell = T.alloc_buffer((1,), dtype, scope="local")
    IRB.buffer_store(cell, value, [0])
    return cell[0]


@contextlib.contextmanager
def guard(cond):
    """``with guard(cond):`` — what the block emits runs only where ``cond`` holds (TIR
    ``if cond:``); ``cond`` None guards nothing (the block is emitted as is), so a predicate a
    plan proved always true is passed as None.  Kernels write it as ``Ax.guard``."""
    from tvm.script.ir_builder import tirx as IRB
    if cond is None:
        yield
        return
    with IRB.If(cond):
        with IRB.Then():
            yield


def point_exprs(layout, shape, coords) -> dict:
    """``f(coords)`` of a plain layout as TIR expressions, one per axis (replicas at index 0):
    each coordinate split into the digits of its dimension's block (outer iters first), plus
    the offset.  Law: for integer coords this is the replica-0 point of ``layout.map(coords)``."""
    t = _tir()
    from axe.layout import group
    out = dict(layout.offset.items())
    for block, c in zip(group(layout, shape).blocks, coords):
        w = 1
        for e, s, a in reversed(block):
            digit = c if (w == 1 and e == _block_size(block)) else t.floormod(t.floordiv(c, w), e) if w > 1 else t.floormod(c, e)
            out[a] = out.get(a, 0) + digit * s
            w *= e
    return out


def _block_size(block) -> int:
    n = 1
    for e, _s, _a in block:
        n *= e
    return n
