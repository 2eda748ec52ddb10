#!/usr/bin/env python3
"""The decode buckets (M ≤ 16, ≤ 64, ≤ 128) of the GEMM, and with ``--mid`` the middle ones (≤ 256,
≤ 512, ≤ 1024): every candidate configuration of ``kernels/gemm_select.py`` against cuBLAS and the
DRAM limit, side by side in one run.

Each candidate is one artifact for every M of its bucket (``make_dynamic(N, K, max_rows=..., ...)``:
scheduled statically for one block-row, so narrow tiles, split-K and the transposed decode tile
fill the GPU; the 128-row tiles are built once with ``max_rows=128`` and serve every decode
bucket, a transposed ``tile_m`` tile with ``max_rows=tile_m``; a middle bucket's split-K and stream-K
candidates are built for their bound, ``<config>_r<bound>``); ``C = A·Wᵀ``,
bf16, W an ``nn.Linear`` weight (N×K).  The DRAM limit of a shape is W's bytes ÷ the read rate
this run measures (``torch.sum`` over a 4 GiB tensor, the best of several).

CPU machine: ``.venv/bin/python benchmarks/gemm_decode.py build [--mid]`` writes ``.carry/gemm_decode/``.
``once --shape S --m M --configs C ...`` launches those candidates and cuBLAS once each, for ``ncu``.
GPU machine: ``python3 benchmarks/gemm_decode.py run [--json PATH]`` checks every artifact at every M
against torch in fp32 (C poisoned with NaN), then times each candidate and cuBLAS from CUDA graphs
in interleaved rounds (median of the rounds' medians) and writes
``benchmarks/results/gemm_decode-<date>-<device>.json`` (``gemm_mid-…`` with ``--mid``; rows: M, N, K, dtype, config, axe_us,
cublas_us, dram_limit_us, heuristic: whether :func:`kernels.gemm_select.heuristic` picks it).
"""

import argparse
import datetime
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
OUT = os.path.join(ROOT, ".carry", "gemm_decode")
MS = (1, 16, 64, 128)
#: the middle buckets' bounds (``--mid``)
MS_MID = (256, 512, 1024)
#: (label, N, K): Llama-3.1-8B and -70B MLP weights, up and down
SHAPES = [("llama8b_up", 14336, 4096), ("llama8b_down", 4096, 14336), ("llama70b_up", 28672, 8192),
          ("llama70b_down", 8192, 28672)]
#: the middle buckets also fit on two more down projections (Gemma-2-9B, Qwen3-32B)
SHAPES_MID = SHAPES + [("gemma9b_down", 3584, 14336), ("qwen32b_down", 5120, 25600)]
#: with ``--shapes``, any MLP weight of ``benchmarks/mlp_gemm.py`` by its label ``Model_proj``
#: (``Gemma-2-27B_up``), beside the labels above
DTYPE = "bfloat16"


def shapes(mid=False, only=None):
    """``[(label, N, K)]``: the decode or middle sweep's shapes, or those named in ``only`` (labels of
    :data:`SHAPES_MID` or ``Model_proj`` of the 16 MLP weights); an unknown name is a ``SystemExit``
    listing the known ones."""
    if not only:
        return SHAPES_MID if mid else SHAPES
    from mlp_gemm import SHAPES as MLP
    known = {label: (label, n, k) for label, n, k in SHAPES_MID}
    known.update({f"{m}_{p}": (f"{m}_{p}", n, k) for m, p, n, k in MLP})
    missing = [o for o in only if o not in known]
    if missing:
        raise SystemExit(f"unknown shapes {missing}; known: {', '.join(known)}")
    return [known[o] for o in only]


def artifact(bound, cfg):
    """``(artifact suffix, max_rows)`` of candidate ``cfg`` of bucket ``bound``: the decode buckets
    share one artifact per configuration (scheduled for 128 rows, or ``tile_m``), a middle bucket's
    statically scheduled candidates get one per bound."""
    from kernels import gemm_select
    cname = gemm_select.name(cfg)
    if bound <= gemm_select.BM:
        return cname, cfg.get("tile_m", gemm_select.BM)
    rows = gemm_select.scheduled_rows(bound, cfg)
    return (cname, None) if rows is None else (f"{cname}_r{rows}", rows)


