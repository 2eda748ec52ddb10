"""When stream-K can spread a few tiles over every CTA (pure Python: the GEMM's selection, which a
serving machine runs without TVM, asks it too; :class:`~kernels.parts.schedulers.stream_k.StreamK`
with ``spread`` holds the schedule)."""


def spread_fits(tiles, k_iters, ctas):
    """Whether ``tiles`` tiles of ``k_iters`` k-blocks spread over ``ctas`` CTAs: fewer tiles than CTAs,
    and each CTA's even share holds 4 to ``k_iters - 4`` k-blocks (every piece at least two after
    the boundaries move off a tile's second and last k-block, and no range two tiles' starts)."""
    return tiles < ctas and 4 <= tiles * k_iters // ctas <= k_iters - 4
