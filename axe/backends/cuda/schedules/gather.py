"""Row gathers (``gather(dst, src, index)``): 16/8/4-byte vectors of index-picked rows.

Both schedules plan the copy as the vector copy of ``dst`` from a *row-major stand-in* of the
source, ``S[(R, C):(2C, 1)]``: its row stride 2C never chains with a column, so the paired dims
keep every chunk's row digit, and the stand-in's offset ``2C·r + c`` of a chunk names its row r
and column c.  The real source address is then ``f_src(0, 0) + index[r]·ld + c`` (``ld`` the
source's row stride), read only when ``index[r] >= 0``; a padding row (``index[r] < 0``) stores
zeros.  The destination side is the vector copy's: any layout with an aligned contiguous run —
shared tiles under a swizzle, register tiles held by threads, global rows.

- ``vector_gather``: ``ld.global.v4`` into registers (or the register destination), then
  ``st.{shared,global}``; zeros for padding rows.
- ``cp_async_gather`` (shared destination, sm_80+): ``cp.async.cg`` with a source size of 0
  for padding rows (the hardware fills zeros).  By default it commits and waits; with
  ``barrier=`` (and ``stage=``) every thread of the scope instead arms one
  ``cp.async.mbarrier.arrive.noinc`` on the barrier, which therefore counts the scope's threads
  among its expected arrivals: a producer warpgroup feeding a pipeline this way never waits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from axe.layout import S, group
from axe.ops.scope import thread_axis_values
from axe.ops.tensor import Tensor
from axe.schedules.emit import is_zero, mem_offset, point_exprs
from axe.schedules.plan import inner_layout
from axe.schedules.pointwise import iterate
from axe.schedules.registry import declining, register

from ..sync import barrier_ptr
from .vector import VectorPlan, _reg_words, _space, _tail, vector_plan

__all__ = ["GatherPlan", "gather_plan", "stand_in"]


@dataclass
class GatherPlan:
    copy: VectorPlan       # the vector copy of dst from the stand-in
    ld: int                # the source's row stride (elements)
    base: object           # the offset of src[0, 0] (elements)
    cols: int              # C: the stand-in's rows are 2C apart
    asynchronous: bool = False

    def describe(self) -> str:
        how = "cp.async.cg (source size 0 on padding rows)" if self.asynchronous else "ld.global + st"
        return (f"{how}: {self.copy.describe()}; row r read at index[r]·{self.ld} + column, zeros where "
                "index[r] < 0")


def stand_in(src: Tensor, rows: int) -> Tensor:
    """The row-major stand-in ``S[(rows, C):(2C, 1)]`` of ``src``'s gathered rows (see above)."""
    cols = src.shape[1]
    return Tensor(src.buffer, S[(rows, cols):(2 * cols, 1)], (rows, cols), src.dtype, "global", name=src.name)


def _source_rows(src: Tensor):
    """``(row stride, offset of src[0, 0])`` of a global source whose columns are unit-stride,
    or a reason."""
    inner = inner_layout(src.layout)
    if inner is not src.layout:
        return f"src {src.name}: a swizzled global source is not a matrix of rows"
    blocks = group(inner, src.shape).blocks
    cols = [it for it in blocks[1] if it[0] > 1]
    if src.shape[1] > 1 and (len(cols) != 1 or cols[0][1:] != (1, "m")):
        return f"src {src.name}: columns are not unit-stride on memory ({blocks[1]})"
    rows = [it for it in blocks[0] if it[0] > 1]
    if len(rows) > 1 or (rows and rows[0][2] != "m"):
        return f"src {src.name}: rows are not one memory iter ({blocks[0]})"
    if rows:
        ld = rows[0][1]
    else:                       # one row in view: the stride is the root's
        root = src.origin
        rb = [it for it in group(inner_layout(root.layout), root.shape).blocks[0] if it[0] > 1]
        ld = rb[0][1] if rb else src.shape[1]
    return ld, inner.offset["m"] + src.base


@declining()
def gather_plan(call, ctx, asynchronous=False):
    """A :class:`GatherPlan` for the call, or the reason it does not fit."""
    import tvm
    dst, src, index = (call.operands[k] for k in ("dst", "src", "index"))
    if index.mem == "local" and index.thread_axes():
        return f"index {index.name} is held across threads ({index.layout}); every thread must read any row's index"
    if inner_layout(index.layout) is not index.layout:
        return f"index {index.name}: a swizzled index tensor is not supported"
    rows = _source_rows(src)
    if isinstance(rows, str):
        return rows
    ld, base = rows
    local = replace(call, op="copy", operands={"dst": dst, "src": stand_in(src, dst.shape[0])})
    plan = vector_plan(local)
    if isinstance(plan, str):
        return plan
    if plan.dist.predicate is not None and asynchronous and call.config.get("barrier") is not None:
        return "a barrier-completed gather needs every thread of the scope to take part (the layout leaves some out)"
    vec = plan.vec
    if ld % vec:
        return f"src {src.name}: row stride {ld} breaks {vec}-element vectors"
    if not is_zero(base) and not (isinstance(base, int) and base % vec == 0) and \
            not tvm.sym.Analyzer().can_prove(tvm.tirx.floormod(base, vec) == 0):
        return f"src {src.name}: offset {base} is not provably a multiple of {vec} elements"
    return GatherPlan(plan, ld, base, src.shape[1], asynchronous)


