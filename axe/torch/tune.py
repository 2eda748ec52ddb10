"""The GEMM configurations per row-count bucket: chosen by the heuristic, or measured by ``axe tune``.

Two kernels are tuned (:data:`KERNELS`, one :class:`Tunable` each): ``torch.ops.axe.gemm`` (the
16-bit GEMM, ``kernels/gemm_select.py``'s buckets and candidates) and ``torch.ops.axe.gemm_fp8``
(the block-scaled FP8 GEMM, ``kernels/gemm_fp8_select.py``'s).  Each launches one artifact per
(N, K, dtype, layout of B, bucket of M); a call finds its artifact with a bucket lookup and a dict
lookup (:func:`spec_for`, ``axe.torch.fp8_ops.spec``).  Without a measured pick the heuristic chooses.

Tuning needs TVM to build and a GPU to measure, which may be two machines::

    axe tune gemm plan --shapes 4096x14336 14336x4096 --dtype bfloat16 --layout col > specs.txt
    axe cache build --spec-file specs.txt           # where TVM is: every candidate into the cache
    axe tune gemm run --shapes 4096x14336 14336x4096 --dtype bfloat16 --layout col   # on the GPU
    axe tune gemm_fp8 plan --shapes 4096x14336 > fp8.txt      # likewise (e4m3, B stored N x K)

``run`` times every candidate of every bucket from CUDA graphs in interleaved rounds (each round
replays every candidate; the pick is the lowest median over the rounds, never one timing) at the
bucket's sample row counts — leaving out a candidate whose build spilled registers (:func:`trusted`)
— and writes the picks to ``<cache>/tune/gemm.json`` beside the artifacts,
keyed by device name, dtype, layout (the 16-bit GEMM's only), N, K and bucket: a serving machine
without TVM reads it.  A new table takes effect after :func:`reload` (and, for ``torch.ops.axe.gemm``,
``axe.torch.ops.clear_plans``, which drops the kernels its plans keep).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .cache import cache_root, kernels_root, shipped_dirs

#: the folder that holds the ``kernels`` package (a checkout's root, an installed wheel's ``axe/_kernels``)
ROOT = kernels_root()
TABLE = Path("tune") / "gemm.json"
_LOCK = threading.Lock()
_TABLE: dict | None = None
_MEMOS: list[dict] = []


def memo() -> dict:
    """A fresh dict for specs chosen from the tables, emptied by :func:`reload` (so a new pick
    takes effect on the next call)."""
    d: dict = {}
    _MEMOS.append(d)
    return d


_SPECS = memo()


_MODULES: dict = {}


def _module(name: str):
    """``kernels.<name>`` (pure Python: no TVM), imported once with the kernels' folder on
    ``sys.path`` (kept here: a per-call lookup costs a dict get, not an import)."""
    m = _MODULES.get(name)
    if m is None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        m = _MODULES[name] = importlib.import_module(f"kernels.{name}")
    return m


@dataclass(frozen=True)
class Tunable:
    """What ``axe tune`` measures for one kernel: its factory, its selection module (``BUCKETS``,
    ``bucket``, ``candidates(bound, N, K)``, ``name``), the factory keywords of a configuration for
    a bucket (``spec``), the heuristic's configuration for M rows, and the operands of a call with
    M rows (inputs, the output last).  ``layouts`` None: B has one layout, not part of the key."""
    name: str
    kernel: str
    selector: str
    dtypes: tuple
    layouts: tuple | None
    spec: Callable          # (sel, N, K, dtype, layout, bound, config) -> factory keywords
    heuristic: Callable     # (sel, M, bound, N, K, layout, dram_bps) -> config
    operands: Callable      # (torch, M, N, K, dtype, layout) -> (inputs..., output)

    def select(self):
        """The selection module, imported once."""
        return _module(self.selector)


def _layout(kernel, b_major):
    """The layout argument of ``kernel``'s ``candidates`` (none where B has one layout)."""
    return () if kernel.layouts is None else (b_major,)


def _gemm_spec(sel, N, K, dtype, b_major, bound, config) -> dict:
    """An artifact scheduled for the bucket's bound gets ``max_rows``
    (``kernels.gemm_select.scheduled_rows``), the others take M at run time."""
    out = {"N": N, "K": K, "dtype": dtype, "b_major": b_major, **config}
    rows = sel.scheduled_rows(bound, config)
    if rows is not None:
        out["max_rows"] = rows
    return out


def _gemm_operands(torch, M, N, K, dtype, b_major):
    tdt = getattr(torch, dtype)
    w = torch.randn((N, K) if b_major == "col" else (K, N), device="cuda", dtype=tdt)
    return torch.randn(M, K, device="cuda", dtype=tdt), w, torch.empty(M, N, device="cuda", dtype=tdt)


