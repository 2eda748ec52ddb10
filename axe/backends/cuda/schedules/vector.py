"""Vectorized copies: ld/st ``.v4``/``.v2`` (16/8/4 bytes) and ``cp.async`` global→shared.

The vector width is the contiguous run a thread owns: the trailing paired dims that are unit
stride on memory in both operands (registers included), capped at 16 bytes, and only when
every other memory stride, the offsets and the symbolic base keep the vector aligned.
Coalescing comes from the distribution: lanes on the fastest thread dim, or round-robin chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from axe.ops.scope import thread_axis_values
from axe.schedules.emit import is_zero, mem_offset
from axe.schedules.generic import operand_shapes
from axe.schedules.plan import Dim, contiguous_run, inner_layout, pair_dims
from axe.schedules.pointwise import count, distribute, iterate
from axe.schedules.registry import register
from axe.layout import SwizzledLayout

__all__ = ["VectorPlan", "vector_plan"]


@dataclass
class VectorPlan:
    dims: list
    dist: object
    vec: int            # elements per vector
    nbytes: int
    lane_stride: object = None
    remote: dict = field(default_factory=dict)    # operand name -> the GPU whose memory it is

    def describe(self) -> str:
        co = "" if self.lane_stride is None else f"; lane stride {self.lane_stride} elements on memory"
        peer = "".join(f"; {k} in the memory of GPU {g} (peer address over NVLink)" for k, g in self.remote.items())
        return (f"{self.nbytes}-byte vectors ({self.vec} elements), dims {[d.extent for d in self.dims]}; "
                f"{self.dist.describe(self.dims)}{co}{peer}")


def _aligned(t, dims, k, vec, skip) -> str | None:
    import tvm
    import tvm.sym
    inner = inner_layout(t.layout)
    for i, d in enumerate(dims):
        if i not in skip and d.axis(k) == "m" and d.stride(k) % vec:
            return f"{t.name}: dim {i} stride {d.stride(k)} breaks {vec}-element alignment"
    if inner.offset["m"] % vec:
        return f"{t.name}: offset {inner.offset['m']} is not a multiple of {vec}"
    if isinstance(t.layout, SwizzledLayout) and (1 << t.layout.swizzle.base) % vec:
        return f"{t.name}: swizzle {t.layout.swizzle} moves units of {1 << t.layout.swizzle.base} < {vec} elements"
    if not is_zero(t.base) and not tvm.sym.Analyzer().can_prove(tvm.tirx.floormod(t.base, vec) == 0):
        return f"{t.name}: symbolic offset {t.base} is not provably a multiple of {vec}"
    return None


def vector_plan(call, max_bytes=16, min_bytes=4):
    """Pair dims, find the per-thread contiguous run, split it into vectors; plan or reason."""
    ts = list(call.operands.values())
    shape, ops = operand_shapes(call)
    dims = pair_dims(shape, ops)
    if isinstance(dims, str):
        return dims
    run, n = contiguous_run(dims, range(len(ts)))
    esize = ts[0].elem_bytes
    if n == 0 or run * esize < min_bytes:
        return (f"the contiguous run common to {[t.name for t in ts]} is {run} element(s) "
                f"({run * esize} bytes) < {min_bytes} bytes")
    vbytes = max_bytes
    while vbytes >= min_bytes and (vbytes % esize or run % (vbytes // esize)):
        vbytes //= 2
    if vbytes < min_bytes:
        return f"run of {run} elements has no vector width between {min_bytes} and {max_bytes} bytes"
    vec = vbytes // esize
    head = dims[:len(dims) - n]
    dims = head + [Dim(run // vec, tuple((vec, "m") for _ in ts)), Dim(vec, tuple((1, "m") for _ in ts))]
    last = len(dims) - 1
    for k, t in enumerate(ts):
        why = _aligned(t, dims, k, vec, {last})
        if why:
            return why
    dist = distribute(dims, ts, call.scope, thread_axis_values(call.scope), chunk=vec)
    if isinstance(dist, str):
        return dist
    if last in dist.thread_dims:
        return "the vector run is spread over threads"
    lane = None
    if dist.round_robin:
        lane = vec
    elif dist.driver is not None:
        mem = [k for k, t in enumerate(ts) if t.mem != "local"]
        fast = [i for i in dist.thread_dims if dims[i].axis(dist.driver) in ("tx", "lane")
                and dims[i].stride(dist.driver) == 1]
        if mem and fast:
            lane = dims[fast[0]].stride(mem[0])
    return VectorPlan(dims, dist, vec, vbytes, lane)


def _space(t) -> str:
    return "shared" if t.mem == "shared" else "global"


def _tail(nbytes):
    n = nbytes // 4
    return f"v{n}.u32" if n > 1 else "u32"


def _reg_words(t, off, n):
    """``n`` 32-bit register words of local tensor ``t`` starting at element offset ``off``."""
    words = t.buffer.view("uint32")
    first = off * t.elem_bytes // 4
    return [words[first + i] for i in range(n)]


def on_this_gpu(call):
    """``(call, {operand: gpu})``: the call with each operand held whole by one (maybe peer) GPU
    rewritten to its local layout, or a reason when an operand spans several GPUs."""
    remote, ops = {}, {}
    for k, t in call.operands.items():
        if not t.on_devices:
            ops[k] = t
            continue
        dev = t.device()
        if dev is None:
            return (f"{k} {t.name} spans several GPUs ({t.layout}): multi-device copies run at the "
                    "devices scope (with Ax.devices())"), None
        remote[k] = dev[0]
        ops[k] = replace(t, layout=dev[1], gpu=None)
    return replace(call, operands=ops), remote


def _ptr(t, off, gpu, ctx):
    """The address of element ``off`` of ``t``: local, or on GPU ``gpu`` through the peer table."""
    ptr = t.flat().ptr_to([off])
    if gpu is None:
        return ptr
    from ..peer import remote_ptr
    return remote_ptr(ptr, gpu, ctx.mesh)


def emit_vector_copy(call, plan: VectorPlan, async_copy: bool = False, ctx=None):
    from tvm.script import tirx as T
    dst, src = call.operands["dst"], call.operands["src"]
    gd, gs = plan.remote.get("dst"), plan.remote.get("src")
    av = thread_axis_values(call.scope)
    last = len(plan.dims) - 1
    nwords = plan.nbytes // 4
    n = count(plan.dims, plan.dist, call.scope, inner=(last,))
    if not async_copy and dst.mem != "local" and src.mem != "local" and 1 < n <= call.config.get("batch", 1):
        _loads_then_stores(call, plan, gs, gd, ctx, av, last, nwords, n)
        return
    with iterate(plan.dims, plan.dist, call.scope, av, inner=(last,)) as digits:
        d_off = mem_offset(dst, plan.dims, 0, digits)
        s_off = mem_offset(src, plan.dims, 1, digits)
        if async_copy:
            T.evaluate(T.ptx[f"cp.async.{'cg' if plan.nbytes == 16 else 'ca'}.shared.global"](
                dst.flat().ptr_to([d_off]), src.flat().ptr_to([s_off]), plan.nbytes))
        elif dst.mem == "local":
            T.evaluate(T.ptx[f"ld.{_space(src)}.{_tail(plan.nbytes)}"](
                *_reg_words(dst, d_off, nwords), _ptr(src, s_off, gs, ctx)))
        elif src.mem == "local":
            T.evaluate(T.ptx[f"st.{_space(dst)}.{_tail(plan.nbytes)}"](
                _ptr(dst, d_off, gd, ctx), *_reg_words(src, s_off, nwords)))
        else:
            tmp = T.alloc_buffer((nwords,), "uint32", scope="local")
            regs = [tmp[i] for i in range(nwords)]
            T.evaluate(T.ptx[f"ld.{_space(src)}.{_tail(plan.nbytes)}"](*regs, _ptr(src, s_off, gs, ctx)))
            T.evaluate(T.ptx[f"st.{_space(dst)}.{_tail(plan.nbytes)}"](_ptr(dst, d_off, gd, ctx), *regs))
    if async_copy and call.config.get("wait", True):
        T.evaluate(T.ptx["cp.async.commit_group"]())
        T.evaluate(T.ptx["cp.async.wait_group"](0))


def _loads_then_stores(call, plan, gs, gd, ctx, av, last, nwords, n):
    """Memory to memory through ``n`` vectors of registers per thread: every load issued before the
    first store, so the copy waits for one memory latency instead of one per vector (the ld/st are
    volatile asm: the compiler keeps their order).  Asked for with ``batch=n`` in the copy's config
    (it costs ``n`` vectors of registers)."""
    from tvm.script import tirx as T
    dst, src = call.operands["dst"], call.operands["src"]
    tmp = T.alloc_buffer((n * nwords,), "uint32", scope="local")
    for phase in ("ld", "st"):
        with iterate(plan.dims, plan.dist, call.scope, av, inner=(last,), index=True) as (digits, i):
            regs = [tmp[i * nwords + w] for w in range(nwords)]
            if phase == "ld":
                T.evaluate(T.ptx[f"ld.{_space(src)}.{_tail(plan.nbytes)}"](
                    *regs, _ptr(src, mem_offset(src, plan.dims, 1, digits), gs, ctx)))
            else:
                T.evaluate(T.ptx[f"st.{_space(dst)}.{_tail(plan.nbytes)}"](
                    _ptr(dst, mem_offset(dst, plan.dims, 0, digits), gd, ctx), *regs))


@register("copy", "vector", "cuda", priority=10, devices=True, broadcasts=True,
          requires="a per-thread contiguous run >= 4 bytes on memory in both operands, aligned; "
                   "a global operand may be a peer GPU's symmetric memory")
class VectorCopy:
    """ld/st.{global,shared}.v4 (16-byte) copies; register side or through a temporary.  An
    operand held by one peer GPU (a distributed tensor sliced at a device index) is addressed
    through the mesh's peer table: a put (dst on a peer) or a get (src on a peer)."""

    @staticmethod
    def check(call, ctx):
        dst, src = call.operands["dst"], call.operands["src"]
        if dst.mem == "local" and src.mem == "local":
            return "register-to-register copy needs no memory instruction"
        if call.config.get("signal") is not None:
            return NO_SIGNAL
        local, remote = on_this_gpu(call)
        if remote is None:
            return local
        if remote and ctx.mesh is None:
            return "an operand is on a peer GPU but the kernel declares no mesh (Ax.mesh)"
        plan = vector_plan(local)
        if not isinstance(plan, str):
            plan.remote = remote
        return plan

    @staticmethod
    def emit(call, plan, ctx):
        local, _ = on_this_gpu(call)
        emit_vector_copy(local, plan, ctx=ctx)


#: why a copy that sets no flag declines ``signal=`` (a put-with-signal), rather than ignore it
NO_SIGNAL = ("signal= asks for a put-with-signal (NVSHMEM, for a target declaring it); this schedule's stores "
             "set no signal — copy, then Ax.fence_system() and Ax.signal()")


@register("copy", "cp_async", "cuda", priority=20,
          requires="global src, shared dst, a contiguous aligned run >= 4 bytes in both")
class CpAsyncCopy:
    """cp.async.cg (16 B) / .ca (4, 8 B) global→shared; commit + wait_group 0 unless wait=False."""

    @staticmethod
    def check(call, ctx):
        dst, src = call.operands["dst"], call.operands["src"]
        if ctx.arch < 80:
            return f"cp.async needs sm_80+, target is {ctx.target}"
        if not (src.mem == "global" and dst.mem == "shared"):
            return f"cp.async copies global→shared, not {src.mem}→{dst.mem}"
        return vector_plan(call)

    @staticmethod
    def emit(call, plan, ctx):
        emit_vector_copy(call, plan, async_copy=True)
