"""What the multi-GPU benchmarks share (``gemm_rs.py``, ``ag_gemm.py``, ``tp_mlp.py``): multicast kept
off, one-line errors naming the rank, the versions of the run, and the check-then-time loop.

Timing law (:func:`check_and_time`): every side is checked before it is timed (a side failing on
any rank is dropped on all); then 5 warm-ups, and ``repeats`` rounds in which the sides take turns,
each a block of ``iters`` back-to-back launches after ``dist.barrier()`` + synchronize, with a CUDA
event before the first launch, one after it and one after the last; per-launch ms = the median over
the rounds on each rank, then the max over ranks (a collective is as slow as its slowest rank).
``--prime`` (the default of ``gemm_rs.py``): per-launch ms over the launches after the first, which
the GPU runs with the queue already filled — so what a side's launch costs on the host (a Python
launch path against a compiled one) is not timed while it stays below the kernel's time, which the
row's ``host_us`` (host time per launch) shows; without it, over all launches from the first event,
so the first launch's host latency is timed once per block.  No L2 flush, for any side.
"""

import os
import sys

#: NVLink multicast stays off on the shared machines, whatever the environment said
SAFE_ENV = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1"))


def multicast_off(tag):
    """Set the three variables that keep NVLink multicast off (before torch or NCCL start)."""
    for k, v in SAFE_ENV:
        if os.environ.get(k) != v:
            if k in os.environ:
                print(f"{tag}: {k}={os.environ[k]!r} overridden to {v!r} (no NVLink multicast)", file=sys.stderr)
            os.environ[k] = v


def why(e, rank, when=""):
    """One line naming the rank and the exception (its first line, at most 300 characters)."""
    return f"rank {rank}: {when}{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"


def _driver():
    """The NVIDIA driver version: NVML, else nvidia-smi."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()
    except ImportError:
        import subprocess
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], check=True,
                              capture_output=True, text=True, timeout=60).stdout.split()[0]


def _version(get):
    """``get()`` as a string, or "unknown (<error>)"."""
    try:
        v = get()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception as e:
        return f"unknown ({type(e).__name__})"


def versions():
    """torch, CUDA, Python, driver and NCCL versions of this run."""
    import platform

    import torch
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "driver": _version(_driver), "nccl": _version(lambda: ".".join(map(str, torch.cuda.nccl.version())))}


def device_tag():
    """``h100``, ``h200``, ...: the device name's model, for file names."""
    import torch
    return torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0].lower()


