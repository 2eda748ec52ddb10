#!/usr/bin/env python3
"""A Llama-style MLP under tensor parallelism on w GPUs, side by side: axe, torch + NCCL, torch's
symm_mem fused ops.

Rank r holds the activations' rows ``x_r`` (M/w × hidden, sequence-parallel), the gate and up
weights' rows ``W_gu,r`` (2·I/w × hidden: its I/w gate rows, then its I/w up rows) and the down
weight's columns ``W_d,r`` (hidden × I/w); it computes ``y_r`` = rows r of
``Σ_g silu(x·W_g,gᵀ) · (x·W_u,gᵀ) · W_d,gᵀ`` — the column-parallel gate/up projection
(all-gather + GEMM), SiLU·up, then the row-parallel down projection (GEMM + reduce-scatter).
bf16, Llama-3.1-8B and -70B sizes, M ∈ {128, 2048, 8192} (``--rows``).  Sides:

- ``nccl``: ``all_gather_into_tensor`` + torch.mm + SiLU·up (torch) + torch.mm + ``reduce_scatter_tensor``;
- ``symm_mem``: ``fused_all_gather_matmul`` + SiLU·up (torch) + ``fused_matmul_reduce_scatter``;
- ``axe``: ``kernels/ag_gemm.py`` (SM push) + ``torch.ops.axe.silu_and_mul`` + ``kernels/gemm_rs.py`` where
  the fused kernels are built (M/w a multiple of 128), else ``axe_nccl``'s step;
- ``axe_silu``: as ``axe`` with the SiLU·up fused into the all-gather + GEMM's store
  (``act="silu_mul"``, the gate/up weight's rows interleaved by tile), where it is built;
- ``axe_nccl``: NCCL's collectives around ``torch.ops.axe.gemm`` and ``silu_and_mul`` (the ops'
  M-bucket picks and compiled launcher: the non-fused path as :mod:`axe.torch.tp` runs it).

Every side is checked against an fp32 reference before it is timed (:mod:`dist_bench`).
Usage: ``.venv/bin/python benchmarks/tp_mlp.py build --world 2 [--rows ...]`` (CPU machine);
``torchrun --nproc-per-node W benchmarks/tp_mlp.py run`` (GPU machine).  Writes
``benchmarks/results/tp_mlp-<date>-<device>-w<W>.json`` with rows ``model, M, world, axe_ms,
nccl_ms, symm_mem_ms`` (and the ``axe_nccl`` figure).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dist_bench  # noqa: E402
from dist_bench import check_and_time, why  # noqa: E402

dist_bench.multicast_off("tp_mlp")

import time  # noqa: E402

sys.path.insert(0, ROOT)
from mlp_gemm import MODELS  # noqa: E402  (torch-free)

MS = (128, 2048, 8192)
SIDES = ("nccl", "symm_mem", "axe", "axe_silu", "axe_nccl")
TOL, WARMUP, REPEATS = 3e-2, 5, 5
POOL_BYTES = 12 << 30
TP_MODELS = ("Llama-3.1-8B", "Llama-3.1-70B")


def names(world, m, model):
    """The artifact names of one (world, M, model): the two fused kernels, axe's two local GEMMs and
    the SiLU·up kernel."""
    h, i = MODELS[model]
    tag = f"tp_mlp_bf16_w{world}_m{m}_{h}x{i}"
    return {"ag": tag + "_ag", "ag_silu": tag + "_ag_silu", "rs": tag + "_rs"}


def shapes(only, world, ms):
    """(model, M) of the benchmark, filtered by ``--only`` (model names)."""
    return [(model, m) for m in ms for model in TP_MODELS if not only or model in only]


def build(args):
    """Build every artifact (CPU machine), skipping existing ones; a fused kernel the shape does not
    fit is reported and its step runs non-fused."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import ag_gemm, gemm_rs
    failed = dist_bench.build_ops(args.out, [op for w in args.world for model, m in shapes(args.only, w, args.m)
                                             for op in _ops(m, *MODELS[model], w)])
    for world in args.world:
        for model, m in shapes(args.only, world, args.m):
            h, i = MODELS[model]
            n = names(world, m, model)
            todo = {n["ag"]: lambda: ag_gemm.build(m, 2 * i, h, world, "bfloat16", "col", name=n["ag"]),
                    n["ag_silu"]: lambda: ag_gemm.build(m, 2 * i, h, world, "bfloat16", "col", name=n["ag_silu"],
                                                        act="silu_mul"),
                    n["rs"]: lambda: gemm_rs.build(m, h, i, world, "bfloat16", "col", name=n["rs"])}
            for name, make in todo.items():
                path = os.path.join(args.out, name)
                if os.path.exists(os.path.join(path, "launch.json")):
                    continue
                t = time.time()
                try:
                    make().save(path)
                    print(f"built {name:44s} {time.time() - t:5.1f} s", flush=True)
                except ValueError as e:
                    print(f"refused {name}: {e}", flush=True)
    print(f"artifacts in {args.out}")
    return 1 if failed else 0


