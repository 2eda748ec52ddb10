#!/usr/bin/env python3
"""axe kernels as PyTorch functions on the GPU (issue 12): calls, dynamic M, torch.compile,
CUDA graphs, host overhead.

Two steps, one list of specializations (:data:`SPECS`) so both sides compute the same keys:

- here (TVM + nvcc): ``.venv/bin/python tests/gpu/run_torch.py build`` fills the cache folder
  ``.carry/axe_cache`` (one entry per specialization, with a progress display);
- on the GPU machine (no TVM): ``python3 tests/gpu/run_torch.py run [--out DIR]`` points
  ``AXE_CACHE_DIR`` there, checks that TVM is absent (so nothing is built), runs every check,
  prints a table and writes ``torch.json`` to ``--out`` (``$OUT``).  Exit status 1 if any
  check fails.

Checks: ``axe::rmsnorm`` / ``axe::softmax`` for many row counts (one artifact each, against
torch in fp32), ``axe::gemm`` (the dynamic-M builds: one artifact per (N, K, dtype, layout of b) and
bucket of M, for every M in ``GEMM_ROWS``), a miss without TVM naming the
build command, ``torch.compile(fullgraph=True)`` (inductor) of a function using the ops, CUDA
graph capture and replay, and the host time per call (jit + runtime) beside torch's own ops.
"""

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
CACHE = os.path.join(ROOT, ".carry", "axe_cache")
TARGET = "sm_90a"

#: (jit kernel in axe.torch.ops.KERNELS, its spec) — what the GPU run needs prebuilt
ROWS = (1, 7, 128, 1000, 4097)
#: row counts of the GEMM: below one tile, ragged, whole tiles, fewer tiles than SMs and more
GEMM_ROWS = (1, 127, 128, 512, 1000, 4097, 8192)


def _gemm_specs():
    """The GEMM op's specializations for GEMM_ROWS (one per bucket of M; the heuristic's
    configurations: no tuning table is carried)."""
    from axe.torch import tune
    out = []
    for name, dt, major in (("gemm", "float16", "row"), ("gemm_nt", "bfloat16", "col")):
        for m in GEMM_ROWS:
            s = (name, tune.spec_for("", 1024, 1024, dt, major, m))
            if s not in out:
                out.append(s)
    return out


SPECS = [("rmsnorm", {"n": n, "dtype": dt}) for n in (1024, 4096) for dt in ("float16", "bfloat16")] + \
        [("softmax", {"n": n, "dtype": dt}) for n in (1024, 4096) for dt in ("float16", "bfloat16")] + _gemm_specs()


def build(args):
    from axe.progress import Progress
    from axe.torch import ops
    from axe.torch.cache import ArtifactCache
    cache = ArtifactCache(args.cache, shipped=[])
    failed = 0
    with Progress(len(SPECS), "build") as p:
        for name, spec in SPECS:
            k = ops.KERNELS[name]
            k._cache, k.progress = cache, False
            try:
                with p.step(f"{name} {spec}"):
                    k.artifact_path(TARGET, spec)
            except Exception:  # noqa: BLE001 - report each, then fail
                failed += 1
                p.note(traceback.format_exc())
    print(f"cache {args.cache}: {len(cache.entries())} entries")
    return 1 if failed else 0


# --- the GPU side -------------------------------------------------------------------------------

