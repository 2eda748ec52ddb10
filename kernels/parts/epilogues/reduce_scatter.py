"""The reduce-scatter epilogue of a GEMM on ``world`` GPUs (A and B sharded over K, C's rows
scattered by owner), with the owners' order of :mod:`kernels.parts.schedulers.owners`:

- a tile owned by a peer is cast to the output type and pushed as a partial into this rank's slot of
  the owner's symmetric staging: ``push="forward"`` (default) bulk-copies each chunk into a local
  stash and goes on, and one warp of the producer warpgroup per consumer warpgroup copies the
  stashed half-tile over NVLink (16-byte stores), fences at system scope and signals the owner;
  ``push="bulk"`` lets the consumers' bulk copies write into the owner's memory directly (the
  transfer then sits on the consumers' path);
- a tile the rank owns (computed last) waits for every peer's signal (bounded by the mesh timeout),
  adds each peer's partial in fp32 and stores the sum with TMA.  ``add="chunks"`` (default)
  bulk-loads each partial chunk into the free chunk buffer and ``ldmatrix``-es it into the
  accumulator's fragment layout, one chunk after another (each chunk's load latency in turn);
  ``add="registers"`` loads the warpgroup's whole half-tile of a peer's partial from the staging
  straight into the output registers (the fragment layout, every load in flight at once: one
  latency per peer) before the tile's cast and store.

A peer tile is signalled one tile late — after the warpgroup's next main loop — so its copies have
long crossed NVLink and waiting for their completion costs nothing.  Law: every owner receives from
every peer exactly one partial per (row block, column block, warpgroup half), signalled by flag
``rs_flag(src, j, n, wg)``, and adds them in the order of the source ranks after its own.
``comm=False`` / ``"nowait"`` are measurement aids (wrong results): nothing exchanged, or pushed
without the owners waiting.
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import Iter, Layout, Swizzle, SwizzledLayout
from kernels.parts.epilogues.store import FUSED_PARAMS

HALF = 64               # rows per consumer warpgroup
FWD_ROWS = 4            # rows a forwarding warp copies per loop iteration (4 × 16 B per lane)
BATCH = 4               # of them in flight per lane: all loaded before the first store
PUSH_REGS = 56          # the producer warpgroup's registers when its warps forward (40 spilled the batch)
#: the producer warpgroup's registers a build may ask for (``setmaxnreg`` takes multiples of 8 from 24;
#: the consumers get the rest of the SM's registers, at most 232)
REGS = range(24, 129, 8)


class _Distributed:
    """What a reduce-scatter build declared: the mesh, the staging P as a distributed tensor and as
    this rank's local slots, the stash and the forwarding counters."""

    _is_meta_class = True

    def __init__(self, mesh=None, P=None, Pl=None, bar=None):
        self.mesh, self.P, self.Pl, self.bar = mesh, P, Pl, bar
        self.Q = self.F = self.cid = self.tx = None
        self.pending = None     # a consumer warpgroup's unsent signal (begin)