def _ops(m, h, i, world):
    """The ``torch.ops.axe`` artifacts of the non-fused steps (:func:`dist_bench.build_ops`): the up
    GEMM (M × 2i/w from M × h), SiLU·up, the down GEMM (M × h from M × i/w)."""
    return [dist_bench.gemm_op(2 * i // world, h, m), ("silu_and_mul", {"d": i // world, "dtype": "bfloat16"}),
            dist_bench.gemm_op(h, i // world, m)]


def _untimed(side, sides, errors):
    """Why a side has no time: ``not built`` (its fused kernel does not fit the shape, so the side
    was never set up) or ``FAIL`` (it was set up, or a rank's ``errors`` dict names it: it failed
    its check or its launch)."""
    return "FAIL" if side in sides or any(e and e.get(side) for e in errors) else "not built"


def run_shape(args, model, M, rank, world, heap, group_name, setup_err):
    """Check, then time every side on one (model, M); returns the JSON row (the same on all ranks)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from axe.runtime.distributed import DistKernel
    h, i = MODELS[model]
    il, ml = i // world, M // world
    n = names(world, M, model)
    art = {k: os.path.join(args.artifacts, v) for k, v in n.items()}
    built = {k: os.path.exists(os.path.join(p, "launch.json")) for k, p in art.items()}
    torch.manual_seed(3000 + rank)
    bf = torch.bfloat16
    x = (torch.randn(ml, h, device="cuda") * 0.5).to(bf)
    wgu = (torch.randn(2 * il, h, device="cuda") * h ** -0.5).to(bf)
    wd = (torch.randn(h, il, device="cuda") * i ** -0.5).to(bf)
    full = torch.empty(M, h, device="cuda", dtype=bf)
    dist.all_gather_into_tensor(full, x)
    hf = full.float() @ wgu.float().t()
    part = (F.silu(hf[:, :il]) * hf[:, il:]) @ wd.float().t()
    dist.all_reduce(part)
    exact = part[rank * ml:(rank + 1) * ml].contiguous()
    del hf, part
    hbuf = torch.empty(M, 2 * il, device="cuda", dtype=bf)
    abuf = torch.empty(M, il, device="cuda", dtype=bf)
    pbuf = torch.empty(M, h, device="cuda", dtype=bf)
    sync = torch.cuda.synchronize
    sides, errs, steps = {}, {}, {}

    def torch_mlp():
        dist.all_gather_into_tensor(full, x)
        hh = torch.mm(full, wgu.t(), out=hbuf)
        a = F.silu(hh[:, :il]) * hh[:, il:]
        torch.mm(a, wd.t(), out=pbuf)
        y = torch.empty(ml, h, device="cuda", dtype=bf)
        dist.reduce_scatter_tensor(y, pbuf)
        return y

    def symm_mlp():
        _, (hh,) = torch.ops.symm_mem.fused_all_gather_matmul(x, [wgu.t()], 0, group_name)
        a = F.silu(hh[:, :il]) * hh[:, il:]
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, wd.t(), "sum", 0, group_name)
    sides["nccl"] = (torch_mlp, None, sync)
    if setup_err.get("symm_mem"):
        errs["symm_mem"] = setup_err["symm_mem"]
    else:
        sides["symm_mem"] = (symm_mlp, None, sync)
    try:
        if setup_err.get("axe"):
            raise RuntimeError(setup_err["axe"])
        ops = dist_bench.axe_ops(args.artifacts)
        fa = torch.empty(M, h, device="cuda", dtype=bf)

        def up_nccl():
            dist.all_gather_into_tensor(fa, x)
            return ops.gemm(fa, wgu, True)

        def down_nccl(a, y):
            dist.reduce_scatter_tensor(y, ops.gemm(a, wd, True))
        ag = DistKernel(art["ag"], heap) if built["ag"] else None
        rs = DistKernel(art["rs"], heap) if built["rs"] else None
        steps = {"ag": "fused" if ag else "nccl+axe", "rs": "fused" if rs else "nccl+axe"}
        ya, yn = torch.empty(ml, h, device="cuda", dtype=bf), torch.empty(ml, h, device="cuda", dtype=bf)

        def axe_mlp():
            a = ops.silu_and_mul((ag(x, wgu, hbuf), hbuf)[1] if ag else up_nccl())
            rs(a, wd, ya) if rs else down_nccl(a, ya)
            return ya

        def axe_nccl_mlp():
            down_nccl(ops.silu_and_mul(up_nccl()), yn)
            return yn
        sides["axe"] = (axe_mlp, ya, sync)
        if built["ag_silu"] and rs:
            from kernels.tp_shapes import interleave
            ags = DistKernel(art["ag_silu"], heap)
            wint = interleave(wgu[:il], wgu[il:]).contiguous()
            ys = torch.empty(ml, h, device="cuda", dtype=bf)

            def axe_silu_mlp():
                ags(x, wint, abuf)
                rs(abuf, wd, ys)
                return ys
            sides["axe_silu"] = (axe_silu_mlp, ys, sync)
        sides["axe_nccl"] = (axe_nccl_mlp, yn, sync)
    except Exception as e:
        errs["axe"] = errs["axe_nccl"] = why(e, rank)
    ref = {s: exact for s in SIDES}
    ms, err_all, errs_all = check_and_time(args, SIDES, sides, ref, errs, rank, world, WARMUP, REPEATS, TOL)
    row = {"model": model, "M": M, "world": world, "hidden": h, "intermediate": i, "axe_steps": steps,
           "axe_ms": ms["axe"], "nccl_ms": ms["nccl"], "symm_mem_ms": ms["symm_mem"], "axe_nccl_ms": ms["axe_nccl"],
           "axe_silu_ms": ms["axe_silu"],
           **dist_bench.side_outcomes(args, SIDES, err_all, errs_all)}
    best = min([v for v in (ms["axe"], ms["axe_silu"], ms["axe_nccl"]) if v], default=None)
    row["axe_best_ms"] = best
    row["fastest"] = min(((v, s) for s, v in ms.items() if v), default=(None, None))[1]
    if rank == 0:
        print(f"{model} M={M} w{world}: " + "  ".join(f"{s} {v:.3f} ms" if v else f"{s} {_untimed(s, sides, errs_all)}"
                                                      for s, v in ms.items())
              + f"  (axe steps {steps})", flush=True)
    torch.cuda.empty_cache()
    return row


def report(args, rows, world):
    """Write the JSON and print the table (rank 0)."""
    miss = [f"{r['model']} M={r['M']}: fastest is {r['fastest']}" for r in rows
            if r["fastest"] not in ("axe", "axe_silu", "axe_nccl")]
    path, dev, date = dist_bench.write_json(args, "tp_mlp", world, {
        "problem": "y_r = rows r of sum_g silu(x W_g,g^T) (x W_u,g^T) W_d,g^T; x_r M/w x hidden, bf16",
        "check": f"max abs err / max abs ref < {TOL} vs fp32; a failing side is not timed",
        "timing": dist_bench.timing_text(args, WARMUP, REPEATS),
        "rows": rows, "summary": {"goal": "axe (fused or non-fused) fastest in every row", "met": not miss, "misses": miss}})

    def f(v):
        return dist_bench.fmt(v, ".3f")
    print(f"\n{date}  {dev} x{world}  -> {path}")
    print(f"{'model':15s} {'M':>5s} {'nccl':>7s} {'symm_mem':>8s} {'axe':>7s} {'axe_silu':>8s} {'axe_nccl':>8s}  axe steps  (ms per MLP)")
    for r in rows:
        print(f"{r['model']:15s} {r['M']:5d} {f(r['nccl_ms']):>7s} {f(r['symm_mem_ms']):>8s} {f(r['axe_ms']):>7s} "
              f"{f(r['axe_silu_ms']):>8s} {f(r['axe_nccl_ms']):>8s}  {r['axe_steps']}")
        for s, texts in r["errors"].items():
            print(f"  {s} FAILED: " + " | ".join(texts))
    print(f"goal (axe fastest in every row): {'met' if not miss else 'NOT met'}" + "".join(f"\n  {m}" for m in miss))


def main(argv=None):
    """``build`` (CPU machine) or ``run`` (under torchrun on the GPU machine)."""
    return dist_bench.cli(argv, __doc__, SIDES, MS, "tp_mlp", build,
                          lambda args: dist_bench.launch(args, shapes, run_shape, report, POOL_BYTES))


if __name__ == "__main__":
    sys.exit(main())
