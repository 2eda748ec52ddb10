"""What a warpgroup's registers hold after a tcgen05.ld plan, read on the NumPy model of the ISA
(:mod:`tcgen05_model`): the tests' bridge from a model TMEM back to a kernel's register layout.

Law: ``ld_tile(tm, plan, regs)[i, j]`` is the value the register that ``regs``' layout assigns to
element (i, j) receives when each of the four warps executes the plan's instructions on ``tm``.
"""

import numpy as np

import tcgen05_model as M


def ld_tile(tm, ld, regs_t):
    """The (rows, cols) tile of register tensor ``regs_t`` after plan ``ld`` (an ``LdPlan``) ran on
    model TMEM ``tm``; columns are the tile's own (add ``ld.col0`` for TMEM's)."""
    rows, cols = regs_t.shape
    got = np.full((rows, cols), np.nan, np.float32)
    for w in range(4):
        regs = np.zeros((32, regs_t.layout.span("m")), np.float32)
        for base, dl, col in ld.steps():
            regs[:, base:base + ld.per_instr] = M.ld(tm, ld.shape, ld.num, w, ((32 * w + dl) << 16) | col)
        for i in range(rows):
            for j in range(cols):
                (x,) = regs_t.layout.map((i, j), regs_t.shape)
                if x["tx"] // 32 == w:
                    got[i, j] = regs[x["tx"] % 32, x["m"]]
    return got