def measured(bound, n, k, extra=()):
    """The configurations timed for bucket ``bound``: its candidates, then those of ``extra`` (``make``
    keywords outside the candidate list, e.g. a deeper ring) that serve the bucket (a decode bucket
    no taller than their ``tile_m``; a middle bucket with 128-row tiles)."""
    from kernels import gemm_select
    cands = gemm_select.candidates(bound, n, k)
    serves = (lambda x: bound <= x.get("tile_m", gemm_select.BM)) if bound <= gemm_select.BM else (lambda x: "tile_m" not in x)
    return cands + [x for x in extra if serves(x) and x not in cands]


def configs(n, k, ms, extra=()):
    """Every configuration measured in the buckets of ``ms``, once each: {suffix: (config, max_rows)}."""
    from kernels import gemm_select
    out = {}
    for bound in sorted({gemm_select.bucket(m) for m in ms}):
        for cfg in measured(bound, n, k, extra):
            suffix, rows = artifact(bound, cfg)
            out[suffix] = (cfg, rows)
    return out


def build(only=None, mid=False, names=None, extra=(), ms=None):
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from axe.backends.cuda.build import c_identifier
    from kernels import gemm
    for label, n, k in shapes(mid, names):
        for cname, (cfg, rows) in configs(n, k, ms or (MS_MID if mid else MS), extra).items():
            tag = f"{label}__{cname}"
            if only and not any(o in tag for o in only):
                continue
            if os.path.exists(os.path.join(OUT, tag, "launch.json")):
                continue
            art = gemm.build_dynamic(n, k, DTYPE, "col", name=c_identifier(f"gemm_decode_{tag}"), max_rows=rows, **cfg)
            art.save(os.path.join(OUT, tag))
            print("built", tag, art.launch["resources"], flush=True)


def checked(torch, kern, a, w, ref, what, tol=1e-2):
    """``(rel_err, call)``: ``kern(a, w, C)`` run once into a NaN-poisoned C and compared with
    ``ref`` (AssertionError naming ``what`` above ``tol``), and the call to time (it rewrites C)."""
    c = torch.full((a.shape[0], w.shape[0]), float("nan"), device="cuda", dtype=a.dtype)
    kern(a, w, c)
    torch.cuda.synchronize()
    err = ((c.float() - ref).norm() / ref.norm()).item() if not c.isnan().any() else float("nan")
    assert err < tol, f"{what}: rel err {err:.2e}"
    return err, lambda: kern(a, w, c) or c


