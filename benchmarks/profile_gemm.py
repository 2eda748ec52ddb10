#!/usr/bin/env python3
"""What cuBLAS runs for the benchmark's shapes, and one launch of each side for a profiler (GPU, no TVM).

``python3 benchmarks/profile_gemm.py names [--m M ...]`` prints, for every MLP shape and dtype of
``benchmarks/gemm.py`` at M = 8192 (or the given row counts), the kernel(s) torch.matmul launches
with their grid, block, registers and shared memory (from a torch.profiler trace): the tile,
cluster and split strategy cuBLAS picked.

``python3 benchmarks/profile_gemm.py once N K [--dtype float16] [--artifacts DIR]`` launches the axe
artifact for (N, K) once and torch.matmul once on the same data, checked against each other, for
``ncu`` to profile (each kernel alone, caches flushed by ncu).

``python3 benchmarks/profile_gemm.py once_fp8 M N K --variant bn256 [--artifacts DIR]`` does the same for the
block-scaled FP8 GEMM's static artifact of ``benchmarks/build_gemm_fp8.py`` and cuBLAS's blockwise
``torch._scaled_mm``, each checked against fp32 of the dequantized operands.

``python3 benchmarks/profile_gemm.py sustain N K [--seconds 4]`` runs each side back to back for a
few seconds while NVML samples the SM clock and the power draw: is the GEMM power-limited, and
does one side run at a lower clock than the other?
"""

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def names(dtypes, ms=None):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gemm import M
    from mlp_gemm import SHAPES
    for m in ms or (M,):
        _names(torch, profile, ProfilerActivity, SHAPES, dtypes, m)


def _names(torch, profile, ProfilerActivity, SHAPES, dtypes, M):
    seen = {}
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for model, proj, n, k in SHAPES:
            if (n, k, dtype) in seen:
                continue
            a = torch.randn(M, k, device="cuda", dtype=tdt)
            w = torch.randn(n, k, device="cuda", dtype=tdt)
            torch.matmul(a, w.t())
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                torch.matmul(a, w.t())
                torch.cuda.synchronize()
            path = os.path.join(tempfile.mkdtemp(), "t.json")
            prof.export_chrome_trace(path)
            kernels = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
            seen[(n, k, dtype)] = [(e["name"], e["args"].get("grid"), e["args"].get("block"),
                                    e["args"].get("registers per thread"), e["args"].get("shared memory"),
                                    e.get("dur")) for e in kernels]
            for name, grid, block, regs, smem, dur in seen[(n, k, dtype)]:
                print(f"M={M:<5d} {dtype:8s} {n:6d}x{k:<6d} {name[:160]:160s} grid {grid} block {block} regs {regs} "
                      f"smem {smem} {dur} us", flush=True)
            del a, w


def once(n, k, dtype, artifacts):
    import torch
    kern, a, w, c = _setup(n, k, dtype, artifacts)
    kern(a, w, c)
    ref = torch.matmul(a, w.t())
    torch.cuda.synchronize()
    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"axe vs cuBLAS rel err {err:.2e}")
    return 0 if err < 1e-2 else 1


def _setup(n, k, dtype, artifacts):
    import torch

    import axe.runtime as rt
    from gemm import M, artifact_name
    tdt = getattr(torch, dtype)
    kern = rt.load(os.path.join(artifacts, artifact_name(dtype, n, k)))
    a = torch.randn(M, k, device="cuda", dtype=tdt)
    w = torch.randn(n, k, device="cuda", dtype=tdt)
    return kern, a, w, torch.empty(M, n, device="cuda", dtype=tdt)


def once_fp8(m, n, k, variant, artifacts):
    import torch

    import axe.runtime as rt
    from gemm_fp8 import Cublas, artifact_name, rel_err
    from kernels.fp8_blocks import quantize_blocks, quantize_rows, reference
    A, SA = quantize_rows(torch.randn(m, k, device="cuda"))
    W, SB = quantize_blocks(torch.randn(n, k, device="cuda"))
    ref = reference(A, W, SA, SB)["C"]
    C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    kern = rt.load(os.path.join(artifacts, f"{artifact_name(m, n, k, 256)[:-len('bn256')]}{variant}"))
    _, cublas = Cublas().call(A, W, SA, SB)
    worst = 0.0
    for side, fn in (("axe", lambda: kern(A, W, SA, SB, C)), ("cublas", cublas)):
        C.fill_(float("nan"))
        out = fn()
        torch.cuda.synchronize()
        err = rel_err(out if side == "cublas" else C, ref)
        worst = max(worst, err)
        print(f"{side} {m}x{n}x{k} rel err {err:.2e}", flush=True)
    return 0 if worst < 1e-2 else 1


def sustain(n, k, dtype, artifacts, seconds):
    import torch

    from axe.torch.timing import sustained
    kern, a, w, c = _setup(n, k, dtype, artifacts)
    for side, fn in (("axe", lambda: kern(a, w, c)), ("cublas", lambda: torch.matmul(a, w.t(), out=c))) * 2:
        x = sustained(torch, fn, seconds)
        print(f"{side:7s} {n}x{k} {dtype}: {2.0 * a.shape[0] * n * k / (x['ms'] * 1e-3) / 1e12:6.0f} TFLOP/s  "
              f"SM clock {x['sm_mhz']:6.0f} MHz  power {x['watts']:5.0f} W  (min clock {x['min_mhz']})", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("names")
    p.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    p.add_argument("--m", type=int, nargs="*", help="row counts (default: 8192)")
    p = sub.add_parser("once")
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_bench"))
    p = sub.add_parser("once_fp8")
    p.add_argument("m", type=int)
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("--variant", default="bn256", help="the artifact's variant (benchmarks/gemm_fp8.variant_name)")
    p.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_fp8"))
    p = sub.add_parser("sustain")
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_bench"))
    args = ap.parse_args()
    if args.cmd == "names":
        sys.exit(names(args.dtypes, args.m))
    if args.cmd == "once_fp8":
        sys.exit(once_fp8(args.m, args.n, args.k, args.variant, args.artifacts))
    if args.cmd == "sustain":
        sys.exit(sustain(args.n, args.k, args.dtype, args.artifacts, args.seconds))
    sys.exit(once(args.n, args.k, args.dtype, args.artifacts))
