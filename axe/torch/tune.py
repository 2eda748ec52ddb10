"""The GEMM configuration per row-count bucket: chosen by the heuristic, or measured by ``axe tune``.

``torch.ops.axe.gemm`` launches one artifact per (N, K, dtype, layout of B, bucket of M) — the
buckets and candidates are ``kernels/gemm_select.py``'s; a call finds its artifact with a bucket
lookup and a dict lookup (:func:`spec_for`).  Without a measured pick the heuristic chooses.

Tuning needs TVM to build and a GPU to measure, which may be two machines::

    axe tune gemm plan --shapes 4096x14336 14336x4096 --dtype bfloat16 --layout col > specs.txt
    axe cache build --spec-file specs.txt           # where TVM is: every candidate into the cache
    axe tune gemm run --shapes 4096x14336 14336x4096 --dtype bfloat16 --layout col   # on the GPU

``run`` times every candidate of every bucket from CUDA graphs in interleaved rounds (each round
replays every candidate; the pick is the lowest median over the rounds, never one timing) at the
bucket's sample row counts, and writes the picks to ``<cache>/tune/gemm.json`` beside the artifacts,
keyed by device name, dtype, layout, N, K and bucket: a serving machine without TVM reads it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from pathlib import Path

from .cache import cache_root, kernels_root, shipped_dirs

KERNEL = "kernels.gemm:make_dynamic"
#: the folder that holds the ``kernels`` package (a checkout's root, an installed wheel's ``axe/_kernels``)
ROOT = kernels_root()
TABLE = Path("tune") / "gemm.json"
_LOCK = threading.Lock()
_TABLE: dict | None = None
_SPECS: dict = {}
_SELECT = []


def select():
    """``kernels.gemm_select`` (pure Python: no TVM), imported once."""
    if not _SELECT:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        _SELECT.append(importlib.import_module("kernels.gemm_select"))
    return _SELECT[0]


def key(device: str, dtype: str, b_major: str, N: int, K: int, bound) -> str:
    """The table key of a bucket (``bound`` None: the unbounded last bucket)."""
    return f"{device}|{dtype}|{b_major}|{N}x{K}|{'inf' if bound is None else bound}"


def table_paths() -> list[Path]:
    """The tuning tables read, first wins: the cache's own, then the shipped folders'."""
    return [cache_root() / TABLE] + [d / TABLE for d in shipped_dirs()]


def table() -> dict:
    """Every pick known here (read once per process; :func:`reload` reads again)."""
    global _TABLE
    if _TABLE is None:
        picks = {}
        for path in reversed(table_paths()):
            if path.is_file():
                picks.update(json.loads(path.read_text())["picks"])
        _TABLE = picks
    return _TABLE


def reload():
    """Forget the tables and the specs chosen from them."""
    global _TABLE
    with _LOCK:
        _TABLE = None
        _SPECS.clear()


def spec(N, K, dtype, b_major, bound, config) -> dict:
    """The factory keywords (cache specialization) of ``config`` for a bucket: an artifact scheduled
    for the bucket's bound gets ``max_rows`` (``kernels.gemm_select.scheduled_rows``), the others
    take M at run time."""
    out = {"N": N, "K": K, "dtype": dtype, "b_major": b_major, **config}
    rows = select().scheduled_rows(bound, config)
    if rows is not None:
        out["max_rows"] = rows
    return out


def spec_for(device: str, N: int, K: int, dtype: str, b_major: str, M: int) -> dict:
    """The specialization a call with M rows runs: the bucket's measured pick for ``device``, else
    the heuristic's (memoized per bucket: a call costs two dict lookups and the bucket search)."""
    sel = select()
    bound = sel.bucket(M)
    memo = (device, N, K, dtype, b_major, bound)
    s = _SPECS.get(memo)
    if s is None:
        pick = table().get(key(device, dtype, b_major, N, K, bound))
        config = pick["config"] if pick else sel.heuristic(bound or 8192, N, K, b_major=b_major)
        s = _SPECS[memo] = spec(N, K, dtype, b_major, bound, config)
    return s


def sample_rows(bound) -> tuple:
    """The row counts a bucket is measured at: both ends of a decode bucket, the bound of the
    others, 8192 for the unbounded one."""
    sel = select()
    if bound is None:
        return (8192,)
    lo = max((b for b in sel.BUCKETS if b is not None and b < bound), default=0) + 1
    return (lo, bound) if bound <= sel.BM else (bound,)


def plan(shapes, dtype, b_major, target="sm_90a", buckets=None) -> list[str]:
    """``axe cache build --spec-file`` lines: every candidate of every bucket of every (N, K)."""
    sel = select()
    lines = []
    for N, K in shapes:
        for bound in buckets or sel.BUCKETS:
            for config in sel.candidates(bound, N, K):
                words = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}"
                         for k, v in sorted(spec(N, K, dtype, b_major, bound, config).items())]
                line = " ".join([KERNEL, target, *words])
                if line not in lines:
                    lines.append(line)
    return lines


