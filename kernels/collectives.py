"""Collectives written once over Axe layouts: reduce-scatter, all-reduce, all-gather (and put).

Each kernel runs on every rank of a 1-D mesh of ``world`` GPUs.  The operands are declared with
their global shapes and layouts over ``gpuid``; one operator call at the multi-device scope
(``with Ax.devices():``) is the whole collective, and which collective it is follows from the
layouts (see ``axe/backends/cuda/schedules/devices.py``):

- reduce-scatter — the paper's signature: ``X`` of global shape (w, M, N) sharded on dim 0 (each
  rank holds its partial M×N), summed over dim 0 into ``Y`` (M, N) sharded on dim 0;
- all-reduce — the same sum into ``Y`` replicated on every rank;
- all-gather — ``X`` (M, N) sharded on dim 0, copied into ``Y`` (M, N) replicated;
- exchange — put and get at CTA scope: each rank stores its ``X`` into its right neighbour's slot
  of ``Y`` (``Ax.copy(Y[next, rows], X[rows])``: a peer's memory, SM stores over NVLink), signals
  it, waits for its left neighbour's signal, then tells its right neighbour that its own ``Y`` is
  complete and waits to hear the same from its left neighbour (on more than 2 GPUs the left
  neighbour's ``Y`` is written by a third rank), then reads the left neighbour's ``Y`` into ``Z``
  (``Ax.copy(Z[rows], Y[prev, rows])``: SM loads from a peer);
- put_signal — each CTA puts its row block of ``X`` into its right neighbour's ``Y`` with a
  signal (``Ax.copy(Y[next, rows], X[rows], signal=(S, bx))``): NVSHMEM's put-with-signal, built
  for a target declaring ``features=("nvshmem",)``; the receiver's ``S[bx]`` becomes the launch's epoch.

Sources are symmetric (peers read them); the runtime supplies the mesh parameters.
"""

from tvm.script import tirx as T

import axe.lang as Ax

CTAS, THREADS = 132, 512


def _mesh_params(world):
    return dict(signals=4 * CTAS * world)


def make(kind, M, N, world, dtype="bfloat16", ctas=CTAS, threads=THREADS, name=None, **config):
    """The collective ``kind`` ("reduce_scatter", "all_reduce", "all_gather") as an axe Kernel
    for an M×N tensor on ``world`` GPUs (M a multiple of world where a dim is sharded)."""
    if kind == "exchange":
        return _exchange(M, N, world, dtype, ctas, threads, name)
    if kind == "put_signal":
        return _put_signal(M, N, world, dtype, ctas, threads, name)
    if kind not in ("reduce_scatter", "all_reduce", "all_gather"):
        raise ValueError(f"collectives: unknown kind {kind!r}")
    if M % world:
        raise ValueError(f"collectives: M={M} is not a multiple of world={world} (unequal shards)")
    Ms, w = M // world, world
    nsig = 4 * ctas * world
    x_local, y_local = {"reduce_scatter": ((M, N), (Ms, N)), "all_reduce": ((M, N), (M, N)),
                        "all_gather": ((Ms, N), (M, N))}[kind]

    def factory():
        @T.prim_func
        def collective(X_: T.Buffer(x_local, dtype), Y_: T.Buffer(y_local, dtype),
                       peers: T.Buffer((w,), "int64"), sig: T.Buffer((nsig,), "int32"), err: T.Buffer((8,), "int32"),
                       rank: T.int32, epoch: T.int32, timeout_ns: T.int64, mc: T.int64):
            bx, tx = Ax.launch(ctas, threads)
            mesh = Ax.mesh(w, peers, sig, err, rank, epoch, timeout_ns, multicast=mc)
            if kind == "all_gather":
                X = Ax.dtensor(X_, (M, N), f"S[({w},{Ms},{N}):(1@gpuid,{N},1)]", symmetric=True)
                Y = Ax.dtensor(Y_, (M, N), f"S[({M},{N}):({N},1)] + R[{w}:1@gpuid]")
                with Ax.devices():
                    Ax.copy(Y, X, **config)
            else:
                X = Ax.dtensor(X_, (w, M, N), f"S[({w},{M},{N}):(1@gpuid,{N},1)]", symmetric=True, partial_dim=0)
                Y = Ax.dtensor(Y_, (M, N), f"S[({w},{Ms},{N}):(1@gpuid,{N},1)]" if kind == "reduce_scatter"
                               else f"S[({M},{N}):({N},1)] + R[{w}:1@gpuid]")
                with Ax.devices():
                    Ax.reduce(Y, X, "sum", dims=0, **config)
        # the multicast offset is a parameter only where the target declares multicast
        return collective if "multicast" in Ax.current_build().features else Ax.without_params(collective, ("mc",))

    return Ax.Kernel(name or f"{kind}_{dtype}_w{world}", factory, meta={"M": M, "N": N, "world": world, "kind": kind})


