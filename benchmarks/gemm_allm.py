#!/usr/bin/env python3
"""The GEMM at every M (``benchmarks/gemm.py --allm``): ``torch.ops.axe.gemm(a, w, True)`` — the op
a serving stack calls, choosing its artifact per bucket of M — beside cuBLAS (``a @ w.T``) and an
autotuned Triton matmul, for M in :data:`MS` × the 16 MLP weight shapes of ``benchmarks/gemm.py``,
all three timed from CUDA graphs in interleaved rounds (median of the rounds' medians).  For
M ≤ 128 the row also carries the DRAM limit: W's bytes ÷ this run's read rate.

CPU machine: ``.venv/bin/python benchmarks/gemm_allm.py build [--dtypes ...]`` fills the op's cache
``.carry/axe_cache`` with every bucket's artifact the sweep calls (the heuristic's configurations, on an
H100 and on an H200: :data:`DRAM_BPS`).
GPU machine: ``python3 benchmarks/gemm.py --allm [--dtypes ...] [--json PATH]`` checks each side
against cuBLAS (fresh random data) and writes ``gemm-allm-DATE-DEVICE.json`` (to ``$OUT`` when
set, else ``benchmarks/results/``): rows ``M, N, K, dtype, axe_ms, cublas_ms, triton_ms, config``
and ``dram_limit_ms`` where M ≤ 128.
"""

import datetime
import json
import os
import platform
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
CACHE = os.path.join(ROOT, ".carry", "axe_cache")
MS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def weight_shapes(only=None):
    """The sweep's (N, K) weight shapes, sorted: the 16 MLP shapes, or of them those in ``only``
    (``["4608x36864", ...]``; an unknown one is an error naming the known ones)."""
    from mlp_gemm import SHAPES
    shapes = sorted({(n, k) for _, _, n, k in SHAPES})
    if not only:
        return shapes
    want = [tuple(int(v) for v in s.lower().split("x")) for s in only]
    unknown = [s for s, w in zip(only, want) if w not in shapes]
    if unknown:
        raise SystemExit(f"--shapes {unknown}: not MLP weight shapes; they are "
                         f"{['%dx%d' % nk for nk in shapes]}")
    return [nk for nk in shapes if nk in want]


#: the GPUs a build serves, by DRAM bandwidth (the heuristic's one device input besides the SM count):
#: an H100 SXM (the heuristic's default, ``kernels.gemm_select.DRAM_BPS``) and an H200, whose decode
#: picks differ (``kernels.gemm_select.CTA_STREAM_BPS``); None: the default
DRAM_BPS = {"h100": None, "h200": 4.8e12}


def specs(dtypes, shapes=None, ms=MS):
    """``[(N, K, dtype, M, spec)]``: what the op asks for at every row of the sweep, on each GPU of
    :data:`DRAM_BPS` (a spec the GPUs share appears once per GPU)."""
    from axe.torch import tune
    out = []
    for gpu, bps in DRAM_BPS.items():
        tune.note_device(f"sweep-{gpu}", bps)
        out += [(n, k, dt, m, tune.spec_for(f"sweep-{gpu}", n, k, dt, "col", m)) for dt in dtypes
                for n, k in weight_shapes(shapes) for m in ms]
    return out


def build(dtypes, shapes=None, ms=MS):
    from axe.progress import Progress
    from axe.torch import ops
    from axe.torch.cache import ArtifactCache
    cache = ArtifactCache(CACHE, shipped=[])
    todo = []
    for *_, spec in specs(dtypes, shapes, ms):
        if spec not in todo:
            todo.append(spec)
    k = ops.KERNELS["gemm_nt"]
    k._cache, k.progress = cache, False
    with Progress(len(todo), "build") as p:
        for spec in todo:
            with p.step(str(spec)):
                k.artifact_path("sm_90a", spec)
    return 0


def _rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def _write(path, head, rows, summary):
    with open(path, "w") as f:
        json.dump({**head, "rows": rows, "summary": summary}, f, indent=1)