def _fp8_operands(torch, M, N, K, dtype, _layout):
    """A (M, K), B (N, K) in e4m3, SA in DeepGEMM's stored layout (kb, round_up(M, 4)), SB
    (nb, kb), C (M, N) bf16: ``kernels.gemm_fp8.make_dynamic``'s arguments."""
    fp8, kb, nb = getattr(torch, dtype), -(-K // 128), -(-N // 128)
    return (torch.randn(M, K, device="cuda").to(fp8), torch.randn(N, K, device="cuda").to(fp8),
            torch.rand(kb, -(-M // 4) * 4, device="cuda") + 0.5, torch.rand(nb, kb, device="cuda") + 0.5,
            torch.empty(M, N, device="cuda", dtype=torch.bfloat16))


GEMM = Tunable("gemm", "kernels.gemm:make_dynamic", "gemm_select", ("float16", "bfloat16"), ("row", "col"),
               _gemm_spec, lambda sel, M, bound, N, K, b_major, dram_bps=None: sel.heuristic(
                   bound or 8192, N, K, b_major=b_major, dram_bps=dram_bps), _gemm_operands)
GEMM_FP8 = Tunable("gemm_fp8", "kernels.gemm_fp8:make_dynamic", "gemm_fp8_select", ("float8_e4m3fn",), None,
                   lambda sel, N, K, dtype, layout, bound, config: {"N": N, "K": K, **sel.with_bound(bound, config)},
                   lambda sel, M, bound, N, K, layout, dram_bps=None: sel.heuristic(M, N, K), _fp8_operands)
KERNELS = {t.name: t for t in (GEMM, GEMM_FP8)}
#: the 16-bit GEMM's factory (what its plan lines name)
KERNEL = GEMM.kernel


def select():
    """``kernels.gemm_select`` (pure Python: no TVM)."""
    return GEMM.select()


def key(device: str, dtype: str, layout, N: int, K: int, bound) -> str:
    """The table key of a bucket (``bound`` None: the unbounded last bucket; ``layout`` None: a
    kernel with one layout of B, left out of the key)."""
    lay = "" if layout is None else f"{layout}|"
    return f"{device}|{dtype}|{lay}{N}x{K}|{'inf' if bound is None else bound}"


def table_paths(name: Path = TABLE) -> list[Path]:
    """The tuning tables ``name`` read, first wins: the cache's own, then the shipped folders'."""
    return [cache_root() / name] + [d / name for d in shipped_dirs()]


def read_tables(name: Path = TABLE) -> dict:
    """Every pick of the tables ``name`` (:func:`table_paths`), a key's first table winning."""
    picks = {}
    for path in reversed(table_paths(name)):
        if path.is_file():
            picks.update(json.loads(path.read_text())["picks"])
    return picks


def table() -> dict:
    """Every pick known here (read once per process; :func:`reload` reads again)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = read_tables(TABLE)
    return _TABLE


def reload():
    """Forget the tables and the specs chosen from them (every :func:`memo`)."""
    global _TABLE
    with _LOCK:
        _TABLE = None
        for d in _MEMOS:
            d.clear()


def spec(N, K, dtype, b_major, bound, config, kernel: Tunable = GEMM) -> dict:
    """The factory keywords (cache specialization) of ``config`` for a bucket (the 16-bit GEMM's:
    an artifact scheduled for the bucket's bound gets ``max_rows``, the others take M at run time)."""
    return kernel.spec(kernel.select(), N, K, dtype, b_major, bound, config)


def choose(kernel: Tunable, device, N: int, K: int, dtype: str, layout, M: int, dram_bps=None) -> dict:
    """The specialization a call with M rows runs, not memoized: M's bucket's measured pick for
    ``device`` (a GPU's name; None: none is read), else the heuristic's configuration for a GPU of
    ``dram_bps`` bytes per second of DRAM bandwidth (None: the heuristic's default)."""
    sel = kernel.select()
    bound = sel.bucket(M)
    pick = table().get(key(device, dtype, layout, N, K, bound)) if device is not None else None
    config = pick["config"] if pick else kernel.heuristic(sel, M, bound, N, K, layout, dram_bps)
    return kernel.spec(sel, N, K, dtype, layout, bound, config)


#: each GPU's DRAM bandwidth by name (bytes per second), as :func:`note_device` learnt it
_DRAM: dict = {}


def note_device(device: str, dram_bps) -> None:
    """Record GPU ``device``'s DRAM bandwidth (:func:`axe.runtime.device.dram_bytes_per_s`; None:
    unknown), which the heuristic weighs where no pick was measured; forgets the specs chosen for
    it before."""
    if _DRAM.get(device, -1) != dram_bps:
        _DRAM[device] = dram_bps
        for d in _MEMOS:
            for k in [k for k in d if isinstance(k, tuple) and k and k[0] == device]:
                del d[k]


def spec_for(device: str, N: int, K: int, dtype: str, b_major: str, M: int) -> dict:
    """The 16-bit GEMM's specialization for a call with M rows (:func:`choose`, with the DRAM
    bandwidth :func:`note_device` recorded for ``device``), memoized per bucket: a call costs two
    dict lookups and the bucket search."""
    memo_key = (device, N, K, dtype, b_major, select().bucket(M))
    s = _SPECS.get(memo_key)
    if s is None:
        s = _SPECS[memo_key] = choose(GEMM, device, N, K, dtype, b_major, M, _DRAM.get(device))
    return s


def sample_rows(bound, kernel: Tunable = GEMM) -> tuple:
    """The row counts a bucket is measured at: both ends of a decode bucket (≤ 128 rows), the
    bound of the others, 8192 for the unbounded one."""
    sel = kernel.select()
    if bound is None:
        return (8192,)
    lo = max((b for b in sel.BUCKETS if b is not None and b < bound), default=0) + 1
    return (lo, bound) if bound <= sel.BM else (bound,)


def plan_line(factory: str, target: str, spec: dict) -> str:
    """One ``axe cache build --spec-file`` line: ``MODULE:FUNCTION TARGET NAME=VALUE ...`` (the
    inverse of :func:`axe.torch.cache.parse_spec` on the words)."""
    words = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in sorted(spec.items())]
    return " ".join([factory, target, *words])


def plan(shapes, dtype, b_major, target="sm_90a", buckets=None, kernel: Tunable = GEMM) -> list[str]:
    """``axe cache build --spec-file`` lines: every candidate of every bucket of every (N, K)."""
    sel = kernel.select()
    lines = []
    for N, K in shapes:
        for bound in buckets or sel.BUCKETS:
            for config in sel.candidates(bound, N, K, *_layout(kernel, b_major)):
                line = plan_line(kernel.kernel, target, spec(N, K, dtype, b_major, bound, config, kernel))
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


def trusted(launch: dict) -> bool:
    """Whether an artifact (its ``launch.json``) may be a pick: ptxas spilled nothing.  A spilling
    build keeps mainloop values in local memory: not what a pick should ship when another candidate
    does not (it was first left out for a wrong result later traced to a race, docs/reliability.md)."""
    res = launch.get("resources") or {}
    return not (res.get("spill_stores") or res.get("spill_loads"))


def graph_timers(kernel: Tunable, specs: dict, M, N, K, dtype, layout) -> dict:
    """``{name: a call returning ms}``: each spec's artifact captured in a CUDA graph at M rows (the
    inputs shared, an output of its own), timed by :func:`axe.torch.timing.graph_ms`; a spec whose
    artifact is not :func:`trusted` gets no timer."""
    import torch

    from .jit import JitKernel
    from .timing import capture, graph_ms
    *inputs, out = kernel.operands(torch, M, N, K, dtype, layout)
    timers = {}
    for name, s in specs.items():
        kern = JitKernel(kernel.kernel, lambda *_, s=s: s, path=ROOT, progress=False)
        if not trusted(kern.load(out.device, s).launch):
            continue
        c = torch.empty_like(out)                           # each graph replays into its own output
        g = capture(torch, lambda kern=kern, c=c: kern(*inputs, c) or c)[0]
        timers[name] = lambda g=g, keep=(inputs, c): graph_ms(torch, g, 10)
    return timers


def run(shapes, dtype, b_major, buckets=None, rounds=7, out=None, log=print, kernel: Tunable = GEMM,
        device=None, timers=graph_timers) -> list[dict]:
    """Measure every candidate of every bucket on the current GPU (``device``: its name) and
    record the picks (see the module docstring): a bucket's pick is the least sum over its sample
    row counts of each candidate's median over ``rounds`` interleaved rounds of ``timers``
    (:func:`graph_timers`'s signature).  Returns the rows measured."""
    sel = kernel.select()
    if device is None:
        import torch
        device = torch.cuda.get_device_name()
    rows, picks = [], {}
    for N, K in shapes:
        for bound in buckets or sel.BUCKETS:
            cands = {sel.name(c): c for c in sel.candidates(bound, N, K, *_layout(kernel, b_major))}
            specs = {name: spec(N, K, dtype, b_major, bound, c, kernel) for name, c in cands.items()}
            total, left_out = dict.fromkeys(cands, 0.0), set()
            for M in sample_rows(bound, kernel):
                timed = timers(kernel, specs, M, N, K, dtype, b_major)
                left_out |= set(specs) - set(timed)         # not trusted (spilled): never a pick
                for name, t in measure(timed, rounds).items():
                    total[name] += t
                    rows.append({"device": device, "dtype": dtype, "b_major": b_major, "N": N, "K": K,
                                 "bucket": bound, "M": M, "config": name, "ms": t})
            for name in sorted(left_out):
                del total[name]
                log(f"axe tune {kernel.name}: {N}x{K} {dtype} bucket {bound}: {name} left out (its build spills)")
            if not total:
                raise RuntimeError(f"axe tune {kernel.name}: {N}x{K} bucket {bound}: every candidate's build spills")
            best = min(total, key=total.get)
            picks[key(device, dtype, b_major, N, K, bound)] = {"config": cands[best], "ms": total[best],
                                                               "rows": list(sample_rows(bound, kernel))}
            log(f"axe tune {kernel.name}: {N}x{K} {dtype} bucket {bound}: {best} ({total[best] * 1e3:.1f} us)")
    record(picks, out)
    return rows


def record(picks: dict, path=None, name: Path = TABLE):
    """Merge ``picks`` into the table at ``path`` (default the cache's table ``name``), written atomically."""
    path = Path(path) if path else cache_root() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        old = json.loads(path.read_text())["picks"] if path.is_file() else {}
        old.update(picks)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"schema": 1, "picks": old}, indent=1, sort_keys=True))
        tmp.replace(path)
    reload()


