"""Where the elements of a register tile sit in its tile: the coordinates of each register of a
thread, read off the tile's layout (the layout algebra's grouping), for the code that must know
them — the attention's masks compare a score's key column with its query row.

Law: for a register tile whose layout groups by its shape into blocks whose iters each lie on
one axis (``m`` for the thread's registers, ``tx`` for the thread) with non-overlapping digits,
:func:`coords` gives, for register ``r`` of thread ``tx``, the ``(row, col)`` that the layout maps
to ``(m = r, tx)``: ``coord_d = Σ digit_k · weight_k`` over block d's iters, where
``digit_k = (value on axis a_k // stride_k) mod extent_k`` and ``weight_k`` is the product of the
extents after iter k in its block (lexicographic, last fastest).  Replicas on a thread axis (a row
value held by every lane of a quad) leave a holder's coordinates those of the shard.  :func:`check_coords` verifies
the law by enumeration.
"""

from axe.layout import group


def _blocks(layout, shape):
    inner = layout.inner if hasattr(layout, "inner") else layout
    if any(a == "m" for _, _, a in inner.replica):
        raise ValueError(f"fragments: layout {layout} replicates on registers; a register's coordinates are not unique")
    return group(inner, shape).blocks


def coords(layout, shape, r: int, tx):
    """``(row, col, …)`` of register ``r`` of thread ``tx`` (an int or a TIR expression) in a register
    tile laid out by ``layout`` over ``shape``; ints where only registers decide a digit."""
    out = []
    for blk in _blocks(layout, shape):
        c, w = 0, 1
        for e, s, a in reversed(blk):
            if a == "m":
                c = c + (r // s) % e * w
            elif a == "tx":
                c = c + (tx // s) % e * w
            else:
                raise ValueError(f"fragments: iter {e}:{s}@{a} is neither on registers (m) nor on tx")
            w *= e
        out.append(c)
    return tuple(out)


def registers_of(layout, shape) -> int:
    """How many registers each thread holds (the layout's span on ``m``)."""
    inner = layout.inner if hasattr(layout, "inner") else layout
    return inner.span("m")


def check_coords(layout, shape, threads: int):
    """Enumerate the layout: every element's (register, thread) gives back its coordinates through
    :func:`coords`; raises ``AssertionError`` naming the first that does not."""
    from math import prod

    from axe.layout.layout import unflatten_index
    inner = layout.inner if hasattr(layout, "inner") else layout
    for x in range(prod(shape)):
        want = unflatten_index(x, tuple(shape))
        for p in inner.map(x):
            got = coords(layout, shape, p["m"], p["tx"])
            assert tuple(got) == tuple(want), f"{layout} over {shape}: element {want} at m={p['m']}, tx={p['tx']} gives {got}"
    return threads
