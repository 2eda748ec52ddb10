#!/usr/bin/env python3
"""Hopper GEMM side by side (GPU, no TVM): axe (``kernels/gemm.py``), torch.matmul (cuBLAS) and
an autotuned Triton matmul, at M = 8192 for the 16 MLP weight shapes of 8 models.

``C = A·Wᵀ`` with A (8192×K) row-major and W (N×K) an ``nn.Linear`` weight; up-projection
(N, K) = (intermediate, hidden), down-projection (hidden, intermediate).  Artifacts come from
``benchmarks/build_gemm.py`` (CPU machine).  Each axe artifact is checked against torch (fp32
reference, fresh random data) before it is timed.  Timing: ``triton.testing.do_bench`` median
on random data.  Writes ``benchmarks/results/gemm-<date>-<device>.json`` (or ``--json``) and
prints a table last.

On an sm_100 device (B200, compute capability 10.0) it loads the sm_100a artifacts
(``build_gemm.py --target sm_100a``: tcgen05 with a TMEM accumulator, names ending ``_sm100``), on
an H100/H200 the sm_90a ones; ``--target`` overrides.  (The sm_100a path is written but has not run:
no B200 has been lent yet.)

``--dynamic`` also times the dynamic-M build of each shape (``kernels/gemm.py:make_dynamic``, one
artifact for every M; ``build_gemm.py --dynamic`` builds it as ``..._dyn``) beside the static one:
it is first checked against cuBLAS at M = 8192 and at the ragged M = 1000 (the same artifact), and
the host time per call (argument checks, grid from M, tensor maps) of both is measured.

Usage (GPU machine): ``python3 benchmarks/gemm.py [--artifacts DIR] [--dtypes float16 bfloat16] [--target T]
[--dynamic]``.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from mlp_gemm import SHAPES, triton_matmul  # noqa: E402

M = 8192
RAGGED = 1000       # --dynamic: a second row count the dynamic artifact is checked at (not a multiple of 128)
#: build target -> (artifact name suffix, persistent CTAs: the SM count of the GPU it is built for, H100/H200 and B200)
BUILD_TARGETS = {"sm_90a": ("", 132), "sm_100a": ("_sm100", 148)}


def artifact_name(dtype, n, k, target="sm_90a", dynamic=False):
    """The artifact folder of a shape: static M = :data:`M`, or ``dynamic`` (any M, ``_dyn``)."""
    return f"gemm_{'f16' if dtype == 'float16' else 'bf16'}_{n}x{k}{BUILD_TARGETS[target][0]}{'_dyn' * dynamic}"


def device_target():
    """The build target whose artifacts this device runs (compute capability 9.0 -> sm_90a, 10.0 -> sm_100a)."""
    from axe.torch.jit import target_of
    import torch
    return target_of(torch.device("cuda"))


def checked_run(kern, n, k, tdt, tol, m=M):
    """Fresh random A (m×K), W (N×K); C poisoned with NaN, computed by ``kern`` and compared with
    cuBLAS: ``(a, w, c, ref, rel err, ok)``."""
    import torch
    a = torch.randn(m, k, device="cuda", dtype=tdt)
    w = torch.randn(n, k, device="cuda", dtype=tdt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
    kern(a, w, c)
    ref = torch.matmul(a, w.t())
    err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
    return a, w, c, ref, err, bool(not c.isnan().any() and err < tol)


def _bench(fn):
    from triton.testing import do_bench
    return do_bench(fn, warmup=100, rep=500, return_mode="median")


def host_us(fn, n=200):
    """Host microseconds per call of ``fn`` (launches queued, not waited for; a sync before and after)."""
    import time

    import torch
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return us


def dynamic_columns(artifacts, name, kern, a, w, c, n, k, tdt, tol):
    """``--dynamic``: the dynamic-M artifact of a shape checked at M and at :data:`RAGGED`, then
    timed on the static run's operands; ``(ms, host us static, host us dynamic, rel err, ok)``."""
    import axe.runtime as rt
    dkern = rt.load(os.path.join(artifacts, name))
    ok, err = True, 0.0
    for m in (M, RAGGED):
        *_, e, good = checked_run(dkern, n, k, tdt, tol, m)
        ok, err = ok and good, max(err, e)
        if not good:
            print(f"WRONG: {name} at M={m} rel err {e:.2e} vs cuBLAS (tolerance {tol}); timed anyway, marked", flush=True)
    return _bench(lambda: dkern(a, w, c)), host_us(lambda: kern(a, w, c)), host_us(lambda: dkern(a, w, c)), err, ok