def check_and_time(args, all_sides, sides, ref, errs, rank, world, warmup=5, repeats=5, tol=2e-2, stats=None):
    """Check every side of ``sides`` (``{side: (fn returning the output, output to poison or None,
    sync)}``) against ``ref[side]`` (sides without a reference are timing aids, run unchecked), then
    time them (the module's law; ``args.prime``, where set, picks the per-launch figure).  ``errs``
    collects ``{side: message}`` of this rank.  Returns ``(ms, err_all, errs_all)``: ``{side: ms or
    None}`` over ``all_sides``, each rank's relative errors and each rank's error messages.
    ``stats``, a dict, receives ``{"host_us": {side: µs}, "ms_all": {side: ms}, "ms_after_first":
    {side: ms}}``: the host time per launch of the timed loop and both per-launch figures (each a
    median over the rounds, max over ranks; None for a side not timed)."""
    import statistics
    import time

    import torch
    import torch.distributed as dist
    err = {s: None for s in args.sides}
    for s, (fn, out, sync) in sides.items():
        try:
            if out is not None:
                out.fill_(float("nan"))
            got = fn()
            sync()
            if s not in ref:
                continue
            e = ((got.float() - ref[s]).abs().max() / ref[s].abs().max()).item()   # NaN if a NaN is left
            err[s] = e if e == e else None
            if not e < tol:
                errs[s] = f"rank {rank}: max abs err / max abs ref {e:.3e} (tolerance {tol})"
        except Exception as e:
            errs[s] = why(e, rank)
    ok = torch.tensor([0.0 if s in errs or s not in sides else 1.0 for s in all_sides], device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)     # a side wrong on one rank is dropped on all
    err_all = [None] * world
    dist.all_gather_object(err_all, err)
    timed = [s for i, s in enumerate(all_sides) if ok[i].item() == 1.0]
    figures = {k: {s: [] for s in timed} for k in ("ms_all", "ms_after_first", "host_us")}
    prime = getattr(args, "prime", False)

    def guarded(s, body):
        """Run ``body`` for side ``s``; if it raised on any rank, every rank drops the side."""
        bad = 0.0
        try:
            body()
        except Exception as e:
            errs.setdefault(s, why(e, rank, "while timing: "))
            bad = 1.0
        flag = torch.tensor([bad], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item():
            timed.remove(s)

    def block(s):
        """One measured block: barrier, then ``iters`` back-to-back launches, a CUDA event before the
        first, after the first and after the last; the host's time over the launch loop."""
        fn, _, sync = sides[s]
        dist.barrier()
        torch.cuda.synchronize()
        t0, t1, t2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        h = time.perf_counter()
        t0.record()
        fn()
        t1.record()
        for _ in range(args.iters - 1):
            fn()
        t2.record()
        h = time.perf_counter() - h
        sync()
        figures["ms_all"][s].append(t0.elapsed_time(t2) / args.iters)
        figures["ms_after_first"][s].append(t1.elapsed_time(t2) / (args.iters - 1))
        figures["host_us"][s].append(h / args.iters * 1e6)

    for s in list(timed):
        guarded(s, lambda: ([sides[s][0]() for _ in range(warmup)], sides[s][2]()))
    for _ in range(repeats):
        for s in list(timed):
            guarded(s, lambda: block(s))
    errs_all = [None] * world
    dist.all_gather_object(errs_all, errs)
    out = {}
    for key, by_side in figures.items():
        med = torch.tensor([statistics.median(by_side[s]) if s in timed else 0.0 for s in all_sides], device="cuda")
        dist.all_reduce(med, op=dist.ReduceOp.MAX)    # a collective is as slow as its slowest rank
        out[key] = {s: med[i].item() if s in timed else None for i, s in enumerate(all_sides)}
    if stats is not None:
        stats.update(out)
    return out["ms_after_first" if prime else "ms_all"], err_all, errs_all


def side_outcomes(args, all_sides, err_all, errs_all, ms=None, unbuilt=()):
    """A JSON row's per-side fields: each rank's relative error, each failing side's messages and,
    given ``ms``, each side's status (``not run``, ``not built``, ``ok`` or ``FAIL``)."""
    out = {"rel_err_per_rank": {s: [e[s] for e in err_all] for s in args.sides},
           "errors": {s: [r[s] for r in errs_all if s in r] for s in all_sides if any(s in r for r in errs_all)}}
    if ms is not None:
        out["status"] = {s: "not run" if s not in args.sides else "not built" if s in unbuilt else "ok" if ms[s]
                         else "FAIL" for s in all_sides}
    return out


def figure_row(args, all_sides, rank, ms, err_all, errs_all, unbuilt, flops, rounds, **fields):
    """A shape's JSON row — ``fields`` (op, model, sizes, ...), ``ms``, :func:`side_outcomes`, TFLOP/s
    per GPU from ``flops`` per launch, :func:`summarize`'s pick and ratios (``rounds``: the timing's
    interleaved rounds) — announced on rank 0."""
    row = {**fields, "ms": ms, **side_outcomes(args, all_sides, err_all, errs_all, ms, unbuilt),
           "tflops_per_gpu": {s: flops / (v * 1e-3) / 1e12 for s, v in ms.items() if v}}
    summarize(row, ms, rounds)
    if rank == 0:
        print(f"{row['model']} M={row['M']} {row['N']}x{row['K']} w{row['world']}: " + "  ".join(
            f"{s} {v:.3f} ms" if v else f"{s} {row['status'][s]}" for s, v in ms.items())
            + f"  pick {row['axe_pick']}, op {row['op_path']} ({row['op_source']})", flush=True)
    return row


def timing_text(args, warmup, repeats):
    """How :func:`check_and_time` timed, for the JSON."""
    first = ("over the launches after the first (primed: the first launch's host latency is not timed)"
             if getattr(args, "prime", False) else "over all launches from the first event (the first launch's host latency timed)")
    return (f"CUDA events around {args.iters} back-to-back launches after {warmup} warm-ups; dist.barrier + "
            f"synchronize before each block; sides interleaved; {repeats} repeats; per-launch ms {first} = median "
            "over repeats per rank, max over ranks; no L2 flush; multicast off")


#: the folder, beside a benchmark's artifacts, of the ``torch.ops.axe`` artifacts its non-fused sides
#: launch (the path :mod:`axe.torch.tp` takes below its fused threshold: the op's bucket pick and
#: compiled launcher, not the one-GPU runtime's Python launch)
OPS_CACHE = "ops_cache"


def gemm_op(N, K, M):
    """The ``torch.ops.axe.gemm(x, w, True)`` artifact (x: M × K, w: N × K, bf16) a call with M rows
    launches: ``("gemm_nt", spec)`` for :func:`build_ops`."""
    from axe.torch import tune
    return ("gemm_nt", tune.spec_for("", N, K, "bfloat16", "col", M))


def build_ops(out, specs):
    """Build the op artifacts ``specs`` (``(name, spec)``, repeats allowed) into ``out``'s
    :data:`OPS_CACHE` (CPU machine); returns how many failed."""
    from axe.torch import ops
    uniq = list({repr(s): s for s in specs}.values())
    return ops.prebuild(uniq, os.path.join(out, OPS_CACHE), "sm_90a")


def axe_ops(artifacts):
    """``torch.ops.axe`` reading the op cache beside ``artifacts`` (GPU machine; before the first
    import of :mod:`axe.torch.ops`, which reads ``$AXE_CACHE_DIR`` at its first call)."""
    os.environ["AXE_CACHE_DIR"] = os.path.join(artifacts, OPS_CACHE)
    import torch

    import axe.torch.ops  # noqa: F401  (registers torch.ops.axe)
    return torch.ops.axe


#: why Flux cannot be installed on the GPU machines, checked on 2026-11-27 (PyPI's JSON API and the
#: sdist's setup.py); :func:`flux_status` reports it with what the run's own Python says
FLUX_PACKAGING = ("byte-flux on PyPI (1.1.1, the newest) is a 71 KB sdist only; its setup.py downloads a "
                  "prebuilt wheel from github.com/bytedance/flux releases named for CUDA 11.8 or 12.4 and the "
                  "running torch's major.minor (the project documents CUDA 12.4, torch 2.6, Python 3.11), and "
                  "otherwise builds from source against 3rdparty/cutlass, which the sdist's 65 files do not "
                  "contain. This machine has "
                  "torch {torch} (CUDA {cuda}), Python {py} and no network, so no wheel fits and no build can run")


def flux_status():
    """Whether the Flux peer (``byte-flux``, import ``flux``) can run here: ``{"ran": False, "why": ...}``
    with the import error and :data:`FLUX_PACKAGING`; an importable Flux is reported as such (no side
    is built for it, so the benchmark does not time it)."""
    import platform

    import torch
    try:
        import flux  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to import is the answer)
        err = f"import flux: {type(e).__name__}: {e}"
        return {"ran": False, "why": err + ". " + FLUX_PACKAGING.format(
            torch=torch.__version__, cuda=torch.version.cuda, py=platform.python_version())}
    return {"ran": False, "why": f"flux {getattr(flux, '__version__', '?')} imports here, but this benchmark has no Flux side"}


