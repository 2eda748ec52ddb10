#!/usr/bin/env python3
"""Hand-written layouts against inferred ones (issue 27 item 4), side by side in one run (GPU).

Each kernel of ``kernels/inferred/`` beside its hand-written twin at the same size: transpose
(8192×8192 fp16, :func:`kernels.transpose.transpose`), RMSNorm and softmax (65536×1024 fp16, the
static ``rmsnorm``/``softmax``), rotary (NeoX, head 128, 32 q / 8 k heads, bf16, 16384 tokens,
:func:`kernels.rotary.dynamic`), GEMM (4096³ fp16 → fp32, TMA + wgmma, single-stage k-loop,
:mod:`kernels.inferred.hand_gemm` against :mod:`kernels.inferred.gemm`; the kernel body they share,
``k_step`` and ``tiled_gemm``, is counted on both sides), the pipelined GEMM (8192³ bf16, B row-major:
the production :func:`kernels.gemm.make` at its default 128×256×64 tile, 4 stages, persistent and
warp-specialized, against :mod:`kernels.inferred.pipelined_gemm`; only the code that declares and
carves the shared tiles is counted, the rest of the kernel being the same code on both sides).  Both versions are checked against torch first (fresh random
data, outputs NaN-poisoned), then timed as CUDA-graph replays (``--graph-calls`` launches a
graph; :func:`axe.torch.timing.graph_ms`) in ``--rounds`` interleaved rounds (hand then inferred,
the order flipped every round); a row's µs is the median over rounds, per launch.

Line counts are counted here from the sources (``ast``): the top-level functions and constants
that make up each version's GPU kernel (listed per row in ``hand_units`` / ``inferred_units``),
without blank lines, comments and docstrings.

Usage: ``build`` here (TVM + nvcc; writes ``.carry/inferred_bench/``), ``run`` on the GPU machine::

    CUDA_PATH=/usr/local/cuda .venv/bin/python benchmarks/inferred.py build
    python3 benchmarks/inferred.py run [--rounds 9] [--json PATH] [--timeout 120] [--only transpose ...]

Each pair runs in its own process, killed after ``--timeout`` s: a kernel that never returns (the
inferred transpose did, 2026-11-27, before inference kept TMA-loaded tiles TMA-writable) gets a
row with ``error`` in the JSON, and the other pairs are timed regardless.
"""

import argparse
import ast
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
OUT = os.path.join(ROOT, ".carry", "inferred_bench")

TRANSPOSE = {"M": 8192, "N": 8192}
ROWS = {"ROWS": 65536}
TOKENS = 16384
ROTARY = (128, 32, 8)
GEMM = (4096, 4096, 4096)
PIPELINED = (8192, 8192, 8192, "bfloat16", "row")
#: the pipelined GEMM's lines are those that declare and carve its shared tiles (the rest of the
#: kernel is the same code on both sides): the hand mainloop's views and their layout
#: (``kernels/parts/tiles.swizzled``), the inferred mainloop's open views
HAND_VIEWS = [f"kernels.parts.mainloops.tma_wgmma:{n}" for n in (
    "WholeB.load", "Cooperative.tile", "Cooperative.b_operand", "Cooperative.a_offset", "Cooperative.a_operand",
    "Cooperative.load")] + ["kernels.parts.tiles:swizzled"]
OPEN_VIEWS = [f"kernels.parts.mainloops.inferred:{n}" for n in (
    "InferredB.load", "Inferred.tile", "Inferred.a_slot", "Inferred.b_slot", "Inferred.a_operand", "Inferred.b_operand",
    "Inferred.load")]

