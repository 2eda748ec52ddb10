"""The all-gather side of an all-gather + GEMM on ``world`` GPUs (``C = all_gather(A) · Bᵀ``: A's rows
sharded by owner, B's rows of N sharded, C's columns sharded), with the gather order of
:mod:`kernels.parts.schedulers.gather`.  It sits in the epilogue's place of the kernel skeleton —
it declares the mesh and the distributed signature, runs producer warps, stores the tiles — and
changes nothing in the mainloop:

- **push**: warps 1–3 of every CTA's producer warpgroup (idle in the one-GPU GEMM; warp 0 loads)
  copy this rank's rows, piece by piece (``PIECE`` rows × K), into this rank's slot of every peer's
  gathered buffer (symmetric memory: ``Ax.copy`` to a distributed tensor sliced at the peer's device
  index, 16-byte stores over NVLink), fence at system scope and signal the peer, one flag per piece.
  Pieces go out step by step — every rank's first peer ``r − 1`` (which reads this rank's rows
  right after its own), then ``r − 2``, … — spread over all CTAs' forwarding warps;
  With ``push="copy_engine"`` no warp pushes: the runtime stages the rows with the copy engines
  before each launch (:meth:`axe.lang.Mesh.copy_before_launch`, one signal per rank's rows);
- **wait**: the producer's loads of a peer's row block wait for its pieces' flags
  (:meth:`GatherOrder.before_tile`), bounded by the mesh timeout like every wait on a peer;
- **store**: a tile of owner g's row block j is stored at C's rows ``g·M/w + j·bm`` (the chunked
  TMA store of :mod:`.store`, or its SiLU·up variant :mod:`.silu_mul` for a fused gate/up
  projection).

Law: every rank receives every peer's M/w rows exactly once per launch, into the half of its
gathered buffer that the launch's epoch names, and computes each of the ``world · M/w`` rows of its
column slice once.  Staging: ``2 · world · M/w × K`` elements per rank from the symmetric heap.
Shapes: M/w a multiple of the tile's rows, K a multiple of 64.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.epilogues.store import FUSED_PARAMS

PIECE = 32              # rows per signalled piece
FWD_WARPS = 3           # forwarding warps per CTA (producer warps 1..3)
VECTORS = 1024          # elements a forwarding warp copies per loop iteration (4 × 16 B per lane)
BATCH = 4               # of them in flight per lane: all loaded before the first store
PUSH_REGS = 56          # the producer warpgroup's registers when its warps push (40 spilled the batch)


class _Gathered:
    """What an all-gather build declared: the mesh, the gathered buffer as a distributed tensor, this
    rank's shard as a plain tensor, the CTA index and the thread index."""

    _is_meta_class = True

    def __init__(self, mesh, G, A, cid, tx):
        self.mesh, self.G, self.A, self.cid, self.tx = mesh, G, A, cid, tx


