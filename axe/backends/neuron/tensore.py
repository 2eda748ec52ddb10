"""TensorE dispatch (the Axe paper §3.4, Appendix H): the largest legal ``nc_matmul`` for three
tile layouts, and the loops over the rest.

``nc_matmul(stationary[K, M], moving[K, N]) -> psum[M, N]``: K on the partitions of both inputs,
M on the free axis of the stationary and the partitions of the result, N on the free axis of the
moving tile and of the result; K <= 128, M <= 128, N <= 512 and within one 2 KiB PSUM bank.

1. Group: each logical dimension (M, K, N) is split into the common refinement of its iters in
   the two operands that carry it, so every piece is one iter in both.
2. K intersection: pieces on P in A and in B must produce the same partitions
   (``intersect(I_A, I_B) == I_A == I_B``); that piece is the contraction, the others (on F in
   both) are loops.
3. M / N intersection: the M piece on F of A and P of C is the instruction's M; the innermost N
   pieces contiguous on F in both B and C, up to 512 and a bank, are its N; the rest are loops.
4. Every loop digit gives one instruction at the offsets the loop iters' strides say.
A layout that cannot feed TensorE is declined with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from axe.layout import LayoutError, intersect
from axe.layout.group import group

from . import hardware as hw
from .tiles import box_text, nki_name

__all__ = ["plan_matmul", "MatmulPlan", "refine"]


def refine(*splits):
    """The common refinement (outer -> inner extents) of several factorizations of one extent,
    or None when their boundaries do not nest (suffix products must form a divisor chain)."""
    cuts = {1}
    for s in splits:
        acc = 1
        for e in reversed(s):
            acc *= e
            cuts.add(acc)
    chain = sorted(cuts)
    if any(b % a for a, b in zip(chain, chain[1:])):
        return None
    return [b // a for a, b in zip(chain, chain[1:])][::-1]


def _extents(L, shape, d):
    return [it.extent for it in group(L, shape).blocks[d] if it.extent > 1] or [1]


def _pieces(t, refined):
    """The iter of each refined piece of ``t``'s two dims (None for extent 1)."""
    shape = tuple(e for r in refined for e in r)
    g = group(t.layout, shape).blocks
    out, k = [], 0
    for r in refined:
        row = []
        for _ in r:
            its = [it for it in g[k] if it.extent > 1]
            if len(its) > 1:
                raise LayoutError(f"{t.describe()}: piece {k} is {its}, not one iter")
            row.append(its[0] if its else None)
            k += 1
        out.append(row)
    return out


@dataclass
class MatmulPlan:
    k: int
    m: int
    n: int
    loops: dict
    instructions: list

    def describe(self) -> str:
        loops = ", ".join(f"{d} {e}" for d, e in self.loops.items() if e > 1) or "none"
        return (f"{len(self.instructions)} x nisa.nc_matmul K={self.k} M={self.m} N={self.n} "
                f"(stationary A[K,M], moving B[K,N] -> PSUM C[M,N]); loops: {loops}")