#: kernel → (size, hand (module, attr, factory args, constants), inferred (...), hand units, inferred units)
KERNELS = {
    "transpose": ("8192x8192 fp16",
                  ("kernels.transpose", "transpose", None, TRANSPOSE),
                  ("kernels.inferred.transpose", "transpose", None, TRANSPOSE),
                  ["SMEM", "_atom_regs", "_wide", "_transpose_through_tma", "transpose"], ["transpose"]),
    "rmsnorm": ("65536x1024 fp16",
                ("kernels.rmsnorm", "rmsnorm", None, ROWS), ("kernels.inferred.rmsnorm", "rmsnorm", None, ROWS),
                ["ROW", "row_tile", "load_row", "store_row", "_scale_row", "_normalize_row", "rmsnorm"], ["rmsnorm"]),
    "softmax": ("65536x1024 fp16",
                ("kernels.softmax", "softmax", None, ROWS), ("kernels.inferred.softmax", "softmax", None, ROWS),
                ["ROW", "ONE", "_softmax_row", "softmax", "kernels.rmsnorm:row_tile", "kernels.rmsnorm:load_row",
                 "kernels.rmsnorm:store_row"], ["softmax"]),
    "rotary": (f"{TOKENS} tokens, NeoX head 128, 32q/8k heads bf16",
               ("kernels.rotary", "dynamic", ROTARY + (True, "bfloat16", "int64"), {}),
               ("kernels.inferred.rotary", "dynamic", ROTARY + ("bfloat16", "int64"), {}),
               ["Plan", "_passes", "_load", "_store", "_rotate", "dynamic"], ["_rotate", "dynamic"]),
    "gemm": ("4096x4096x4096 fp16 -> fp32",
             ("kernels.inferred.hand_gemm", "make", GEMM, {}), ("kernels.inferred.gemm", "make", GEMM, {}),
             ["SMEM_A", "SMEM_B", "k_step", "tiled_gemm", "_tiles", "make"],
             ["kernels.inferred.hand_gemm:k_step", "kernels.inferred.hand_gemm:tiled_gemm", "_tiles", "make"]),
    "pipelined_gemm": ("8192x8192x8192 bf16, B row-major, 128x256x64, 4 stages",
                       ("kernels.gemm", "make", PIPELINED, {}), ("kernels.inferred.pipelined_gemm", "make", PIPELINED, {}),
                       HAND_VIEWS, OPEN_VIEWS),
    # a literal copy of kernels/inferred/mma_gemm.py's BENCH (that module imports TVM; this run has none)
    "mma_gemm": ("4096x4096x4096 fp16 -> fp32, mma.sync",
                 ("kernels.inferred.hand_mma_gemm", "make", (4096, 4096, 4096), {}),
                 ("kernels.inferred.mma_gemm", "make", (4096, 4096, 4096), {}),
                 ["SMEM", "REG_A", "REG_B", "ACC", "k_step", "tiled_gemm", "_tiles", "make"],
                 ["kernels.inferred.hand_mma_gemm:k_step", "kernels.inferred.hand_mma_gemm:tiled_gemm", "_tiles", "make"]),
}



def code_lines(module: str, names) -> int:
    """Lines of code of the top-level definitions ``names`` of ``module`` (``"mod:name"`` picks
    another module, ``"Class.method"`` a method): no blank lines, no comment-only lines, no docstrings."""
    total = 0
    for n in names:
        mod, name = n.split(":") if ":" in n else (module, n)
        path = os.path.join(ROOT, *mod.split(".")) + ".py"
        src = open(path).read()
        tree, lines = ast.parse(src), src.splitlines()
        node = tree
        for part in name.split("."):        # "Class.method": a method
            node = next(d for d in node.body if getattr(d, "name", None) == part or any(
                getattr(t, "id", None) == part for t in getattr(d, "targets", [getattr(d, "target", None)])))
        doc = set()
        for sub in ast.walk(node):
            body = getattr(sub, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
                doc.update(range(body[0].lineno, body[0].end_lineno + 1))
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        total += sum(1 for i in range(first, node.end_lineno + 1)
                     if i not in doc and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))
    return total


def build():
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from cases_inferred import build as build_one
    os.makedirs(OUT, exist_ok=True)
    for kernel, (_, hand, inferred, _, _) in KERNELS.items():
        for which, spec in (("hand", hand), ("inferred", inferred)):
            art = build_one(*spec, name=f"{kernel}_{which}")
            art.save(os.path.join(OUT, f"{kernel}_{which}"))
            print(f"{kernel}_{which}: {[r.chosen for r in art.records]}", flush=True)
    print(f"artifacts in {OUT}")


