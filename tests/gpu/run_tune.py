#!/usr/bin/env python3
"""``axe tune`` end to end on a GPU (no TVM there): measure the candidates of the decode bucket and
of the unbounded bucket for one weight shape, then check that ``torch.ops.axe.gemm`` runs the picks.

- here (TVM + nvcc): ``AXE_CACHE_DIR=.carry/axe_cache axe cache build --spec-file <(axe tune gemm plan
  --shapes 4096x14336 --buckets 16 64 128 inf)`` builds every candidate;
- on the GPU machine: ``python3 tests/gpu/run_tune.py [--out DIR]`` tunes into a fresh table in the
  carried cache, prints the picks, checks the op at M in :data:`ROWS` against torch in fp32 and that
  each call loaded its bucket's pick, and writes ``tune.json`` (picks and every timing) to ``--out``.
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
CACHE = os.path.join(ROOT, ".carry", "axe_cache")
SHAPE, DTYPE, LAYOUT = (4096, 14336), "bfloat16", "col"
BUCKETS = [16, 64, 128, None]
ROWS = (1, 16, 17, 77, 128, 129, 2000)


def fresh_table(argv, doc):
    """The command line (``--out``, ``--rounds``), with the carried cache made the cache and its
    tuning table removed and forgotten (a run tunes from nothing)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ["AXE_CACHE_DIR"] = CACHE
    from axe.torch import tune
    table = os.path.join(CACHE, str(tune.TABLE))
    if os.path.exists(table):
        os.remove(table)
    tune.reload()
    return args


def main(argv=None):
    args = fresh_table(argv, __doc__)
    import torch

    from axe.torch import ops, tune
    rows = tune.run([SHAPE], DTYPE, LAYOUT, BUCKETS, args.rounds)
    picks = tune.table()
    device = torch.cuda.get_device_name()
    N, K = SHAPE
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    worst = 0.0
    for m in ROWS:
        a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        got = torch.ops.axe.gemm(a, w, True).float()
        ref = a.float() @ w.float().t()
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"M={m}: rel err {err:.2e}"
        worst = max(worst, err)
        bound = tune.select().bucket(m)
        pick = picks.get(tune.key(device, DTYPE, LAYOUT, N, K, bound))       # an untuned bucket: the heuristic
        want = tune.spec(N, K, DTYPE, LAYOUT, bound, pick["config"] if pick else tune.select().heuristic(m, N, K))
        loaded_pick(ops.KERNELS["gemm_nt"], want, m)
    return report(ops.KERNELS["gemm_nt"], os.path.join(args.out, "tune.json"), device, picks, rows, worst, ROWS)


def loaded_pick(kernel, want, m):
    """Assert that the jit ``kernel`` has loaded the specialization ``want`` (a call with m rows)."""
    loaded = [dict(k[1:]) for k in kernel._memo]
    assert want in loaded, f"M={m}: the op loaded {loaded}, not the pick {want}"


def report(kernel, path, device, picks, rows, worst, ms):
    """Assert that the op built nothing (the carried cache held every pick), print the picks (the op
    checked at ``ms`` rows) and write them with every timing to ``path``; returns 0."""
    assert kernel.builds == 0, f"the op built {kernel.builds} artifacts: the carried cache lacks a pick"
    print(f"ok: picks {json.dumps(picks)}; the op ran them at M in {ms}, worst rel err {worst:.1e}")
    with open(path, "w") as f:
        json.dump({"device": device, "picks": picks, "rows": rows, "op_rel_err": worst}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
