"""The runtime's own GPU test kernels, in TVMScript (imports TVM: build side only).

- ``vcopy``: each thread copies 16 bytes (``ld.global.v4`` / ``st.global.v4``);
- ``tma_copy``: a 64x64 fp16 tile per CTA, global -> shared by ``cp.async.bulk.tensor`` completing
  on an mbarrier, shared -> global by ``cp.async.bulk.tensor`` (bulk group); 200 rows, so the
  last tile is partial (TMA zero-fills the load and clips the store);
- ``tma_swizzle``: as ``tma_copy`` but loaded through a 128-byte-swizzled map and stored through a
  plain one, so the output shows the hardware's swizzle (16-byte chunk j of row r lands at
  j ^ (r % 8));
- ``cluster_rank``: 8 CTAs in clusters of 2 write ``rank_in_cluster * 1000 + cluster_id``
  (launched through ``cuLaunchKernelEx`` with a cluster-dimension attribute);
- ``axpy``: ``C = alpha * A + B`` with a shape symbol ``M`` (grid = M) and a float scalar.
"""

from tvm.script import tirx as T

TMA_ROWS, TMA_COLS, TMA_TILE = 200, 64, 64

# fmt: off
@T.prim_func
def vcopy(A: T.Buffer((256 * 1024,), "float32"), B: T.Buffer((256 * 1024,), "float32")):
    T.device_entry()
    bx = T.cta_id([256])
    tx = T.thread_id([256])
    for v in T.vectorized(4):
        B[bx * 1024 + tx * 4 + v] = A[bx * 1024 + tx * 4 + v]


def tma_tile_copy(rows, smem_align):
    """A (rows, 64) fp16 copy, one 64x64 TMA tile per CTA through shared memory."""
    ctas = (rows + TMA_TILE - 1) // TMA_TILE

    @T.prim_func
    def tma_tile_copy(A: T.Buffer((rows, 64), "float16"), B: T.Buffer((rows, 64), "float16"),
                      A_map: T.handle("tensormap"), B_map: T.handle("tensormap")):
        T.device_entry()
        bx = T.cta_id([ctas])
        tx = T.thread_id([128])
        smem = T.alloc_buffer((64, 64), "float16", scope="shared.dyn", align=smem_align)
        bar = T.alloc_buffer((1,), "uint64", scope="shared", align=8)
        if tx == 0:
            T.ptx.mbarrier.init.shared.b64(bar.ptr_to([0]), T.uint32(1))
            T.ptx["fence.proxy.async.shared::cta"]()
        T.cuda.cta_sync()
        if tx == 0:
            T.ptx.mbarrier.arrive.expect_tx.shared.b64(bar.ptr_to([0]), T.uint32(64 * 64 * 2))
            T.ptx["cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"](
                smem.ptr_to([0, 0]), T.address_of(A_map), 0, bx * 64, bar.ptr_to([0]))
        T.cuda.mbarrier_wait(bar.ptr_to([0]), 0)
        if tx == 0:
            T.ptx["cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"](
                T.address_of(B_map), 0, bx * 64, smem.ptr_to([0, 0]))
            T.ptx["cp.async.bulk.commit_group"]()
            T.ptx["cp.async.bulk.wait_group"](0)

    return tma_tile_copy


tma_copy = tma_tile_copy(200, 128)
tma_swizzle = tma_tile_copy(256, 1024)  # a 128B-swizzled tile needs 1024-byte alignment


@T.prim_func
def axpy(a: T.handle, b: T.handle, c: T.handle, alpha: T.float32):
    M = T.int32()
    A = T.match_buffer(a, (M, 256), "float32")
    B = T.match_buffer(b, (M, 256), "float32")
    C = T.match_buffer(c, (M, 256), "float32")
    T.device_entry()
    bx = T.cta_id([M])
    tx = T.thread_id([256])
    C[bx, tx] = A[bx, tx] * alpha + B[bx, tx]


@T.prim_func
def cluster_rank(Out: T.Buffer((8 * 32,), "int32")):
    T.device_entry()
    cid = T.cluster_id([4])
    rank = T.cta_id_in_cluster([2])
    bx = T.cta_id([8])
    tx = T.thread_id([32])
    Out[bx * 32 + tx] = rank * 1000 + cid
# fmt: on

TMA_SPECS = [
    {"param": "A_map", "tensor": "A", "box": [TMA_TILE, TMA_TILE]},
    {"param": "B_map", "tensor": "B", "box": [TMA_TILE, TMA_TILE]},
]

# load through a 128B-swizzled map, store through a plain one: B is A with each row's 16-byte
# chunks permuted, chunk j -> j ^ (row % 8) (the smem tile is 1024-byte aligned)
TMA_SWIZZLE_SPECS = [
    {"param": "A_map", "tensor": "A", "box": [TMA_TILE, TMA_TILE], "swizzle": 128},
    {"param": "B_map", "tensor": "B", "box": [TMA_TILE, TMA_TILE], "swizzle": 0},
]
