"""Operand tiles and regions shared by the GEMM-shaped kernels: where a block of a matrix lies, how
a 16-bit tile is laid out in shared memory for TMA and the tensor cores, and how an operand with a
run-time number of rows is declared.

Laws: ``block(X, i, j, r, c)`` is rows ``[i·r, (i+1)·r)`` × columns ``[j·c, (j+1)·c)`` of X;
``b_block`` is the same region of B's K×N view whichever way B is stored; ``swizzled(r, c)`` tiles
both the TMA box and the wgmma atom (column blocks of 64 elements under the 128-byte swizzle).
"""

from axe.layout import S, Swizzle, SwizzledLayout

#: the rows of the static view a runtime-M operand (A, C) is declared through (:func:`rows_view`).
#: A and C are reached only by TMA, whose coordinates are the slices' starts and whose bounds come
#: from the tensor map encoded off the real tensor, so the view need hold just one tile's rows (its
#: element base wraps at them and is never read); a larger count costs parse time, since slicing
#: checks every block of the sliced dimension (2**31 rows: minutes)
DYN_ROWS = 128


def block(X, i, j, rows, cols):
    """Block (i, j) of ``rows``×``cols`` of the matrix ``X``."""
    return X[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols]


def b_block(B, b_major, n0, k0, cols, depth):
    """B's ``depth`` k-rows from ``k0`` by ``cols`` columns from ``n0``, as B is stored (K×N for
    ``"row"``, N×K for ``"col"``)."""
    return B[k0:k0 + depth, n0:n0 + cols] if b_major == "row" else B[n0:n0 + cols, k0:k0 + depth]


def swizzled(rows, cols, lead=(), panel=None):
    """A (rows, cols) tile as column blocks of 64 elements (128 bytes of 16-bit data), each
    row-major under TMA's 128-byte swizzle: a tiling of both the TMA box and the wgmma atom.
    ``lead``: extent-1 dims in front (the tile seen as a box of a higher-rank tensor).
    ``panel``: elements from one column block to the next (default ``rows * 64``: the blocks
    back to back); a larger one describes these rows as a row range of a taller tile."""
    if cols <= 64:
        return SwizzledLayout(S[tuple(lead) + (rows, cols)], Swizzle(3, 3, 3))
    ones = (1,) * len(lead)
    return SwizzledLayout(S[ones + (rows, cols // 64, 64):ones + (64, panel or rows * 64, 1)], Swizzle(3, 3, 3))


def rows_view(buf, dynamic, axis=0):
    """``buf`` itself (static rows), or for a run-time row count the same data seen with a static
    extent (:data:`DYN_ROWS`) along ``axis`` (0: a (M, cols) matrix; 1: a (1, M) row vector of
    per-row values): axe's tensors need static shapes, and these operands are only reached through
    TMA, whose maps take the real extent from the tensor at launch (:func:`unbake_rows`)."""
    if not dynamic:
        return buf
    import tvm
    shape = [DYN_ROWS if i == axis else d for i, d in enumerate(buf.shape)]
    return tvm.tirx.decl_buffer(shape, buf.dtype, name=buf.name, data=buf.data)


def unbake_rows(specs, params=("A_map", "C_map"), vectors=()):
    """Let the TMA maps ``params`` among ``specs`` (the build's tensor-map specs, edited in place)
    take their extents from the tensor at launch (``shape: None``) instead of the placeholder
    view's static ones; their strides stay (N and K are static), except for the (1, M) row vectors
    among them (``vectors``), whose one stride spans M and is taken from the tensor too.  Returns
    the specs edited."""
    done = [s for s in specs if s["param"] in params]
    if len(done) != len(params):
        raise ValueError(f"gemm: tensor maps {sorted(params)} expected among the build's, found "
                         f"{sorted(s['param'] for s in specs)}")
    for s in done:
        s["shape"] = None
        if s["param"] in vectors:
            s["strides_bytes"] = None
    return done


def static_rows(buf, rows, cols=None):
    """``buf``'s data seen as a static ``(rows, cols)`` matrix: axe tensors have static shapes,
    and these operands are reached through TMA (coordinates are slice starts, bounds come from
    the tensor map encoded off the real tensor) or by row index, so the view holds a few rows."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import IRBuilder
    shape = (rows,) if cols is None else (rows, cols)
    return IRBuilder.name(buf.name, T.decl_buffer(shape, buf.dtype, data=buf.data))