def write_json(args, bench, world, fields):
    """Write ``{benchmark, date, device, world, sms, versions, peers_not_run, **fields}`` to ``--json`` or
    ``benchmarks/results/<bench>-<date>-<device>-w<world>.json`` (under ``$OUT`` when set);
    returns ``(path, device, date)``."""
    import datetime
    import json

    import torch
    dev, date = torch.cuda.get_device_name(), datetime.date.today().isoformat()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = args.json or os.path.join(os.environ.get("OUT", os.path.join(root, "benchmarks", "results")),
                                     f"{bench}-{date}-{device_tag()}-w{world}.json")
    result = {"benchmark": bench, "date": date, "device": dev, "world": world,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count, "versions": versions(),
              "peers_not_run": {"flux": flux_status()}, **fields}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return path, dev, date


def fmt(v, spec, unit=""):
    """``v`` formatted for a table (``-`` for None)."""
    return "-" if v is None else format(v, spec) + unit


def print_goal(g):
    """The goal line of a table and its misses."""
    print(f"goal ({g['goal']}): {'met' if g['met'] else 'NOT met'}" + "".join(f"\n  {m}" for m in g["misses"]))


#: the sides that measure :mod:`axe.torch.tp`'s paths (:data:`axe.torch.tp_tune.PATHS`): the fused
#: kernel as the op builds it (side ``axe``, not its variants), NCCL + ``torch.ops.axe.gemm``, NCCL + torch.mm
PATH_SIDES = {"fused": "axe", "nccl+axe": "axe_nccl", "nccl+cublas": "nccl"}


