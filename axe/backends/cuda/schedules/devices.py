"""Multi-device collectives on CUDA: copy and reduce whose operands are distributed over ``gpuid``.

``peer_pull`` (SM-driven, over NVLink): at the multi-device scope every CTA of every GPU takes
part; each rank iterates over the elements its ``dst`` holds (its box, from
:func:`axe.layout.devices.device_sharding`), spread over all threads of its grid in vectors of
up to 16 bytes, and for each reads the source elements where the ``src`` layout puts them — its
own memory or a peer's symmetric copy (``local address + peers[g]``) — combining them (sum, max,
min in fp32 for a reduce; a plain move for a copy) and storing into its local ``dst``.  Which
collective that is follows from the layouts alone: ``src`` sharded over a stacked dim and
reduced, ``dst`` sharded — reduce-scatter; ``dst`` replicated — all-reduce; a copy from a
sharded ``src`` to a replicated ``dst`` — all-gather; a copy between two shardings — an
all-to-all.  Around it two handshakes between CTA c of every pair of GPUs (signals at system
scope, each wait bounded by the mesh's timeout): before reading (the peers' sources are written)
and after (no peer overwrites a source this CTA still reads).

``multimem`` (targets declaring NVLink multicast only): the same iteration, but each reduce
vector is one ``multimem.ld_reduce`` on the multicast address of the source, which the NVSwitch
sums over all GPUs.  It is verified by compilation only: the runtime refuses to launch it on
machines that keep multicast off.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from axe.layout import LayoutError, SwizzledLayout, group
from axe.schedules.emit import guard, point_exprs
from axe.schedules.generic import reduce_combine
from axe.schedules.registry import add_schedule, declining

from .. import peer

__all__ = ["PullPlan", "pull_plan"]

_COMBINE = {"sum": "+", "max": "max", "min": "min"}


@dataclass
class PullPlan:
    what: str               # "copy" or the reduce kind
    sharding: object        # dst's DeviceSharding
    vec: int                # elements per vector
    reduced: tuple          # src dims summed over (reduce), () for a copy
    inserted: bool          # dst drops the reduced dims (else keeps them with extent 1)
    sync: bool
    multicast: bool = False

    def describe(self) -> str:
        boxes = {g: [(b.lows, b.exts) for b in bs] for g, bs in self.sharding.boxes.items()}
        how = "multimem.ld_reduce on the multicast address" if self.multicast else \
            "SM loads from each owner's symmetric copy over NVLink"
        red = f", {self.what} over src dims {list(self.reduced)}" if self.reduced else ""
        return (f"each rank fills its dst box {boxes} with {self.vec}-element vectors{red}: {how}; "
                f"{'CTA-pair handshakes at system scope before and after' if self.sync else 'no handshakes (sync=False)'}")


def _symmetric(ctx, t) -> bool:
    return bool(ctx.distributed.get("params", {}).get(t.buffer.name, {}).get("symmetric"))


def _inner_run(L, shape) -> int:
    """Elements of the last dimension that are contiguous (stride 1) on memory."""
    block = group(L, shape).blocks[-1]
    e, s, a = block[-1]
    return e if (s == 1 and a == "m") else 1


@declining()
def pull_plan(call, ctx, multicast=False):
    """The plan of a multi-device copy/reduce, or the reason it does not fit."""
    from axe.layout.devices import device_sharding
    if call.scope.kind != "devices":
        return f"runs at the multi-device scope (with Ax.devices()), not in {call.scope.describe()}"
    if ctx.mesh is None:
        return "no mesh declared (Ax.mesh)"
    dst, src = call.operands["dst"], call.operands["src"]
    for k, t in (("dst", dst), ("src", src)):
        if isinstance(t.layout, SwizzledLayout):
            return f"{k} {t.name} is swizzled"
        if t.gpu is not None:
            return f"{k} {t.name} is one device's part (sliced at a device index); give the whole distributed tensor"
        if not (isinstance(t.base, int) and t.base == 0):
            return f"{k} {t.name} has a symbolic offset {t.base}"
    try:
        sh = device_sharding(dst.layout, dst.shape)
        group(src.layout, src.shape)
    except LayoutError as err:
        return str(err)
    if any(len(b) > 1 for b in sh.boxes.values()):
        return f"dst {dst.name}: a rank holds several boxes {sh.boxes}"
    if not multicast and not _symmetric(ctx, src):
        return f"src {src.name} is not symmetric (Ax.dtensor(..., symmetric=True)): peers cannot read it"
    if sh.world > ctx.mesh.world:
        return f"dst {dst.name} names gpuid {sh.world - 1}; the mesh has {ctx.mesh.world} devices"
    if call.op == "reduce":
        what, reduced = call.attrs["kind"], tuple(call.attrs["dims"])
        inserted = dst.rank == src.rank - len(reduced)
        if prod(src.shape[d] for d in reduced) > 64:
            return f"reduces {prod(src.shape[d] for d in reduced)} values per element (at most 64 unrolled)"
    else:
        what, reduced, inserted = "copy", (), False
        if tuple(dst.shape) != tuple(src.shape):
            return f"dst shape {list(dst.shape)} differs from src shape {list(src.shape)}"
    if reduced and reduced[-1] == src.rank - 1:
        return "reduces over the last dimension (the vector dimension)"
    esize = dst.elem_bytes
    exts = sh.local_shape()
    runs = [_inner_run(sh.local, exts), _inner_run(src.layout, src.shape), exts[-1]]
    offs = [sh.local.offset["m"], src.layout.offset["m"]]
    vec = max(16 // esize, 1)
    while vec > 1 and (any(r % vec for r in runs) or any(o % vec for o in offs)):
        vec //= 2
    if vec * esize < 4:
        return f"contiguous runs {runs} of {esize}-byte elements give {vec * esize}-byte vectors (needs >= 4)"
    if multicast and what != "sum":
        return f"multimem.ld_reduce sums; {what!r} is not a sum"
    return PullPlan(what, sh, vec, reduced, inserted, call.config.get("sync", True), multicast)


def _select_rank(rank, per_rank, default=0):
    """``per_rank[rank]`` as a TIR select chain (per_rank: {g: int})."""
    from tvm.script import tirx as T
    out = default
    for g, v in sorted(per_rank.items()):
        out = T.if_then_else(rank == g, v, out) if v != out else out
    return out


def _handshake(mesh, base, cta, tx):
    """CTA ``cta`` of every pair of GPUs meets: thread g signals GPU g and waits for it."""
    from tvm.script import tirx as T
    w = mesh.world
    T.evaluate(T.tvm_storage_sync("shared"))
    with guard(T.And(tx < w, tx != mesh.rank)):
        peer.signal_peer(mesh, base + cta * w + mesh.rank, tx)
        peer.wait_signal(mesh, base + cta * w + tx, tx)
    T.evaluate(T.tvm_storage_sync("shared"))


def emit_pull(call, plan: PullPlan, ctx):
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    mesh = ctx.mesh
    dst, src = call.operands["dst"], call.operands["src"]
    scope = call.scope
    cta, grid = scope.extra["cta"], scope.extra["grid"]
    nctas, threads, tx = prod(grid), scope.cta_threads, scope.tx
    sh, vec = plan.sharding, plan.vec
    exts = sh.local_shape()
    esize = dst.elem_bytes
    nwords = vec * esize // 4
    chunks = prod(exts) // vec
    total = nctas * threads
    if plan.sync:
        base = mesh.alloc(4 * nctas * mesh.world, f"{call.op} at {call.where}")
        _handshake(mesh, base, cta, tx)
    lows = [_select_rank(mesh.rank, {g: (bs[0].lows[d] if bs else 0) for g, bs in sh.boxes.items()})
            for d in range(len(exts))]
    held = [g for g, bs in sh.boxes.items() if bs]
    gt = cta * threads + tx
    with IRB.serial(0, -(-chunks // total)) as it:
        c = it * total + gt
        with guard(c < chunks if chunks % total else None):
            with guard(_holds(mesh.rank, held, sh.world)):
                _emit_vector(plan, dst, src, c, exts, lows, vec, nwords, mesh)
    if plan.sync:
        _handshake(mesh, base + 2 * nctas * mesh.world, cta, tx)


def _holds(rank, held, world):
    from tvm.script import tirx as T
    if len(held) == world:
        return None
    cond = None
    for g in held:
        cond = rank == g if cond is None else T.Or(cond, rank == g)
    return cond if cond is not None else T.bool(False)


def _emit_vector(plan, dst, src, c, exts, lows, vec, nwords, mesh):
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    # local coordinates of vector c (row-major over exts, the last dim in vectors)
    y, rest = [], c
    vexts = list(exts[:-1]) + [exts[-1] // vec]
    for e in reversed(vexts):
        y.append(T.floormod(rest, e) if e > 1 else 0)
        rest = T.floordiv(rest, e)
    y.reverse()
    y[-1] = y[-1] * vec
    x = [lo + yi for lo, yi in zip(lows, y)]
    d_off = point_exprs(plan.sharding.local, exts, y)["m"]
    words = T.alloc_buffer((nwords,), "uint32", scope="local")
    vals = words.view(dst.dtype)
    tail = f"v{nwords}.u32" if nwords > 1 else "u32"
    if not plan.reduced:
        _load(src, x, words, tail, mesh, plan)
    else:
        acc = T.alloc_buffer((vec,), "float32", scope="local")
        first = True
        for k in product(*(range(src.shape[d]) for d in plan.reduced)):
            u = _src_coords(x, plan.reduced, k, plan.inserted, src.rank)
            _load(src, u, words, tail, mesh, plan)   # multicast: one multimem.ld_reduce sums all GPUs
            for i in range(vec):
                v = T.cast(vals[i], "float32")
                IRB.buffer_store(acc, v if first else reduce_combine(plan.what, acc[i], v), [i])
            first = False
            if plan.multicast:
                break
        for i in range(vec):
            IRB.buffer_store(vals, T.cast(acc[i], dst.dtype), [i])
    T.evaluate(T.ptx[f"st.global.{tail}"](dst.flat().ptr_to([d_off]), *[words[i] for i in range(nwords)]))


def _src_coords(x, reduced, k, inserted, rank):
    u, xi, ki = [], iter(x), iter(k)
    for d in range(rank):
        if d in reduced:
            u.append(next(ki))
            if not inserted:
                next(xi)
        else:
            u.append(next(xi))
    return u


def _load(src, u, words, tail, mesh, plan):
    from tvm.script import tirx as T
    pt = point_exprs(src.layout, src.shape, u)
    ptr = src.flat().ptr_to([pt["m"]])
    regs = [words[i] for i in range(int(words.shape[0]))]
    if plan.multicast:
        mc = T.handle_add_byte_offset(ptr, mesh.multicast)
        kind = {"bfloat16": "bf16x2", "float16": "f16x2", "float32": "f32"}[str(src.dtype)]
        T.evaluate(T.ptx[f"multimem_ld_reduce.relaxed.sys.global.add.{tail.split('.')[0]}.{kind}"](*regs, mc)
                   if tail != "u32" else T.ptx[f"multimem_ld_reduce.relaxed.sys.global.add.{kind}"](*regs, mc))
        return
    g = pt.get("gpuid", 0)
    T.evaluate(T.ptx[f"ld.global.{tail}"](*regs, peer.remote_ptr(ptr, g, mesh)))


_PULL = "multi-device scope; dst sharded in boxes over gpuid; src symmetric; >= 4-byte runs"
# all-gather / all-to-all / get (copy) and reduce-scatter / all-reduce (reduce): one schedule
for _op in ("copy", "reduce"):
    add_schedule(_op, "peer_pull", "cuda", 40, _PULL, devices=True, check=pull_plan, emit=emit_pull)


def _multimem_check(call, ctx):
    if "multicast" not in ctx.features:
        return f"target {ctx.target} does not declare NVLink multicast (features {list(ctx.features)})"
    if ctx.mesh is None or ctx.mesh.multicast is None:
        return "the mesh has no multicast offset (Ax.mesh(..., multicast=...))"
    return pull_plan(call, ctx, multicast=True)


def _multimem_emit(call, plan, ctx):
    ctx.distributed["multicast"] = True      # the runtime refuses to launch it where multicast is off
    emit_pull(call, plan, ctx)


# reduce-scatter / all-reduce by multimem.ld_reduce (the NVSwitch sums): compile-verified only
add_schedule("reduce", "multimem", "cuda", 50, "a target declaring NVLink multicast; multi-device scope; sum",
             devices=True, check=_multimem_check, emit=_multimem_emit)