# --- the command line: axe tune gemm|gemm_fp8 plan|run -----------------------------------------

def _shape(text: str) -> tuple:
    import argparse
    n, sep, k = text.lower().partition("x")
    if not sep or not n.isdigit() or not k.isdigit():
        raise argparse.ArgumentTypeError(f"shape {text!r} is not NxK (e.g. 4096x14336)")
    return int(n), int(k)


def _main(args) -> int:
    kernel = KERNELS[args.tune_kernel]
    dtype, layout = args.dtype, getattr(args, "layout", None)
    buckets = None if args.buckets is None else [None if b == "inf" else int(b) for b in args.buckets]
    if args.action == "plan":
        print("\n".join(plan(args.shapes, dtype, layout, args.target, buckets, kernel)))
        return 0
    run(args.shapes, dtype, layout, buckets, args.rounds, args.out, kernel=kernel)
    return 0


_HELP = {"gemm": "torch.ops.axe.gemm's configurations", "gemm_fp8": "torch.ops.axe.gemm_fp8's configurations (e4m3, "
         "B stored N x K)"}


def subjects(subparsers):
    """The subparsers of ``axe tune`` (one per subject: ``gemm``, ``gemm_fp8``, ``tp``), made on the
    first call for the CLI's ``subparsers``: a module that tunes another subject adds its own parser
    here (``axe tune tp``: :func:`axe.torch.tp.add_commands`) without this module importing it."""
    t = subparsers.choices.get("tune")
    if t is None:
        t = subparsers.add_parser("tune", help="measure and keep the fastest configuration or path per shape")
        t.set_defaults(tune_subjects=t.add_subparsers(dest="tune_kernel", required=True))
    return t.get_default("tune_subjects")


def add_commands(subparsers) -> None:
    """``axe tune {gemm, gemm_fp8} {plan, run}``, added to the CLI's ``subparsers``."""
    sub = subjects(subparsers)
    for kernel in KERNELS.values():
        g = sub.add_parser(kernel.name, help=f"{_HELP[kernel.name]} (plan: the builds; run: measure, on a GPU)")
        g.add_argument("action", choices=("plan", "run"))
        g.add_argument("--shapes", nargs="+", required=True, type=_shape,
                       help="weight shapes NxK (C = A·Bᵀ for B stored N x K)")
        g.add_argument("--dtype", default=kernel.dtypes[-1], choices=kernel.dtypes)
        if kernel.layouts:
            g.add_argument("--layout", default="col", choices=kernel.layouts, help="B stored KxN (row) or NxK (col)")
        g.add_argument("--buckets", nargs="*", help="bucket bounds (default all; 'inf' for the last)")
        g.add_argument("--target", default="sm_90a")
        g.add_argument("--rounds", type=int, default=7, help="interleaved rounds (at least 3)")
        g.add_argument("--out", help="the table to write (default <cache>/tune/gemm.json)")
        g.set_defaults(func=_main)
