#!/usr/bin/env python3
"""Where the fused GEMM + reduce-scatter's local overhead goes, at M = 8192 on w GPUs: four suspects,
each a measured pair of sides, timed side by side on the same inputs.

The local problem of a down projection (A: M × K/w, W: N × K/w, bf16, the ``nn.Linear`` weight) on
the small shapes (Qwen3-8B, Llama-3.1-8B, Gemma-2-9B) and Llama-3.1-70B as a control.  Sides:

- ``bare``: torch.mm (cuBLAS) of the local problem; ``gemm_op``: ``torch.ops.axe.gemm`` (the op's
  artifact, run-time M, its compiled launcher; ``gemm_rs.py``'s ``axe_gemm``);
- (b) the launch: ``gemm_dyn`` the same run-time-M GEMM launched through the runtime's Python
  :class:`~axe.runtime.launcher.Kernel` (against ``gemm_op``); ``local_rebind`` / ``fused_rebind``
  the nothing-exchanged / default fused kernel launched as ``DistKernel`` did before it kept its
  launch plan (every launch a full bind — checks, tensor maps, a new plan — because the epoch is a
  scalar of the call; against ``local`` / ``fused``, launched through ``DistKernel`` now);
- (c) static M: ``gemm_static`` the plain GEMM built for M = 8192 (against ``gemm_dyn``: same
  launch path, same configuration);
- (d) the tile order: ``local_raster`` the nothing-exchanged kernel with the owners' segments in row
  order on every rank (``rs_order="raster"``: the plain GEMM's order; against ``local``, each rank's
  own rows last);
- (a) the register split (producer / consumer warpgroups): ``fused`` (default, 56/224),
  ``fused_r48`` (48/232), ``fused_r40`` (40/232, the GEMM's); ``local`` (40/232: nothing forwards)
  against ``local_r56`` (56/224).

``local*`` are measurement aids (``rs_comm=False``: nothing exchanged, wrong results) and run
unchecked; every other side is checked as in ``gemm_rs.py`` (fp32 reference, outputs NaN-poisoned,
tolerance 2e-2).  Timing: :mod:`dist_bench`'s law (primed by default), 7 interleaved rounds; each
row has ``ms`` (the per-launch time after each block's first launch), ``ms_all`` (from the first
launch: its host latency timed once per block) and ``host_us`` (host time per launch of the timed
loop) per side, the pairs' ratios (``pairs``: later side / earlier side − 1, in %), and
``epochs_ok``: after the timing every signal a peer set in an exchanging kernel holds that kernel's
launch count (each launch carried its own epoch).

Usage: ``.venv/bin/python benchmarks/gemm_rs_overhead.py build [--world 2] [--only NAME...]`` (CPU
machine); ``torchrun --nproc-per-node W benchmarks/gemm_rs_overhead.py run [--artifacts DIR] [--json
PATH]`` (GPU machine).  Writes ``benchmarks/results/gemm_rs_overhead-<date>-<device>-w<world>.json``
(or ``--json``; under ``$OUT`` when set); rank 0 prints a table.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dist_bench  # noqa: E402
from dist_bench import check_and_time, why  # noqa: E402

dist_bench.multicast_off("gemm_rs_overhead")

import time  # noqa: E402

sys.path.insert(0, ROOT)
from gemm_rs import POOL_BYTES, artifact_name, problem  # noqa: E402
from mlp_gemm import MODELS  # noqa: E402  (torch-free)

MS = (8192,)
#: the small shapes whose fused kernel is 3-9% over cuBLAS, and the control
DEFAULT_MODELS = ("Qwen3-8B", "Llama-3.1-8B", "Gemma-2-9B", "Llama-3.1-70B")
#: the fused kernel's builds: artifact suffix -> kernels.gemm_rs.make keywords
FUSED = {"": {}, "_r48": {"rs_regs": 48}, "_r40": {"rs_regs": 40}, "_local": {"rs_comm": False},
         "_local_raster": {"rs_comm": False, "rs_order": "raster"}, "_local_r56": {"rs_comm": False, "rs_regs": 56}}
#: side -> (how it launches, artifact suffix): "torch" (torch.mm), "op" (torch.ops.axe.gemm), "kernel"
#: (the runtime's Kernel), "dist" (DistKernel), "rebind" (DistKernel's full bind every launch)
SIDES = {"bare": ("torch", None), "gemm_op": ("op", None), "gemm_dyn": ("kernel", "_gemm_dyn"),
         "gemm_static": ("kernel", "_gemm_static"), "local": ("dist", "_local"), "local_rebind": ("rebind", "_local"),
         "local_raster": ("dist", "_local_raster"), "local_r56": ("dist", "_local_r56"), "fused": ("dist", ""),
         "fused_rebind": ("rebind", ""), "fused_r48": ("dist", "_r48"), "fused_r40": ("dist", "_r40")}
#: the sides checked against the reference (the others are measurement aids: wrong by design)
LOCAL_REF, SCATTERED_REF = ("bare", "gemm_op", "gemm_dyn", "gemm_static"), ("fused", "fused_rebind", "fused_r48", "fused_r40")
#: (suspect, earlier side, later side): each row's ``pairs[f"{suspect}: {later} vs {earlier}"]``
PAIRS = (("a", "fused", "fused_r48"), ("a", "fused", "fused_r40"), ("a", "local", "local_r56"),
         ("b", "gemm_op", "gemm_dyn"), ("b", "local", "local_rebind"), ("b", "fused", "fused_rebind"),
         ("c", "gemm_dyn", "gemm_static"), ("d", "local_raster", "local"),
         ("gap", "gemm_op", "local"), ("gap", "gemm_static", "local_raster"), ("gap", "bare", "fused"))
TOL, WARMUP, REPEATS = 2e-2, 5, 7


def shapes(only, world, ms):
    """(model, M, N, K) of the down projections at every M of ``ms``: ``only`` (model, ``NxK`` or
    artifact name) among every model, else :data:`DEFAULT_MODELS`."""
    out = [(name, m, h, i) for m in ms for name, (h, i) in MODELS.items()]
    if not only:
        return [s for s in out if s[0] in DEFAULT_MODELS]
    return [s for s in out if {s[0], f"{s[2]}x{s[3]}", artifact_name(world, *s[1:])} & set(only)]


def build(args):
    """Build every side's artifact for every shape and world size (CPU machine), skipping existing
    ones: the fused kernel's builds (:data:`FUSED`), the plain GEMM with a run-time and with a static
    M, and into the op cache ``torch.ops.axe.gemm``'s artifact of the local problem."""
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from kernels import gemm, gemm_rs
    failed = dist_bench.build_ops(args.out, [dist_bench.gemm_op(n, k // w, m) for w in args.world
                                             for _, m, n, k in shapes(args.only, w, args.m)])
    for world in args.world:
        for model, m, n, k in shapes(args.only, world, args.m):
            name, kl = artifact_name(world, m, n, k), k // world
            todo = {s: (lambda s=s, kw=kw: gemm_rs.build(m, n, k, world, "bfloat16", "col", name=name + s, **kw))
                    for s, kw in FUSED.items()}
            todo["_gemm_dyn"] = lambda: gemm.build_dynamic(n, kl, "bfloat16", "col", name=name + "_gemm_dyn")
            todo["_gemm_static"] = lambda: gemm.build(m, n, kl, "bfloat16", "col", name=name + "_gemm_static")
            for suffix, make in todo.items():
                path = os.path.join(args.out, name + suffix)
                if os.path.exists(os.path.join(path, "launch.json")):
                    continue
                t = time.time()
                try:
                    art = make()
                except ValueError as e:          # a shape a build refuses: that side is not run
                    print(f"refused {name + suffix}: {e}", flush=True)
                    failed += 1
                    continue
                art.save(path)
                r = art.launch.get("resources", {})
                print(f"built {name + suffix:48s} regs {r.get('registers')} spills {r.get('spill_stores')}/"
                      f"{r.get('spill_loads')}  {time.time() - t:5.1f} s", flush=True)
    print(f"artifacts in {args.out}")
    return 1 if failed else 0


def make_sides(sel, a, w, rank, world, M, n, heap, artifact, setup_err):
    """``{side: (launch fn returning the output, output to poison or None, sync fn)}``, ``{side: error}``
    for the sides that could not be set up on this rank, the sides whose artifact was not built, and
    ``{artifact suffix: DistKernel}``."""
    import torch
    from axe.runtime.distributed import DistKernel
    from axe.runtime.launcher import Kernel
    ops = dist_bench.axe_ops(os.path.dirname(artifact))
    sync = torch.cuda.synchronize
    sides, errs, dist_kernels = {}, {}, {}
    unbuilt = {s for s, (_, x) in SIDES.items()
               if s in sel and x is not None and not os.path.exists(os.path.join(artifact + x, "launch.json"))}
    for s, (how, suffix) in SIDES.items():
        if s not in sel or s in unbuilt:
            continue
        try:
            if how == "torch":
                c = torch.empty(M, n, device=a.device, dtype=a.dtype)
                sides[s] = (lambda c=c: torch.mm(a, w.t(), out=c), c, sync)
            elif how == "op":
                sides[s] = (lambda: ops.gemm(a, w, True), None, sync)
            elif how == "kernel":
                k, c = Kernel(artifact + suffix), torch.empty(M, n, device=a.device, dtype=a.dtype)
                sides[s] = (lambda k=k, c=c: (k(a, w, c), c)[1], c, sync)
            else:
                if setup_err.get("axe"):
                    raise RuntimeError(setup_err["axe"])
                # one DistKernel per artifact: "fused" and "fused_rebind" share its epochs and signals
                if suffix not in dist_kernels:
                    dist_kernels[suffix] = DistKernel(artifact + suffix, heap)
                k = dist_kernels[suffix]
                out = torch.empty(M // world, n, device=a.device, dtype=a.dtype)
                if how == "dist":
                    fn = (lambda k=k, out=out: (k(a, w, out), out)[1])
                else:
                    fn = (lambda k=k, out=out: rebind(k, (a, w, out)))
                sides[s] = (fn, out if s in SCATTERED_REF else None, k.synchronize)
        except Exception as e:
            errs[s] = why(e, rank)
    return sides, errs, unbuilt, dist_kernels


def epochs_seen(kernels):
    """``{suffix: {"launches": n, "signals": sorted distinct nonzero values}}`` of each DistKernel that
    exchanges (not the ``_local*`` aids): a peer signals with its launch's epoch, so after n launches
    on every rank each signal a peer set holds n — the plan's epoch slot did advance on the GPU."""
    import torch
    out = {}
    for suffix, k in kernels.items():
        if suffix.startswith("_local"):
            continue
        torch.cuda.synchronize()
        sig = k._fill[k.dist["runtime"]["signals"]]
        out[suffix] = {"launches": k.epoch, "signals": sorted(set(sig[sig != 0].tolist()))}
    return out


def rebind(k, args):
    """Launch DistKernel ``k`` the way its launches went before it kept a plan per signature: its
    stream check, its arguments, then the kernel's checked path with this launch's epoch (a new
    call signature every launch: every check, every tensor map, a new plan); returns the output."""
    k._check_stream(None)
    k.kernel(*k.arguments(*args))
    k.epoch += 1
    return args[-1]


def run_shape(args, model, M, n, k, rank, world, heap, group_name, setup_err):
    """Check, then time every selected side on one shape; returns the JSON row (the same on all ranks)."""
    import torch
    import torch.distributed as dist
    kl, name = k // world, artifact_name(world, M, n, k)
    a, w, ref = problem(M, n, kl, rank, world, LOCAL_REF, SCATTERED_REF)
    sides, errs, unbuilt, kernels = make_sides(args.sides, a, w, rank, world, M, n, heap,
                                               os.path.join(args.artifacts, name), setup_err)
    stats = {}
    ms, err_all, errs_all = check_and_time(args, tuple(SIDES), sides, ref, errs, rank, world, WARMUP, REPEATS, TOL,
                                           stats)
    seen = [None] * world
    dist.all_gather_object(seen, epochs_seen(kernels))
    del ref, kernels
    row = {"model": model, "M": M, "N": n, "K": k, "K_local": kl, "world": world, "artifact": name, "ms": ms,
           "ms_all": stats["ms_all"], "host_us": stats["host_us"],
           **dist_bench.side_outcomes(args, tuple(SIDES), err_all, errs_all, ms, unbuilt),
           "pairs": pairs(ms), "pairs_all": pairs(stats["ms_all"]), "epochs_seen_per_rank": seen,
           "epochs_ok": all(v["signals"] == [v["launches"]] for r in seen for v in r.values())}
    if rank == 0:
        print(f"{model} M={M} {n}x{k} w{world}: " + "  ".join(
            f"{s} {v:.3f} ms" if v else f"{s} {row['status'][s]}" for s, v in ms.items()), flush=True)
    del sides, a, w
    torch.cuda.empty_cache()
    return row


def pairs(ms):
    """``{"<suspect>: <later> vs <earlier>": (later / earlier − 1) · 100}`` for :data:`PAIRS` (None where
    a side has no time)."""
    return {f"{x}: {b} vs {a}": (ms[b] / ms[a] - 1) * 100 if ms.get(a) and ms.get(b) else None for x, a, b in PAIRS}


def report(args, rows, world):
    """Write the JSON and print the tables (rank 0)."""
    import torch
    path, dev, date = dist_bench.write_json(args, "gemm_rs_overhead", world, {
        "problem": "the local problem of a tensor-parallel down projection: A M x K/w, W N x K/w (nn.Linear weight), "
        f"bf16, M in {sorted({r['M'] for r in rows})}; (N, K) = (hidden, intermediate)",
        "sides": {s: f"{how} {'' if x is None else x}".strip() for s, (how, x) in SIDES.items()},
        "check": f"{', '.join(LOCAL_REF + SCATTERED_REF)}: max abs err / max abs ref < {TOL} vs fp32; "
        "local*: unchecked (nothing exchanged)",
        "timing": dist_bench.timing_text(args, WARMUP, REPEATS), "figures": rows})
    f = dist_bench.fmt
    print(f"\n{date}  {dev} x{world}  torch {torch.__version__}  cuda {torch.version.cuda}  -> {path}")
    print("ms per launch (" + ("after each block's first launch" if args.prime else "from the first launch") +
          "); host µs per launch in brackets")
    print(f"{'side':13s} " + " ".join(f"{r['model']:>22s}" for r in rows) + "   (each cell: ms [host µs] ms from the first launch)")
    for s in SIDES:
        print(f"{s:13s} " + " ".join(
            f"{f(r['ms'][s], '.3f'):>6s} [{f(r['host_us'][s], '.0f'):>5s}] {f(r['ms_all'][s], '.3f'):>6s}"
            if r["ms"][s] else f"{r['status'][s]:>22s}" for r in rows))
    print("pairs, % (later over earlier; primed / from the first launch):")
    for key in rows[0]["pairs"] if rows else ():
        print(f"  {key:38s} " + "  ".join(f"{r['model']} {f(r['pairs'][key], '+.1f')}/{f(r['pairs_all'][key], '+.1f')}"
                                            for r in rows))
    for r in rows:
        for s, texts in r["errors"].items():
            print(f"  {s} FAILED {r['model']}: " + " | ".join(texts))
        if not r["epochs_ok"]:
            print(f"  EPOCHS {r['model']}: a signal does not hold its kernel's launch count: {r['epochs_seen_per_rank']}")


def main(argv=None):
    """``build`` (CPU machine) or ``run`` (under torchrun on the GPU machine)."""
    heap_sides = tuple(s for s, (how, _) in SIDES.items() if how in ("dist", "rebind"))
    return dist_bench.cli(argv, __doc__, tuple(SIDES), MS, "gemm_rs_overhead", build,
                          lambda args: dist_bench.launch(args, shapes, run_shape, report, POOL_BYTES, heap_sides),
                          prime=True)


if __name__ == "__main__":
    sys.exit(main())
