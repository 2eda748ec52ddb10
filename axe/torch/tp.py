"""Tensor-parallel GEMMs with the argument conventions of PyTorch's symmetric-memory fused ops
(``torch.ops.symm_mem.fused_all_gather_matmul`` and ``fused_matmul_reduce_scatter``), usable where
PyTorch's async tensor parallelism would call them:

- :func:`fused_all_gather_matmul` ``(A_shard, Bs, gather_dim, group_name)`` → ``(A, [A @ B for B in
  Bs])``: A's rows gathered from every rank of the group, times each ``B`` (K × N/w, this rank's
  columns — the transpose of its ``nn.Linear`` weight shard, as PyTorch passes it);
- :func:`fused_matmul_reduce_scatter` ``(A, B, reduce_op, scatter_dim, group_name)`` → this rank's
  rows of ``Σ_ranks A @ B`` (A: M × K/w, B: K/w × N).

Each call **chooses per shape** (:func:`choose`, the reason in :func:`explain`): axe's fused kernel
(:mod:`kernels.ag_gemm` / :mod:`kernels.gemm_rs` through :class:`axe.runtime.distributed.DistKernel`
on the group's symmetric heap) where it is built for the shape and M ≥ :data:`FUSED_MIN_ROWS`, else
the non-fused path — NCCL's collective and axe's own GEMM (``torch.ops.axe.gemm``, its
configuration picked by M's bucket).  The threshold is measured, not assumed (2026-11-26, bf16,
``benchmarks/ag_gemm.py`` and ``gemm_rs.py`` on 2×H200 and 4×H200): at M = 8192 the fused kernels
beat NCCL + mm on 8 of 8 (all-gather) and 7–8 of 8 (reduce-scatter) weight shapes, at M ≤ 2048
the non-fused path is the faster of axe's two on every shape.

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

from .jit import JitKernel
from .ops import ROOT, _DTYPES

__all__ = ["fused_all_gather_matmul", "fused_matmul_reduce_scatter", "all_gather_linear", "linear_reduce_scatter",
           "choose", "explain", "Choice", "FUSED_MIN_ROWS", "add_commands"]

#: rows (global M) from which the fused kernels are chosen (see the module docstring)
FUSED_MIN_ROWS = 4096


@dataclass(frozen=True)
class Choice:
    """What a call runs: ``path`` ``"fused"`` or ``"nccl"`` (NCCL + axe's GEMM), and why."""

    path: str
    why: str


def choose(op: str, M: int, N: int, K: int, world: int) -> Choice:
    """The path for ``op`` (``"all_gather_matmul"`` or ``"matmul_reduce_scatter"``) on the global
    problem M × N × K over ``world`` ranks: fused where the kernel is built for the shape (its own
    ``fits`` condition) and ``M ≥ FUSED_MIN_ROWS``."""
    if op not in ("all_gather_matmul", "matmul_reduce_scatter"):
        raise ValueError(f"axe.torch.tp.choose: op must be 'all_gather_matmul' or 'matmul_reduce_scatter', got {op!r}")
    shapes = _shapes()
    why = (shapes.ag_gemm_fits if op == "all_gather_matmul" else shapes.gemm_rs_fits)(M, N, K, world)
    if why:
        return Choice("nccl", f"the fused kernel does not fit: {why}")
    if M < FUSED_MIN_ROWS:
        return Choice("nccl", f"M={M} < {FUSED_MIN_ROWS}: NCCL + axe's GEMM measured faster at these rows")
    return Choice("fused", f"M={M} >= {FUSED_MIN_ROWS} and the kernel fits: the fused kernel measured faster")


def explain(op: str, M: int, N: int, K: int, world: int) -> str:
    """One line: which path :func:`choose` takes for the problem, and why."""
    c = choose(op, M, N, K, world)
    return f"axe {op} {M}x{N}x{K} on {world} GPUs: {c.path} ({c.why})"


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


def _fused(kind: str, group):
    """The JitKernel of a fused kernel, loading its artifacts as DistKernels on the group's heap."""
    k = _KERNELS.get((kind, id(group)))
    if k is None:
        from axe.runtime.distributed import DistKernel
        heap = _heap(group)
        # the calls name the specialization themselves (JitKernel.load), so the spec function is unused
        k = _KERNELS[(kind, id(group))] = JitKernel(f"kernels.{kind}:make", lambda *a: {}, path=ROOT,
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


def fused_all_gather_matmul(A_shard, Bs, gather_dim=0, group_name=None, *, return_A=True):
    """``(A, [A @ B for B in Bs])`` with ``A = all_gather(A_shard)`` along dim 0 over the group (the
    symm_mem convention; each B is K × N/w).  See the module docstring for the choice and ``return_A``."""
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
        if choose("all_gather_matmul", M, N * w, K, w).path == "fused":
            k = _fused("ag_gemm", group)
            spec = {"M": M, "N": N * w, "K": K, "world": w, "dtype": _DTYPES[A_shard.dtype], "b_major": b_major}
            C = A_shard.new_empty((M, N))
            k.load(A_shard.device, spec)(A_shard.contiguous(), Bk, C)
            outs.append(C)
        else:
            outs.append(torch.ops.axe.gemm(gathered(), Bk, b_major == "col"))
    return (gathered() if return_A else None), outs


def fused_matmul_reduce_scatter(A, B, reduce_op="sum", scatter_dim=0, group_name=None):
    """This rank's rows of ``Σ_ranks A @ B`` (A: M × K/w, B: K/w × N; the symm_mem convention)."""
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
    if choose("matmul_reduce_scatter", M, N, kl * w, w).path == "fused":
        k = _fused("gemm_rs", group)
        spec = {"M": M, "N": N, "K": kl * w, "world": w, "dtype": _DTYPES[A.dtype], "b_major": b_major}
        k.load(A.device, spec)(A.contiguous(), Bk, out)
        return out
    P = torch.ops.axe.gemm(A.contiguous(), Bk, b_major == "col")
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


def add_commands(subparsers) -> None:
    """``axe tp OP M N K --world W``: which path a call of ``OP`` takes for the global problem, and why."""
    p = subparsers.add_parser("tp", help="which path axe.torch.tp takes for a tensor-parallel GEMM, and why")
    p.add_argument("op", choices=("all_gather_matmul", "matmul_reduce_scatter"))
    p.add_argument("M", type=int, help="global rows")
    p.add_argument("N", type=int, help="global columns (all ranks')")
    p.add_argument("K", type=int, help="global reduction length")
    p.add_argument("--world", type=int, default=2, help="GPUs in the group (default 2)")
    p.set_defaults(func=lambda a: print(explain(a.op, a.M, a.N, a.K, a.world)))
