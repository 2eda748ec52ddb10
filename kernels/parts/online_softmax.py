"""The online softmax of a flash-attention consumer, in fp32 registers: per query row a running max
``m`` (in log2 units: scores are scaled by ``c = scale · log2 e`` so that ``exp(scale·s − m') =
exp2(c·s − m)``) and a running sum ``l``; each key tile's scores ``S`` (a register tile in an MMA's
accumulator layout) become ``P = exp2(c·S − m_new)`` in place, and the factor ``α = exp2(m_old − m_new)``
rescales ``l`` and the output accumulator.

Law: after the tiles ``S_1 … S_t`` of a row, ``m = max_k c·s_k`` and ``l = Σ_k exp2(c·s_k − m)``
over its unmasked keys, and an accumulator updated by ``O ← α·O + P·V`` holds ``Σ_k exp2(c·s_k − m)·v_k``;
so ``O / l`` is the softmax-weighted sum and ``(m + log2 l)·ln 2`` the log-sum-exp.  A row whose keys
so far are all masked (−∞) keeps ``m = −∞`` and subtracts 0 instead (its P are 0, never NaN).

The row values live in the accumulator's threads: ``rows`` is the layout of a (rows, 1) tile
replicated over the lanes that share a row (for wgmma's D fragment: ``S[(4,2,8):(32@tx,1,4@tx)] +
R[4:1@tx]``, each of a quad's lanes holding its two rows), which the reductions write (in-thread,
then shuffles across the quad) and the broadcasts read; updates of the row values themselves run
on each thread's own registers (:meth:`OnlineSoftmax.own`).
"""

import math

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S


class OnlineSoftmax:
    """The running ``(m, l)`` of ``n`` query rows laid out by ``rows`` (see the module docstring);
    ``c``: the scale times log2 e."""

    def __init__(self, n, rows, c):
        self.n, self.rows, self.c = n, rows, float(c)
        self.regs = rows.span("m")
        reg = lambda name: Ax.registers((n, 1), "float32", rows, name=name)      # noqa: E731
        self.m, self.l, self.m_new, self.m_use, self.r_sum, self.alpha = (
            reg(x) for x in ("m_run", "l_run", "m_new", "m_use", "r_sum", "alpha"))
        self.reset()

    def reset(self):
        """Start a new set of rows: ``m = −∞``, ``l = 0``."""
        Ax.elementwise(self.own(self.m), lambda: T.float32(-math.inf))
        Ax.elementwise(self.own(self.l), lambda: T.float32(0))

    def own(self, t):
        """A row tile as this thread's own registers (every lane holding a row has its value)."""
        return Ax.view(t, S[self.regs:1], (self.regs,))

    def update(self, s):
        """Scores ``s`` (fp32 registers, −∞ where masked) become ``P`` in place; ``m``, ``l`` and
        ``alpha`` (the rescale of what was accumulated before) move on.  Returns ``alpha``."""
        o, c = self.own, T.float32(self.c)
        Ax.reduce(self.m_new, s, "max", dims=1)
        Ax.elementwise(o(self.m_new), lambda mo, mx: T.max(mo, mx * c), o(self.m), o(self.m_new))
        Ax.elementwise(o(self.m_use), lambda mn: T.if_then_else(mn == T.float32(-math.inf), T.float32(0), mn),
                       o(self.m_new))
        Ax.elementwise(s, lambda x, mu: T.exp2(x * c - mu), s, self.m_use)
        Ax.reduce(self.r_sum, s, "sum", dims=1)
        Ax.elementwise(o(self.alpha), lambda mo, mu: T.exp2(mo - mu), o(self.m), o(self.m_use))
        Ax.elementwise(o(self.l), lambda lr, a, rs: lr * a + rs, o(self.l), o(self.alpha), o(self.r_sum))
        Ax.elementwise(o(self.m), lambda mn: mn, o(self.m_new))
        return self.alpha

    def rescale(self, acc):
        """``acc *= alpha`` row by row."""
        Ax.elementwise(acc, lambda x, a: x * a, acc, self.alpha)

    def finish(self, out, acc):
        """``out = acc / l`` cast to ``out``'s type."""
        Ax.elementwise(out, lambda x, lr: T.Cast(out.dtype, x / lr), acc, self.l)

    def lse(self, r):
        """Register ``r``'s row log-sum-exp in natural-log units, ``(m + log2 l)·ln 2``."""
        return (self.m.flat()[r] + T.log2(self.l.flat()[r])) * T.float32(math.log(2))
