#!/usr/bin/env python3
"""GEMM + reduce-scatter on w GPUs of one host, side by side: axe, cuBLAS, cuBLAS+NCCL, symm_mem.

Tensor-parallel down projection, M = 8192, bf16: A (M×K) and the ``nn.Linear`` weight W (N×K) are
sharded on K over w ranks (rank r holds A_r: M×K/w, W_r: N×K/w); rank r receives
``Y_r = Σ_g (A_g·W_gᵀ)[rows r·M/w .. (r+1)·M/w − 1]``; (N, K) = (hidden, intermediate) of the 8
models of ``benchmarks/gemm.py``.  Sides: ``bare`` (torch.mm of the local problem, M×N: the
ideal), ``nccl`` (torch.mm + ``dist.reduce_scatter_tensor``), ``symm_mem``
(``torch.ops.symm_mem.fused_matmul_reduce_scatter``), ``axe`` (``kernels/gemm_rs.py`` through
``axe.runtime.distributed.DistKernel``).

Every side is checked before it is timed: fresh random data (randn × 0.5), outputs poisoned with
NaN, reference = fp32 partials all-reduced (``bare``: the local fp32 partial), max abs err / max
abs ref < 2e-2; a side failing on any rank is reported and not timed.  Timing: CUDA events around
``--iters`` back-to-back launches after 5 warm-ups, ``dist.barrier()`` + synchronize before each
block, sides interleaved per repeat, 5 repeats; per-launch ms = median over the repeats on each
rank, then max over ranks.  No L2 flush, for any side.  NVLink multicast is kept off (env below).

Usage: ``.venv/bin/python benchmarks/gemm_rs.py build --world 2 4 [--out DIR]`` (CPU machine);
``torchrun --nproc-per-node W benchmarks/gemm_rs.py run [--artifacts DIR] [--json PATH] [--iters N]
[--only NAME...] [--sides ...]`` (GPU machine; no TVM).  Writes
``benchmarks/results/gemm_rs-<date>-<device>-w<world>.json`` (or ``--json``); rank 0 prints a table.
"""

import os
import sys

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.get(_k) != _v:   # multicast stays off, whatever the environment said
        if _k in os.environ:
            print(f"gemm_rs: {_k}={os.environ[_k]!r} overridden to {_v!r} (no NVLink multicast)", file=sys.stderr)
        os.environ[_k] = _v

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from gemm import M, MODELS  # noqa: E402  (torch-free)

SIDES = ("bare", "nccl", "symm_mem", "axe", "axe_gemm", "axe_local", "axe_nowait", "axe_bulk")
#: diagnostic sides, to split axe's time: its one-GPU GEMM of the local problem (kernels/gemm.py), and
#: the fused kernel with nothing exchanged (rs_comm=False: tile order and epilogues, wrong results)
DIAGNOSTIC = ("axe_gemm", "axe_local", "axe_nowait")    # axe_nowait: pushes and signals, no waits
#: axe_bulk: the fused kernel with rs_push="bulk" (checked like axe; the consumers' bulk copies push)
TOL, WARMUP, REPEATS = 2e-2, 5, 5
#: the symmetric pool: each axe side's kernel keeps its staging (M·N bf16) for the whole run
POOL_BYTES = 12 << 30


def artifact_name(world, n, k):
    """The artifact directory name of one down projection at one world size."""
    return f"gemm_rs_bf16_w{world}_{n}x{k}"


def shapes(only, world):
    """(model, N, K) of the down projections, filtered by ``--only`` (model, ``NxK`` or artifact name)."""
    out = [(m, h, i) for m, (h, i) in MODELS.items()]
    return [s for s in out if not only or {s[0], f"{s[1]}x{s[2]}", artifact_name(world, s[1], s[2])} & set(only)]


def _why(e, rank, when=""):
    """One line naming the rank and the exception (its first line, at most 300 characters)."""
    return f"rank {rank}: {when}{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"