def read_rate(torch, gib=4, reps=5):
    """Bytes per second torch.sum reads from DRAM (the best of ``reps``)."""
    x = torch.empty(gib * 2**30 // 2, device="cuda", dtype=torch.bfloat16).normal_()
    best = 0.0
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x.sum()
        e.record()
        torch.cuda.synchronize()
        best = max(best, x.numel() * 2 / (s.elapsed_time(e) * 1e-3))
    del x
    return best


def run(path, rounds, mid=False, names=None, extra=(), ms=None):
    import torch

    import axe.runtime as rt
    from axe.torch.timing import capture, graph_ms, median, round_robin
    from axe.runtime.device import dram_bytes_per_s
    from kernels import gemm_select
    dev = torch.cuda.get_device_name()
    dram_bps = dram_bytes_per_s(torch.cuda.current_device())
    rate = read_rate(torch)
    print(f"{dev}: read rate {rate / 1e12:.2f} TB/s", flush=True)
    rows = []
    for label, n, k in shapes(mid, names):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        loaded = {d.split("__", 1)[1]: rt.load(d) for d in sorted(glob.glob(os.path.join(OUT, f"{label}__*")))}
        for m in ms or (MS_MID if mid else MS):
            bound = gemm_select.bucket(m)
            names = {artifact(bound, x)[0]: gemm_select.name(x) for x in measured(bound, n, k, extra)}
            kernels = {names[c]: loaded[c] for c in names if c in loaded}
            if not kernels:         # a partial build (``build --only``) left this bucket out
                print(f"{label:14s} M={m:4d}  no artifacts built", flush=True)
                continue
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = a.float() @ w.float().t()
            fns, errs = {}, {}
            for cname, kern in kernels.items():
                errs[cname], fns[cname] = checked(torch, kern, a, w, ref, f"{label} M={m} {cname}")
            fns["cublas"] = lambda: torch.matmul(a, w.t())
            graphs = {key: capture(torch, f)[0] for key, f in fns.items()}
            timed = round_robin({key: (lambda g=g: graph_ms(torch, g, 20)) for key, g in graphs.items()}, rounds)
            us = {key: median(v) * 1e3 for key, v in timed.items()}
            dram = n * k * 2 / rate * 1e6
            pick = gemm_select.name(gemm_select.heuristic(m, n, k, dram_bps=dram_bps))
            best = min(kernels, key=us.get)
            for cname in kernels:
                rows.append({"M": m, "N": n, "K": k, "dtype": DTYPE, "shape": label, "bucket": bound, "config": cname,
                             "axe_us": round(us[cname], 2), "cublas_us": round(us["cublas"], 2),
                             "dram_limit_us": round(dram, 2), "rel_err": errs[cname], "heuristic": cname == pick,
                             "spill_stores": kernels[cname].launch["resources"].get("spill_stores", 0)})
            print(f"{label:14s} M={m:4d}  cuBLAS {us['cublas']:7.1f}  DRAM {dram:6.1f}  best {best} {us[best]:7.1f}  "
                  f"heuristic {pick} {us.get(pick, float('nan')):7.1f}  default {us.get('default', us.get('split_k1_stages4_tile_n256', 0)):7.1f}",
                  flush=True)
            del graphs
    day = datetime.date.today().isoformat()
    stem = "gemm_mid" if mid else "gemm_decode"
    path = path or os.path.join(ROOT, "benchmarks", "results", f"{stem}-{day}-{dev.split()[-1].lower()}.json")
    with open(path, "w") as f:
        json.dump({"device": dev, "date": day, "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
                   "read_rate_Bps": rate, "dram_peak_Bps": dram_bps,
                   "timing": f"CUDA graph replays, median of {rounds} interleaved rounds",
                   "rows": rows}, f, indent=1)
    print("wrote", path)


def once(label, m, configs):
    """One launch of each named candidate of shape ``label`` and one of cuBLAS at M = ``m``, for ``ncu``
    to profile (each kernel alone)."""
    import torch

    import axe.runtime as rt
    (_, n, k), = shapes(True, [label])
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for cname in configs:
        rt.load(os.path.join(OUT, f"{label}__{cname}"))(a, w, c)
    torch.matmul(a, w.t())
    torch.cuda.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("build", "run", "once"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="build the artifacts whose names contain one of these")
    ap.add_argument("--mid", action="store_true", help="the middle buckets (M 256, 512, 1024) instead of decode")
    ap.add_argument("--ms", nargs="*", type=int, help="build/run: these row counts instead (e.g. --mid --ms 2048 4096: "
                    "the larger buckets' run-time-M widths)")
    ap.add_argument("--shapes", nargs="*", help="build/run: these shapes' labels only (see shapes())")
    ap.add_argument("--shape", help="once: the shape label")
    ap.add_argument("--m", type=int, default=1, help="once: the row count")
    ap.add_argument("--configs", nargs="*", default=(), help="once: the candidates' names")
    ap.add_argument("--extra", nargs="*", default=(), type=json.loads,
                    help="build/run: configurations beyond the candidates, as JSON make keywords "
                         "('{\"tile_m\": 16, \"split_k\": 4, \"stages\": 12}'), in every decode bucket they serve")
    args = ap.parse_args(argv)
    if args.mode == "once":
        return once(args.shape, args.m, args.configs)
    if args.mode == "build":
        return build(args.only, args.mid, args.shapes, args.extra, args.ms)
    if not glob.glob(os.path.join(OUT, "*", "launch.json")):
        raise SystemExit(f"no artifacts in {OUT}: run `benchmarks/gemm_decode.py build` on the CPU machine")
    return run(args.json, args.rounds, args.mid, args.shapes, args.extra, args.ms)


if __name__ == "__main__":
    sys.exit(main())
