#!/usr/bin/env python3
"""The block-scaled FP8 GEMM at every M: axe's run-time-M artifact of each bucket (the configuration
:func:`kernels.gemm_fp8_select.heuristic` picks, what ``torch.ops.axe.gemm_fp8`` runs) beside cuBLAS
(``torch._scaled_mm`` with 1×128 / 128×128 blockwise scales, :class:`gemm_fp8.Cublas`) and the
Triton block-scaled GEMM (:func:`gemm_fp8.triton_block_fp8`), for M in :data:`gemm_allm.MS` × the
16 MLP weight shapes and DeepSeek-V3's six (N, K) pairs.  Every side is checked against the fp32
product of the dequantized operands (‖C − ref‖/‖ref‖ < 1e-2, C poisoned with NaN first) before it
is timed; a wrong or failing side is recorded and not timed.  Timing: CUDA graph replays, median of
``--rounds`` interleaved rounds.  For M ≤ 128 a row also carries ``dram_limit_ms``: the weight's
bytes and its scales' (N·K + 4·⌈N/128⌉·⌈K/128⌉) ÷ this run's read rate (``torch.sum`` of 4 GiB, as
``benchmarks/gemm_allm.py`` measures it).

CPU machine: ``.venv/bin/python benchmarks/gemm_fp8_allm.py --build [--out DIR]`` builds every
(shape, bucket) artifact the sweep calls — one per (N, K, configuration): buckets sharing a
configuration share it — slimmed to ``launch.json`` + ``kernel.cubin`` in ``.carry/gemm_fp8_allm/``,
and prints the carry's size (refused above :data:`CARRY_LIMIT`); ``--candidates`` also builds every
candidate configuration of the decode buckets (``gemm_fp8_select.candidates``) and the two sides of
the large buckets' CTA-pair rule (:func:`candidates_for`), which the run then times beside the pick
(``candidates_ms``, ``best_candidate``: what fits the heuristic).
GPU machine: ``python3 benchmarks/gemm_fp8_allm.py [--only mlp|deepseek] [--shapes NxK ...] [--budget S] [--resume]
[--shape-timeout S] [--rounds R] [--json PATH]`` writes ``gemm_fp8-allm-DATE-DEVICE.json`` (to
``$OUT`` when set, else ``benchmarks/results/``), rewritten after every shape.  Each shape runs in a
child process killed after ``--shape-timeout`` seconds (0: in this process), so a hang or a crash
becomes that shape's rows with an ``error``; shapes not started within ``--budget`` seconds are
recorded as skipped; ``--resume`` keeps the rows of ``--json``'s file and measures only the other
shapes, so the sweep can be spread over several runs of one time limit each.  Rows: ``set, model, proj, M, N, K, dtype, axe_ms, cublas_ms, triton_ms,
config, artifact, rel_err, errors`` and ``dram_limit_ms`` where M ≤ 128.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from gemm_allm import MS  # noqa: E402  (the 16-bit sweep's row counts)

ARTIFACTS = os.path.join(ROOT, ".carry", "gemm_fp8_allm")
#: the most the carried artifacts may take (bytes): the device tool carries 64 MiB in all
CARRY_LIMIT = 50 * 2**20
#: what a slim artifact keeps (the runtime needs no more)
SLIM = ("launch.json", "kernel.cubin")
DTYPE = "float8_e4m3fn"
SIDES = ("axe", "cublas", "triton")
DEVICE = "cuda"         # the CPU test of run_shape's control flow sets "cpu"


def shapes():
    """``[(set, model, proj, N, K)]``: the MLP weights (one row per distinct (N, K), named after its
    first model), then DeepSeek-V3's six."""
    from gemm_fp8 import DEEPSEEK
    from mlp_gemm import SHAPES
    seen, out = set(), []
    for model, proj, n, k in SHAPES:
        if (n, k) not in seen:
            seen.add((n, k))
            out.append(("mlp", model, proj, n, k))
    return out + [("deepseek", "DeepSeek-V3", f"{n}x{k}", n, k) for n, k in DEEPSEEK]


def select_shapes(only=None, only_shapes=None):
    """The shapes of set ``only`` (None: both) among ``only_shapes`` (``"NxK"`` names; None: all)."""
    return [s for s in shapes() if only in (None, s[0]) and (not only_shapes or f"{s[3]}x{s[4]}" in only_shapes)]


def config_for(m, n, k):
    """The configuration the op runs for M rows (``make_dynamic`` keywords)."""
    from kernels.gemm_fp8_select import heuristic
    return heuristic(m, n, k)


def artifact_name(n, k, config):
    from kernels.gemm_fp8_select import name
    return f"gemm_fp8_dyn_{n}x{k}_{name(config)}"


