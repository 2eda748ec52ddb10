#!/usr/bin/env python3
"""TMA L2 promotion, none against 128 and 256 bytes, on the same cubins: the GEMMs' run-time-M artifacts of
an artifact cache (``kernels.gemm.make_dynamic`` and ``kernels.gemm_fp8.make_dynamic`` entries),
each loaded three times — its tensor maps encoded with ``l2_promotion`` 0 (the driver's default,
what axe asked for until 2026-11-27), 128 and 256 (:data:`axe.backends.cuda.schedules.tma.L2_PROMOTION`) —
and cuBLAS, side by side in one run.

The promotion is a field of the tensor map the runtime encodes on the host (``launch.json``'s
``tensormaps``), not of the cubin, so the two sides run the same machine code and differ only in
how L2 fills from DRAM.  Each side is checked against torch in fp32 (C poisoned with NaN) before it is
timed from a CUDA graph in interleaved rounds (median of the rounds' medians).

GPU machine: ``python3 benchmarks/tma_l2.py --cache DIR [DIR ...] [--ms 1 16 64 128 8192]
[--json PATH]``; a bounded artifact (``max_rows``) runs at the values of ``--ms`` it serves (for
each value, the smallest bound that serves it), an unbounded one at the values above 1024.  JSON
``benchmarks/results/tma_l2-<date>-<device>.json``: rows ``kernel, N, K, dtype, M, config,
none_us, l2_128_us, l2_256_us, cublas_us``.
"""

import argparse
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from result_file import write_rows  # noqa: E402

MS = (1, 16, 64, 128, 8192)
SIDES = {"none_us": 0, "l2_128_us": 128, "l2_256_us": 256}


def flat(folder):
    """``[(kind, spec, dir)]`` of a folder of named FP8 artifacts (``benchmarks/gemm_fp8_allm.py --build``:
    ``gemm_fp8_dyn_<N>x<K>_<configuration>``, a bounded one's configuration naming ``max_rows<R>``)."""
    out = []
    for d in sorted(glob.glob(os.path.join(folder, "gemm_fp8_dyn_*", ""))):
        m = re.match(r"gemm_fp8_dyn_(\d+)x(\d+)_(.*)", os.path.basename(os.path.dirname(d)))
        if m:
            rows = re.search(r"max_rows(\d+)", m[3])
            out.append(("gemm_fp8", {"N": int(m[1]), "K": int(m[2]), "config": m[3],
                                     "max_rows": int(rows[1]) if rows else None}, d))
    return out


def entries(caches):
    """``[(kind, spec, dir)]``: the GEMM artifacts of the caches (``kind``: ``gemm`` or ``gemm_fp8``),
    or of a folder of named FP8 artifacts (:func:`flat`)."""
    out = []
    for cache in caches:
        out += flat(cache)
        for kind in ("gemm", "gemm_fp8"):
            for key in sorted(glob.glob(os.path.join(cache, f"kernels.{kind}.make_dynamic", "*", "key.json"))):
                with open(key) as f:
                    out.append((kind, json.load(f)["spec"], os.path.dirname(key)))
    return out


def served(entries_, ms):
    """``[(kind, spec, dir, M)]``: each M of ``ms`` on the tightest bounded artifact of its shape
    that serves it (every configuration of that bound), and M above 1024 on the unbounded ones."""
    out = []
    for kind, spec, d in entries_:
        bound = spec.get("max_rows")
        same = [s.get("max_rows") for k, s, _ in entries_ if k == kind and (s["N"], s["K"], s.get("dtype")) ==
                (spec["N"], spec["K"], spec.get("dtype"))]
        for m in ms:
            if bound is None:
                if m > 1024:
                    out.append((kind, spec, d, m))
            elif m <= bound and bound == min(b for b in same if b is not None and b >= m):
                out.append((kind, spec, d, m))
    return out


def promoted(rt, d, size):
    """The artifact in ``d`` loaded with every tensor map's L2 promotion set to ``size`` bytes."""
    kern = rt.load(d)
    for spec in kern.launch.get("tensormaps", []):
        spec["l2_promotion"] = size
    return kern