class AllGather:
    """Push this rank's rows to every peer and store tiles at their owner's rows (the module's law);
    ``inner``: the chunked store it stores through; ``sched``: a :class:`GatherOrder`."""

    hands_over = False
    m_maps = ()

    def __init__(self, inner, sched, M, K, N, world, b_major, b_shape, sms, push="sm"):
        if push not in ("sm", "copy_engine"):
            raise ValueError(f"ag_gemm: push must be 'sm' or 'copy_engine', got {push!r}")
        if (push == "sm") != (sched.pieces > 0):
            raise ValueError("ag_gemm: the SM push signals pieces (pieces > 0), the copy engine whole shards (pieces=0)")
        if K % 64:
            raise ValueError(f"ag_gemm: K={K} must be a multiple of 64 (the rows are pushed 64 columns at a time)")
        self.inner, self.sched, self.push_by = inner, sched, push
        self.name = "all-gather" if push == "sm" else "all-gather (copy engine)"
        self.M, self.K, self.N, self.world, self.b_major, self.b_shape, self.sms = M, K, N, world, b_major, b_shape, sms
        self.p_shape = (2 * world * M, K)         # two halves × world slots × M rows
        self.nsig = sched.nsig
        self.smem = inner.smem
        self.unused_params = ("Q_",) + FUSED_PARAMS
        self.producer_regs = PUSH_REGS if push == "sm" else inner.producer_regs
        self.cols = next(c for c in (256, 128, 64) if K % c == 0)
        self.rows = VECTORS // self.cols

    def out_cols(self, N):
        """C's columns: the inner store's (half the GEMM's for SiLU·up)."""
        return self.inner.out_cols(N)

    def inputs(self, *params):
        """No fused operands."""

    def declare(self, A_, B_, C_, P_, P_map, Q_, peers, sig, err, rank_, epoch, timeout_ns, F, cid, tx):
        """The mesh and the distributed signature (A's rows sharded, B's rows of N sharded, C's columns
        sharded), P the gathered buffer the runtime supplies from the symmetric heap."""
        from axe.layout.interop.dtensor import Shard
        world, M, K, N = self.world, self.M, self.K, self.N
        mesh = Ax.mesh(world, peers, sig, err, rank_, epoch, timeout_ns)
        if self.push_by == "sm":
            mesh.alloc(self.nsig, "ag_gemm: a piece of a peer's rows has landed")
        else:
            mesh.copy_before_launch(A_, P_, M, "ag_gemm: a peer's rows have landed (copy engine)")
        Ax.dtensor(A_, (M * world, K), placements=[Shard(0)])
        n_dim = 0 if self.b_major == "col" else 1           # N is B's dim 0 when B is stored N×K
        b_global = tuple(x * (world if d == n_dim else 1) for d, x in enumerate(self.b_shape))
        Ax.dtensor(B_, b_global, placements=[Shard(n_dim)])
        Ax.dtensor(C_, (M * world, self.out_cols(N) * world), placements=[Shard(1)])
        rows = self.p_shape[0]
        G = Ax.dtensor(P_, (world, rows, K), f"S[({world},{rows},{K}):(1@gpuid,{K},1)]", scratch=True)
        self.sched.gathered = Ax.param(P_, tensormap=P_map)
        return _Gathered(mesh, G, Ax.param(A_), cid, tx)

    def begin(self, dist):
        """Nothing to set up."""

    def end(self, dist, wg, leader):
        """Nothing pending."""

    def push(self, dist, wi):
        """Forwarding warp ``wi`` of CTA ``cid``: pieces ``q = cid·FWD_WARPS + wi + t·FWD_WARPS·sms`` of
        the step-major list (step s = 1 … w−1 sends to rank ``r − s``), each copied 64-column blocks at
        a time, fenced at system scope and signalled."""
        sched, world, mesh = self.sched, self.world, dist.mesh
        me = mesh.rank
        per_step = sched.m_tiles * sched.pieces
        items, warps = (world - 1) * per_step, FWD_WARPS * self.sms
        lead = dist.tx % 32 == 0
        with T.serial(-(-items // warps)) as t:
            q = t * warps + dist.cid * FWD_WARPS + wi
            with Ax.guard(q < items):
                peer = (me + world - 1 - q // per_step) % world
                j, piece = q % per_step // sched.pieces, q % sched.pieces
                src = j * sched.bm + piece * PIECE
                dst = sched.slot_row(mesh.epoch, me) + src
                # rolled loops (#pragma unroll 1): unrolled, nvcc keeps several iterations' vectors
                # and offsets live, more than the producer warpgroup's 40 registers hold (spills)
                with T.serial(PIECE // self.rows, unroll=1) as r:
                    with T.serial(self.K // self.cols, unroll=1) as c:
                        r0, c0 = r * self.rows, c * self.cols
                        Ax.copy(dist.G[peer, dst + r0:dst + r0 + self.rows, c0:c0 + self.cols],
                                dist.A[src + r0:src + r0 + self.rows, c0:c0 + self.cols], schedule="vector", batch=BATCH)
                Ax.fence_system()
                T.evaluate(T.cuda.warp_sync())
                with Ax.guard(lead):
                    Ax.signal(sched.flag(me, j, piece), peer)

    def producer_warps(self, dist):
        """Warps 1 … FWD_WARPS of the producer warpgroup push this rank's rows (the SM push)."""
        if self.push_by != "sm":
            return
        for wi in range(FWD_WARPS):
            with Ax.warps(1 + wi, 2 + wi):
                self.push(dist, wi)

    def store(self, acc, out, pool, C, dist, wg, leader, p, n_blk):
        """Block-row p (owner g's row block j) is stored at C's block-row ``g · m_tiles + j``."""
        seg, j = self.sched.segment(p)
        owner = self.sched.owner(dist.mesh.rank, seg)
        self.inner.tile(acc, out, pool, C, wg, leader, owner * self.sched.m_tiles + j, n_blk)