def candidates_for(m, n, k):
    """Every candidate configuration of M's bucket (``gemm_fp8_select.candidates``, with the bound
    each is scheduled for) where the bucket is a decode one (≤ 128 rows); in a bucket above
    ``MAX_BOUND`` rows the two sides of the CTA-pair rule (``gemm_fp8_select.pairs_win``): the
    256-wide tile uncut and as pairs, both on the run-time grid (one artifact each for every large
    bucket); else none."""
    from kernels.gemm_fp8_select import BM, MAX_BOUND, PAIR, STAGES, bucket, candidates, with_bound
    bound = bucket(m)
    if bound is not None and bound <= BM:
        return [with_bound(bound, c) for c in candidates(bound, n, k)]
    if (bound is None or bound > MAX_BOUND) and n >= PAIR["bn"]:
        return [with_bound(bound, c) for c in (dict(bn=256, stages=STAGES[256]), PAIR)]
    return []


def plan(todo_shapes, ms=MS, every_candidate=False):
    """``[(N, K, config, name)]``: every distinct artifact the sweep calls (``every_candidate``: also
    every candidate of the decode buckets, which the run times beside the pick)."""
    out = {}
    for *_, n, k in todo_shapes:
        for m in ms:
            for config in [config_for(m, n, k)] + (candidates_for(m, n, k) if every_candidate else []):
                out.setdefault(artifact_name(n, k, config), (n, k, config))
    return [(n, k, config, nm) for nm, (n, k, config) in out.items()]


def slim(directory):
    """Remove everything but :data:`SLIM` from an artifact directory."""
    for f in os.listdir(directory):
        if f not in SLIM:
            os.remove(os.path.join(directory, f))


def carry_bytes(out):
    """Bytes of every file under ``out``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)


def build(out, only=None, every_candidate=False, only_shapes=None):
    """Build the plan's artifacts into ``out`` (slim); 1 when one failed or the carry is over the limit."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from build_gemm import save_built
    from kernels import gemm_fp8
    todo = plan(select_shapes(only, only_shapes), every_candidate=every_candidate)
    failed = []
    for i, (n, k, config, nm) in enumerate(todo):
        print(f"[{i + 1}/{len(todo)}] ", end="", flush=True)
        try:
            save_built(out, nm, lambda: gemm_fp8.build_dynamic(n, k, name=nm, **config))
            slim(os.path.join(out, nm))
        except Exception as err:  # noqa: BLE001 - report every artifact that does not build
            failed.append(f"{nm}: {type(err).__name__}: {err}")
            print(f"FAILED {nm}: {err}", flush=True)
    size = carry_bytes(out)
    print(f"{len(todo)} artifacts in {out}: {size / 2**20:.1f} MiB (limit {CARRY_LIMIT / 2**20:.0f} MiB); "
          f"{len(failed)} failed")
    for f in failed:
        print("  " + f)
    return 1 if failed or size > CARRY_LIMIT else 0