def run(dtypes, path=None, rounds=3, shapes=None, row_counts=MS):
    os.environ["AXE_CACHE_DIR"] = CACHE
    import torch
    import triton

    import axe.torch.ops  # noqa: F401  (registers torch.ops.axe)
    from axe.torch import tune
    from axe.torch.timing import capture, graph_ms, median, round_robin
    from mlp_gemm import triton_matmul
    from gemm_decode import read_rate
    tri = triton_matmul(few=True)
    rate = read_rate(torch)
    dev = torch.cuda.get_device_name()
    print(f"{dev}: read rate {rate / 1e12:.2f} TB/s", flush=True)
    rows = []
    shapes = weight_shapes(shapes)
    date = datetime.date.today().isoformat()
    short = dev.replace("NVIDIA ", "").split()[0].lower()
    path = path or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                f"gemm-allm-{date}-{short}.json")
    from axe.runtime.device import dram_bytes_per_s
    head = {"benchmark": "gemm-allm", "date": date, "device": dev, "read_rate_Bps": rate,
            "dram_peak_Bps": dram_bytes_per_s(torch.cuda.current_device()),
            "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                         "python": platform.python_version()},
            "timing": f"CUDA graph replays, median of {rounds} interleaved rounds (each the median of 10 batches of "
                      "5 replays); C = A·Wᵀ, W N×K; axe = torch.ops.axe.gemm (the bucket's heuristic configuration), "
                      "cuBLAS = torch.matmul, Triton autotuned over 3 configurations"}
    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for n, k in shapes:
            w = torch.randn(n, k, device="cuda", dtype=tdt)
            for m in row_counts:
                a = torch.randn(m, k, device="cuda", dtype=tdt)
                ref = torch.matmul(a, w.t())
                ct = torch.empty_like(ref)
                got = torch.ops.axe.gemm(a, w, True)
                err = _rel(got, ref)
                assert err < TOL[dtype], f"axe {m}x{n}x{k} {dtype}: rel err {err:.2e}"
                assert _rel(tri(a, w, ct), ref) < TOL[dtype], f"triton {m}x{n}x{k} {dtype}"
                fns = {"axe": lambda: torch.ops.axe.gemm(a, w, True), "cublas": lambda: torch.matmul(a, w.t()),
                       "triton": lambda: tri(a, w, ct)}
                graphs = {key: capture(torch, f)[0] for key, f in fns.items()}
                ms = {key: median(v) for key, v in
                      round_robin({key: (lambda g=g: graph_ms(torch, g, 10, inner=5)) for key, g in graphs.items()},
                                  rounds).items()}
                spec = tune.spec_for(dev, n, k, dtype, "col", m)
                row = {"M": m, "N": n, "K": k, "dtype": dtype, "axe_ms": ms["axe"], "cublas_ms": ms["cublas"],
                       "triton_ms": ms["triton"], "rel_err": err,
                       "config": {key: v for key, v in spec.items() if key not in ("N", "K", "dtype", "b_major")}}
                if m <= 128:
                    row["dram_limit_ms"] = n * k * tdt.itemsize / rate * 1e3
                rows.append(row)
                print(f"{dtype} {m:5d}x{n}x{k}: axe {ms['axe'] * 1e3:8.1f} us  cuBLAS {ms['cublas'] * 1e3:8.1f}  "
                      f"triton {ms['triton'] * 1e3:8.1f}  x{ms['cublas'] / ms['axe']:.3f}", flush=True)
                del graphs
            _write(path, head, rows, {})            # what is measured so far survives a time limit
    summary = {}
    for dtype in dtypes:
        for m in row_counts:
            r = [x["cublas_ms"] / x["axe_ms"] for x in rows if x["dtype"] == dtype and x["M"] == m]
            summary[f"{dtype} M={m}"] = {"axe_vs_cublas_median": statistics.median(r), "axe_vs_cublas_min": min(r)}
        r = [x["cublas_ms"] / x["axe_ms"] for x in rows if x["dtype"] == dtype]
        summary[dtype] = {"axe_vs_cublas_median": statistics.median(r), "axe_vs_cublas_min": min(r)}
    _write(path, head, rows, summary)
    for key, s in summary.items():
        print(f"{key}: axe/cuBLAS median {s['axe_vs_cublas_median']:.3f} min {s['axe_vs_cublas_min']:.3f}")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("build",))
    ap.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"])
    ap.add_argument("--shapes", nargs="*", help="NxK weight shapes of the 16 (default: all)")
    ap.add_argument("--ms", type=int, nargs="*", default=list(MS), help="row counts (default: the sweep's)")
    args = ap.parse_args()
    sys.exit(build(args.dtypes, args.shapes, args.ms))