def plan_matmul(A, B, C):
    """The instructions ``[(C box, A box, B box, first k-step)]`` of ``C += A·B``, or the reason
    the layouts cannot feed TensorE."""
    (M, K), (_, N) = A.shape, B.shape
    ka, kb = _extents(A.layout, A.shape, 1), _extents(B.layout, B.shape, 0)
    ma, mc = _extents(A.layout, A.shape, 0), _extents(C.layout, C.shape, 0)
    nb, nc = _extents(B.layout, B.shape, 1), _extents(C.layout, C.shape, 1)
    rk, rm, rn = refine(ka, kb), refine(ma, mc), refine(nb, nc)
    for what, r, x, y in (("K", rk, "A", "B"), ("M", rm, "A", "C"), ("N", rn, "B", "C")):
        if r is None:
            return f"the {what} iters of {x} and {y} do not split {what} at common points"
    pa, pb, pc = _pieces(A, [rm, rk]), _pieces(B, [rk, rn]), _pieces(C, [rm, rn])
    # K intersection
    k_inst, k_loops = None, []
    for j, (ia, ib) in enumerate(zip(pa[1], pb[0])):
        if ia is None:
            continue
        if ia.axis == "P" and ib.axis == "P":
            if intersect(ia, ib) != ia or ia != ib:
                return f"K piece {j}: A's partitions {ia} and B's {ib} do not produce the same rows"
            if k_inst is not None:
                return f"K is on the partitions in two iters ({k_inst[1]} and {ia}); one contraction iter allowed"
            k_inst = (j, ia)
        elif ia.axis == "F" and ib.axis == "F":
            k_loops.append((j, ia, ib))
        else:
            return f"K piece {j} is on {ia.axis} in A but {ib.axis} in B: TensorE contracts over the partitions of both"
    if k_inst is None:
        return "no K iter lies on the partitions of A and B (TensorE contracts over partitions)"
    if k_inst[1].stride != 1:
        return f"the contraction iter {k_inst[1]} must take consecutive partitions"
    # M intersection
    m_inst, m_loops = None, []
    for j, (ia, ic) in enumerate(zip(pa[0], pc[0])):
        if ia is None:
            continue
        if ia.axis == "F" and ic.axis == "P":
            if m_inst is not None:
                return "M is on C's partitions in two iters"
            m_inst = (j, ia, ic)
        elif ia.axis == "F" and ic.axis == "F":
            m_loops.append((j, ia, ic))
        else:
            return f"M piece {j} is on {ia.axis} in A and {ic.axis} in C: M must be on A's free axis and C's partitions"
    if m_inst is None:
        m_inst = (None, None, None) if M == 1 else None
        if m_inst is None:
            return "no M iter is on the free axis of A and the partitions of C"
    if m_inst[1] is not None and (m_inst[1].stride != 1 or m_inst[2].stride != 1):
        return f"the instruction's M iters {m_inst[1]} (A) and {m_inst[2]} (C) must be contiguous"
    m = m_inst[1].extent if m_inst[1] is not None else 1
    if m > hw.MATMUL_STATIONARY_FREE:
        return f"M {m} > {hw.MATMUL_STATIONARY_FREE} (stationary free size)"
    # N intersection: innermost pieces contiguous in B and C
    n_pieces = [(j, ib, ic) for j, (ib, ic) in enumerate(zip(pb[1], pc[1])) if ib is not None]
    for j, ib, ic in n_pieces:
        if ib.axis != "F" or ic.axis != "F":
            return f"N piece {j} is on {ib.axis} in B and {ic.axis} in C: N must be on the free axis of both"
    n, inst = 1, []
    for j, ib, ic in reversed(n_pieces):
        if ib.stride == n and ic.stride == n and n * ib.extent <= hw.MATMUL_MOVING_FREE:
            n *= ib.extent
            inst.append(j)
        else:
            break
    n_loops = [(j, ib, ic) for j, ib, ic in n_pieces if j not in inst]
    split = 1
    if not inst and n_pieces:      # the innermost piece alone exceeds 512: cut it
        j, ib, ic = n_pieces[-1]
        if ib.stride != 1 or ic.stride != 1:
            return f"the innermost N iters {ib} (B) and {ic} (C) are not contiguous"
        n = max(d for d in range(1, hw.MATMUL_MOVING_FREE + 1) if ib.extent % d == 0)
        split = ib.extent // n
        n_loops = [x for x in n_loops if x[0] != j]
    bank = hw.PSUM_BANK_BYTES // 4          # fp32 per PSUM bank: one instruction's result fits one
    instructions = []
    a_name, b_name, c_name = nki_name(A), nki_name(B), nki_name(C)
    aP, aF = A.layout.offset["P"], A.layout.offset["F"]
    bP, bF = B.layout.offset["P"], B.layout.offset["F"]
    cP, cF = C.layout.offset["P"], C.layout.offset["F"]
    for mdig in product(*[range(it.extent) for _, it, _ in m_loops]):
        for ndig in product(*[range(x[1].extent) for x in n_loops]):
            for s in range(split):
                for kdig in product(*[range(x[1].extent) for x in k_loops]):
                    a_f = aF + sum(d * it.stride for d, (_, it, _) in zip(mdig, m_loops)) + \
                        sum(d * ia.stride for d, (_, ia, _) in zip(kdig, k_loops))
                    b_f = bF + sum(d * ib.stride for d, (_, ib, _) in zip(ndig, n_loops)) + \
                        sum(d * ib.stride for d, (_, _, ib) in zip(kdig, k_loops)) + s * n
                    c_f = cF + sum(d * ic.stride for d, (_, _, ic) in zip(mdig, m_loops)) + \
                        sum(d * ic.stride for d, (_, _, ic) in zip(ndig, n_loops)) + s * n
                    if c_f // bank != (c_f + n - 1) // bank:
                        return (f"the instruction's C range [{c_f}, {c_f + n}) crosses a PSUM bank "
                                f"({bank} fp32): align C's N pieces to banks")
                    kk = k_inst[1].extent
                    instructions.append((box_text(c_name, cP, m, c_f, n), box_text(a_name, aP, kk, a_f, m),
                                         box_text(b_name, bP, kk, b_f, n), not any(kdig)))
    loop_count = {"M": prod(it.extent for _, it, _ in m_loops), "N": prod(x[1].extent for x in n_loops) * split,
                  "K": prod(x[1].extent for x in k_loops)}
    return MatmulPlan(k_inst[1].extent, m, n, loop_count, instructions)