def weight_bytes(n, k):
    """Bytes a call must read at least: the e4m3 weight and its fp32 128×128-block scales."""
    return n * k + 4 * -(-n // 128) * -(-k // 128)


def dram_limit_ms(n, k, rate):
    """Milliseconds to read the weight and its scales at ``rate`` bytes per second."""
    return weight_bytes(n, k) / rate * 1e3


def make_row(shape, m, config, ms, rel, errors, rate):
    """A result row: the shape, each side's milliseconds (None where it failed or was wrong), the
    configuration, and where M ≤ 128 the DRAM limit at ``rate``."""
    kind, model, proj, n, k = shape
    row = {"set": kind, "model": model, "proj": proj, "M": m, "N": n, "K": k, "dtype": DTYPE,
           **{f"{s}_ms": ms.get(s) for s in SIDES}, "config": config, "artifact": artifact_name(n, k, config),
           "rel_err": rel, "errors": errors}
    if m <= 128:
        row["dram_limit_ms"] = dram_limit_ms(n, k, rate)
    return row


def check(fn, out, ref):
    """Run ``fn`` once into ``out`` (poisoned with NaN first); the relative error, or raises why the
    side is wrong."""
    from gemm_fp8 import TOL, rel_err, sync
    out.fill_(float("nan"))
    got = fn()
    sync()
    got = got if got is not None and hasattr(got, "isnan") else out
    if got.isnan().any():
        raise AssertionError(f"{int(got.isnan().sum())} outputs NaN (never written)")
    err = rel_err(got, ref)
    if not err < TOL:
        raise AssertionError(f"relative error {err:.2e} >= {TOL}")
    return err


def run_shape(shape, artifacts, rate, rounds, ms_list=MS, on_row=None):
    """Every M of one shape: each side checked, then the correct ones timed from CUDA graphs in
    ``rounds`` interleaved rounds; returns the rows (``on_row(rows)`` after each)."""
    import torch

    import axe.runtime as rt
    from axe.torch.timing import capture, graph_ms, median, round_robin
    from gemm_fp8 import Cublas, error_line, triton_or_error
    from kernels.fp8_blocks import quantize_blocks, quantize_rows, reference
    _, _, _, n, k = shape
    tri = triton_or_error()
    W, SB = quantize_blocks(torch.randn(n, k, device=DEVICE))
    rows = []
    for m in ms_list:
        config = config_for(m, n, k)
        errors, rel, fns, notes = {}, {}, {}, {}
        A, SA = quantize_rows(torch.randn(m, k, device=DEVICE))
        ref = reference(A, W, SA, SB)["C"]
        C = torch.empty(m, n, device=DEVICE, dtype=torch.bfloat16)
        sides = {}
        try:
            kern = rt.load(os.path.join(artifacts, artifact_name(n, k, config)))
            sides["axe"] = lambda: kern(A, W, SA, SB, C)
        except Exception as e:  # noqa: BLE001
            errors["axe"] = error_line(e)
        try:
            how, fn = Cublas.call(A, W, SA, SB)
            sides["cublas"], notes["cublas_call"] = fn, how
        except Exception as e:  # noqa: BLE001
            errors["cublas"] = error_line(e)
        sides["triton"] = lambda: tri(A, W, SA, SB, C)
        for cand in candidates_for(m, n, k):       # where --candidates built them: timed beside the pick
            path = os.path.join(artifacts, artifact_name(n, k, cand))
            if cand != config and os.path.exists(path):
                sides[f"cand:{artifact_name(n, k, cand)}"] = (lambda kc: lambda: kc(A, W, SA, SB, C))(rt.load(path))
        for side, fn in sides.items():
            try:
                rel[side] = check(fn, C, ref)
                fns[side] = fn
            except Exception as e:  # noqa: BLE001 - one side's failure must not stop the others
                errors[side] = error_line(e)
        ms = {}
        if fns:
            graphs = {s: capture(torch, f)[0] for s, f in fns.items()}
            ms = {s: median(v) for s, v in round_robin(
                {s: (lambda g=g: graph_ms(torch, g, 10, inner=5)) for s, g in graphs.items()}, rounds).items()}
            del graphs
        row = {**make_row(shape, m, config, ms, rel, errors, rate), **notes}
        cands = {side[5:]: t for side, t in ms.items() if side.startswith("cand:")}
        if cands:       # the pick's time among every candidate's
            row["candidates_ms"] = {**cands, **({artifact_name(n, k, config): ms["axe"]} if "axe" in ms else {})}
            row["best_candidate"] = min(row["candidates_ms"], key=row["candidates_ms"].get)
        rows.append(row)
        if on_row:
            on_row(rows)
        cells = "  ".join(f"{s} {ms[s] * 1e3:8.1f}" if s in ms else f"{s} {'-':>8s}" for s in SIDES)
        print(f"{m:5d}x{n}x{k}: {cells} us  {artifact_name(n, k, config)}", flush=True)
        del A, SA, ref, C
    torch.cuda.empty_cache()
    return rows


def failed_rows(shape, rate, why, ms_list=MS, done=()):
    """The rows of a shape's row counts not in ``done``, each recording ``why`` (a crash, a hang)."""
    _, _, _, n, k = shape
    return [make_row(shape, m, config_for(m, n, k), {}, {}, {"shape": why}, rate) for m in ms_list if m not in done]


def summarize(rows):
    """Per M: cuBLAS time ÷ axe time (median, min over the shapes) and, M ≤ 128, the DRAM limit ÷
    axe time (the share of the read rate axe reaches)."""
    out = {}
    for m in sorted({r["M"] for r in rows}):
        r = [x for x in rows if x["M"] == m and x["axe_ms"] and x["cublas_ms"]]
        d = [x["dram_limit_ms"] / x["axe_ms"] for x in rows if x["M"] == m and x["axe_ms"] and "dram_limit_ms" in x]
        if r:
            v = [x["cublas_ms"] / x["axe_ms"] for x in r]
            out[f"M={m}"] = {"shapes": len(r), "cublas_over_axe_median": statistics.median(v),
                             "cublas_over_axe_min": min(v), **({"dram_share_median": statistics.median(d)} if d else {})}
    return out


def write(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


def child(shape_key, artifacts, rate, rounds, part):
    """The child process's work: one shape's rows into ``part``, rewritten after every M (so a crash
    or a hang loses only the M it happened at)."""
    shape = next(s for s in shapes() if f"{s[3]}x{s[4]}" == shape_key)
    run_shape(shape, artifacts, rate, rounds, on_row=lambda rows: write(part, rows))
    return 0


def shape_rows(shape, args, rate):
    """One shape's rows: in a child killed after ``--shape-timeout`` seconds (a timeout or a crash
    recorded on each row), or in this process."""
    if not args.shape_timeout:
        try:
            return run_shape(shape, args.artifacts, rate, args.rounds)
        except Exception:  # noqa: BLE001 - e.g. out of memory making the operands
            return failed_rows(shape, rate, traceback.format_exc()[-2000:])
    part = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gemm_fp8_allm_{os.getpid()}_{shape[3]}x{shape[4]}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{shape[3]}x{shape[4]}", "--part", part,
           "--rate", repr(rate), "--rounds", str(args.rounds), "--artifacts", args.artifacts]
    why = None
    try:
        subprocess.run(cmd, timeout=args.shape_timeout, check=True)
    except subprocess.TimeoutExpired:
        why = f"timed out after {args.shape_timeout} s (a hang?)"
    except (subprocess.CalledProcessError, OSError) as e:
        why = f"child failed: {e}"
    try:
        with open(part) as f:
            rows = json.load(f)
        os.remove(part)
    except (OSError, ValueError):
        rows = []
    if why is None and len(rows) == len(MS):
        return rows
    return rows + failed_rows(shape, rate, why or "the child left no rows", done={r["M"] for r in rows})


def run(args):
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError as err:
        triton_version = f"not importable: {err}"
    from gemm_decode import read_rate
    from gemm_fp8 import budgeted
    rate = read_rate(torch)
    torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    short = dev.replace("NVIDIA ", "").split()[0].lower()
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                     f"gemm_fp8-allm-{date}-{short}.json")
    print(f"{dev}: read rate {rate / 1e12:.2f} TB/s -> {path}", flush=True)
    result = {"benchmark": "gemm_fp8-allm", "date": date, "device": dev, "read_rate_Bps": rate,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
                           "python": platform.python_version()},
              "timing": f"CUDA graph replays, median of {args.rounds} interleaved rounds (each the median of 10 batches "
                        "of 5 replays); C = (SA*A)·(SB*W)ᵀ bf16, W N×K e4m3 with 128×128 scales, A 1×128 scales; axe = "
                        "the bucket's run-time-M artifact (gemm_fp8_select.heuristic), cuBLAS = torch._scaled_mm "
                        "blockwise, Triton = benchmarks/gemm_fp8.py's block-scaled GEMM (autotuned)",
              "rows": [], "skipped": [], "summary": {}}
    if args.resume and os.path.exists(path):     # a sweep split over several runs: keep the shapes measured
        with open(path) as f:
            result["rows"] = json.load(f)["rows"]
    done = {(r["N"], r["K"]) for r in result["rows"]}
    t0 = time.time()
    todo = [s for s in select_shapes(args.only, args.shapes) if (s[3], s[4]) not in done]
    for i, shape in budgeted(todo, t0, args.budget, result):
        print(f"[{i + 1}/{len(todo)}] {shape[0]} {shape[1]} {shape[2]} N={shape[3]} K={shape[4]}", flush=True)
        result["rows"] += shape_rows(shape, args, rate)
        result["summary"], result["seconds"] = summarize(result["rows"]), time.time() - t0
        write(path, result)             # what is measured so far survives a time limit
    write(path, result)
    for key, s in result["summary"].items():
        print(f"{key}: cuBLAS/axe median {s['cublas_over_axe_median']:.3f} min {s['cublas_over_axe_min']:.3f}"
              + (f"; DRAM limit/axe median {s['dram_share_median']:.2f}" if "dram_share_median" in s else ""))
    print("wrote", path)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true", help="build the artifacts (CPU machine, TVM + nvcc)")
    ap.add_argument("--out", default=ARTIFACTS, help="--build: where the artifacts go")
    ap.add_argument("--artifacts", default=ARTIFACTS)
    ap.add_argument("--only", choices=("mlp", "deepseek"), default=None)
    ap.add_argument("--shapes", nargs="*", default=None, metavar="NxK", help="only these weight shapes")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds: shapes not started by then are skipped")
    ap.add_argument("--shape-timeout", type=int, default=240, help="seconds per shape's child process (0: in process)")
    ap.add_argument("--candidates", action="store_true",
                    help="also build (and the run times, where built) every candidate of the decode buckets")
    ap.add_argument("--resume", action="store_true", help="keep the rows of --json's file and skip their shapes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build:
        return build(args.out, args.only, args.candidates, args.shapes)
    if args.child:
        return child(args.child, args.artifacts, args.rate, args.rounds, args.part)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