def summarize(row, ms, rounds):
    """Add to ``row`` the ratios of the fused kernel (the faster of its variants, ``axe_fused``)
    against the peers and the bare GEMM, the exposed communication (the fused kernel's time minus
    axe's own GEMM's), and two picks among the op's paths (:data:`PATH_SIDES`):

    - ``axe_pick`` (``axe_pick_ms``, ``axe_pick_side``, ``tuned``): what ``axe tune tp`` would record
      for this bucket from this run's figures — :func:`axe.torch.tp_tune.entry` over the paths'
      medians of ``rounds`` rounds — and ``pick_vs_nccl``, ``pick_vs_symm_mem``;
    - ``op_path`` (``op_source``, ``op_why``, ``op_ms``, ``op_vs_nccl``): what the op itself chooses
      here (:func:`axe.torch.tp.choose` for this GPU and world: its tuned table where one is read,
      else the heuristic), timed by its path's side in this run."""
    from axe.torch import tp, tp_tune
    ax, nc, sm, ba, ag = (ms.get(s) for s in ("axe", "nccl", "symm_mem", "bare", "axe_gemm"))
    fused = [(v, s) for s, v in ms.items() if s in ("axe", "axe_ce", "axe_bulk", "axe_regs", "axe_rows") and v]
    if fused:           # the fused kernel: the faster of its variants (SM push, copy engine, bulk push, adds)
        ax, row["axe_fused"] = min(fused)
    measured = {p: ms[s] for p, s in PATH_SIDES.items() if ms.get(s)}
    tuned = row["tuned"] = tp_tune.entry(measured, [row["M"]], rounds) if measured else None
    pick = measured[tuned["pick"]] if tuned else None
    row["axe_pick"], row["axe_pick_ms"] = (tuned["pick"], pick) if tuned else (None, None)
    row["axe_pick_side"] = PATH_SIDES[tuned["pick"]] if tuned else None
    row["axe_vs_nccl"] = nc / ax if ax and nc else None
    row["axe_vs_symm_mem"] = sm / ax if ax and sm else None
    row["axe_over_bare_pct"] = (ax / ba - 1) * 100 if ax and ba else None
    row["exposed_ms"] = ax - ag if ax and ag else None
    row["pick_vs_nccl"] = nc / pick if pick and nc else None
    row["pick_vs_symm_mem"] = sm / pick if pick and sm else None
    c = tp.choose(row["op"], row["M"], row["N"], row["K"], row["world"], device=_device_name())
    row["op_path"], row["op_source"], row["op_why"] = c.path, c.source, c.why
    op_ms = ms.get(PATH_SIDES[c.path])
    row["op_ms"] = op_ms
    row["op_vs_nccl"] = nc / op_ms if op_ms and nc else None
    return row