def _exchange(M, N, world, dtype, ctas, threads, name):
    if M % ctas:
        raise ValueError(f"collectives: exchange needs M={M} to be a multiple of ctas={ctas}")
    w, rows = world, M // ctas
    nsig = 2 * ctas

    def factory():
        @T.prim_func
        def exchange(X_: T.Buffer((M, N), dtype), Y_: T.Buffer((M, N), dtype), Z_: T.Buffer((M, N), dtype),
                     peers: T.Buffer((w,), "int64"), sig: T.Buffer((nsig,), "int32"), err: T.Buffer((8,), "int32"),
                     rank: T.int32, epoch: T.int32, timeout_ns: T.int64):
            bx, tx = Ax.launch(ctas, threads)
            mesh = Ax.mesh(w, peers, sig, err, rank, epoch, timeout_ns)
            mesh.alloc(nsig, "exchange: a CTA's put has landed (then: the sender's own Y is complete)")
            X = Ax.param(X_)
            Z = Ax.param(Z_)
            Y = Ax.dtensor(Y_, (w, M, N), f"S[({w},{M},{N}):(1@gpuid,{N},1)]", symmetric=True)
            nxt = (mesh.rank + 1) % w
            prv = (mesh.rank + w - 1) % w
            Ax.copy(Y[nxt, bx * rows:(bx + 1) * rows, :], X[bx * rows:(bx + 1) * rows, :])    # put
            Ax.fence_system()
            Ax.sync()
            if tx == 0:
                Ax.signal(bx, nxt)
                Ax.wait(bx, prv)              # my Y holds my left neighbour's rows
                Ax.signal(ctas + bx, nxt)     # ... which my right neighbour may now read
                Ax.wait(ctas + bx, prv)       # my left neighbour's Y holds its left neighbour's rows
            Ax.sync()
            Ax.copy(Z[bx * rows:(bx + 1) * rows, :], Y[prv, bx * rows:(bx + 1) * rows, :])    # get
        return exchange

    return Ax.Kernel(name or f"exchange_{dtype}_w{world}", factory, meta={"M": M, "N": N, "world": world, "kind": "exchange"})


def _put_signal(M, N, world, dtype, ctas, threads, name):
    if M % ctas:
        raise ValueError(f"collectives: put_signal needs M={M} to be a multiple of ctas={ctas}")
    w, rows = world, M // ctas

    def factory():
        @T.prim_func
        def put_signal(X_: T.Buffer((M, N), dtype), Y_: T.Buffer((M, N), dtype), S_: T.Buffer((ctas,), "uint64"),
                       peers: T.Buffer((w,), "int64"), sig: T.Buffer((ctas,), "int32"),
                       err: T.Buffer((8,), "int32"), rank: T.int32, epoch: T.int32, timeout_ns: T.int64):
            bx, tx = Ax.launch(ctas, threads)
            mesh = Ax.mesh(w, peers, sig, err, rank, epoch, timeout_ns)
            X = Ax.param(X_)
            Y = Ax.dtensor(Y_, (w, M, N), f"S[({w},{M},{N}):(1@gpuid,{N},1)]", symmetric=True)
            S = Ax.dtensor(S_, (w, ctas), f"S[({w},{ctas}):(1@gpuid,1)]", symmetric=True)   # noqa: F841 - declares the signature
            Ax.copy(Y[(mesh.rank + 1) % w, bx * rows:(bx + 1) * rows, :], X[bx * rows:(bx + 1) * rows, :],
                    signal=(S_, bx))
        return put_signal

    return Ax.Kernel(name or f"put_signal_{dtype}_w{world}", factory,
                     meta={"M": M, "N": N, "world": world, "kind": "put_signal"})


def build(kind, M, N, world, dtype="bfloat16", target="sm_90a", features=(), **kw):
    """Build :func:`make`'s kernel into an artifact."""
    return Ax.compile_kernel(make(kind, M, N, world, dtype, **kw), target, features=features)


reduce_scatter_bf16 = make("reduce_scatter", 4096, 4096, 2, name="reduce_scatter_bf16")
