#!/usr/bin/env python3
"""GEMM + reduce-scatter on w GPUs of one host, side by side: axe, cuBLAS, cuBLAS+NCCL, symm_mem.

Tensor-parallel down projection, M ∈ {128, 512, 2048, 8192} (``--rows``), bf16: A (M×K) and the ``nn.Linear`` weight W (N×K) are
sharded on K over w ranks (rank r holds A_r: M×K/w, W_r: N×K/w); rank r receives
``Y_r = Σ_g (A_g·W_gᵀ)[rows r·M/w .. (r+1)·M/w − 1]``; (N, K) = (hidden, intermediate) of the 8
models of ``benchmarks/gemm.py``.  Sides: ``bare`` (torch.mm of the local problem, M×N: the
ideal), ``nccl`` (torch.mm + ``dist.reduce_scatter_tensor``), ``symm_mem``
(``torch.ops.symm_mem.fused_matmul_reduce_scatter``), ``axe`` (``kernels/gemm_rs.py`` through
``axe.runtime.distributed.DistKernel``), ``axe_nccl`` (the non-fused path as :mod:`axe.torch.tp` runs it:
``torch.ops.axe.gemm`` of the local problem — its M bucket's pick, the compiled launcher — then
``dist.reduce_scatter_tensor``).  ``axe``, ``axe_nccl`` and ``nccl`` time :mod:`axe.torch.tp`'s three paths
(fused, nccl+axe, nccl+cublas): each row records the pick ``axe tune tp`` would make from this run's
figures (``axe_pick``, ``tuned``) and the op's own choice here and its time (``op_path``, ``op_source``,
``op_ms``: the tuned table beside the op cache, or in ``$AXE_SHIPPED_DIRS``, else the heuristic).

Every side is checked before it is timed: fresh random data (randn × 0.5), outputs poisoned with
NaN, reference = fp32 partials all-reduced (``bare``: the local fp32 partial), max abs err / max
abs ref < 2e-2; a side failing on any rank is reported and not timed.  Timing (:mod:`dist_bench`'s
law, primed by default): ``--iters`` back-to-back launches after 5 warm-ups, ``dist.barrier()`` +
synchronize before each block, sides interleaved per repeat, 5 repeats; per-launch ms over the
launches after each block's first (``--no-prime``: over all, the first launch's host latency
included; each row keeps both, ``ms_all``, and the host time per launch, ``host_us``) = median over
the repeats on each rank, then max over ranks.  No L2 flush, for any side.  NVLink multicast is kept
off (env below).

Usage: ``.venv/bin/python benchmarks/gemm_rs.py build --world 2 4 [--rows 128 8192] [--diagnostics] [--out DIR]``
(CPU machine; the diagnostic sides' artifacts only with ``--diagnostics``);
``torchrun --nproc-per-node W benchmarks/gemm_rs.py run [--artifacts DIR] [--json PATH] [--iters N]
[--only NAME...] [--sides ...]`` (GPU machine; no TVM).  Writes
``benchmarks/results/gemm_rs-<date>-<device>-w<world>.json`` (or ``--json``); rank 0 prints a table.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dist_bench  # noqa: E402
from dist_bench import check_and_time, why  # noqa: E402

dist_bench.multicast_off("gemm_rs")

import functools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, ROOT)
from mlp_gemm import MODELS  # noqa: E402  (torch-free)

MS = (128, 512, 2048, 8192)
SIDES = ("bare", "nccl", "symm_mem", "axe", "axe_regs", "axe_rows", "axe_nccl", "axe_gemm", "axe_local", "axe_local_rows",
         "axe_nowait", "axe_bulk")
#: diagnostic sides, to split axe's time: its one-GPU GEMM of the local problem (kernels/gemm.py), and
#: the fused kernel with nothing exchanged (rs_comm=False: tile order and epilogues, wrong results)
DIAGNOSTIC = ("axe_gemm", "axe_local", "axe_local_rows", "axe_nowait")   # axe_nowait: pushes and signals, no waits
#: axe_rows / axe_local_rows: the fused kernel / nothing exchanged with rs_a="rows" (A read with the plain
#: GEMM's 2-D boxes; refused where M/w is not a multiple of 128)
#: axe_bulk: the fused kernel with rs_push="bulk" (checked like axe; the consumers' bulk copies push);
#: axe_regs: with rs_add="registers" (checked like axe; an owner adds each peer's half-tile through
#: registers, one load latency, instead of chunk by chunk through shared memory)
TOL, WARMUP, REPEATS = 2e-2, 5, 5
#: the symmetric pool: each axe side's kernel keeps its staging (M·N bf16) for the whole run
POOL_BYTES = 12 << 30


def artifact_name(world, m, n, k):
    """The artifact directory name of one down projection at one world size and M."""
    return f"gemm_rs_bf16_w{world}_m{m}_{n}x{k}"


def shapes(only, world, ms):
    """(model, M, N, K) of the down projections at every M of ``ms``, filtered by ``--only``
    (model, ``NxK`` or artifact name)."""
    out = [(name, m, h, i) for m in ms for name, (h, i) in MODELS.items()]
    return [s for s in out if not only or {s[0], f"{s[2]}x{s[3]}", artifact_name(world, *s[1:])} & set(only)]


def build(args):
    """Build the artifacts for every shape, M and world size (CPU machine), skipping existing ones:
    the fused kernel, and into the op cache (:data:`dist_bench.OPS_CACHE`) ``torch.ops.axe.gemm``'s
    artifact of the local problem (the non-fused path, as :mod:`axe.torch.tp` runs it); with
    ``--diagnostics`` also the measurement aids (local, nowait, bulk)."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import gemm_rs
    failed = dist_bench.build_ops(args.out, [dist_bench.gemm_op(n, k // w, m) for w in args.world
                                             for _, m, n, k in shapes(args.only, w, args.m)])
    for world in args.world:
        for model, m, n, k in shapes(args.only, world, args.m):
            name = artifact_name(world, m, n, k)
            path = os.path.join(args.out, name)
            t = time.time()
            todo = {"": lambda: gemm_rs.build(m, n, k, world, dtype="bfloat16", b_major="col", name=name),
                    "_regs": lambda: gemm_rs.build(m, n, k, world, dtype="bfloat16", b_major="col", name=name + "_regs",
                                                   rs_add="registers"),
                    "_rows": lambda: gemm_rs.build(m, n, k, world, dtype="bfloat16", b_major="col", name=name + "_rows",
                                                   rs_a="rows")}
            if args.diagnostics:
                todo.update({s: functools.partial(gemm_rs.build, m, n, k, world, dtype="bfloat16", b_major="col",
                                                  name=name + s, **kw)
                             for s, kw in (("_local", dict(rs_comm=False)), ("_nowait", dict(rs_comm="nowait")),
                                           ("_local_rows", dict(rs_comm=False, rs_a="rows")),
                                           ("_bulk", dict(rs_push="bulk")))})
            built = []
            for suffix, make in todo.items():
                if not os.path.exists(os.path.join(path + suffix, "launch.json")):
                    try:
                        make().save(path + suffix)
                        built.append(suffix or "fused")
                    except ValueError as e:         # a shape the kernel refuses: that side is not run
                        print(f"refused {name + suffix}: {e}", flush=True)
            if built:
                r = (json.load(open(os.path.join(path, "launch.json"))).get("resources", {})
                     if os.path.exists(os.path.join(path, "launch.json")) else {})
                print(f"built {name:36s} ({', '.join(built)})  regs {r.get('registers')} spills "
                      f"{r.get('spill_stores')}/{r.get('spill_loads')}  {time.time() - t:5.1f} s", flush=True)
    print(f"artifacts in {args.out}")
    return 1 if failed else 0


def make_sides(sel, a, w, rank, world, M, n, heap, artifact, group_name, setup_err):
    """``{side: (launch fn returning the output, output to poison or None, sync fn)}``, ``{side: error}``
    for the sides that could not be set up on this rank, and the sides whose artifact was not built."""
    import torch
    import torch.distributed as dist
    from axe.runtime.distributed import DistKernel
    ops = dist_bench.axe_ops(os.path.dirname(artifact))
    wt, sides, errs = w.t(), {}, {}
    buf = torch.empty(M, n, device=a.device, dtype=a.dtype)           # bare's output, nccl's partial
    y = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
    sync = torch.cuda.synchronize

    def nccl():
        torch.mm(a, wt, out=buf)
        dist.reduce_scatter_tensor(y, buf)
        return y
    sides["bare"] = (lambda: torch.mm(a, wt, out=buf), buf, sync)
    sides["nccl"] = (nccl, y, sync)
    sides["symm_mem"] = (lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, wt, "sum", 0, group_name),
                         None, sync)   # returns a fresh tensor: nothing to poison
    #: side -> artifact suffix (DistKernel: the fused ones; None: torch.ops.axe.gemm from the op cache)
    arts = {"axe": "", "axe_regs": "_regs", "axe_rows": "_rows", "axe_nccl": None, "axe_gemm": None,
            "axe_local": "_local", "axe_local_rows": "_local_rows", "axe_nowait": "_nowait", "axe_bulk": "_bulk"}
    unbuilt = {s for s, x in arts.items()
               if s in sel and x is not None and not os.path.exists(os.path.join(artifact + x, "launch.json"))}
    for s, suffix in arts.items():
        if s not in sel or s in unbuilt:
            continue
        try:
            if s == "axe" and setup_err.get("axe"):
                raise RuntimeError(setup_err["axe"])
            if suffix is None:
                if s == "axe_gemm":
                    sides[s] = (lambda: ops.gemm(a, w, True), None, sync)
                else:
                    ys = torch.empty_like(y)

                    def axe_nccl(ys=ys):
                        dist.reduce_scatter_tensor(ys, ops.gemm(a, w, True))
                        return ys
                    sides[s] = (axe_nccl, ys, sync)
                continue
            k = DistKernel(artifact + suffix, heap)
            out = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
            poison = out if s in ("axe", "axe_regs", "axe_rows", "axe_bulk") else None   # local, nowait: wrong by design
            sides[s] = (lambda k=k, out=out: (k(a, w, out), out)[1], poison, k.synchronize)
        except Exception as e:
            errs[s] = why(e, rank)
    if setup_err.get("symm_mem"):
        errs["symm_mem"] = setup_err["symm_mem"]
    return {s: v for s, v in sides.items() if s in sel and s not in errs}, errs, unbuilt