def _rms_ref(x, w, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _close(got, want, what, tol):
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()
    assert not got.isnan().any(), f"{what}: NaN in the output"
    assert err < tol, f"{what}: max error {err:.2e} (relative to the largest value) exceeds {tol}"
    return err


def _loaded(ops, names, count, what):
    """Each jit kernel ``names`` built nothing here and loaded ``count`` artifacts (for ``what``)."""
    for name in names:
        k = ops.KERNELS[name]
        assert k.builds == 0, f"{name}: built {k.builds} artifacts on the GPU machine"
        assert len(k._memo) == count, f"{name}: {len(k._memo)} kernels loaded for {what}, expected {count}"


def check_rows(ops, res):
    """rmsnorm and softmax for every row count in ROWS, 2 row lengths, 2 dtypes: one artifact
    per (n, dtype), nothing built."""
    worst = 0.0
    for n in (1024, 4096):
        for dt in (torch.float16, torch.bfloat16):
            w = torch.randn(n, dtype=dt, device="cuda")
            for m in ROWS:
                x = torch.randn(m, n, dtype=dt, device="cuda") * 3
                worst = max(worst, _close(torch.ops.axe.rmsnorm(x, w, 1e-5), _rms_ref(x, w, 1e-5), f"rmsnorm {m}x{n} {dt}", 2e-2))
                worst = max(worst, _close(torch.ops.axe.softmax(x), torch.softmax(x.float(), -1), f"softmax {m}x{n} {dt}", 2e-2))
            x3 = torch.randn(2, 3, n, dtype=dt, device="cuda")
            _close(torch.ops.axe.softmax(x3), torch.softmax(x3.float(), -1), f"softmax 2x3x{n}", 2e-2)
    _loaded(ops, ("rmsnorm", "softmax"), 4, "4 (n, dtype) pairs")
    res["rows_max_rel_err"] = worst
    return f"{len(ROWS)} row counts x 2 n x 2 dtypes, one artifact per (n, dtype); worst rel err {worst:.1e}"


def check_gemm(ops, res):
    """``axe::gemm`` for every M in GEMM_ROWS, B row- and column-major: one artifact per bucket of
    M serves them (nothing built), rows past M untouched (C is exactly M x N)."""
    b = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    b2 = torch.randn(1024, 1024, dtype=torch.bfloat16, device="cuda")
    worst = 0.0
    for m in GEMM_ROWS:
        a = torch.randn(m, 1024, dtype=torch.float16, device="cuda")
        worst = max(worst, _close(torch.ops.axe.gemm(a, b), a.float() @ b.float(), f"gemm fp16 row M={m}", 1e-2))
        a2 = a.bfloat16()
        worst = max(worst, _close(torch.ops.axe.gemm(a2, b2, True), a2.float() @ b2.float().T,
                                  f"gemm bf16 col M={m}", 2e-2))
    buckets = sum(1 for name, _ in SPECS if name == "gemm")       # distinct configurations of the buckets
    _loaded(ops, ("gemm", "gemm_nt"), buckets, f"{len(GEMM_ROWS)} row counts of one (N, K, dtype)")
    res["gemm_max_rel_err"] = worst
    return (f"M in {GEMM_ROWS} x 1024 x 1024, fp16 a@b and bf16 a@b.T, one artifact per bucket's configuration ({buckets}); "
            f"worst rel err {worst:.1e}")


def check_missing(ops, res):
    from axe.torch.cache import ArtifactMissing
    x = torch.randn(4, 2048, dtype=torch.float16, device="cuda")
    try:
        torch.ops.axe.softmax(x)
    except ArtifactMissing as e:
        msg = str(e)
        assert "axe cache build kernels.softmax:dynamic dtype=float16 n=2048 --target sm_90a" in msg, msg
        assert "TVM is not installed" in msg, msg
        return "an unbuilt (n=2048) specialization names its build command"
    raise AssertionError("softmax n=2048 ran, but nothing built it")


def check_compile(ops, res):
    def f(x, w):
        return torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w) * 2) + 1

    w = torch.randn(1024, dtype=torch.float16, device="cuda")
    out = []
    for backend in ("inductor", "aot_eager"):
        torch._dynamo.reset()
        g = torch.compile(f, fullgraph=True, backend=backend, dynamic=True)
        for m in (5, 64, 333):
            x = torch.randn(m, 1024, dtype=torch.float16, device="cuda")
            want = torch.softmax((_rms_ref(x, w, 1e-6).half() * 2).float(), -1) + 1
            _close(g(x, w), want, f"compiled ({backend}) M={m}", 2e-2)
        out.append(backend)
    return f"fullgraph=True, dynamic=True, backends {', '.join(out)}: right for M in (5, 64, 333)"


def check_graphs(ops, res):
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(256, 4096, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                  # warm up (loads the kernels) off the capture
        for _ in range(2):
            y = torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w))
    for i in range(3):
        x.copy_(torch.randn_like(x) * (i + 1))
        g.replay()
        torch.cuda.synchronize()
        _close(y, torch.softmax(_rms_ref(x, w, 1e-6).bfloat16().float(), -1), f"graph replay {i}", 2e-2)
    return "rmsnorm -> softmax captured once, 3 replays on new inputs right"