def _setup(torch, kernel, k):
    """``(launch, check)`` for artifact ``k`` of ``kernel`` on fresh inputs."""
    args = {a["name"].rstrip("_"): a for a in k.launch["args"]}
    if kernel == "transpose":
        m, n = args["A"]["shape"]
        a = torch.randn(m, n, device="cuda", dtype=torch.float16)
        b = torch.full((n, m), float("nan"), device="cuda", dtype=torch.float16)
        return (lambda: k(a, b)), (lambda: bool(torch.equal(b, a.t())))
    if kernel in ("rmsnorm", "softmax"):
        r, n = args["X"]["shape"]
        x = torch.randn(r, n, device="cuda", dtype=torch.float16)
        y = torch.full((r, n), float("nan"), device="cuda", dtype=torch.float16)
        if kernel == "softmax":
            ref = torch.softmax(x.float(), -1)
            return (lambda: k(x, y)), (lambda: ((y.float() - ref).norm() / ref.norm()).item() < 2e-3)
        w = torch.randn(1, n, device="cuda", dtype=torch.float16)
        ref = torch.nn.functional.rms_norm(x.float(), (n,), w.view(-1).float(), 1e-6)
        return (lambda: k(x, w, y)), (lambda: ((y.float() - ref).norm() / ref.norm()).item() < 2e-3)
    if kernel in ("gemm", "mma_gemm"):
        m, kk = args["A"]["shape"]
        n = args["B"]["shape"][0]
        a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
        b = torch.randn(n, kk, device="cuda", dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        ref = a.float() @ b.float().t()
        return (lambda: k(a, b, c)), (lambda: ((c - ref).norm() / ref.norm()).item() < 1e-3)
    if kernel == "pipelined_gemm":       # C = A·B, B row-major (K×N), bf16 out
        a = torch.randn(*args["A"]["shape"], device="cuda", dtype=torch.bfloat16)
        b = torch.randn(*args["B"]["shape"], device="cuda", dtype=torch.bfloat16)
        c = torch.full(args["C"]["shape"], float("nan"), device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        return (lambda: k(a, b, c)), (lambda: ((c.float() - ref).norm() / ref.norm()).item() < 1e-2)
    hs, hq, hk = ROTARY
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from cases_serving import rope_cache, rotate
    cache = rope_cache(torch, hs, torch.bfloat16)
    pos = torch.randint(0, cache.shape[0], (TOKENS,), device="cuda", dtype=torch.int64)
    q = torch.randn(TOKENS, hq * hs, device="cuda", dtype=torch.bfloat16)
    kk = torch.randn(TOKENS, hk * hs, device="cuda", dtype=torch.bfloat16)
    q0, k0 = q.clone(), kk.clone()
    cd = cache.double()
    cos, sin = cd[pos, :hs // 2], cd[pos, hs // 2:]

    def check():
        for got, x0, h in ((q, q0, hq), (kk, k0, hk)):
            want = rotate(torch, x0.view(TOKENS, h, hs).double(), cos, sin, True)
            if ((got.view(TOKENS, h, hs).double() - want).abs().max() / want.abs().max()).item() > 1e-2:
                return False
        return True
    return (lambda: k(pos, q, kk, cache)), check


def _row_base(kernel):
    size, hand, inferred, hu, iu = KERNELS[kernel]
    return {"kernel": kernel, "size": size,
            "hand_lines": code_lines(hand[0], hu), "inferred_lines": code_lines(inferred[0], iu),
            "hand_units": f"{hand[0]}: {', '.join(hu)}", "inferred_units": f"{inferred[0]}: {', '.join(iu)}"}


def pair(args):
    """One kernel's pair, in the child process :func:`run` starts (a hung launch hangs only it):
    prints its row and writes it, as JSON, to ``--row-json``."""
    import torch

    import axe.runtime as rt
    from axe.torch.timing import capture, graph_ms, median
    kernel = args.kernel
    row = _row_base(kernel)
    row["device"] = torch.cuda.get_device_name()

    def done():
        with open(args.row_json, "w") as f:
            json.dump(row, f)
    fns = {}
    #: each side's launch closure, and with it its tensors: a captured graph holds only their
    #: addresses, and torch.cuda.graph's entry (gc + empty_cache) would otherwise return the first
    #: side's tensors to the driver before its graph replays (an illegal address, H200, 2026-11-27)
    alive = []
    for which in ("hand", "inferred"):
        k = rt.load(os.path.join(args.artifacts, f"{kernel}_{which}"))
        launch, check = _setup(torch, kernel, k)
        alive.append(launch)
        launch()
        torch.cuda.synchronize()
        if not check():
            row["error"] = f"{kernel}_{which} is wrong against torch: not timed"
            print(row["error"], flush=True)
            return done()

        def many(launch=launch):
            for _ in range(args.graph_calls):
                launch()
        fns[which] = capture(torch, many)[0]
    times = {"hand": [], "inferred": []}
    for r in range(args.rounds):
        for which in (("hand", "inferred") if r % 2 == 0 else ("inferred", "hand")):
            times[which].append(graph_ms(torch, fns[which], 5) * 1e3 / args.graph_calls)
    row.update({"hand_us": round(median(times["hand"]), 2), "inferred_us": round(median(times["inferred"]), 2),
                "hand_us_rounds": [round(t, 2) for t in times["hand"]],
                "inferred_us_rounds": [round(t, 2) for t in times["inferred"]]})
    print(f"{kernel:10s} {row['size']:44s} hand {row['hand_us']:9.2f} us  inferred {row['inferred_us']:9.2f} us  "
          f"lines {row['hand_lines']} -> {row['inferred_lines']}", flush=True)
    done()


def run(args):
    """Each kernel's pair in a child process bounded by ``--timeout`` seconds (load, check and
    timing together): a pair that hangs, crashes or is wrong gets its row with ``error`` and the
    others are timed regardless."""
    import subprocess
    import tempfile
    import time
    rows, dev = [], None
    kernels = args.only or list(KERNELS)
    for kernel in kernels:
        with tempfile.TemporaryDirectory(prefix="inferred_pair_") as tmp:
            out = os.path.join(tmp, "row.json")
            cmd = [sys.executable, os.path.abspath(__file__), "pair", "--kernel", kernel, "--row-json", out,
                   "--artifacts", args.artifacts, "--rounds", str(args.rounds), "--graph-calls", str(args.graph_calls)]
            t0 = time.monotonic()
            try:
                rc = subprocess.run(cmd, timeout=args.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = None
            wall = round(time.monotonic() - t0, 1)
            if os.path.exists(out):
                with open(out) as f:
                    row = json.load(f)
            else:
                row = _row_base(kernel)
                row["error"] = (f"timed out after {args.timeout} s (killed: its load, check or timing never finished)"
                                if rc is None else f"child exited {rc} without a row")
                print(f"{kernel:10s} {row['error']}", flush=True)
        row["wall_s"] = wall
        dev = row.pop("device", None) or dev
        rows.append(row)
    if dev is None:
        try:
            import torch
            dev = torch.cuda.get_device_name()
        except Exception as err:     # noqa: BLE001 - recorded, not fatal: the rows say what ran
            dev = f"unknown ({type(err).__name__})"
    day = datetime.date.today().isoformat()
    short = "h200" if "H200" in dev else "h100" if "H100" in dev else dev.split()[-1].lower()
    path = args.json or os.path.join(ROOT, "benchmarks", "results", f"inferred-{day}-{short}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from dist_bench import versions
    with open(path, "w") as f:
        json.dump({"device": dev, "date": day, "versions": versions(), "timing": f"CUDA graph of {args.graph_calls} launches, median of "
                   f"{args.rounds} interleaved rounds (5 replays each), us per launch",
                   "bound": f"each pair in its own process, killed after {args.timeout} s", "rows": rows}, f, indent=1)
    print(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("build", "run", "lines", "pair"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a pair (load, check, timing) may take")
    ap.add_argument("--only", nargs="*", choices=list(KERNELS), help="these pairs (default: all)")
    ap.add_argument("--kernel", choices=list(KERNELS), help=argparse.SUPPRESS)
    ap.add_argument("--row-json", help=argparse.SUPPRESS)
    ap.add_argument("--artifacts", default=OUT)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--graph-calls", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.mode == "build":
        build()
    elif args.mode == "lines":
        for kernel, (_, hand, inferred, hu, iu) in KERNELS.items():
            print(f"{kernel:10s} hand {code_lines(hand[0], hu):4d}  inferred {code_lines(inferred[0], iu):4d}")
    elif args.mode == "pair":
        pair(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
