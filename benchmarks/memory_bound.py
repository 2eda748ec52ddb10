#!/usr/bin/env python3
"""Memory-bound kernels written in axe against torch and a plain copy, side by side (GPU).

Times the ``transpose_bench`` (and every ``transpose_*_bench`` variant found), ``rmsnorm_bench``
and ``softmax_bench`` artifacts (``tests/gpu/cases_kernels.py`` builds them on the CPU machine;
``run_all.py`` checks them against torch first), torch's equivalent (``B.copy_(A.t())``;
``F.rms_norm``; ``torch.softmax``) and a device-to-device copy of the same bytes,
with ``triton.testing.do_bench`` (median; L2 flushed between runs).  Bandwidth counts bytes
read plus bytes written once each.  Prints a table last and writes JSON.

Usage (GPU machine): ``python3 benchmarks/memory_bound.py [--artifacts DIR] [--json PATH]``.
"""

import argparse
import datetime
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _bench(fn):
    from triton.testing import do_bench
    return do_bench(fn, warmup=50, rep=300, return_mode="median")  # ms


def run(artifacts):
    import torch
    import torch.nn.functional as F

    import axe.runtime as rt

    rows = []
    variants = sorted(d[:-len("_bench")] for d in os.listdir(artifacts)
                      if d.startswith("transpose") and d.endswith("_bench"))
    variants.sort(key=lambda v: v != "transpose")    # the main kernel first
    copy_ms = torch_ms = None
    for name in variants:
        k = rt.load(os.path.join(artifacts, name + "_bench"))
        m, n = k.launch["args"][0]["shape"]
        a = torch.randn(m, n, device="cuda", dtype=torch.float16)
        b = torch.full((n, m), float("nan"), device="cuda", dtype=torch.float16)
        flat_src, flat_dst = a.view(-1), torch.empty_like(a).view(-1)
        moved = 2 * a.numel() * a.element_size()
        k(a, b)
        torch.cuda.synchronize()
        assert torch.equal(b, a.t()), f"{name}_bench is wrong; run tests/gpu/run_all.py"
        if copy_ms is None:
            torch_ms = _bench(lambda: b.copy_(a.t()))
            copy_ms = _bench(lambda: flat_dst.copy_(flat_src))
            main = (k, a, b)
        rows.append((name, f"{m}x{n} fp16", moved, {
            "axe": _bench(lambda: k(a, b)), "torch": torch_ms, "copy": copy_ms}))
    if variants:   # the main kernel and the copy again, after the variants: their spread is the noise
        k, a, b = main
        rows[0][3]["axe_again"] = _bench(lambda: k(a, b))
        rows[0][3]["copy_again"] = _bench(lambda: flat_dst.copy_(flat_src))

    k = rt.load(os.path.join(artifacts, "rmsnorm_bench"))
    r, n = k.launch["args"][0]["shape"]
    x = torch.randn(r, n, device="cuda", dtype=torch.float16)
    w = torch.randn(1, n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    xs, xd = x.view(-1), torch.empty_like(x).view(-1)
    moved = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
    k(x, w, y)
    torch.cuda.synchronize()
    ref = F.rms_norm(x.float(), (n,), w.view(-1).float(), 1e-6)
    assert ((y.float() - ref).norm() / ref.norm()).item() < 2e-3, "rmsnorm_bench is wrong"
    rows.append(("rmsnorm", f"{r}x{n} fp16", moved, {
        "axe": _bench(lambda: k(x, w, y)),
        "torch": _bench(lambda: F.rms_norm(x, (n,), w.view(-1), 1e-6)),
        "copy": _bench(lambda: xd.copy_(xs)),
    }))

    path = os.path.join(artifacts, "softmax_bench")
    if os.path.isdir(path):
        k = rt.load(path)
        r, n = k.launch["args"][0]["shape"]
        x = torch.randn(r, n, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        xs, xd = x.view(-1), torch.empty_like(x).view(-1)
        moved = 2 * x.numel() * x.element_size()
        k(x, y)
        torch.cuda.synchronize()
        ref = torch.softmax(x.float(), dim=-1)
        assert ((y.float() - ref).norm() / ref.norm()).item() < 2e-3, "softmax_bench is wrong"
        rows.append(("softmax", f"{r}x{n} fp16", moved, {
            "axe": _bench(lambda: k(x, y)),
            "torch": _bench(lambda: torch.softmax(x, dim=-1)),
            "copy": _bench(lambda: xd.copy_(xs)),
        }))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.path.join(ROOT, ".carry", "artifacts"))
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", ROOT), "memory_bound.json"))
    args = ap.parse_args(argv)
    import torch
    import triton

    rows = run(args.artifacts)
    result = {
        "benchmark": "memory_bound", "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(), "driver_cuda": torch.version.cuda,
        "versions": {"torch": torch.__version__, "triton": triton.__version__,
                     "python": platform.python_version()},
        "timing": "triton.testing.do_bench median, warmup 50 ms, rep 300 ms; bytes = read + write",
        "figures": [],
    }
    lines = [f"{'kernel':20s} {'size':16s} {'axe ms':>8s} {'torch ms':>9s} {'copy ms':>8s} "
             f"{'axe GB/s':>9s} {'copy GB/s':>9s} {'vs torch':>9s} {'of copy':>8s}"]
    for name, size, moved, t in rows:
        gbs = {kk: moved / (v * 1e-3) / 1e9 for kk, v in t.items()}
        fig = {"kernel": name, "size": size, "bytes": moved, "ms": t, "GB_per_s": gbs,
               "speedup_vs_torch": t["torch"] / t["axe"], "fraction_of_copy_bandwidth": gbs["axe"] / gbs["copy"]}
        result["figures"].append(fig)
        lines.append(f"{name:20s} {size:16s} {t['axe']:8.4f} {t['torch']:9.4f} {t['copy']:8.4f} "
                     f"{gbs['axe']:9.0f} {gbs['copy']:9.0f} {fig['speedup_vs_torch']:8.2f}x "
                     f"{fig['fraction_of_copy_bandwidth']:7.1%}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{result['date']}  {result['device']}  torch {torch.__version__}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
