#!/usr/bin/env python3
"""``axe tune gemm_fp8`` end to end on a GPU (no TVM there): measure the candidates of the 16-row
decode bucket and of the unbounded bucket for one weight shape, then check that
``torch.ops.axe.gemm_fp8`` runs the picks.

- here (TVM + nvcc): ``AXE_CACHE_DIR=.carry/axe_cache axe cache build --spec-file <(axe tune gemm_fp8
  plan --shapes 4096x14336 --buckets 16 inf)`` builds every candidate;
- on the GPU machine: ``python3 tests/gpu/run_tune_fp8.py [--out DIR]`` tunes into a fresh table in
  the carried cache, prints the picks, checks the op at M in :data:`ROWS` against
  ``fp8_ops.reference`` (fp32 of the dequantized operands) and that each call loaded its bucket's
  pick, and writes ``tune_fp8.json`` (picks and every timing) to ``--out``.
"""

import os
import sys

from run_tune import fresh_table, loaded_pick, report        # this folder's 16-bit run

SHAPE, FP8 = (4096, 14336), "float8_e4m3fn"
BUCKETS = [16, None]
ROWS = (1, 7, 16, 9000)


def main(argv=None):
    args = fresh_table(argv, __doc__)
    import torch

    from axe.torch import fp8_ops, tune
    rows = tune.run([SHAPE], FP8, None, BUCKETS, args.rounds, kernel=tune.GEMM_FP8)
    picks = tune.table()
    device = torch.cuda.get_device_name()
    N, K = SHAPE
    kb, nb = -(-K // 128), -(-N // 128)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    sb = torch.rand(nb, kb, device="cuda") + 0.5
    worst = 0.0
    for m in ROWS:
        a = torch.randn(m, K, device="cuda").to(torch.float8_e4m3fn)
        sa = torch.rand(m, kb, device="cuda") + 0.5
        got = torch.ops.axe.gemm_fp8(a, b, fp8_ops.deepgemm_scales(sa), sb).float()
        ref = fp8_ops.reference(a, b, sa, sb)
        err = ((got - ref).norm() / ref.norm()).item()
        assert err < 1e-2, f"M={m}: rel err {err:.2e}"
        worst = max(worst, err)
        bound = fp8_ops.bucket(m)
        pick = picks[tune.key(device, FP8, None, N, K, bound)]
        want = tune.spec(N, K, FP8, None, bound, pick["config"], tune.GEMM_FP8)
        assert fp8_ops.spec(m, N, K, device) == want, f"M={m}: spec {fp8_ops.spec(m, N, K, device)}, pick {want}"
        loaded_pick(fp8_ops.KERNEL, want, m)
    return report(fp8_ops.KERNEL, os.path.join(args.out, "tune_fp8.json"), device, picks, rows, worst, ROWS)


if __name__ == "__main__":
    sys.exit(main())