def build(args):
    """Build the artifacts for every shape and world size (CPU machine), skipping existing ones."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import gemm_rs
    for world in args.world:
        for model, n, k in shapes(args.only, world):
            name = artifact_name(world, n, k)
            path = os.path.join(args.out, name)
            if os.path.exists(os.path.join(path, "launch.json")):
                print(f"exists {name}", flush=True)
                continue
            t = time.time()
            art = gemm_rs.build(M, n, k, world, dtype="bfloat16", b_major="col", name=name)
            art.save(path)
            from kernels import gemm
            gemm.build(M, n, k // world, "bfloat16", "col", name=name + "_gemm").save(path + "_gemm")
            gemm_rs.build(M, n, k, world, dtype="bfloat16", b_major="col", name=name + "_local",
                          rs_comm=False).save(path + "_local")
            gemm_rs.build(M, n, k, world, dtype="bfloat16", b_major="col", name=name + "_nowait",
                          rs_comm="nowait").save(path + "_nowait")
            gemm_rs.build(M, n, k, world, dtype="bfloat16", b_major="col", name=name + "_bulk",
                          rs_push="bulk").save(path + "_bulk")
            r = art.launch.get("resources", {})
            print(f"built {name:32s} {len(art.cubin):7d} B  regs {r.get('registers')} spills "
                  f"{r.get('spill_stores')}/{r.get('spill_loads')}  {time.time() - t:5.1f} s", flush=True)
    print(f"artifacts in {args.out}")
    return 0


def make_sides(sel, a, w, rank, world, n, heap, artifact, group_name, setup_err):
    """``{side: (launch fn returning the output, output to poison or None, sync fn)}`` and
    ``{side: error}`` for the sides that could not be set up on this rank."""
    import torch
    import torch.distributed as dist
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
    if "axe" in sel:
        try:
            if setup_err.get("axe"):
                raise RuntimeError(setup_err["axe"])
            from axe.runtime.distributed import DistKernel
            k = DistKernel(artifact, heap)
            ya = torch.empty(M // world, n, device=a.device, dtype=a.dtype)

            def axe():
                k(a, w, ya)
                return ya
            sides["axe"] = (axe, ya, k.synchronize)
        except Exception as e:
            errs["axe"] = _why(e, rank)
    try:
        if "axe_gemm" in sel:
            from axe.runtime import load
            kg = load(artifact + "_gemm")
            yg = torch.empty(M, n, device=a.device, dtype=a.dtype)
            sides["axe_gemm"] = (lambda: (kg(a, w, yg), yg)[1], yg, sync)
        if "axe_local" in sel:
            from axe.runtime.distributed import DistKernel
            kl_ = DistKernel(artifact + "_local", heap)
            yl = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
            sides["axe_local"] = (lambda: (kl_(a, w, yl), yl)[1], None, kl_.synchronize)
        if "axe_nowait" in sel:
            from axe.runtime.distributed import DistKernel
            kn_ = DistKernel(artifact + "_nowait", heap)
            yn = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
            sides["axe_nowait"] = (lambda: (kn_(a, w, yn), yn)[1], None, kn_.synchronize)
        if "axe_bulk" in sel:
            from axe.runtime.distributed import DistKernel
            kb_ = DistKernel(artifact + "_bulk", heap)
            yb = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
            sides["axe_bulk"] = (lambda: (kb_(a, w, yb), yb)[1], yb, kb_.synchronize)
    except Exception as e:
        errs["axe_gemm" if "axe_gemm" in sel and "axe_gemm" not in sides else "axe_local"] = _why(e, rank)
    if setup_err.get("symm_mem"):
        errs["symm_mem"] = setup_err["symm_mem"]
    return {s: v for s, v in sides.items() if s in sel and s not in errs}, errs


def run_shape(args, model, n, k, rank, world, heap, group_name, setup_err):
    """Check, then time every selected side on one shape; returns the JSON row (the same on all ranks)."""
    import torch
    import torch.distributed as dist
    kl, ml, name = k // world, M // world, artifact_name(world, n, k)
    torch.manual_seed(1000 + rank)
    a = (torch.randn(M, kl, device="cuda") * 0.5).to(torch.bfloat16)
    w = (torch.randn(n, kl, device="cuda") * 0.5).to(torch.bfloat16)
    part = a.float() @ w.float().t()
    ref = {"bare": part.clone(), "axe_gemm": part.clone()}
    dist.all_reduce(part)
    ref.update({s: part[rank * ml:(rank + 1) * ml] for s in ("nccl", "symm_mem", "axe", "axe_bulk")})
    sides, errs = make_sides(args.sides, a, w, rank, world, n, heap, os.path.join(args.artifacts, name),
                             group_name, setup_err)
    err = {s: None for s in args.sides}
    for s, (fn, out, sync) in sides.items():
        try:
            if out is not None:
                out.fill_(float("nan"))
            got = fn()
            sync()
            if s not in ref:        # axe_local, axe_nowait: timing aids, their results are wrong by design
                continue
            e = ((got.float() - ref[s]).abs().max() / ref[s].abs().max()).item()   # NaN if a NaN is left
            err[s] = e if e == e else None
            if not e < TOL:
                errs[s] = f"rank {rank}: max abs err / max abs ref {e:.3e} (tolerance {TOL})"
        except Exception as e:
            errs[s] = _why(e, rank)
    del part, ref
    ok = torch.tensor([0.0 if s in errs or s not in sides else 1.0 for s in SIDES], device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)     # a side wrong on one rank is dropped on all
    err_all = [None] * world
    dist.all_gather_object(err_all, err)
    timed = [s for i, s in enumerate(SIDES) if ok[i].item() == 1.0]
    times = {s: [] for s in timed}

    def guarded(s, body):
        """Run ``body`` for side ``s``; if it raised on any rank, every rank drops the side."""
        bad = 0.0
        try:
            body()
        except Exception as e:
            errs.setdefault(s, _why(e, rank, "while timing: "))
            bad = 1.0
        flag = torch.tensor([bad], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            timed.remove(s)

    def block(s):
        """One measured block: barrier, then ``iters`` back-to-back launches between CUDA events."""
        fn, _, sync = sides[s]
        dist.barrier()
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(args.iters):
            fn()
        t1.record()
        sync()
        times[s].append(t0.elapsed_time(t1) / args.iters)

    for s in list(timed):
        guarded(s, lambda: ([sides[s][0]() for _ in range(WARMUP)], sides[s][2]()))
    for _ in range(REPEATS):
        for s in list(timed):
            guarded(s, lambda: block(s))
    errs_all = [None] * world
    dist.all_gather_object(errs_all, errs)
    med = torch.tensor([statistics.median(times[s]) if s in timed else 0.0 for s in SIDES], device="cuda")
    dist.all_reduce(med, op=dist.ReduceOp.MAX)    # a collective is as slow as its slowest rank
    ms = {s: med[i].item() if s in timed else None for i, s in enumerate(SIDES)}
    row = {"model": model, "M": M, "N": n, "K": k, "K_local": kl, "world": world, "artifact": name, "ms": ms,
           "status": {s: "not run" if s not in args.sides else "ok" if ms[s] else "FAIL" for s in SIDES},
           "rel_err_per_rank": {s: [e[s] for e in err_all] for s in args.sides},
           "errors": {s: [r[s] for r in errs_all if s in r] for s in SIDES if any(s in r for r in errs_all)},
           "tflops_per_gpu": {s: 2.0 * M * n * kl / (v * 1e-3) / 1e12 for s, v in ms.items() if v}}
    ax, nc, sm, ba = ms["axe"], ms["nccl"], ms["symm_mem"], ms["bare"]
    row["axe_vs_nccl"] = nc / ax if ax and nc else None
    row["axe_vs_symm_mem"] = sm / ax if ax and sm else None
    row["axe_over_bare_pct"] = (ax / ba - 1) * 100 if ax and ba else None
    if rank == 0:
        print(f"{model} {n}x{k} w{world}: " + "  ".join(f"{s} {v:.3f} ms" if v else f"{s} {row['status'][s]}"
                                                         for s, v in ms.items()), flush=True)
    del sides, a, w
    torch.cuda.empty_cache()
    return row


def goal(rows):
    """The goal check: axe faster than nccl and symm_mem on every shape, and within 5% of bare."""
    why = []
    for r in rows:
        tag = f"{r['model']} {r['N']}x{r['K']}"
        for key, bad in (("axe_vs_nccl", lambda v: v <= 1.0), ("axe_vs_symm_mem", lambda v: v <= 1.0),
                         ("axe_over_bare_pct", lambda v: v > 5.0)):
            if r[key] is None or bad(r[key]):
                why.append(f"{tag}: {key} {'missing' if r[key] is None else format(r[key], '.3f')}")
    return {"goal": "axe faster than both peers on every shape, and within 5% of bare", "met": not why, "misses": why}


def _driver():
    """The NVIDIA driver version: NVML, else nvidia-smi."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except ImportError:
        import subprocess
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], check=True,
                              capture_output=True, text=True, timeout=60).stdout.split()[0]