def problem(torch, kind, spec, m):
    """``(args, C, reference, cublas)`` of one GEMM call at M = ``m``."""
    n, k = spec["N"], spec["K"]
    if kind == "gemm":
        dt = getattr(torch, spec.get("dtype", "bfloat16"))
        a = torch.randn(m, k, device="cuda", dtype=dt)
        w = torch.randn(n, k, device="cuda", dtype=dt)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        return (a, w, c), c, a.float() @ w.float().t(), lambda: torch.matmul(a, w.t())
    from gemm_fp8 import Cublas
    from kernels.fp8_blocks import quantize_blocks, quantize_rows, reference
    A, SA = quantize_rows(torch.randn(m, k, device="cuda"))
    W, SB = quantize_blocks(torch.randn(n, k, device="cuda"))
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    try:
        _, cub = Cublas().call(A, W, SA, SB)
    except RuntimeError:        # cuBLAS refuses some shapes (M = 1 on torch 2.11): axe's sides still run
        cub = None
    return (A, W, SA, SB, c), c, reference(A, W, SA, SB)["C"].float(), cub


def config_name(spec):
    return spec.get("config") or "_".join(f"{k}{v}" for k, v in sorted(spec.items()) if k not in ("N", "K", "dtype", "b_major"))


def measure(torch, rt, kind, spec, d, m, rounds):
    """One row: artifact ``d`` at M = ``m`` with each promotion, checked, then timed beside cuBLAS."""
    from axe.torch.timing import capture, graph_ms, median, round_robin
    args, c, ref, cublas = problem(torch, kind, spec, m)
    fns, errs = {}, {}
    for side, size in SIDES.items():
        kern = promoted(rt, d, size)
        c.fill_(float("nan"))
        kern(*args)
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 2e-2:
            raise AssertionError(f"l2_promotion={size}: rel err {err:.2e}")
        errs[side], fns[side] = err, (lambda kern=kern: kern(*args))
    if cublas is not None:
        fns["cublas_us"] = cublas
    graphs = {key: capture(torch, f)[0] for key, f in fns.items()}
    reps = 20 if m <= 1024 else 5
    timed = round_robin({key: (lambda g=g: graph_ms(torch, g, reps)) for key, g in graphs.items()}, rounds)
    us = {key: round(median(v) * 1e3, 2) for key, v in timed.items()}
    row = {"kernel": kind, "N": spec["N"], "K": spec["K"], "dtype": spec.get("dtype", "float8_e4m3fn"), "M": m,
           "config": config_name(spec), **us, "rel_err": errs}
    print(f"{kind:8s} {spec['N']:6d}x{spec['K']:<6d} M={m:5d} {row['config']:44s} none {us['none_us']:9.1f}  "
          f"128B {us['l2_128_us']:9.1f}  256B {us['l2_256_us']:9.1f} ({us['none_us'] / us['l2_256_us']:.3f}x)  cuBLAS {us.get('cublas_us', float('nan')):9.1f}",
          flush=True)
    return row


def run(caches, ms, rounds, path):
    import torch

    import axe.runtime as rt
    dev = torch.cuda.get_device_name()
    todo = served(entries(caches), ms)
    print(f"{dev}: {len(todo)} (artifact, M) pairs", flush=True)
    rows = []
    seen = set()
    for kind, spec, d, m in todo:
        ident = (kind, json.dumps(spec, sort_keys=True), m)
        if ident in seen:           # the same configuration in two caches
            continue
        seen.add(ident)
        try:
            rows.append(measure(torch, rt, kind, spec, d, m, rounds))
        except Exception as e:  # noqa: BLE001  (a failed check or an unloadable artifact is a row, not the end)
            rows.append({"kernel": kind, "N": spec["N"], "K": spec["K"], "M": m, "config": config_name(spec),
                         "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"{kind} {spec} M={m}: {rows[-1]['error']}", flush=True)
    path = write_rows(torch, "tma_l2", rows, f"CUDA graph replays, median of {rounds} interleaved rounds; the same "
                      "cubin on every side", path)
    ratios = sorted(r["none_us"] / r["l2_256_us"] for r in rows if "error" not in r)
    if ratios:
        print(f"none/256B: median {ratios[len(ratios) // 2]:.3f}, min {ratios[0]:.3f}, max {ratios[-1]:.3f}; wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", nargs="+", required=True, help="artifact cache folders (AXE_CACHE_DIR)")
    ap.add_argument("--ms", nargs="+", type=int, default=MS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    run(a.cache, a.ms, a.rounds, a.json)


if __name__ == "__main__":
    main()
