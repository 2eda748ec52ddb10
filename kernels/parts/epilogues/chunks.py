"""How a store epilogue cuts a warpgroup's columns into chunks and buffers (pure Python, no TVM):
the store (:mod:`kernels.parts.epilogues.store`) builds from it, and selection
(:func:`kernels.gemm_select.stages_for`) reads it to size the ring beside the buffers.
"""


def chunking(epilogue, cols, epilogue_bufs=None):
    """``(chunks, bufs)`` of a warpgroup's ``cols`` columns (a multiple of 16) stored ``epilogue`` at a
    time: the whole 64-column blocks in chunks of ``epilogue`` (a multiple of 64 dividing them), then
    the rest (``cols mod 64``, if any) as one more chunk (:meth:`ChunkedStore.span`); two buffers (write one while the
    other stores) for more than two chunks, else one (wait until the previous chunk's store has read
    it), unless ``epilogue_bufs`` says."""
    body = cols - cols % 64
    if cols % 16 or not body or epilogue % 64 or body % epilogue:
        whole = f"{cols}" if body == cols else f"{body} (the whole 64-column blocks of {cols} columns, a multiple of 16)"
        raise ValueError(f"gemm: epilogue chunk {epilogue} must be a multiple of 64 dividing {whole}")
    chunks = body // epilogue + (cols % 64 > 0)
    bufs = epilogue_bufs or (2 if chunks > 2 else 1)
    if bufs not in (1, 2) or bufs > chunks:
        raise ValueError(f"gemm: epilogue_bufs must be 1 or 2 and at most the {chunks} chunks, got {epilogue_bufs!r}")
    return chunks, bufs