def problem(M, n, kl, rank, world, local, scattered):
    """This rank's inputs — A (M × ``kl``) and the weight W (``n`` × ``kl``), bf16, fresh randn × 0.5
    seeded by the rank — and the fp32 references: ``{side: A·Wᵀ}`` for the sides ``local`` (the
    local partial) and ``{side: rows rank·M/w .. of Σ_ranks A·Wᵀ}`` for ``scattered`` (collective)."""
    import torch
    import torch.distributed as dist
    torch.manual_seed(1000 + rank)
    a = (torch.randn(M, kl, device="cuda") * 0.5).to(torch.bfloat16)
    w = (torch.randn(n, kl, device="cuda") * 0.5).to(torch.bfloat16)
    part = a.float() @ w.float().t()
    ref = {s: part for s in local}
    total = part.clone()
    dist.all_reduce(total)
    ml = M // world
    ref.update({s: total[rank * ml:(rank + 1) * ml] for s in scattered})
    return a, w, ref


def run_shape(args, model, M, n, k, rank, world, heap, group_name, setup_err):
    """Check, then time every selected side on one shape; returns the JSON row (the same on all ranks)."""
    import torch
    kl, name = k // world, artifact_name(world, M, n, k)
    a, w, ref = problem(M, n, kl, rank, world, ("bare", "axe_gemm"),
                        ("nccl", "symm_mem", "axe", "axe_regs", "axe_rows", "axe_nccl", "axe_bulk"))
    sides, errs, unbuilt = make_sides(args.sides, a, w, rank, world, M, n, heap, os.path.join(args.artifacts, name),
                                      group_name, setup_err)
    stats = {}
    ms, err_all, errs_all = check_and_time(args, SIDES, sides, ref, errs, rank, world, WARMUP, REPEATS, TOL, stats)
    del ref
    row = dist_bench.figure_row(args, SIDES, rank, ms, err_all, errs_all, unbuilt, 2.0 * M * n * kl, REPEATS,
                                op="matmul_reduce_scatter", model=model, M=M, N=n, K=k, K_local=kl, world=world,
                                artifact=name, ms_all=stats["ms_all"], host_us=stats["host_us"])
    del sides, a, w
    torch.cuda.empty_cache()
    return row