def measure(timers: dict, rounds: int) -> dict:
    """``{name: median ms}`` over ``rounds`` interleaved rounds of ``timers`` (name -> a call
    returning milliseconds); at least three rounds, so that no pick rests on one timing."""
    from .timing import median, round_robin
    if rounds < 3:
        raise ValueError(f"axe tune: rounds must be at least 3, got {rounds}")
    return {name: median(ms) for name, ms in round_robin(timers, rounds).items()}


def run(shapes, dtype, b_major, buckets=None, rounds=7, out=None, log=print) -> list[dict]:
    """Measure every candidate of every bucket on the current GPU and record the picks (see the
    module docstring); returns the rows measured."""
    import torch

    from .jit import JitKernel
    from .timing import capture, graph_ms
    sel = select()
    device = torch.cuda.get_device_name()
    tdt = getattr(torch, dtype)
    rows, picks = [], {}
    for N, K in shapes:
        w = torch.randn((N, K) if b_major == "col" else (K, N), device="cuda", dtype=tdt)
        for bound in buckets or sel.BUCKETS:
            cands = {sel.name(c): c for c in sel.candidates(bound, N, K)}
            kerns = {name: JitKernel(KERNEL, lambda *_, s=spec(N, K, dtype, b_major, bound, config): s, path=ROOT,
                                     progress=False) for name, config in cands.items()}
            total = dict.fromkeys(cands, 0.0)
            for M in sample_rows(bound):
                a = torch.randn(M, K, device="cuda", dtype=tdt)
                graphs, keep = {}, []
                for name, kern in kerns.items():
                    c = torch.empty(M, N, device="cuda", dtype=tdt)
                    keep.append(c)                  # each graph replays into its own C
                    graphs[name] = capture(torch, lambda kern=kern, c=c: kern(a, w, c) or c)[0]
                ms = measure({n: (lambda g=g: graph_ms(torch, g, 10)) for n, g in graphs.items()}, rounds)
                for name, t in ms.items():
                    total[name] += t
                    rows.append({"device": device, "dtype": dtype, "b_major": b_major, "N": N, "K": K,
                                 "bucket": bound, "M": M, "config": name, "ms": t})
            best = min(total, key=total.get)
            picks[key(device, dtype, b_major, N, K, bound)] = {"config": cands[best], "ms": total[best],
                                                               "rows": list(sample_rows(bound))}
            log(f"axe tune: {N}x{K} {dtype} bucket {bound}: {best} ({total[best] * 1e3:.1f} us)")
    record(picks, out)
    return rows


def record(picks: dict, path=None):
    """Merge ``picks`` into the table at ``path`` (default the cache's), written atomically."""
    path = Path(path) if path else cache_root() / TABLE
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        old = json.loads(path.read_text())["picks"] if path.is_file() else {}
        old.update(picks)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"schema": 1, "picks": old}, indent=1, sort_keys=True))
        tmp.replace(path)
    reload()


# --- the command line: axe tune gemm plan|run ---------------------------------------------------

def _shape(text: str) -> tuple:
    import argparse
    n, sep, k = text.lower().partition("x")
    if not sep or not n.isdigit() or not k.isdigit():
        raise argparse.ArgumentTypeError(f"shape {text!r} is not NxK (e.g. 4096x14336)")
    return int(n), int(k)


def _main(args) -> int:
    shapes = args.shapes
    buckets = None if args.buckets is None else [None if b == "inf" else int(b) for b in args.buckets]
    if args.action == "plan":
        print("\n".join(plan(shapes, args.dtype, args.layout, args.target, buckets)))
        return 0
    run(shapes, args.dtype, args.layout, buckets, args.rounds, args.out)
    return 0


def add_commands(subparsers) -> None:
    """``axe tune gemm {plan, run}``, added to the CLI's ``subparsers``."""
    t = subparsers.add_parser("tune", help="measure and keep the GEMM configuration per bucket of M")
    sub = t.add_subparsers(dest="tune_kernel", required=True)
    g = sub.add_parser("gemm", help="torch.ops.axe.gemm's configurations (plan: the builds; run: measure, on a GPU)")
    g.add_argument("action", choices=("plan", "run"))
    g.add_argument("--shapes", nargs="+", required=True, type=_shape, help="weight shapes NxK (C = A·Bᵀ for --layout col)")
    g.add_argument("--dtype", default="bfloat16", choices=("float16", "bfloat16"))
    g.add_argument("--layout", default="col", choices=("row", "col"), help="B stored KxN (row) or NxK (col)")
    g.add_argument("--buckets", nargs="*", help="bucket bounds (default all; 'inf' for the last)")
    g.add_argument("--target", default="sm_90a")
    g.add_argument("--rounds", type=int, default=7, help="interleaved rounds (at least 3)")
    g.add_argument("--out", help="the table to write (default <cache>/tune/gemm.json)")
    g.set_defaults(func=_main)
