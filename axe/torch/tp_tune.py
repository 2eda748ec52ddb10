"""The measured choice of a tensor-parallel op's path: ``axe tune tp``'s table and loop.

:mod:`axe.torch.tp`'s two ops each run one of three paths (:data:`PATHS`): ``"fused"`` (axe's
fused kernel, where it is built for the shape), ``"nccl+axe"`` (NCCL's collective and axe's own
GEMM, ``torch.ops.axe.gemm``) and ``"nccl+cublas"`` (NCCL's collective and ``torch.mm``, the
fallback Triton-distributed takes too).  ``axe tune tp run``, under torchrun on ``world`` GPUs,
times every path that runs at a bucket's sample row count in interleaved rounds (the median over
at least three rounds on each rank, then the largest over the ranks: a collective is as slow as
its slowest rank, and every rank then holds the same figures, so every rank picks the same path)
and rank 0 writes them to ``<cache>/tune/tp.json`` beside the artifacts (:func:`record`), keyed by
device name, world size, op, dtype, layout of B, global N × K and M's bucket (:func:`key`; the
buckets are ``torch.ops.axe.gemm``'s, :mod:`kernels.gemm_select`: the non-fused path's GEMM has the
global M rows, so a bucket's measured path runs the GEMM configuration that bucket's rows get).

A call reads the table (:func:`lookup`) and takes the fastest measured path that runs at its own M
(:func:`decide`: the fused kernel only where it fits); without an entry for its device and world
the op falls back to :func:`axe.torch.tp.choose`'s heuristic.  A new table takes effect after
:func:`axe.torch.tune.reload`.  The loop's timers are a parameter (:func:`run`), so the selection is
tested with fake timers on a CPU; :func:`axe.torch.tp.path_timers` times the ops themselves.
"""

from __future__ import annotations

from pathlib import Path

from . import tune

__all__ = ["PATHS", "TABLE", "key", "bucket", "sample_rows", "table", "lookup", "decide", "entry", "agree", "run"]

#: the paths of a tensor-parallel op, in the order a tie is broken
PATHS = ("fused", "nccl+axe", "nccl+cublas")
#: the table, under the cache folder and each shipped folder
TABLE = Path("tune") / "tp.json"
#: the rows the unbounded last bucket is measured at
UNBOUNDED_ROWS = 16384
_READ = tune.memo()


def key(device: str, world: int, op: str, dtype: str, layout: str, N: int, K: int, bound) -> str:
    """The table key of a bucket of global rows (``bound`` None: the unbounded last bucket)."""
    return f"{device}|w{world}|{op}|{dtype}|{layout}|{N}x{K}|{'inf' if bound is None else bound}"


def bucket(M: int):
    """The bucket bound of M global rows: ``torch.ops.axe.gemm``'s (:func:`kernels.gemm_select.bucket`)."""
    return tune.select().bucket(M)


def sample_rows(bound) -> int:
    """The global rows a bucket is measured at: its bound (a multiple of every power-of-two world
    size up to 16), :data:`UNBOUNDED_ROWS` for the unbounded one."""
    return UNBOUNDED_ROWS if bound is None else bound


def table() -> dict:
    """Every tensor-parallel entry known here: the cache's table, then the shipped folders' (read
    once; :func:`axe.torch.tune.reload` reads again)."""
    picks = _READ.get("picks")
    if picks is None:
        picks = _READ["picks"] = tune.read_tables(TABLE)
    return picks


def lookup(device: str, world: int, op: str, dtype: str, layout: str, N: int, K: int, M: int) -> dict | None:
    """The entry (:func:`entry`) of M's bucket for this device and world, or None."""
    return table().get(key(device, world, op, dtype, layout, N, K, bucket(M)))


def decide(ms: dict) -> str:
    """The path of ``ms`` (``{path: ms}``) with the least time; a tie goes to the earlier path of
    :data:`PATHS`.  Law: ``ms[decide(ms)] <= ms[p]`` for every ``p``."""
    unknown = set(ms) - set(PATHS)
    if not ms or unknown:
        raise ValueError(f"axe tune tp: the measured paths must be a non-empty subset of {PATHS}, got {sorted(ms)}")
    return min(ms, key=lambda p: (ms[p], PATHS.index(p)))


def entry(ms: dict, rows, rounds: int) -> dict:
    """A table entry: the paths' times (``{path: ms}``, each a median over ``rounds`` interleaved
    rounds), the rows they were measured at and the pick (:func:`decide`).  Fewer than three rounds
    are refused: no pick rests on one timing."""
    if rounds < 3:
        raise ValueError(f"axe tune tp: rounds must be at least 3, got {rounds}")
    return {"pick": decide(ms), "ms": dict(ms), "rows": list(rows), "rounds": rounds}


def agree(ms: dict) -> dict:
    """``ms`` made the same on every rank of the default process group: each path's largest time
    over the ranks (identical figures give identical picks).  The ranks must have timed the same
    paths; without a process group ``ms`` is returned as it is."""
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        return dict(ms)
    names = [None] * dist.get_world_size()
    dist.all_gather_object(names, sorted(ms))
    if any(n != names[0] for n in names):
        raise RuntimeError(f"axe tune tp: the ranks timed different paths: {names}")
    order = sorted(ms)
    t = torch.tensor([float(ms[p]) for p in order], dtype=torch.float64,
                     device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return dict(zip(order, t.tolist()))


def run(op: str, shapes, world: int, device: str, timers, dtype="bfloat16", layout="col", buckets=None, rounds=7,
        out=None, log=print, rank=0) -> dict:
    """Measure every path of ``op`` at each bucket's :func:`sample_rows` for every global (N, K) of
    ``shapes`` and record the entries (rank 0 writes the table at ``out``, default the cache's).
    ``timers(op, M, N, K, dtype, layout)`` gives ``{path: a call returning ms}`` for the paths that
    run there (every rank the same); each path's figure is its median over ``rounds`` interleaved
    rounds (:func:`axe.torch.tune.measure`), made the same on every rank by :func:`agree`.  Returns
    ``{key: entry}``."""
    picks = {}
    for N, K in shapes:
        for bound in buckets or tune.select().BUCKETS:
            M = sample_rows(bound)
            timed = timers(op, M, N, K, dtype, layout)
            if not timed:
                raise RuntimeError(f"axe tune tp: {op} {M}x{N}x{K}: no path to time")
            e = entry(agree(tune.measure(timed, rounds)), [M], rounds)
            picks[key(device, world, op, dtype, layout, N, K, bound)] = e
            log(f"axe tune tp: {op} {N}x{K} {dtype} w{world} bucket {bound} (M={M}): {e['pick']} ("
                + ", ".join(f"{p} {e['ms'][p] * 1e3:.1f} us" for p in PATHS if p in e["ms"]) + ")")
    if rank == 0:
        tune.record(picks, out, TABLE)
    return picks
