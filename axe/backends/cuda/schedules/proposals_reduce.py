"""What the CUDA reductions propose to layout inference (:mod:`axe.schedules.infer`): the layouts
of a register tile reduced along its last dim under which ``warp_shuffle`` or ``cta_smem`` (or
``in_thread``) serves the reduction, and its result replicated where the shuffles leave it.

Without them an open tile reduced after a load takes the 16-byte vector rule, which spreads the
tile in row-major runs over all threads with no regard to rows: a row may then straddle warps
(shared memory and two barriers where one warp's shuffles would do) or straddle warps with the
kept rows on threads too, which no CUDA reduction serves.  The candidates, best first:

- *rows within warps*: each row over ``l`` lanes of one warp (``l`` the largest power of two ≤ 32
  dividing the row's runs), runs of ``v`` contiguous elements per lane, the warps and lane groups
  taking rows in turn: a ``shfl.sync.bfly`` over ``l`` lanes reduces it;
- *rows over the CTA*: each row over all threads in runs of ``v``, the rows in registers: warp
  shuffles, then one partial per warp through shared memory.

A run is 8 elements where the row allows: one 16-byte vector of the 16-bit tiles a reduction's
chain is usually loaded as, two of an fp32 tile (the run the vector rule gives the 16-bit tile
the reduced fp32 one is computed from, so the chain keeps one layout).
"""

from __future__ import annotations

from axe.layout import Layout
from axe.layout.infer import replicated_for
from axe.layout.iters import Iter
from axe.schedules.infer import add_proposal

__all__ = ["RUN", "row_reduction_layouts"]

#: elements each thread holds contiguously in a row, where the row's width allows
RUN = 8


def _run(width: int, per: int = 1) -> int:
    """The largest of RUN, RUN/2, …, 1 with ``width`` a multiple of ``run · per``."""
    v = RUN
    while v > 1 and width % (v * per):
        v //= 2
    return v if width % (v * per) == 0 else 0


def _dense(iters) -> Layout:
    """The layout of ``iters`` ((extent, stride, axis) outermost first; the register strides are
    ignored) with its registers numbered densely, innermost fastest."""
    out, w = [], 1
    for e, s, a in reversed([it for it in iters if it[0] > 1]):
        out.append(Iter(e, w, a) if a == "m" else Iter(e, s, a))
        w *= e if a == "m" else 1
    return Layout(tuple(reversed(out)) or (Iter(1, 1, "m"),))


def row_reduction_layouts(shape, threads: int) -> list:
    """Layouts of a register tile of ``shape`` (rank 1 or 2) over ``threads`` (whole warps) whose
    last dim a reduction serves without moving kept data between threads, best first (see the
    module).  Law: every layout holds each element once; in the first, the elements of one row
    lie in ``l`` consecutive lanes of one warp, each lane's ``v`` consecutive elements in
    consecutive registers; in the second every row spreads over all threads in the same runs."""
    rows, width = (1, shape[0]) if len(shape) == 1 else tuple(shape)
    if len(shape) not in (1, 2) or threads % 32:
        return []
    warps, out = threads // 32, []
    v = _run(width)
    runs = width // v
    lanes = 32
    while runs % lanes:
        lanes //= 2
    per_pass = warps * 32 // lanes
    if rows % per_pass == 0:
        out.append(_dense([(rows // per_pass, 1, "m"), (per_pass, lanes, "tx"), (runs // lanes, 1, "m"),
                           (lanes, 1, "tx"), (v, 1, "m")]))
    v = _run(width, threads)
    if v and warps > 1:
        out.append(_dense([(rows, 1, "m"), (width // (v * threads), 1, "m"), (threads, 1, "tx"), (v, 1, "m")]))
    return out


def _reduce(call, key, shape, elem_bytes, mem):
    """Candidates for the reduce's open ``src`` (the tile reduced along its last dim) or ``dst``
    (the result replicated over the threads each candidate gives a row)."""
    src = call.operands["src"]
    if mem != "local" or call.attrs["dims"] != (len(src.shape) - 1,):
        return []
    cands = row_reduction_layouts(tuple(src.shape), call.scope.threads)
    if key == "src":
        return cands
    kept = tuple(src.shape[:-1]) + (1,)
    return [replicated_for(L, tuple(src.shape), kept) for L in cands]


def _reduce_label(plan, key):
    if getattr(plan, "warp_dims", None):
        how = "CTA reduction (shfl.sync.bfly, one partial per warp through shared memory)"
    elif getattr(plan, "masks", None):
        how = f"shfl.sync.bfly reduction over {2 * max(plan.masks)} lanes"
    else:
        how = "in-thread reduction"
    return how if key == "src" else f"result of the {how}"


# below the instruction fragments (a gemm's accumulator keeps its fragment and is reduced as it
# lies), above the vector rule (which would place the rows without regard to the reduction)
add_proposal("reduce", "cuda", ("warp_shuffle", "cta_smem", "in_thread"), _reduce, _reduce_label, priority=10)