class ReduceScatter:
    """Push peer tiles to their owners, add the peers' partials into own tiles (the module's law);
    ``inner``: the chunked store it sends and stores through; ``regs``: the producer warpgroup's
    registers (:data:`REGS`; None: :data:`PUSH_REGS` where its warps forward, else the store's)."""

    hands_over = False

    def __init__(self, inner, sched, M, K, N, world, b_major, b_shape, comm=True, push="forward", add="chunks",
                 regs=None):
        if push not in ("forward", "bulk"):
            raise ValueError(f"gemm_rs: push must be 'forward' or 'bulk', got {push!r}")
        if add not in ("chunks", "registers"):
            raise ValueError(f"gemm_rs: add must be 'chunks' or 'registers', got {add!r}")
        if regs is not None and regs not in REGS:
            raise ValueError(f"gemm_rs: regs (the producer warpgroup's registers) must be a multiple of 8 from "
                             f"{REGS[0]} to {REGS[-1]}, got {regs!r}")
        self.inner, self.sched = inner, sched
        self.M, self.K, self.N, self.world, self.b_major, self.b_shape = M, K, N, world, b_major, b_shape
        self.comm, self.push, self.add = comm, push, add
        self.name = f"reduce-scatter ({push})"
        bm, bn = inner.main.bm, inner.main.bn
        self.p_shape = (world, sched.m_tiles * bm, sched.n_tiles * bn)     # staging: one padded slot per source
        self.nsig = world * sched.m_tiles * sched.n_tiles * 2
        self.smem = inner.smem
        self.unused_params = (() if push == "forward" else ("Q_",)) + ("P_map",) + FUSED_PARAMS
        # the forwarding warps push whenever anything is exchanged: also under "nowait", which only
        # leaves out the owners' waits
        self.forwards = push == "forward" and comm in (True, "nowait")
        # ``regs`` given: that split whatever the build (the register split measured on its own)
        self.producer_regs = regs or (PUSH_REGS if self.forwards else inner.producer_regs)

    m_maps = ()

    def out_cols(self, N):
        """C's columns: the GEMM's."""
        return N

    def inputs(self, *params):
        """No fused operands."""

    def flag(self, src, j, n_blk, wg):
        """The signal on the owner that ``src``'s half-tile ``wg`` of (j, n_blk) has arrived."""
        return ((src * self.sched.m_tiles + j) * self.sched.n_tiles + n_blk) * 2 + wg

    def declare(self, A_, B_, C_, P_, P_map, Q_, peers, sig, err, rank_, epoch, timeout_ns, F, cid, tx):
        """The mesh and the distributed signature (A and B sharded over K, C's rows scattered, P the
        symmetric staging the runtime supplies)."""
        from axe.layout.interop.dtensor import Shard
        world, M, K, N = self.world, self.M, self.K, self.N
        e = self.inner.epilogue
        mesh = Ax.mesh(world, peers, sig, err, rank_, epoch, timeout_ns)
        mesh.alloc(self.nsig, "gemm_rs tile signals (rs_flag)")
        Ax.dtensor(A_, (M * world, K * world), placements=[Shard(1)])
        b_dim = 1 if self.b_major == "col" else 0          # K is B's dim 1 when B is stored N×K
        b_global = tuple(x * (world if d == b_dim else 1) for d, x in enumerate(self.b_shape))
        Ax.dtensor(B_, b_global, placements=[Shard(b_dim)])
        Ax.dtensor(C_, (M * world, N), placements=[Shard(0)])
        # staging holds each 64×epilogue chunk as the image of the shared chunk it is pushed from
        # (rows of 64-column blocks under the 128-byte swizzle), so one bulk copy moves a chunk
        rows, cols = self.p_shape[1], self.p_shape[2]

        def staging(lead, row_blocks):
            """``lead`` iters, then the rows in blocks of 64, then the columns as chunks of
            ``epilogue``, each chunk's 64-column blocks (of 64 rows) after one another."""
            its = list(lead) + [Iter(row_blocks, HALF * cols), Iter(HALF, 64), Iter(cols // e, HALF * e),
                                Iter(e // 64, HALF * 64), Iter(64, 1)]
            return SwizzledLayout(Layout(its), Swizzle(3, 3, 3))
        P = Ax.dtensor(P_, (world,) + self.p_shape, staging([Iter(world, 1, "gpuid"), Iter(world, rows * cols)], rows // HALF),
                       scratch=True)
        # Pl: this rank's slots as one (world·rows, cols) matrix, read locally
        Pl = Ax.view(Ax.param(P_), staging([], world * rows // HALF), (world * rows, cols))
        d = _Distributed(mesh, P, Pl, Ax.cuda.mbarrier(1, 2, name="partial"))   # one barrier per consumer
        if self.push == "forward":     # the stash: this rank's peer tiles, by owner, as staging images
            d.Q = Ax.view(Ax.param(Q_, scratch=True), staging([], world * rows // HALF), (world * rows, cols))
        d.F, d.cid, d.tx = F, cid, tx
        return d

    def begin(self, dist):
        """The warpgroup's pending signal in registers: flag, owner (-1: none), partial loads so
        far, peer tiles handed to the forwarding warp so far."""
        dist.pending = T.alloc_buffer((4,), "int32", scope="local")
        IRB.buffer_store(dist.pending, -1, [0])
        IRB.buffer_store(dist.pending, 0, [2])
        IRB.buffer_store(dist.pending, 0, [3])

    def end(self, dist, wg, leader):
        """Signal the owner of the tile pushed last, if any.  Only the thread that issued the copies
        waits for them and signals."""
        pend = dist.pending
        with Ax.guard(pend[0] >= 0):
            with Ax.guard(leader):
                Ax.cuda.bulk_wait(0)                 # the pushed chunks are written (at the owner, or stashed)
                if self.push == "bulk":
                    Ax.signal(pend[0], pend[1])
                else:                           # hand the stashed half-tile to this warpgroup's forwarding warp
                    Ax.cuda.counter_publish(dist.F, dist.cid * 2 + wg, pend[3] + 1)
            IRB.buffer_store(pend, -1, [0])
            IRB.buffer_store(pend, pend[3] + 1, [3])

    def forward(self, dist, wg):
        """Forwarding warp ``2 + wg`` of the producer warpgroup: for each peer tile of this CTA, in
        the consumers' order, wait until consumer warpgroup ``wg`` has stashed its half, copy it
        into the owner's staging slot over NVLink, fence at system scope and signal the owner.  It
        serves one warpgroup only: a forwarding warp that also waited on the other would couple the
        two, and a warpgroup waiting for a peer could then hold back the signal the peer waits for."""
        sched, world, bn, bm = self.sched, self.world, self.inner.main.bn, self.inner.main.bm
        me = dist.mesh.rank
        lead = dist.tx % 32 == 0
        done = T.alloc_buffer((1,), "int32", scope="local")
        IRB.buffer_store(done, 0, [0])
        with T.serial(sched.count(dist.cid)) as it:
            p, n_blk = sched.coords(dist.cid, it)
            seg, j = sched.segment(p)
            owner = sched.owner(me, seg)
            with Ax.guard(sched.peer(me, seg)):
                with Ax.guard(lead):
                    Ax.cuda.counter_wait(dist.F, dist.cid * 2 + wg, done[0] + 1)
                T.evaluate(T.cuda.warp_sync())
                # FWD_ROWS rows at a time, in a loop TVM leaves rolled (pragma_unroll_explicit 0):
                # unrolled whole, the copy's 64 lane offsets are invariant in the tile loop, nvcc
                # hoists them out of it, and 64 live offsets overflow the producer's registers;
                # each iteration's BATCH vectors are all loaded before the first store (one memory
                # latency per iteration, not one per vector)
                with T.serial(HALF // FWD_ROWS, annotations={"pragma_unroll_explicit": 0}) as c:
                    row = j * bm + wg * HALF + c * FWD_ROWS
                    at = owner * self.p_shape[1] + row
                    Ax.copy(dist.P[owner, me, row:row + FWD_ROWS, n_blk * bn:(n_blk + 1) * bn],
                            dist.Q[at:at + FWD_ROWS, n_blk * bn:(n_blk + 1) * bn], schedule="vector", batch=BATCH)
                Ax.fence_system()
                T.evaluate(T.cuda.warp_sync())
                with Ax.guard(lead):
                    Ax.signal(self.flag(me, j, n_blk, wg), owner)
                IRB.buffer_store(done, done[0] + 1, [0])
        with Ax.guard(lead):                       # the counter is zero again for the next launch
            Ax.cuda.counter_publish(dist.F, dist.cid * 2 + wg, 0)

    def producer_warps(self, dist):
        """Warp 2 + wg of the producer warpgroup forwards consumer warpgroup wg's halves."""
        if self.forwards:
            for wg in range(2):
                with Ax.warps(2 + wg, 3 + wg):
                    self.forward(dist, wg)

    def store(self, acc, out, pool, C, dist, wg, leader, p, n_blk):
        """Block-row p: a peer's tile is pushed into the owner's staging slot of this rank and
        signalled at the next epilogue (:meth:`end`); an own tile waits for every peer's partial,
        adds them and is stored."""
        sched, world, inner = self.sched, self.world, self.inner
        tile, e, rows = inner.tile, inner.epilogue, self.p_shape[1]
        mesh, P, Pl = dist.mesh, dist.P, dist.Pl
        seg, j = sched.segment(p)
        me = mesh.rank
        owner = sched.owner(me, seg)
        if not self.comm:     # the measurement aid: every epilogue local, nothing exchanged
            with IRB.If(sched.peer(me, seg)):
                with IRB.Then():
                    tile(acc, out, pool, C, wg, leader, j, n_blk, dest=lambda row, n0:
                         Pl[me * rows + row:me * rows + row + HALF, n0:n0 + e])
                with IRB.Else():
                    tile(acc, out, pool, C, wg, leader, j, n_blk)
            return
        self.end(dist, wg, leader)
        with IRB.If(sched.peer(me, seg)):
            with IRB.Then():
                tile(acc, out, pool, C, wg, leader, j, n_blk, dest=lambda row, n0: (
                    P[owner, me, row:row + HALF, n0:n0 + e] if self.push == "bulk" else
                    dist.Q[owner * rows + row:owner * rows + row + HALF, n0:n0 + e]))
                IRB.buffer_store(dist.pending, self.flag(me, j, n_blk, wg), [0])
                IRB.buffer_store(dist.pending, owner, [1])
            with IRB.Else():
                if self.comm == "nowait":
                    tile(acc, out, pool, C, wg, leader, j, n_blk)
                    return
                with Ax.guard(leader):
                    for s in range(1, world):
                        src = (me + s) % world
                        Ax.wait(self.flag(src, j, n_blk, wg), src)
                Ax.cuda.named_barrier(1 + wg, 128)
                Ax.cuda.fence_gpu()
                row = j * inner.main.bm + wg * HALF
                if self.add == "registers":
                    bn = inner.main.bn
                    for s in range(1, world):
                        at = (me + s) % world * rows + row
                        Ax.copy(out, Pl[at:at + HALF, n_blk * bn:(n_blk + 1) * bn])
                        Ax.elementwise(acc, lambda a, q: a + T.cast(q, "float32"), acc, out)
                    tile(acc, out, pool, C, wg, leader, j, n_blk)
                    return

                def add_partials(c, Cw, n0):
                    """Each peer's partial of chunk c: one bulk load of its image into the free chunk
                    buffer, ldmatrix into the fragment layout, fp32 add."""
                    cols = slice(c * e, (c + 1) * e)
                    for s in range(1, world):
                        at = (me + s) % world * rows + row
                        Ax.copy(Cw, Pl[at:at + HALF, n0:n0 + e], barrier=dist.bar, stage=wg, schedule="bulk")
                        Ax.cuda.mbarrier_wait(dist.bar, dist.pending[2] % 2, wg)
                        IRB.buffer_store(dist.pending, dist.pending[2] + 1, [2])
                        Ax.copy(out[:, cols], Cw)
                        Ax.cuda.named_barrier(1 + wg, 128)       # every thread has read the buffer
                        Ax.elementwise(acc[:, cols], lambda a, q: a + T.cast(q, "float32"), acc[:, cols], out[:, cols])
                tile(acc, out, pool, C, wg, leader, j, n_blk, add_chunk=add_partials)
