#!/usr/bin/env python3
"""All-gather + GEMM on w GPUs of one host, side by side: axe, cuBLAS, NCCL + cuBLAS, symm_mem.

Tensor-parallel column-parallel layer (the up projection), M ∈ {128, 512, 2048, 8192} (``--rows``),
bf16: the activations A (M×K) are sharded by rows (rank r holds A_r: M/w×K) and the ``nn.Linear``
weight W (N×K) by rows of N (W_r: N/w×K); rank r computes ``C_r = all_gather(A) · W_rᵀ`` (M×N/w);
(N, K) = (intermediate, hidden) of the 8 models of ``benchmarks/gemm.py``.  Sides: ``bare``
(torch.mm of the gathered problem, M×N/w: the ideal), ``nccl`` (``dist.all_gather_into_tensor`` +
torch.mm), ``symm_mem`` (``torch.ops.symm_mem.fused_all_gather_matmul``), ``axe``
(``kernels/ag_gemm.py`` through ``axe.runtime.distributed.DistKernel``; built where M/w is a
multiple of 128), ``axe_nccl`` (the non-fused path as :mod:`axe.torch.tp` runs it: NCCL all-gather +
``torch.ops.axe.gemm``, its M bucket's pick through the compiled launcher), ``axe_gemm`` (that GEMM
of the gathered problem alone),
``axe_ce`` (the fused kernel with ``push="copy_engine"``: the runtime stages the rows with
``cudaMemcpyAsync`` beside the kernel instead of the producer warps pushing them).  ``axe``,
``axe_nccl`` and ``nccl`` time :mod:`axe.torch.tp`'s three paths (fused, nccl+axe, nccl+cublas): each
row records the pick ``axe tune tp`` would make from this run's figures (``axe_pick``, ``tuned``) and
the op's own choice here and its time (``op_path``, ``op_source``, ``op_ms``; see ``gemm_rs.py``).

Every side is checked against fp32 (``all_gather(A) · W_rᵀ``) before it is timed; timing as
:mod:`dist_bench` says.  Usage: ``.venv/bin/python benchmarks/ag_gemm.py build --world 2 4 [--rows ...]``
(CPU machine); ``torchrun --nproc-per-node W benchmarks/ag_gemm.py run [--artifacts DIR] [--json
PATH]`` (GPU machine; no TVM).  Writes ``benchmarks/results/ag_gemm-<date>-<device>-w<world>.json``.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dist_bench  # noqa: E402
from dist_bench import check_and_time, why  # noqa: E402

dist_bench.multicast_off("ag_gemm")

import time  # noqa: E402

sys.path.insert(0, ROOT)
from mlp_gemm import MODELS  # noqa: E402  (torch-free)

MS = (128, 512, 2048, 8192)
SIDES = ("bare", "nccl", "symm_mem", "axe", "axe_ce", "axe_nccl", "axe_gemm")
TOL, WARMUP, REPEATS = 2e-2, 5, 5
POOL_BYTES = 12 << 30       # the symmetric pool: the fused kernel's gathered buffer (2·M×K bf16)


def artifact_name(world, m, n, k):
    """The artifact directory name of one up projection at one world size and M."""
    return f"ag_gemm_bf16_w{world}_m{m}_{n}x{k}"


def shapes(only, world, ms):
    """(model, M, N, K) of the up projections at every M of ``ms``, filtered by ``--only``."""
    out = [(name, m, i, h) for m in ms for name, (h, i) in MODELS.items()]
    return [s for s in out if not only or {s[0], f"{s[2]}x{s[3]}", artifact_name(world, *s[1:])} & set(only)]


def build(args):
    """Build the fused kernel and axe's GEMM of the gathered problem for every shape (CPU machine),
    skipping existing ones; a shape the fused kernel refuses is reported and its side not run."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import ag_gemm
    failed = dist_bench.build_ops(args.out, [dist_bench.gemm_op(n // w, k, m) for w in args.world
                                             for _, m, n, k in shapes(args.only, w, args.m)])
    for world in args.world:
        for model, m, n, k in shapes(args.only, world, args.m):
            name = artifact_name(world, m, n, k)
            path = os.path.join(args.out, name)
            t = time.time()
            todo = {"": lambda: ag_gemm.build(m, n, k, world, "bfloat16", "col", name=name),
                    "_ce": lambda: ag_gemm.build(m, n, k, world, "bfloat16", "col", name=name + "_ce",
                                                 push="copy_engine")}
            for suffix, make in todo.items():
                if os.path.exists(os.path.join(path + suffix, "launch.json")):
                    continue
                try:
                    make().save(path + suffix)
                    print(f"built {name + suffix:40s} {time.time() - t:5.1f} s", flush=True)
                except ValueError as e:
                    print(f"refused {name + suffix}: {e}", flush=True)
    print(f"artifacts in {args.out}")
    return 1 if failed else 0


def make_sides(sel, a, w, rank, world, M, n, heap, artifact, group_name, setup_err):
    """``{side: (fn, output to poison or None, sync)}``, ``{side: error}``, unbuilt sides."""
    import torch
    import torch.distributed as dist
    from axe.runtime.distributed import DistKernel
    k_ = a.shape[1]
    wt = w.t()
    full = torch.empty(M, k_, device=a.device, dtype=a.dtype)
    c = torch.empty(M, n // world, device=a.device, dtype=a.dtype)
    sync = torch.cuda.synchronize
    sides, errs = {}, {}

    def nccl():
        dist.all_gather_into_tensor(full, a)
        return torch.mm(full, wt, out=c)
    dist.all_gather_into_tensor(full, a)
    bare_a = full.clone()
    sides["bare"] = (lambda: torch.mm(bare_a, wt, out=c), c, sync)
    sides["nccl"] = (nccl, c, sync)
    sides["symm_mem"] = (lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [wt], 0, group_name)[1][0], None, sync)
    suffix = {"axe": "", "axe_ce": "_ce", "axe_nccl": None, "axe_gemm": None}     # None: torch.ops.axe.gemm
    unbuilt = {s for s, x in suffix.items()
               if s in sel and x is not None and not os.path.exists(os.path.join(artifact + x, "launch.json"))}
    ops = dist_bench.axe_ops(os.path.dirname(artifact))
    for s in suffix:
        if s not in sel or s in unbuilt:
            continue
        try:
            if s in ("axe", "axe_ce"):
                if setup_err.get("axe"):
                    raise RuntimeError(setup_err["axe"])
                kf = DistKernel(artifact + suffix[s], heap)
                ca = torch.empty_like(c)
                sides[s] = (lambda kf=kf, ca=ca: (kf(a, w, ca), ca)[1], ca, kf.synchronize)
                continue
            if s == "axe_gemm":
                sides[s] = (lambda: ops.gemm(bare_a, w, True), None, sync)
            else:
                fa = torch.empty_like(full)

                def axe_nccl(fa=fa):
                    dist.all_gather_into_tensor(fa, a)
                    return ops.gemm(fa, w, True)
                sides[s] = (axe_nccl, None, sync)
        except Exception as e:
            errs[s] = why(e, rank)
    if setup_err.get("symm_mem"):
        errs["symm_mem"] = setup_err["symm_mem"]
    return {s: v for s, v in sides.items() if s in sel and s not in errs}, errs, unbuilt


def run_shape(args, model, M, n, k, rank, world, heap, group_name, setup_err):
    """Check, then time every selected side on one shape; returns the JSON row (the same on all ranks)."""
    import torch
    import torch.distributed as dist
    name = artifact_name(world, M, n, k)
    torch.manual_seed(2000 + rank)
    a = (torch.randn(M // world, k, device="cuda") * 0.5).to(torch.bfloat16)
    w = (torch.randn(n // world, k, device="cuda") * 0.5).to(torch.bfloat16)
    full = torch.empty(M, k, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_into_tensor(full, a)
    exact = full.float() @ w.float().t()
    del full
    ref = {s: exact for s in SIDES}
    sides, errs, unbuilt = make_sides(args.sides, a, w, rank, world, M, n, heap, os.path.join(args.artifacts, name),
                                      group_name, setup_err)
    ms, err_all, errs_all = check_and_time(args, SIDES, sides, ref, errs, rank, world, WARMUP, REPEATS, TOL)
    del ref, exact
    row = dist_bench.figure_row(args, SIDES, rank, ms, err_all, errs_all, unbuilt, 2.0 * M * (n // world) * k, REPEATS,
                                op="all_gather_matmul", model=model, M=M, N=n, K=k, N_local=n // world, world=world,
                                artifact=name)
    del sides, a, w
    torch.cuda.empty_cache()
    return row


def report(args, rows, world):
    """Write the JSON and print the table (rank 0)."""
    import torch
    g = dist_bench.goal(rows)
    path, dev, date = dist_bench.write_json(args, "ag_gemm", world, {
        "problem": "C_r = all_gather(A) W_r^T; A_r M/w x K, W_r N/w x K (nn.Linear weight); "
        f"M in {sorted({r['M'] for r in rows})}, bf16, (N, K) = (intermediate, hidden)",
        "check": f"max abs err / max abs ref < {TOL} vs fp32; fresh randn x0.5; outputs NaN-poisoned",
        "timing": dist_bench.timing_text(args, WARMUP, REPEATS), "figures": rows, "summary": g})
    f = dist_bench.fmt
    print(f"\n{date}  {dev} x{world}  torch {torch.__version__}  -> {path}")
    print(f"{'model':15s} {'M':>5s} {'N×K':>11s} {'bare':>7s} {'nccl':>7s} {'symm_mem':>8s} {'axe':>9s} {'axe_ce':>9s} {'axe_nccl':>8s} "
          f"{'axe_gemm':>8s} {'pick':>11s} {'vs nccl':>7s} {'vs symm':>7s} {'axe/bare':>8s} {'op':>13s} {'op/nccl':>7s}  "
          "(ms; pick: the tuned selection from this run; vs = peer/pick; op: the op's own choice (t: tuned table, "
          "h: heuristic), op/nccl: nccl's time over the op's path's)")
    for r in rows:
        c = {s: f(v, ".3f") if v else r["status"][s] for s, v in r["ms"].items()}
        print(f"{r['model']:15s} {r['M']:5d} {r['N']:>5d}×{r['K']:<5d} {c['bare']:>7s} {c['nccl']:>7s} {c['symm_mem']:>8s} "
              f"{c['axe']:>9s} {c['axe_ce']:>9s} {c['axe_nccl']:>8s} {c['axe_gemm']:>8s} {r['axe_pick'] or '-':>11s} "
              f"{f(r['pick_vs_nccl'], '.3f'):>7s} {f(r['pick_vs_symm_mem'], '.3f'):>7s} "
              f"{f(r['axe_over_bare_pct'], '+.1f', '%'):>8s} {r['op_path'] + ' ' + r['op_source'][0]:>13s} "
              f"{f(r['op_vs_nccl'], '.3f'):>7s}")
        for s, texts in r["errors"].items():
            print(f"  {s} FAILED: " + " | ".join(texts))
    dist_bench.print_goal(g)


def main(argv=None):
    """``build`` (CPU machine) or ``run`` (under torchrun on the GPU machine)."""
    return dist_bench.cli(argv, __doc__, SIDES, MS, "ag_gemm", build,
                          lambda args: dist_bench.launch(args, shapes, run_shape, report, POOL_BYTES))


if __name__ == "__main__":
    sys.exit(main())