def _version(get):
    """``get()`` as a string, or "unknown (<error>)"."""
    try:
        v = get()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception as e:
        return f"unknown ({type(e).__name__})"


def report(args, rows, world):
    """Write the JSON and print the table (rank 0)."""
    import torch
    dev, date = torch.cuda.get_device_name(), datetime.date.today().isoformat()
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                     f"gemm_rs-{date}-{dev.replace('NVIDIA ', '').split()[0].lower()}-w{world}.json")
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                "driver": _version(_driver),
                "nccl": _version(lambda: ".".join(map(str, torch.cuda.nccl.version())))}
    g = goal(rows)
    result = {"benchmark": "gemm_rs", "date": date, "device": dev, "world": world,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count, "versions": versions,
              "problem": "Y_r = rows r*M/w.. of sum_g A_g W_g^T; A_g M x K/w, W_g N x K/w (nn.Linear weight); "
                         "M = 8192, bf16, (N, K) = (hidden, intermediate)",
              "check": f"max abs err / max abs ref < {TOL} vs fp32 partials all-reduced; fresh randn x0.5; "
                       "outputs NaN-poisoned; a failing side is not timed",
              "timing": f"CUDA events around {args.iters} back-to-back launches after {WARMUP} warm-ups; "
                        f"dist.barrier + synchronize before each block; sides interleaved; {REPEATS} repeats; "
                        "per-launch ms = median over repeats per rank, max over ranks; no L2 flush; multicast off",
              "figures": rows, "summary": g}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)

    def f(v, fmt, unit=""):
        return "-" if v is None else format(v, fmt) + unit
    print(f"\n{date}  {dev} x{world}  torch {torch.__version__}  cuda {torch.version.cuda}  -> {path}")
    print(f"{'model':15s} {'N×K':>11s} {'w':>2s} {'bare':>7s} {'nccl':>7s} {'symm_mem':>8s} {'axe':>7s} "
          f"{'vs nccl':>7s} {'vs symm':>7s} {'axe/bare':>8s} {'axe_gemm':>8s} {'axe_local':>9s} {'axe_nowait':>10s} {'axe_bulk':>8s}   "
          "(ms per launch; vs = peer/axe; axe/bare - 1; axe_gemm, axe_local: see DIAGNOSTIC)")
    for r in rows:
        c = {s: f(v, ".3f") if v else r["status"][s] for s, v in r["ms"].items()}
        print(f"{r['model']:15s} {r['N']:>5d}×{r['K']:<5d} {world:2d} {c['bare']:>7s} {c['nccl']:>7s} "
              f"{c['symm_mem']:>8s} {c['axe']:>7s} {f(r['axe_vs_nccl'], '.3f'):>7s} "
              f"{f(r['axe_vs_symm_mem'], '.3f'):>7s} {f(r['axe_over_bare_pct'], '+.1f', '%'):>8s} "
              f"{c['axe_gemm']:>8s} {c['axe_local']:>9s} {c['axe_nowait']:>10s} {c['axe_bulk']:>8s}")
    for r in rows:
        for x in r["rel_err_per_rank"].get("axe", []) and [r["rel_err_per_rank"]["axe"]]:
            print(f"axe rel err {r['model']:15s} per rank: " + " ".join(f(e, ".2e") for e in x))
        for s, texts in r["errors"].items():
            print(f"  {s} FAILED {r['model']}: " + " | ".join(texts))
    print(f"goal ({g['goal']}): {'met' if g['met'] else 'NOT met'}" + "".join(f"\n  {m}" for m in g["misses"]))