def run(artifacts, dtypes, target, dynamic=False):
    import torch

    import axe.runtime as rt
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from cases_gemm import TOL

    tri = triton_matmul()
    rows = []
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for model, proj, n, k in SHAPES:
            name = artifact_name(dtype, n, k, target)
            kern = rt.load(os.path.join(artifacts, name))
            a, w, c, ref, err, ok = checked_run(kern, n, k, tdt, TOL[dtype])
            if not ok:
                print(f"WRONG: {name} rel err {err:.2e} vs cuBLAS (tolerance {TOL[dtype]}); timed anyway, marked", flush=True)
            ct = torch.empty_like(c)
            tri(a, w, ct)
            terr = ((ct.float() - ref.float()).norm() / ref.float().norm()).item()
            assert terr < TOL[dtype], f"triton {name}: rel err {terr:.2e}"
            ms = {"axe": _bench(lambda: kern(a, w, c)),
                  "cublas": _bench(lambda: torch.matmul(a, w.t(), out=ct)),
                  "triton": _bench(lambda: tri(a, w, ct))}
            extra = {}
            if dynamic:
                ms["axe_dynamic"], hs, hd, derr, dok = dynamic_columns(
                    artifacts, artifact_name(dtype, n, k, target, True), kern, a, w, c, n, k, tdt, TOL[dtype])
                extra = {"host_us": {"axe": hs, "axe_dynamic": hd}, "axe_dynamic_rel_err_vs_cublas": derr,
                         "axe_dynamic_correct": dok}
            flops = 2.0 * M * n * k
            tf = {kk: flops / (v * 1e-3) / 1e12 for kk, v in ms.items()}
            if dynamic:
                extra.update(axe_dynamic_vs_cublas=tf["axe_dynamic"] / tf["cublas"],
                             axe_dynamic_vs_static=tf["axe_dynamic"] / tf["axe"])
            rows.append({"model": model, "proj": proj, "dtype": dtype, "M": M, "N": n, "K": k, "ms": ms,
                         "tflops": tf, "axe_vs_cublas": tf["axe"] / tf["cublas"],
                         "triton_vs_cublas": tf["triton"] / tf["cublas"], "axe_rel_err_vs_cublas": err, "axe_correct": ok,
                         **extra})
            print(f"{dtype} {model} {proj}: axe {tf['axe']:.0f} cuBLAS {tf['cublas']:.0f} triton {tf['triton']:.0f}"
                  + (f" axe dynamic {tf['axe_dynamic']:.0f}" if dynamic else ""), flush=True)
            del a, w, c, ct, ref
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "gemm_bench"))
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--target", choices=sorted(BUILD_TARGETS), default=None,
                    help="whose artifacts to load (default: the device's, from its compute capability)")
    ap.add_argument("--dynamic", action="store_true",
                    help="also time the dynamic-M artifacts (build_gemm.py --dynamic) beside the static ones")
    ap.add_argument("--allm", action="store_true",
                    help="the M sweep through torch.ops.axe.gemm (benchmarks/gemm_allm.py) instead of M = 8192")
    ap.add_argument("--shapes", nargs="*", help="--allm: NxK weight shapes of the 16 (default: all)")
    ap.add_argument("--ms", type=int, nargs="*", help="--allm: row counts (default: the sweep's ten)")
    args = ap.parse_args(argv)
    if args.allm:
        import gemm_allm
        return gemm_allm.run(args.dtypes, args.json, shapes=args.shapes, row_counts=args.ms or gemm_allm.MS)
    import torch
    import triton

    target = args.target or device_target()
    print(f"axe artifacts for {target} from {args.artifacts}", flush=True)
    rows = run(args.artifacts, args.dtypes, target, args.dynamic)
    dev = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    short = dev.replace("NVIDIA ", "").split()[0].lower()
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                     f"gemm-{date}-{short}.json")
    summary = {}
    for dtype in args.dtypes:
        r = [x["axe_vs_cublas"] for x in rows if x["dtype"] == dtype]
        t = [x["triton_vs_cublas"] for x in rows if x["dtype"] == dtype]
        summary[dtype] = {"axe_vs_cublas_median": statistics.median(r), "axe_vs_cublas_min": min(r),
                          "triton_vs_cublas_median": statistics.median(t), "triton_vs_cublas_min": min(t)}
        if args.dynamic:
            for key in ("axe_dynamic_vs_cublas", "axe_dynamic_vs_static"):
                v = [x[key] for x in rows if x["dtype"] == dtype]
                summary[dtype].update({f"{key}_median": statistics.median(v), f"{key}_min": min(v)})
            for who in ("axe", "axe_dynamic"):
                summary[dtype][f"host_us_{who}_median"] = statistics.median(
                    x["host_us"][who] for x in rows if x["dtype"] == dtype)
    result = {"benchmark": "gemm", "date": date, "device": dev, "target": target, "sms": torch.cuda.get_device_properties(0).multi_processor_count,
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                           "python": platform.python_version()},
              "timing": "triton.testing.do_bench median, warmup 100 ms, rep 500 ms; random normal data; "
                        "C = A·Wᵀ, A 8192×K row-major, W N×K; TFLOP/s = 2MNK / time",
              "figures": rows, "summary": summary}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\n{date}  {dev}  torch {torch.__version__}  triton {triton.__version__}  -> {path}")
    print(f"{'dtype':8s} {'model':15s} {'proj':4s} {'N':>6s} {'K':>6s} {'axe':>6s} {'cuBLAS':>6s} {'triton':>6s} "
          f"{'axe/cuBLAS':>10s} {'triton/cuBLAS':>13s}" + (f" {'dyn':>6s} {'dyn/static':>10s}" if args.dynamic else "")
          + "   (TFLOP/s)")
    for x in rows:
        tf = x["tflops"]
        print(f"{x['dtype']:8s} {x['model']:15s} {x['proj']:4s} {x['N']:6d} {x['K']:6d} {tf['axe']:6.0f} "
              f"{tf['cublas']:6.0f} {tf['triton']:6.0f} {x['axe_vs_cublas']:10.3f} {x['triton_vs_cublas']:13.3f}"
              + (f" {tf['axe_dynamic']:6.0f} {x['axe_dynamic_vs_static']:10.3f}" if args.dynamic else "")
              + ("" if x["axe_correct"] and x.get("axe_dynamic_correct", True) else "  WRONG"))
    for dtype, s in summary.items():
        print(f"{dtype}: axe/cuBLAS median {s['axe_vs_cublas_median']:.3f} min {s['axe_vs_cublas_min']:.3f}; "
              f"triton/cuBLAS median {s['triton_vs_cublas_median']:.3f} min {s['triton_vs_cublas_min']:.3f}"
              + (f"; dynamic/cuBLAS median {s['axe_dynamic_vs_cublas_median']:.3f}, dynamic/static median "
                 f"{s['axe_dynamic_vs_static_median']:.3f} min {s['axe_dynamic_vs_static_min']:.3f}, host us/call "
                 f"static {s['host_us_axe_median']:.1f} dynamic {s['host_us_axe_dynamic_median']:.1f}"
                 if args.dynamic else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
