"""Tensor-parallel GEMMs with the argument conventions of PyTorch's symmetric-memory fused ops
(``torch.ops.symm_mem.fused_all_gather_matmul`` and ``fused_matmul_reduce_scatter``), usable where
PyTorch's async tensor parallelism would call them:

- :func:`fused_all_gather_matmul` ``(A_shard, Bs, gather_dim, group_name)`` → ``(A, [A @ B for B in
  Bs])``: A's rows gathered from every rank of the group, times each ``B`` (K × N/w, this rank's
  columns — the transpose of its ``nn.Linear`` weight shard, as PyTorch passes it);
- :func:`fused_matmul_reduce_scatter` ``(A, B, reduce_op, scatter_dim, group_name)`` → this rank's
  rows of ``Σ_ranks A @ B`` (A: M × K/w, B: K/w × N).

Each call **chooses per shape** (:func:`choose`, the reason in :func:`explain`) one of three paths
(:data:`axe.torch.tp_tune.PATHS`): ``"fused"`` — axe's fused kernel (:mod:`kernels.ag_gemm` /
:mod:`kernels.gemm_rs` through :class:`axe.runtime.distributed.DistKernel` on the group's symmetric
heap), where it is built for the shape; ``"nccl+axe"`` — NCCL's collective and axe's own GEMM
(``torch.ops.axe.gemm``, its configuration picked by M's bucket); ``"nccl+cublas"`` — NCCL's
collective and ``torch.mm``.  Where ``axe tune tp`` has measured the shape's bucket on this GPU and
world size (:mod:`axe.torch.tp_tune`), the fastest measured path that runs at the call's M is
taken, so the op is never slower than mm + NCCL by its own measurement; without a measurement the
heuristic takes the fused kernel where it fits and M ≥ :data:`FUSED_MIN_ROWS`, else NCCL + axe's
GEMM (2026-11-26, bf16, ``benchmarks/ag_gemm.py`` and ``gemm_rs.py`` on 2×H200 and 4×H200: at
M = 8192 the fused kernels beat NCCL + mm on most weight shapes, at M ≤ 2048 the non-fused path is
the faster of axe's two).  ``path=`` forces a path (what ``axe tune tp`` times).

The fused all-gather does not materialize the gathered A (its rows live in the kernel's staging
buffer in two alternating halves, and its own rows are read in place): ``return_A=True`` (the
symm_mem convention) gathers it with NCCL beside the kernel; pass ``return_A=False`` to skip that.
Only ``gather_dim=0``, ``scatter_dim=0`` and ``reduce_op="sum"`` are taken; anything else is
refused naming the argument.

With DTensors in and out, the two halves of a sequence-parallel MLP are
:func:`all_gather_linear` (``x`` Shard(0) rows, a column-parallel ``nn.Linear`` weight Shard(0) →
``x @ weightᵀ`` Shard(1)) and :func:`linear_reduce_scatter` (``x`` Shard(1), a row-parallel weight
Shard(1) → Shard(0)), on a one-dimensional device mesh; the placements are checked and named in
every refusal.  The artifacts are built (or found) by :class:`axe.torch.jit.JitKernel`
like every axe op's.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import tp_tune, tune
from .jit import JitKernel
from .ops import ROOT, _DTYPES, _device_name

__all__ = ["fused_all_gather_matmul", "fused_matmul_reduce_scatter", "all_gather_linear", "linear_reduce_scatter",
           "choose", "explain", "Choice", "FUSED_MIN_ROWS", "FUSED_KERNEL", "fused_fits", "fused_spec", "local_gemm",
           "paths", "plan", "path_timers", "add_commands"]

#: rows (global M) from which the heuristic chooses the fused kernels (see the module docstring)
FUSED_MIN_ROWS = 4096
OPS = ("all_gather_matmul", "matmul_reduce_scatter")
_CHOICES = tune.memo()


@dataclass(frozen=True)
class Choice:
    """What a call runs: ``path`` (one of :data:`axe.torch.tp_tune.PATHS`), why, the ``source`` that
    decided (``"tuned"``: ``axe tune tp``'s table; ``"heuristic"``) and, tuned, the measured
    ``(path, ms)`` pairs."""

    path: str
    why: str
    source: str = "heuristic"
    ms: tuple = ()


def fused_fits(op: str, M: int, N: int, K: int, world: int) -> str | None:
    """None where ``op``'s fused kernel is built for the global problem, else why not (the kernel's
    own rule, :mod:`kernels.tp_shapes`)."""
    if op not in OPS:
        raise ValueError(f"axe.torch.tp: op must be 'all_gather_matmul' or 'matmul_reduce_scatter', got {op!r}")
    shapes = _shapes()
    return (shapes.ag_gemm_fits if op == "all_gather_matmul" else shapes.gemm_rs_fits)(M, N, K, world)


def choose(op: str, M: int, N: int, K: int, world: int, dtype: str = "bfloat16", layout: str = "col",
           device: str | None = None) -> Choice:
    """The path for ``op`` (``"all_gather_matmul"`` or ``"matmul_reduce_scatter"``) on the global
    problem M × N × K over ``world`` ranks, B stored ``layout``, on the GPU named ``device``: the
    fastest path ``axe tune tp`` measured in M's bucket for that device and world among those that
    run at M (the fused kernel only where it fits), else the heuristic: fused where the kernel
    fits and ``M ≥ FUSED_MIN_ROWS``, else NCCL + axe's GEMM.  Memoized until
    :func:`axe.torch.tune.reload`."""
    memo = (op, M, N, K, world, dtype, layout, device)
    c = _CHOICES.get(memo)
    if c is None:
        c = _CHOICES[memo] = _choose(op, M, N, K, world, dtype, layout, device)
    return c


def _choose(op, M, N, K, world, dtype, layout, device) -> Choice:
    unfit = fused_fits(op, M, N, K, world)
    tuned = tp_tune.lookup(device, world, op, dtype, layout, N, K, M) if device else None
    if tuned:
        ms = {p: tuned["ms"][p] for p in tp_tune.PATHS if p in tuned["ms"]}
        runs = {p: v for p, v in ms.items() if not (p == "fused" and unfit)}
        if runs:
            figures = ", ".join(f"{p} {v:.3f} ms" for p, v in ms.items())
            left = f"; fused left out at M={M}: {unfit}" if unfit and "fused" in ms else ""
            rows = "/".join(map(str, tuned["rows"]))
            return Choice(tp_tune.decide(runs), f"measured on {device} x{world} at M={rows} (bucket "
                          f"{tp_tune.bucket(M)}): {figures}{left}", "tuned", tuple(ms.items()))
    none = f"no tuned entry for {device} x{world}; " if device else ""
    if unfit:
        return Choice("nccl+axe", f"{none}the fused kernel does not fit: {unfit}")
    if M < FUSED_MIN_ROWS:
        return Choice("nccl+axe", f"{none}M={M} < {FUSED_MIN_ROWS}: NCCL + axe's GEMM measured faster at these rows")
    return Choice("fused", f"{none}M={M} >= {FUSED_MIN_ROWS} and the kernel fits: the fused kernel measured faster")


def explain(op: str, M: int, N: int, K: int, world: int, dtype: str = "bfloat16", layout: str = "col",
            device: str | None = None) -> str:
    """One line: which path :func:`choose` takes for the problem, which source decided, and why
    (tuned: every measured path's time)."""
    c = choose(op, M, N, K, world, dtype, layout, device)
    return f"axe {op} {M}x{N}x{K} on {world} GPUs: {c.path} ({c.source}: {c.why})"


def _shapes():
    """:mod:`kernels.tp_shapes` (TVM-free), found like every kernel module the ops name."""
    import importlib
    import sys
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    return importlib.import_module("kernels.tp_shapes")


_HEAPS: dict = {}
_KERNELS: dict = {}


def _group(group_name):
    import torch.distributed as dist
    if group_name is None:
        return dist.group.WORLD
    if not isinstance(group_name, str):
        return group_name
    from torch.distributed.distributed_c10d import _resolve_process_group
    return _resolve_process_group(group_name)


def _heap(group):
    """The group's symmetric heap (one per process group, opened on first use)."""
    h = _HEAPS.get(id(group))
    if h is None:
        from axe.runtime.symmetric import SymmetricHeap
        h = _HEAPS[id(group)] = SymmetricHeap(group=group)
    return h


#: the factory of each op's fused kernel (what its cache entries and plan lines name)
FUSED_KERNEL = {"all_gather_matmul": "kernels.ag_gemm:make", "matmul_reduce_scatter": "kernels.gemm_rs:make"}


def fused_spec(op: str, M: int, N: int, K: int, world: int, dtype: str, b_major: str) -> dict:
    """The specialization (factory keywords) of ``op``'s fused kernel for the global problem."""
    return {"M": M, "N": N, "K": K, "world": world, "dtype": dtype, "b_major": b_major}


def local_gemm(op: str, N: int, K: int, world: int) -> tuple:
    """(N, K) of the non-fused path's GEMM on one rank (its rows are the global M): the all-gather's
    columns are split, the reduce-scatter's reduction."""
    return (N // world, K) if op == "all_gather_matmul" else (N, K // world)


def _fused(op: str, group):
    """The JitKernel of ``op``'s fused kernel, loading its artifacts as DistKernels on the group's heap."""
    k = _KERNELS.get((op, id(group)))
    if k is None:
        from axe.runtime.distributed import DistKernel
        heap = _heap(group)
        # the calls name the specialization themselves (JitKernel.load), so the spec function is unused
        k = _KERNELS[(op, id(group))] = JitKernel(FUSED_KERNEL[op], lambda *a: {}, path=ROOT,
                                                  loader=lambda p: DistKernel(p, heap))
    return k


def _b_layout(B, what):
    """``(matrix as the kernel takes it, b_major)`` for a K × N operand: ``"col"`` where B is the
    transpose of a contiguous N × K weight, ``"row"`` where B itself is contiguous."""
    if B.t().is_contiguous():
        return B.t(), "col"
    if B.is_contiguous():
        return B, "row"
    raise ValueError(f"axe.torch.tp: {what} must be contiguous or the transpose of a contiguous matrix "
                     f"(got strides {tuple(B.stride())})")


def _check(name, value, allowed):
    if value not in allowed:
        raise ValueError(f"axe.torch.tp: {name}={value!r} is not supported (only {', '.join(map(repr, allowed))})")


def _path(path, op, M, N, K, world, A, b_major) -> str:
    """``path`` if forced (checked), else :func:`choose`'s for the call's dtype, layout and GPU."""
    if path is not None:
        _check("path", path, tp_tune.PATHS)
        return path
    return choose(op, M, N, K, world, _DTYPES.get(A.dtype, str(A.dtype)), b_major, _device_name(A.device)).path


def fused_all_gather_matmul(A_shard, Bs, gather_dim=0, group_name=None, *, return_A=True, path=None):
    """``(A, [A @ B for B in Bs])`` with ``A = all_gather(A_shard)`` along dim 0 over the group (the
    symm_mem convention; each B is K × N/w).  See the module docstring for the choice, ``path`` and
    ``return_A``."""
    import torch
    import torch.distributed as dist
    _check("gather_dim", gather_dim, (0,))
    group = _group(group_name)
    w = dist.get_world_size(group)
    m, K = A_shard.shape
    M = m * w
    outs, full = [], None

    def gathered():
        nonlocal full
        if full is None:
            full = A_shard.new_empty((M, K))
            dist.all_gather_into_tensor(full, A_shard.contiguous(), group=group)
        return full
    for B in Bs:
        Bk, b_major = _b_layout(B, "B")
        N = int(B.shape[1])
        how = _path(path, "all_gather_matmul", M, N * w, K, w, A_shard, b_major)
        if how == "fused":
            k = _fused("all_gather_matmul", group)
            C = A_shard.new_empty((M, N))
            k.load(A_shard.device, fused_spec("all_gather_matmul", M, N * w, K, w, _DTYPES[A_shard.dtype], b_major))(
                A_shard.contiguous(), Bk, C)
            outs.append(C)
        elif how == "nccl+axe":
            outs.append(torch.ops.axe.gemm(gathered(), Bk, b_major == "col"))
        else:
            outs.append(torch.mm(gathered(), B))
    return (gathered() if return_A else None), outs


def fused_matmul_reduce_scatter(A, B, reduce_op="sum", scatter_dim=0, group_name=None, *, path=None):
    """This rank's rows of ``Σ_ranks A @ B`` (A: M × K/w, B: K/w × N; the symm_mem convention); see
    the module docstring for the choice and ``path``."""
    import torch
    import torch.distributed as dist
    _check("reduce_op", reduce_op, ("sum",))
    _check("scatter_dim", scatter_dim, (0,))
    group = _group(group_name)
    w = dist.get_world_size(group)
    M, kl = A.shape
    Bk, b_major = _b_layout(B, "B")
    N = int(B.shape[1])
    out = A.new_empty((M // w, N))
    how = _path(path, "matmul_reduce_scatter", M, N, kl * w, w, A, b_major)
    if how == "fused":
        k = _fused("matmul_reduce_scatter", group)
        k.load(A.device, fused_spec("matmul_reduce_scatter", M, N, kl * w, w, _DTYPES[A.dtype], b_major))(
            A.contiguous(), Bk, out)
        return out
    P = torch.ops.axe.gemm(A.contiguous(), Bk, b_major == "col") if how == "nccl+axe" else torch.mm(A, B)
    dist.reduce_scatter_tensor(out, P, group=group)
    return out


def _placed(name, t, want):
    """``t``'s local tensor and mesh, after checking that ``t`` is a DTensor on a one-dimensional mesh
    placed as ``want`` (a ``Shard`` dim); the refusal names the argument and what it got."""
    from torch.distributed.tensor import DTensor, Shard
    if not isinstance(t, DTensor):
        raise TypeError(f"axe.torch.tp: {name} must be a DTensor placed (Shard({want}),), got {type(t).__name__}")
    if t.device_mesh.ndim != 1 or tuple(t.placements) != (Shard(want),):
        raise ValueError(f"axe.torch.tp: {name} must be placed (Shard({want}),) on a 1-D device mesh, got "
                         f"{tuple(t.placements)} on a mesh of shape {tuple(t.device_mesh.shape)}")
    return t.to_local(), t.device_mesh


def _dtensor(local, mesh, dim, shape):
    """``local`` as this rank's Shard(dim) part of a DTensor of global ``shape`` on ``mesh``."""
    import torch
    from torch.distributed.tensor import DTensor, Shard
    return DTensor.from_local(local, mesh, (Shard(dim),), run_check=False, shape=torch.Size(shape),
                              stride=torch.empty(shape, device="meta").stride())


def _same_mesh(a, b):
    if a != b:
        raise ValueError("axe.torch.tp: x and weight must live on the same device mesh")


def all_gather_linear(x, weight):
    """``x @ weightᵀ`` of a sequence-parallel ``x`` (DTensor M × K placed Shard(0)) and a
    column-parallel ``nn.Linear`` weight (DTensor N × K placed Shard(0)): a DTensor M × N placed
    Shard(1), computed by :func:`fused_all_gather_matmul` on the mesh's group (the fused kernel or
    NCCL + axe's GEMM, as :func:`choose` says)."""
    xl, mesh = _placed("x", x, 0)
    wl, wmesh = _placed("weight", weight, 0)
    _same_mesh(mesh, wmesh)
    _, (out,) = fused_all_gather_matmul(xl, [wl.t()], 0, mesh.get_group(), return_A=False)
    return _dtensor(out, mesh, 1, (x.shape[0], weight.shape[0]))


def linear_reduce_scatter(x, weight):
    """``x @ weightᵀ`` of ``x`` (DTensor M × K placed Shard(1): each rank holds a slice of K) and a
    row-parallel ``nn.Linear`` weight (DTensor N × K placed Shard(1)): a DTensor M × N placed
    Shard(0) (the sum over ranks, reduce-scattered by rows), computed by
    :func:`fused_matmul_reduce_scatter` on the mesh's group."""
    xl, mesh = _placed("x", x, 1)
    wl, wmesh = _placed("weight", weight, 1)
    _same_mesh(mesh, wmesh)
    out = fused_matmul_reduce_scatter(xl, wl.t(), "sum", 0, mesh.get_group())
    return _dtensor(out, mesh, 0, (x.shape[0], weight.shape[0]))


def paths(op: str, M: int, N: int, K: int, world: int) -> tuple:
    """The paths of ``op`` that run the global problem: all three where the fused kernel fits, else
    the two non-fused ones."""
    return tuple(p for p in tp_tune.PATHS if p != "fused" or fused_fits(op, M, N, K, world) is None)


def plan(op: str, shapes, world: int, dtype="bfloat16", layout="col", buckets=None, target="sm_90a",
         device: str = "") -> list[str]:
    """``axe cache build --spec-file`` lines for ``axe tune tp run``: at each bucket's sample rows,
    ``op``'s fused kernel where it fits, and the ``torch.ops.axe.gemm`` artifact of the non-fused
    path (the configuration M's bucket gets on the GPU named ``device``: its measured GEMM pick if
    the GEMM table here holds one, else the heuristic's; ``""`` names none)."""
    lines = []
    for N, K in shapes:
        n, k = local_gemm(op, N, K, world)
        for bound in buckets or tune.select().BUCKETS:
            M = tp_tune.sample_rows(bound)
            todo = [(tune.KERNEL, tune.spec_for(device, n, k, dtype, layout, M))]
            if "fused" in paths(op, M, N, K, world):
                todo.append((FUSED_KERNEL[op], fused_spec(op, M, N, K, world, dtype, layout)))
            for factory, spec in todo:
                line = tune.plan_line(factory, target, spec)
                if line not in lines:
                    lines.append(line)
    return lines


def path_timers(op: str, M: int, N: int, K: int, dtype: str, layout: str, group=None, iters: int = 10,
                warmup: int = 3) -> dict:
    """``{path: a call returning ms}`` for every path of ``op`` that runs the global problem (GPU,
    under a process group): random operands of this rank's shapes (B stored ``layout``), each path
    warmed up, then each call of a timer a block of ``iters`` back-to-back op calls with the path
    forced, after a barrier of the group (:func:`axe.torch.timing.burst_ms`): what a call of the op
    costs on that path, collective included."""
    import torch
    import torch.distributed as dist

    from .timing import burst_ms
    grp = _group(group)
    w = dist.get_world_size(grp)
    if M % w:
        raise ValueError(f"axe tune tp: M={M} must be a multiple of the world size {w}")
    torch.manual_seed(1000 + dist.get_rank(grp))
    tdt = getattr(torch, dtype)
    n, k = local_gemm(op, N, K, w)
    A = torch.randn(M // w if op == "all_gather_matmul" else M, k, device="cuda").mul_(0.5).to(tdt)
    W = torch.randn((n, k) if layout == "col" else (k, n), device="cuda").mul_(k ** -0.5).to(tdt)
    B = W.t() if layout == "col" else W                  # K x N as the op takes it

    def call(p):
        if op == "all_gather_matmul":
            return lambda: fused_all_gather_matmul(A, [B], 0, grp, return_A=False, path=p)
        return lambda: fused_matmul_reduce_scatter(A, B, "sum", 0, grp, path=p)
    timers = {}
    for p in paths(op, M, N, K, w):
        fn = call(p)
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        timers[p] = lambda fn=fn: burst_ms(torch, fn, calls=iters, blocks=1, warmup=0,
                                           before=lambda: dist.barrier(group=grp))
    return timers


def _tune_main(args) -> int:
    """``axe tune tp plan`` (prints the build lines) or ``run`` (under torchrun: measures and records)."""
    buckets = None if args.buckets is None else [None if b == "inf" else int(b) for b in args.buckets]
    if args.action == "plan":
        print("\n".join(plan(args.op, args.shapes, args.world, args.dtype, args.layout, buckets, args.target,
                             args.device or "")))
        return 0
    import datetime
    import os

    import torch
    import torch.distributed as dist

    from axe.runtime.symmetric import disable_multicast_env
    disable_multicast_env()             # before NCCL starts: NVLink multicast stays off
    started = not dist.is_initialized()
    if started:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300), device_id=torch.device("cuda", local))
    try:
        rank = dist.get_rank()
        tp_tune.run(args.op, args.shapes, dist.get_world_size(), torch.cuda.get_device_name(),
                    lambda *a: path_timers(*a, iters=args.iters), args.dtype, args.layout, buckets, args.rounds,
                    args.out, print if rank == 0 else (lambda *_: None), rank)
        dist.barrier()
    finally:
        if started:
            dist.destroy_process_group()
    return 0


def _add_tune_command(subparsers) -> None:
    """``axe tune tp {plan, run}`` under ``axe tune`` (:func:`axe.torch.tune.subjects`)."""
    g = tune.subjects(subparsers).add_parser(
        "tp", help="the tensor-parallel ops' path per shape (plan: the builds; run: measure, under torchrun)")
    g.add_argument("action", choices=("plan", "run"))
    g.add_argument("--op", required=True, choices=OPS)
    g.add_argument("--shapes", nargs="+", required=True, type=tune._shape,
                   help="global weight shapes NxK, as choose() takes them (C = A·Bᵀ for B stored N x K)")
    g.add_argument("--world", type=int, default=2, help="GPUs (plan only; run takes torchrun's)")
    g.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    g.add_argument("--layout", default="col", choices=("row", "col"), help="B stored KxN (row) or NxK (col)")
    g.add_argument("--buckets", nargs="*", help="bucket bounds of global M (default all; 'inf' for the last)")
    g.add_argument("--target", default="sm_90a")
    g.add_argument("--device", help="plan: the GPU whose measured GEMM picks the non-fused GEMM's builds follow")
    g.add_argument("--rounds", type=int, default=7, help="interleaved rounds (at least 3)")
    g.add_argument("--iters", type=int, default=10, help="op calls per timed block")
    g.add_argument("--out", help="the table to write (default <cache>/tune/tp.json)")
    g.set_defaults(func=_tune_main)


def _explain_command(a) -> None:
    device = a.device
    if device is None:
        import torch
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    print(explain(a.op, a.M, a.N, a.K, a.world, a.dtype, a.layout, device))


def add_commands(subparsers) -> None:
    """``axe tp OP M N K --world W``: which path a call of ``OP`` takes for the global problem, which
    source decided and why; and ``axe tune tp``."""
    p = subparsers.add_parser("tp", help="which path axe.torch.tp takes for a tensor-parallel GEMM, and why")
    p.add_argument("op", choices=OPS)
    p.add_argument("M", type=int, help="global rows")
    p.add_argument("N", type=int, help="global columns (all ranks')")
    p.add_argument("K", type=int, help="global reduction length")
    p.add_argument("--world", type=int, default=2, help="GPUs in the group (default 2)")
    p.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    p.add_argument("--layout", default="col", choices=("row", "col"), help="B stored KxN (row) or NxK (col)")
    p.add_argument("--device", help="the GPU name whose tuned table is read (default this machine's GPU; none: "
                                    "the heuristic)")
    p.set_defaults(func=_explain_command)
    _add_tune_command(subparsers)