def _index_value(index: Tensor, r):
    """``index`` element r (row-major over its shape) as a TIR load."""
    import tvm
    t = tvm.tirx
    coords, rest = [], r
    for e in reversed(index.shape):
        coords.append(t.floormod(rest, e) if e > 1 else 0)
        rest = t.floordiv(rest, e) if e > 1 else rest
    off = point_exprs(index.layout, index.shape, tuple(reversed(coords))).get("m", 0)
    if not is_zero(index.base):
        off = off + index.base
    return index.flat()[off]


_ZFILL = """
__forceinline__ __device__ void axe_cp_async_zfill(void* smem, const void* gmem, int bytes, int valid) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  int n = valid ? bytes : 0;
  if (bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(s), "l"(gmem), "r"(n) : "memory");
  } else if (bytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\\n" :: "r"(s), "l"(gmem), "r"(n) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\\n" :: "r"(s), "l"(gmem), "r"(n) : "memory");
  }
}
"""
# one source per function: the code generator includes each function's source once, by name
_ARRIVE = """
__forceinline__ __device__ void axe_cp_async_arrive_noinc(void* bar) {
  unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" :: "r"(b) : "memory");
}
"""


#: ``axe_ld_zfill{n}(w0.., ptr, valid)``: n 32-bit words of global memory, or zeros when not valid
_LOADS = "".join(
    f"""
__forceinline__ __device__ void axe_ld_zfill{n}({", ".join(f"unsigned& w{i}" for i in range(n))}, const void* p, int valid) {{
  if (valid) {{
    asm volatile("ld.global.{'v%d.' % n if n > 1 else ''}u32 {'{' if n > 1 else ''}{", ".join(f"%{i}" for i in range(n))}{'}' if n > 1 else ''}, [%{n}];\\n"
                 : {", ".join(f'"=r"(w{i})' for i in range(n))} : "l"(p));
  }} else {{
    {" ".join(f"w{i} = 0u;" for i in range(n))}
  }}
}}""" for n in (1, 2, 4))


def _emit(call, plan: GatherPlan):
    from tvm.script import tirx as T
    dst, src, index = (call.operands[k] for k in ("dst", "src", "index"))
    cp = plan.copy
    fake = stand_in(src, dst.shape[0])
    av = thread_axis_values(call.scope)
    last = len(cp.dims) - 1
    nwords = cp.nbytes // 4
    two_c = 2 * plan.cols
    with iterate(cp.dims, cp.dist, call.scope, av, inner=(last,)) as digits:
        d_off = mem_offset(dst, cp.dims, 0, digits)
        p_off = mem_offset(fake, cp.dims, 1, digits)
        r, c = p_off // two_c, p_off % two_c
        ix = _index_value(index, r)
        valid = ix >= 0
        s_off = plan.base + T.max(ix, 0) * plan.ld + c
        if plan.asynchronous:
            T.evaluate(T.cuda.func_call("axe_cp_async_zfill", dst.flat().ptr_to([d_off]), src.flat().ptr_to([s_off]),
                                        cp.nbytes, T.Cast("int32", valid), source_code=_ZFILL))
        else:   # registers: the destination's own words; else a temporary, then the store
            tmp = None if dst.mem == "local" else T.alloc_buffer((nwords,), "uint32", scope="local")
            words = _reg_words(dst, d_off, nwords) if tmp is None else [tmp[i] for i in range(nwords)]
            T.evaluate(T.cuda.func_call(f"axe_ld_zfill{nwords}", *words, src.flat().ptr_to([s_off]),
                                        T.Cast("int32", valid), source_code=_LOADS))
            if tmp is not None:
                T.evaluate(T.ptx[f"st.{_space(dst)}.{_tail(cp.nbytes)}"](dst.flat().ptr_to([d_off]), *words))
    if not plan.asynchronous:
        return
    bar = call.config.get("barrier")
    if bar is None:
        T.evaluate(T.ptx["cp.async.commit_group"]())
        T.evaluate(T.ptx["cp.async.wait_group"](0))
        return
    stage = call.config.get("stage", 0)
    T.evaluate(T.cuda.func_call("axe_cp_async_arrive_noinc", barrier_ptr(bar, stage), source_code=_ARRIVE))


@register("gather", "cp_async_gather", "cuda", priority=20,
          requires="shared dst with an aligned contiguous run >= 4 bytes; global src rows unit-stride")
class CpAsyncGather:
    """cp.async.cg/.ca of index-picked rows into shared memory, zero-filled padding rows; commit +
    wait, or ``barrier=``: one ``cp.async.mbarrier.arrive.noinc`` per thread of the scope."""

    @staticmethod
    def check(call, ctx):
        dst = call.operands["dst"]
        if ctx.arch < 80:
            return f"cp.async needs sm_80+, target is {ctx.target}"
        if dst.mem != "shared":
            return f"cp.async writes shared memory, dst is {dst.mem}"
        return gather_plan(call, ctx, asynchronous=True)

    @staticmethod
    def emit(call, plan, ctx):
        _emit(call, plan)


@register("gather", "vector_gather", "cuda", priority=10,
          requires="dst (global, shared or registers) with an aligned contiguous run >= 4 bytes; global src rows")
class VectorGather:
    """ld.global vectors of index-picked rows, stored to dst (registers directly); zeros for
    padding rows; synchronous."""

    @staticmethod
    def check(call, ctx):
        if call.config.get("barrier") is not None:
            return "vector loads complete in registers, not on an mbarrier: drop barrier= (or use cp_async_gather)"
        return gather_plan(call, ctx)

    @staticmethod
    def emit(call, plan, ctx):
        _emit(call, plan)