def run(args):
    """torchrun entry: one process per GPU; rank 0 writes the JSON and prints the table."""
    import torch
    import torch.distributed as dist
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    setup_err, heap = {}, None
    if "symm_mem" in args.sides:
        try:
            import warnings
            import torch.distributed._symmetric_memory as symm   # registers torch.ops.symm_mem
            with warnings.catch_warnings():                      # deprecated (a no-op) in newer torch
                warnings.simplefilter("ignore")
                getattr(symm, "enable_symm_mem_for_group", lambda g: None)(group_name)
        except Exception as e:
            setup_err["symm_mem"] = _why(e, rank, "setup: ")
    if "axe" in args.sides:
        try:
            from axe.runtime.symmetric import SymmetricHeap
            heap = SymmetricHeap(pool_bytes=POOL_BYTES)
        except Exception as e:
            setup_err["axe"] = _why(e, rank, "SymmetricHeap(): ")
    rows = [run_shape(args, m, n, k, rank, world, heap, group_name, setup_err) for m, n, k in shapes(args.only, world)]
    dist.barrier()
    if rank == 0:
        report(args, rows, world)
    dist.destroy_process_group()
    return 0


def main(argv=None):
    """Parse the command line (no torch needed) and dispatch to ``build`` or ``run``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("build", help="build the axe artifacts (CPU machine, TVM)")
    b.add_argument("--world", type=int, nargs="+", action="extend", help="world sizes (default 2), e.g. --world 2 4")
    b.add_argument("--out", default=os.path.join(ROOT, ".carry", "gemm_rs_bench"))
    r = sub.add_parser("run", help="check and time the sides (under torchrun on the GPU machine, no TVM)")
    r.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_rs_bench"))
    r.add_argument("--json", default=None, help="default benchmarks/results/gemm_rs-<date>-<device>-w<W>.json")
    r.add_argument("--iters", type=int, default=20, help="launches per measured block")
    r.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    for p in (b, r):
        p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                       help="model names, NxK or artifact names (e.g. Llama-3.1-8B 4096x14336)")
    args = ap.parse_args(argv)
    if args.mode == "build":
        args.world = args.world or [2]
        return build(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
