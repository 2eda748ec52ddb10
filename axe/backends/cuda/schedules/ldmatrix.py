"""Warp-collective shared↔register copies: ``ldmatrix`` / ``stmatrix`` ``.m8n8{.x1,.x2,.x4}{.trans}.b16``.

The instruction's atom is the 8×8 b16 fragment ``S[(8,4,2):(4@lane,1@lane,1@reg)]`` (written on
``tx`` for CTA-collective register layouts): thread t of a warp holds row t//4, columns 2·(t%4)
and 2·(t%4)+1 in one 32-bit register.  Preconditions, all from the layout algebra:

- the register operand is a tiling ``C ⊗ atom`` (``tile_of``) over its 2-D shape, with C placing
  atoms on warps and on register pairs only (no replicas, every warp the same register pairs);
- the shared operand keeps each atom row (or, for ``.trans``, each atom column: the transposed
  view ``permute(tile, (1, 0))``) as 8 contiguous elements, 16-byte aligned: the innermost
  iter of that logical dim has stride 1 and an extent multiple of 8, every other stride, the
  offset and the symbolic base are multiples of 8 elements, a swizzle moves units >= 8.

Addresses are derived, never written by hand: lane l supplies the address of row l%8 of the
(l//8)-th matrix, i.e. of the element the atom places at (l%8, 0) (``.trans``: (0, l%8)) in the
register pair of that matrix; its logical position comes from inverting the register layout on
(thread, register) and its address from the shared layout (swizzle included).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as _cartesian

from axe.layout import Layout, SwizzledLayout, group, tile_of
from axe.layout.canonical import merge_chain
from axe.layout.iters import Iter
from axe.ops.scope import thread_axis_values
from axe.schedules.emit import guard, is_zero, mem_offset, thread_digits
from axe.schedules.generic import operand_shapes
from axe.schedules.plan import THREAD_AXES, inner_layout, pair_dims
from axe.schedules.registry import add_schedule, declining

__all__ = ["LdMatrixPlan", "atom", "ldmatrix_plan", "lane_sources", "lane_address"]

ROWS = 8            # an m8n8 matrix: 8 rows of 8 b16 elements (16 bytes)


def atom(axis: str = "lane") -> Layout:
    """The ldmatrix/stmatrix fragment over (8, 8): ``S[(8,4,2):(4@axis,1@axis,1@m)]`` (row r,
    columns 2c, 2c+1 in thread ``4r + c`` of ``axis``, registers 0 and 1).  Kernels reach it as
    ``Ax.cuda.ldmatrix_atom``: a register tile that is ``C ⊗ ldmatrix_atom()`` is what ldmatrix
    fills and stmatrix stores."""
    return Layout((Iter(8, 4, axis), Iter(4, 1, axis), Iter(2, 1, "m")))


@dataclass
class LdMatrixPlan:
    """``groups``: per instruction, the register element offsets of its matrices (pairs);
    ``dims``: paired dims of (dst, src); ``reg_k``/``smem_k``: operand indices into them."""

    store: bool
    trans: bool
    thread_axis: str
    dims: list
    reg_k: int
    smem_k: int
    groups: list
    outer: object          # C with register layout = C ⊗ atom
    warps: int

    @property
    def mnemonic(self) -> str:
        return "stmatrix" if self.store else "ldmatrix"

    def instruction(self, n: int) -> str:
        return f"{self.mnemonic}.sync.aligned.m8n8.x{n}{'.trans' if self.trans else ''}.shared.b16"

    def describe(self) -> str:
        counts = {}
        for g in self.groups:
            counts[len(g)] = counts.get(len(g), 0) + 1
        ins = " + ".join(f"{c} x {self.mnemonic}.x{n}{'.trans' if self.trans else ''}"
                         for n, c in sorted(counts.items(), reverse=True))
        row = "column" if self.trans else "row"
        return (f"{ins} per warp ({sum(len(g) for g in self.groups)} atoms each, {self.warps} warp(s)); "
                f"registers = {self.outer} ⊗ {atom(self.thread_axis)}; lane l supplies {row} l%8 "
                f"of matrix l//8 (16-byte shared {row}s)")


def _shared_rows(t, shape, d) -> str | None:
    """None when logical dim ``d`` of shared ``t`` runs in 16-byte-aligned contiguous chunks of 8."""
    import tvm
    inner = inner_layout(t.layout)
    if any(a != "m" for _, _, a in inner.shard) or inner.replica:
        return f"{t.name}: shared layout {t.layout} is not a plain memory layout"
    blocks = group(inner, shape).blocks
    chain = merge_chain(blocks[d])
    if not chain or chain[-1][1] != 1 or chain[-1][0] % ROWS:
        what = "column" if d == 0 else "row"
        return (f"{t.name}: logical dim {d} of {t.layout} over {list(shape)} is not a unit-stride run of a "
                f"multiple of {ROWS} elements (innermost {chain[-1] if chain else 'none'}), so an atom {what} "
                f"is not 16 contiguous bytes")
    others = [it for k, blk in enumerate(blocks) for it in (merge_chain(blk) if k == d else blk)
              if not (k == d and it is chain[-1])]
    for e, s, _ in others:
        if e > 1 and s % ROWS:
            return f"{t.name}: stride {s} of {t.layout} breaks 16-byte alignment of the shared rows"
    if inner.offset["m"] % ROWS:
        return f"{t.name}: offset {inner.offset['m']} is not a multiple of {ROWS} elements (16 bytes)"
    if isinstance(t.layout, SwizzledLayout):
        if (1 << t.layout.swizzle.base) % ROWS:
            return f"{t.name}: swizzle {t.layout.swizzle} moves units of {1 << t.layout.swizzle.base} < {ROWS} elements"
        if t.layout.base["m"] % ROWS:
            return f"{t.name}: swizzle base {t.layout.base['m']} is not a multiple of {ROWS} elements"
    if not is_zero(t.base) and not tvm.sym.Analyzer().can_prove(tvm.tirx.floormod(t.base, ROWS) == 0):
        return f"{t.name}: symbolic offset {t.base} is not provably a multiple of {ROWS} elements (16 bytes)"
    return None


def _register_groups(reg, C, warps):
    """Per-warp register element offsets of the atoms' pairs, chunked into x4/x2/x1; or a reason."""
    per_thread = {}
    for x in range(C.size):
        (c,) = C.map(x)
        who = tuple(sorted((a, v) for a, v in c.items() if a != "m"))
        per_thread.setdefault(who, []).append(2 * c["m"])
    lists = {who: sorted(v) for who, v in per_thread.items()}
    first = next(iter(lists.values()))
    if any(v != first for v in lists.values()):
        return f"{reg.name}: warps hold different register pairs ({C} places atoms unevenly)"
    if len(set(first)) != len(first):
        return f"{reg.name}: two atoms share a register pair under {C}"
    if len(lists) > warps:
        return f"{reg.name}: {C} places atoms on {len(lists)} warps; the scope has {warps}"
    groups, rest = [], list(first)
    for n in (4, 2, 1):
        while len(rest) >= n:
            groups.append(rest[:n])
            rest = rest[n:]
    return groups