def _device_name():
    """This GPU's name (what the op's tuned table is keyed by), None without one."""
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def goal(rows):
    """The goal check: on every shape the op's own choice never slower than mm + NCCL (``op_vs_nccl``
    at least 1) and the pick faster than symm_mem; at M = 8192 the fused kernel within 3% of the
    bare GEMM (the exchange hidden)."""
    miss = []
    for r in rows:
        tag = f"{r['model']} M={r['M']} {r['N']}x{r['K']}"
        tests = [("op_vs_nccl", lambda v: v < 1.0), ("pick_vs_symm_mem", lambda v: v <= 1.0)]
        if r["M"] >= 8192:
            tests.append(("axe_over_bare_pct", lambda v: v > 3.0))
        for key, bad in tests:
            if r[key] is None or bad(r[key]):
                miss.append(f"{tag}: {key} {'missing' if r[key] is None else format(r[key], '.3f')}")
    return {"goal": "the op's choice never slower than mm + NCCL and the pick faster than symm_mem on every "
                    "shape; at M = 8192 the fused kernel within 3% of bare", "met": not miss, "misses": miss}


def launch(args, shapes, run_shape, report, pool_bytes, heap_for=("axe",)):
    """The torchrun entry: one process per GPU; the symm_mem ops registered, axe's symmetric heap of
    ``pool_bytes`` (where a side of ``heap_for`` is selected; its failure is ``setup_err["axe"]``);
    ``run_shape(args, *shape, rank, world, heap, group_name, setup_err)`` per shape; rank 0 reports."""
    import datetime

    import torch
    import torch.distributed as dist
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    setup_err, heap = {}, None
    if "symm_mem" in args.sides:
        try:
            import warnings

            import torch.distributed._symmetric_memory as symm   # registers torch.ops.symm_mem
            with warnings.catch_warnings():                      # deprecated (a no-op) in newer torch
                warnings.simplefilter("ignore")
                getattr(symm, "enable_symm_mem_for_group", lambda g: None)(group_name)
        except Exception as e:
            setup_err["symm_mem"] = why(e, rank, "setup: ")
    if set(heap_for) & set(args.sides):
        try:
            from axe.runtime.symmetric import SymmetricHeap
            heap = SymmetricHeap(pool_bytes=pool_bytes)
        except Exception as e:
            setup_err["axe"] = why(e, rank, "SymmetricHeap(): ")
    rows = [run_shape(args, *s, rank, world, heap, group_name, setup_err) for s in shapes(args.only, world, args.m)]
    dist.barrier()
    if rank == 0:
        report(args, rows, world)
    dist.destroy_process_group()
    return 0


def cli(argv, doc, sides, ms, bench, build, run, prime=False):
    """Parse ``build`` / ``run`` command lines (no torch needed) and dispatch; ``bench``: the
    benchmark's name (artifact folder ``.carry/<bench>_bench``, JSON ``<bench>-<date>-<device>-w<W>.json``);
    ``prime``: the default of ``--prime`` (the module's timing law)."""
    import argparse
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("build", help="build the axe artifacts (CPU machine, TVM)")
    b.add_argument("--world", type=int, nargs="+", action="extend", help="world sizes (default 2), e.g. --world 2 4")
    b.add_argument("--out", default=os.path.join(root, ".carry", f"{bench}_bench"))
    b.add_argument("--diagnostics", action="store_true", help="also build the diagnostic sides' kernels")
    r = sub.add_parser("run", help="check and time the sides (under torchrun on the GPU machine, no TVM)")
    r.add_argument("--artifacts", default=os.path.join(root, ".carry", f"{bench}_bench"))
    r.add_argument("--json", default=None, help=f"default benchmarks/results/{bench}-<date>-<device>-w<W>.json")
    r.add_argument("--iters", type=int, default=20, help="launches per measured block (at least 2)")
    r.add_argument("--prime", action=argparse.BooleanOptionalAction, default=prime,
                   help="per-launch ms over the launches after each block's first (the module's timing law)")
    r.add_argument("--sides", nargs="+", choices=sides, default=list(sides))
    for p in (b, r):
        # not --m: torchrun reads an abbreviation of its own options in it, even after the script
        p.add_argument("--rows", dest="m", type=int, nargs="+", default=list(ms), help=f"values of M (default {ms})")
        p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                       help="model names, NxK or artifact names (e.g. Llama-3.1-8B 4096x14336)")
    args = ap.parse_args(argv)
    if args.mode == "run" and args.iters < 2:
        ap.error(f"--iters must be at least 2 (a block times the launches after its first), got {args.iters}")
    if args.mode == "build":
        args.world = args.world or [2]
        return build(args)
    return run(args)