def report(args, rows, world):
    """Write the JSON and print the table (rank 0)."""
    import torch
    g = dist_bench.goal(rows)
    path, dev, date = dist_bench.write_json(args, "gemm_rs", world, {
        "problem": "Y_r = rows r*M/w.. of sum_g A_g W_g^T; A_g M x K/w, W_g N x K/w (nn.Linear weight); "
        f"M in {sorted({r['M'] for r in rows})}, bf16, (N, K) = (hidden, intermediate)",
        "check": f"max abs err / max abs ref < {TOL} vs fp32 partials all-reduced; fresh randn x0.5; "
        "outputs NaN-poisoned; a failing side is not timed",
        "timing": dist_bench.timing_text(args, WARMUP, REPEATS), "figures": rows, "summary": g})
    f = dist_bench.fmt
    print(f"\n{date}  {dev} x{world}  torch {torch.__version__}  cuda {torch.version.cuda}  -> {path}")
    print(f"{'model':15s} {'M':>5s} {'N×K':>11s} {'w':>2s} {'bare':>7s} {'nccl':>7s} {'symm_mem':>8s} {'axe':>7s} {'axe_regs':>8s} "
          f"{'axe_rows':>8s} {'axe_nccl':>8s} {'vs nccl':>7s} {'vs symm':>7s} {'axe/bare':>8s} {'axe_gemm':>8s} {'axe_local':>9s} "
          f"{'local_rows':>10s} {'axe_nowait':>10s} {'axe_bulk':>9s} {'pick':>11s} {'op':>13s} {'op/nccl':>7s}   "
          "(ms per launch; vs = peer/fused (the faster of axe, axe_regs, axe_rows, axe_bulk); fused/bare - 1; axe_gemm, axe_local: see "
          "DIAGNOSTIC; pick: the tuned selection from this run; op: the op's own choice (t: tuned table, h: heuristic), "
          "op/nccl: nccl's time over the op's path's)")
    for r in rows:
        c = {s: f(v, ".3f") if v else r["status"][s] for s, v in r["ms"].items()}
        print(f"{r['model']:15s} {r['M']:5d} {r['N']:>5d}×{r['K']:<5d} {world:2d} {c['bare']:>7s} {c['nccl']:>7s} "
              f"{c['symm_mem']:>8s} {c['axe']:>7s} {c['axe_regs']:>8s} {c['axe_rows']:>8s} {c['axe_nccl']:>8s} {f(r['axe_vs_nccl'], '.3f'):>7s} "
              f"{f(r['axe_vs_symm_mem'], '.3f'):>7s} {f(r['axe_over_bare_pct'], '+.1f', '%'):>8s} "
              f"{c['axe_gemm']:>8s} {c['axe_local']:>9s} {c['axe_local_rows']:>10s} {c['axe_nowait']:>10s} {c['axe_bulk']:>9s} "
              f"{r['axe_pick'] or '-':>11s} {r['op_path'] + ' ' + r['op_source'][0]:>13s} "
              f"{f(r['op_vs_nccl'], '.3f'):>7s}")
    for r in rows:
        for x in r["rel_err_per_rank"].get("axe", []) and [r["rel_err_per_rank"]["axe"]]:
            print(f"axe rel err {r['model']:15s} per rank: " + " ".join(f(e, ".2e") for e in x))
        for s, texts in r["errors"].items():
            print(f"  {s} FAILED {r['model']}: " + " | ".join(texts))
    dist_bench.print_goal(g)


def main(argv=None):
    """``build`` (CPU machine) or ``run`` (under torchrun on the GPU machine)."""
    return dist_bench.cli(argv, __doc__, SIDES, MS, "gemm_rs", build,
                          lambda args: dist_bench.launch(args, shapes, run_shape, report, POOL_BYTES), prime=True)


if __name__ == "__main__":
    sys.exit(main())