def _per_call(fn, n=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return host


def _profile(fn, n=500, top=15):
    """Where the host time of ``fn`` goes: cProfile's top functions by own time over ``n`` calls,
    as ``"us per call own/cumulative  function"`` lines (printed, and kept in the JSON)."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    lines = [f"{tt / n * 1e6:7.2f} {ct / n * 1e6:7.2f}  {os.path.basename(f)}:{line}({fn_name})"
             for (f, line, fn_name), (_, _, tt, ct, _) in rows]
    print("host profile (us per call, own / cumulative):\n  " + "\n  ".join(lines))
    return lines


def check_overhead(ops, res):
    """Host time per call on a tiny problem (launch-bound): the op (custom-op dispatch + jit +
    runtime), the jit kernel alone, the runtime Kernel alone, torch's own op."""
    x = torch.randn(8, 1024, dtype=torch.float16, device="cuda")
    w = torch.randn(1024, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    jk = ops.KERNELS["rmsnorm"]
    w2 = w.view(1, 1024)
    rk = jk._memo[(x.device, ("n", 1024), ("dtype", "float16"))]
    ga = torch.randn(8, 1024, dtype=torch.float16, device="cuda")          # the dynamic-M GEMM, M = 8
    gb = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    fig = {
        "op axe::rmsnorm": _per_call(lambda: torch.ops.axe.rmsnorm(x, w)),
        "op body without dispatch": _per_call(lambda: ops._rmsnorm(x, w)),
        "jit kernel": _per_call(lambda: jk(x, w2, y, 1e-6)),
        "runtime Kernel": _per_call(lambda: rk(x, w2, y, 1e-6)),
        "op axe::gemm": _per_call(lambda: torch.ops.axe.gemm(ga, gb)),
        "torch matmul": _per_call(lambda: ga @ gb),
        "torch rms_norm": _per_call(lambda: torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)),
        "torch softmax": _per_call(lambda: torch.softmax(x, -1)),
    }
    res["host_us_per_call"] = {k: round(v * 1e6, 2) for k, v in fig.items()}
    res["op_profile"] = _profile(lambda: torch.ops.axe.rmsnorm(x, w))
    res["jit_bookkeeping_us"] = round((fig["jit kernel"] - fig["runtime Kernel"]) * 1e6, 2)
    return ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in fig.items())


def check_speed(ops, res):
    """GPU time per call (CUDA events) of the dynamic-M kernels against torch, a few M."""
    rows = {}
    for n in (1024, 4096):
        w = torch.randn(n, dtype=torch.float16, device="cuda")
        for m in (128, 4096, 32768):
            x = torch.randn(m, n, dtype=torch.float16, device="cuda")
            t = {}
            for name, fn in (("axe_rmsnorm", lambda: torch.ops.axe.rmsnorm(x, w)),
                             ("torch_rmsnorm", lambda: torch.nn.functional.rms_norm(x, (n,), w, 1e-6)),
                             ("axe_softmax", lambda: torch.ops.axe.softmax(x)),
                             ("torch_softmax", lambda: torch.softmax(x, -1))):
                for _ in range(5):
                    fn()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(50):
                    fn()
                b.record()
                torch.cuda.synchronize()
                t[name] = round(a.elapsed_time(b) / 50 * 1e3, 2)     # us
            rows[f"{m}x{n}"] = t
    res["gpu_us"] = rows
    return "; ".join(f"{k}: " + " ".join(f"{n}={v}" for n, v in t.items()) for k, t in rows.items())


def check_readme(ops, res):
    """The README's "Calling axe from PyTorch" example, as written (its specializations are in
    SPECS)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Calling axe from PyTorch"):]
    code = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python\n") + 10)]
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    _close(scope["y"], _rms_ref(scope["x"], scope["w"], 1e-6), "README rmsnorm", 2e-2)
    _close(scope["f"](scope["x"], scope["w"]), torch.softmax(_rms_ref(scope["x"], scope["w"], 1e-6).bfloat16().float(), -1),
           "README compiled", 2e-2)
    return f"ran ({len(code.splitlines())} lines); y, f(x, w) right; c {tuple(scope['c'].shape)}"


CHECKS = [check_rows, check_gemm, check_missing, check_compile, check_graphs, check_overhead, check_speed,
          check_readme]


def run(args):
    global torch
    os.environ["AXE_CACHE_DIR"] = args.cache
    import importlib.util
    assert importlib.util.find_spec("tvm") is None, "TVM is installed here: this run must show that none is needed"
    import torch
    from axe.torch import ops
    res, failed = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}, 0
    rows = []
    for check in CHECKS:
        t = time.perf_counter()
        try:
            msg, ok = check(ops, res), True
        except Exception:  # noqa: BLE001 - report every check
            msg, ok = traceback.format_exc(), False
            failed += 1
        rows.append((check.__name__, ok, time.perf_counter() - t))
        print(f"{'ok  ' if ok else 'FAIL'} {check.__name__:16s} {msg}", flush=True)
    print("\n".join(f"{n:16s} {'ok' if ok else 'FAIL':4s} {s:6.1f} s" for n, ok, s in rows))
    res["checks"] = {n: ok for n, ok, _ in rows}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "torch.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 1 if failed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "run"))
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/axe-out"))
    args = ap.parse_args(argv)
    return build(args) if args.what == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