def _register_inverse(dims, k) -> str | None:
    """The register dims of operand k must be recoverable from a register offset by
    floordiv/floormod (the emitted inverse); checked exhaustively."""
    regs = [(d.extent, d.stride(k)) for d in dims if d.axis(k) == "m"]
    for digits in _cartesian(*(range(e) for e, _ in regs)):
        off = sum(g * s for g, (_, s) in zip(digits, regs))
        if tuple((off // s) % e for e, s in regs) != digits:
            return f"register dims {regs} are not invertible by floordiv/floormod"
    return None


@declining()
def ldmatrix_plan(call, ctx, store: bool):
    """An :class:`LdMatrixPlan` or the reason the layouts do not match the instruction."""
    dst, src = call.operands["dst"], call.operands["src"]
    name = "stmatrix" if store else "ldmatrix"
    reg, smem = (src, dst) if store else (dst, src)
    if store and ctx.arch < 90:
        return f"stmatrix needs sm_90+, target is {ctx.target}"
    if ctx.arch < 75:
        return f"ldmatrix needs sm_75+, target is {ctx.target}"
    if not (reg.mem == "local" and smem.mem == "shared"):
        want = "registers→shared" if store else "shared→registers"
        return f"{name} copies {want}, not {src.mem}→{dst.mem}"
    if reg.elem_bytes != 2:
        return f"{name}.b16 moves 16-bit elements, {reg.name} is {reg.dtype}"
    if call.scope.threads % 32:
        return f"{name} is warp-collective; the {call.scope.kind} scope has {call.scope.threads} threads"
    shape, ops = operand_shapes(call)
    if len(shape) != 2:
        return f"{name} tiles 2-D operands, the copy shape is {list(shape)}"
    axes = set(reg.thread_axes())
    thread_axis = "tx" if "tx" in axes else "lane"
    if axes - {thread_axis, "warp"} or (thread_axis == "tx" and "warp" in axes):
        return f"{reg.name}: register layout {reg.layout} names axes {sorted(axes)}; the atom needs lane/warp or tx"
    A = atom(thread_axis)
    C = tile_of(reg.layout, shape, A, (ROWS, ROWS))
    if C is None:
        return (f"{reg.name}: register layout {reg.layout} over {list(shape)} is not a tiling C ⊗ {A} "
                f"of the {name} 8x8 b16 atom")
    if C.replica:
        return f"{reg.name}: atom placement {C} replicates atoms across threads"
    if "lane" in C.axes():
        return f"{reg.name}: atom placement {C} moves atoms along lanes (an atom fills a warp)"
    warps = call.scope.threads // 32
    rows = _shared_rows(smem, shape, 1)
    trans = False
    if rows is not None:
        cols = _shared_rows(smem, shape, 0)
        if cols is not None:
            return f"shared rows: {rows}; transposed (.trans): {cols}"
        trans = True
    dims = pair_dims(shape, ops)
    if isinstance(dims, str):
        return dims
    reg_k, smem_k = (1, 0) if store else (0, 1)
    why = _register_inverse(dims, reg_k)
    if why:
        return f"{reg.name}: {why}"
    groups = _register_groups(reg, C, warps)
    if isinstance(groups, str):
        return groups
    return LdMatrixPlan(store, trans, thread_axis, dims, reg_k, smem_k, groups, C, warps)


def _symbolic_map(L: Layout, x):
    """``f_L(x)`` per axis for a TIR index expression (L without replicas)."""
    import tvm
    t = tvm.tirx
    out, w = {}, 1
    for e, s, a in reversed(L.shard):
        out[a] = out.get(a, 0) + t.floormod(t.floordiv(x, w), e) * s
        w *= e
    for a, v in L.offset.items():
        out[a] = out.get(a, 0) + v
    return out


def _select(index, values):
    """``values[index]`` for a TIR index and a list of Python ints."""
    import tvm
    expr = values[-1]
    for i in range(len(values) - 2, -1, -1):
        expr = tvm.tirx.Select(index == i, values[i], expr)
    return expr


def lane_sources(plan: LdMatrixPlan, group_offsets, axis_values):
    """The digits of the element whose shared address this lane supplies, for one instruction.

    Lane l names matrix q = (l//8) mod n and row r = l%8; the atom places the row's first
    element ((r, 0), or (0, r) for ``.trans``) at (thread-in-warp, register) = f_atom(x); that
    thread and register ``group_offsets[q] + f_atom(x)[m]`` are mapped back through the
    register layout's dims to logical digits.
    """
    import tvm
    t = tvm.tirx
    lane = axis_values["lane"]
    n = len(group_offsets)
    q = t.floormod(t.floordiv(lane, ROWS), n) if n > 1 else 0
    r = t.floormod(lane, ROWS)
    held = _symbolic_map(atom(plan.thread_axis), r if plan.trans else r * ROWS)
    holder = held[plan.thread_axis]
    av = dict(axis_values)
    av["lane"] = holder
    if plan.thread_axis == "tx":
        av["tx"] = axis_values["tx"] - lane + holder
    reg_off = (_select(q, group_offsets) if n > 1 else group_offsets[0]) + held["m"]
    return av, reg_off


def _digits(plan, reg, av, reg_off):
    import tvm
    t = tvm.tirx
    digits, _, why = thread_digits(plan.dims, plan.reg_k, reg.layout, av)
    if why:
        raise ValueError(f"{reg.name}: {why}")
    off = reg_off - inner_layout(reg.layout).offset["m"]
    for i, d in enumerate(plan.dims):
        if d.axis(plan.reg_k) == "m":
            digits[i] = t.floormod(t.floordiv(off, d.stride(plan.reg_k)), d.extent)
    return digits


def lane_address(call, plan: LdMatrixPlan, group_offsets, axis_values):
    """The shared element offset this thread supplies to the instruction moving the register
    pairs at ``group_offsets`` (an expression in the scope's thread index)."""
    dst, src = call.operands["dst"], call.operands["src"]
    reg, smem = (src, dst) if plan.store else (dst, src)
    lav, reg_off = lane_sources(plan, group_offsets, axis_values)
    return mem_offset(smem, plan.dims, plan.smem_k, _digits(plan, reg, lav, reg_off))


def emit_matrix_copy(call, plan: LdMatrixPlan):
    from tvm.script import tirx as T
    dst, src = call.operands["dst"], call.operands["src"]
    reg, smem = (src, dst) if plan.store else (dst, src)
    av = thread_axis_values(call.scope)
    _, pred, _ = thread_digits(plan.dims, plan.reg_k, reg.layout, av)
    words = reg.buffer.view("uint32")
    with guard(pred):
        for g in plan.groups:
            addr = smem.flat().ptr_to([lane_address(call, plan, g, av)])
            regs = [words[o // 2] for o in g]
            if plan.store:
                T.evaluate(T.ptx[plan.instruction(len(g))](addr, *regs))
            else:
                T.evaluate(T.ptx[plan.instruction(len(g))](*regs, addr))


def _emit(call, plan, ctx):
    emit_matrix_copy(call, plan)


# ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.b16 shared→registers and its sm_90 mirror stmatrix
add_schedule("copy", "ldmatrix", "cuda", priority=25,
             requires="registers = C ⊗ ldmatrix atom S[(8,4,2):(4@lane,1@lane,1@reg)]; shared rows 16 contiguous aligned bytes",
             check=lambda call, ctx: ldmatrix_plan(call, ctx, store=False), emit=_emit)
add_schedule("copy", "stmatrix", "cuda", priority=25,
             requires="sm_90+; registers = C ⊗ stmatrix atom; shared rows 16 contiguous aligned bytes",
             check=lambda call, ctx: ldmatrix_plan(call, ctx, store=True), emit=_emit)
