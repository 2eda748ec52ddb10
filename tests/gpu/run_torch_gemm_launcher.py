#!/usr/bin/env python3
"""``torch.ops.axe.gemm`` through the compiled launcher on the GPU (issue 24 item 1): the C++
path's tensor maps follow moved tensors, its scratch stays on its stream, and every result is the
checked path's, bit for bit.

Uses the artifacts of ``benchmarks/torch_ops.py build`` (``.carry/serving_cache``: the
Llama-3.1-8B GEMMs ``x @ w.T``, w 14336×4096 and 4096×14336, bf16, M in 1, 8, 64, 2048); run
``python3 tests/gpu/run_torch_gemm_launcher.py [--cache DIR]`` on the GPU machine (no TVM).  Per
(shape, M):

- the second call of a signature launches from C++ (``launched`` + 1) and equals the first
  (checked) call's result exactly; a new activation (A's map moved) equals the checked path's
  result for it (``FAST_PATH = False``) and torch's within 3e-2 of the largest value;
- on a side stream a plan with scratch (split-K) is refused once (``refused`` + 1), the Python
  plan launches with that stream's scratch, the next call there launches from C++; back on the
  default stream the same; a plan without scratch launches from C++ on any stream; every result
  exact;
- captured into a CUDA graph (torch's capture stream) and replayed on new data: exact;
- four threads with their own activations, 20 calls each: every result exact.

Writes ``torch_gemm_launcher.json`` under ``$OUT`` (else the current folder); exit status 1 if any
check fails.
"""

import argparse
import json
import os
import sys
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

SHAPES = ((14336, 4096), (4096, 14336))
ROWS = (1, 8, 64, 2048)


def counts(ops) -> dict:
    return ops._LAUNCHER.counts()


def delta(ops, before: dict) -> dict:
    """How many calls the library launched and refused since ``before``."""
    now = counts(ops)
    return {k: now[k] - before[k] for k in ("launched", "refused")}


def checked(torch, ops, a, w):
    """The GEMM through the checked path (every check, the runtime Kernel's launch)."""
    ops.FAST_PATH = False
    try:
        return torch.ops.axe.gemm(a, w, True)
    finally:
        ops.FAST_PATH = True


def case(torch, ops, N: int, K: int, M: int) -> dict:
    """Every check of the module docstring for one (N, K, M); raises AssertionError naming the
    first that fails."""
    g = torch.Generator(device="cuda").manual_seed(M + N)
    a, a2 = (torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) * K ** -0.5
    gemm = torch.ops.axe.gemm
    c1 = gemm(a, w, True)
    rec = ops.PLANS["gemm"][(ops._sig(a), ops._sig(w), True)][2]
    assert rec is not None, "the plan was not handed to the compiled launcher (a configuration with clusters?)"
    scratch = bool(rec[2])
    row = {"N": N, "K": K, "M": M, "scratch": scratch}

    before = counts(ops)
    c2 = gemm(a, w, True)
    assert delta(ops, before) == {"launched": 1, "refused": 0}, f"second call: {delta(ops, before)}"
    assert torch.equal(c2, c1), "the C++ launch differs from the checked call"
    want = checked(torch, ops, a2, w)
    before = counts(ops)
    c3 = gemm(a2, w, True)
    assert delta(ops, before) == {"launched": 1, "refused": 0}, f"moved activation: {delta(ops, before)}"
    assert torch.equal(c3, want), "the C++ launch on a moved activation differs from the checked path"
    ref = a2.float() @ w.float().t()
    row["max_rel_err"] = err = ((c3.float() - ref).abs().max() / ref.abs().max()).item()
    assert err < 3e-2, f"max error {err:.2e} against torch"

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        before = counts(ops)
        c4 = gemm(a2, w, True)
        first = delta(ops, before)
        c5 = gemm(a2, w, True)
        row["side_stream"] = both = delta(ops, before)
    torch.cuda.current_stream().wait_stream(side)
    expect = {"launched": 1, "refused": 1} if scratch else {"launched": 2, "refused": 0}
    assert both == expect and first["refused"] == int(scratch), f"side stream: first {first}, both {both}"
    before = counts(ops)
    c6, c7 = gemm(a2, w, True), gemm(a2, w, True)
    row["back_on_default"] = delta(ops, before)
    assert row["back_on_default"] == expect, f"back on the default stream: {row['back_on_default']}"
    for i, c in enumerate((c4, c5, c6, c7), 4):
        assert torch.equal(c, want), f"call {i} (streams) differs from the checked path"

    static = a.clone()
    gemm(static, w, True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    before = counts(ops)
    with torch.cuda.graph(graph):
        out = gemm(static, w, True)
    row["capture"] = delta(ops, before)
    static.copy_(a2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want), "the graph's replay differs from the checked path"

    xs = [torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]
    wants = [checked(torch, ops, x, w) for x in xs]
    bad = []

    def work(i):
        for _ in range(20):
            if not torch.equal(gemm(xs[i], w, True), wants[i]):
                bad.append(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, f"threads {sorted(set(bad))} got another result than the checked path"
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.path.join(ROOT, ".carry", "serving_cache"))
    args = ap.parse_args(argv)
    os.environ["AXE_CACHE_DIR"] = args.cache
    import torch

    from axe.torch import ops
    path = ops.launcher()
    print(f"launch path: {path['path']} ({path['why']})")
    if "gemm" not in path["compiled"]:
        print("FAILED: axe::gemm is not on the compiled launcher")
        return 1
    rows, failed = [], 0
    for N, K in SHAPES:
        for M in ROWS:
            try:
                row = case(torch, ops, N, K, M)
                print("ok", json.dumps(row), flush=True)
            except Exception as e:  # noqa: BLE001 - every case is reported
                failed += 1
                row = {"N": N, "K": K, "M": M, "error": f"{type(e).__name__}: {e}"}
                print("FAILED", json.dumps(row), traceback.format_exc(), sep="\n", flush=True)
            rows.append(row)
    result = {"device": torch.cuda.get_device_name(), "launch_path": path, "counts": counts(ops), "rows": rows,
              "failed": failed}
    out = os.path.join(os.environ.get("OUT", "."), "torch_gemm_launcher.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{len(rows) - failed} of {len(rows)} passed; counts {result['counts']}; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
