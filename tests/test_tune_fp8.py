"""``axe tune gemm_fp8`` and the FP8 op's per-call choice (``axe/torch/tune.py``, ``axe/torch/fp8_ops.py``).

Oracles: ``kernels/gemm_fp8_select.py``'s buckets and candidates walked by brute force (the plan's
lines parsed back with ``axe.torch.cache.parse_spec``), stand-in timers with seeded timings whose
medians numpy computes (a pick is the least sum of medians over the rounds, never the one fastest
timing), and the on-disk table read back.
"""

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from axe.torch import fp8_ops, tune  # noqa: E402
from axe.torch.cache import parse_spec  # noqa: E402
from kernels import gemm_fp8_select as S  # noqa: E402
from test_tune import cache  # noqa: E402,F401 - a fixture: a fresh cache folder, the tables forgotten

DEV, FP8 = "NVIDIA H200", "float8_e4m3fn"
SHAPE = (4096, 14336)


def test_plan_lists_exactly_the_candidates_specs():
    lines = tune.plan([SHAPE, (7168, 2048)], FP8, None, kernel=tune.GEMM_FP8)
    assert len(lines) == len(set(lines))
    got = set()
    for line in lines:
        kernel, target, *words = line.split()
        assert kernel == "kernels.gemm_fp8:make_dynamic" and target == "sm_90a"
        got.add(tuple(sorted(parse_spec(words).items())))
    want = {tuple(sorted({"N": N, "K": K, **S.with_bound(b, c)}.items()))
            for N, K in (SHAPE, (7168, 2048)) for b in S.BUCKETS for c in S.candidates(b, N, K)}
    assert got == want
    # a decode bucket's candidates are scheduled for its bound, one line each
    assert sum("max_rows=64 " in line or line.endswith("max_rows=64") for line in lines
               if " N=4096 " in line) == len(S.candidates(64, *SHAPE))


def _fake_timers(seed, rounds, calls):
    """Stand-in for :func:`tune.graph_timers`: seeded timings in [1, 2) ms per (M, candidate), except
    the first candidate of each bucket, which has the single fastest timing (0.001 ms, in the first
    round) and a median of 9 ms.  Returns the factory and the timings it hands out."""
    rng, given = np.random.default_rng(seed), {}

    def timers(kernel, specs, M, N, K, dtype, layout):
        out = {}
        for i, name in enumerate(specs):
            vals = [0.001] + [9.0] * (rounds - 1) if i == 0 else list(rng.uniform(1.0, 2.0, rounds))
            given[(N, K, M, name)] = vals
            it = iter(vals)
            out[name] = lambda it=it, name=name, M=M: (calls.append((M, name)), next(it))[1]
        return out
    return timers, given


@pytest.mark.parametrize("kernel, dtype, layout", [(tune.GEMM_FP8, FP8, None), (tune.GEMM, "bfloat16", "col")])
def test_run_picks_the_least_median_over_interleaved_rounds(cache, kernel, dtype, layout):
    rounds, calls = 5, []
    timers, given = _fake_timers(7, rounds, calls)
    buckets = [16, 128, 512, None]
    rows = tune.run([SHAPE], dtype, layout, buckets, rounds, log=lambda *_: None, kernel=kernel, device=DEV,
                    timers=timers)
    sel = kernel.select()
    picks = json.loads((cache / tune.TABLE).read_text())["picks"]
    assert len(picks) == len(buckets)
    for bound in buckets:
        cands = {sel.name(c): c for c in sel.candidates(bound, *SHAPE)}
        Ms = tune.sample_rows(bound, kernel)
        total = {n: sum(np.median(given[(*SHAPE, M, n)]) for M in Ms) for n in cands}
        fastest_once = min(cands, key=lambda n: min(min(given[(*SHAPE, M, n)]) for M in Ms))
        best = min(total, key=total.get)
        assert best != fastest_once                 # the single fastest timing loses
        pick = picks[tune.key(DEV, dtype, layout, *SHAPE, bound)]
        assert pick["config"] == cands[best] and pick["rows"] == list(Ms)
        assert pick["ms"] == pytest.approx(total[best])
        for M in Ms:                                # interleaved: each round calls every candidate once
            seq = [n for m, n in calls if m == M][-rounds * len(cands):]
            assert [seq[i * len(cands):(i + 1) * len(cands)] for i in range(rounds)] == [list(cands)] * rounds
    assert len(rows) == sum(len(sel.candidates(b, *SHAPE)) * len(tune.sample_rows(b, kernel)) for b in buckets)
    fp8_key = tune.key(DEV, FP8, None, *SHAPE, 16)
    assert (fp8_key == f"{DEV}|{FP8}|4096x14336|16") and (fp8_key in picks) == (kernel is tune.GEMM_FP8)


def test_the_fp8_op_takes_a_tuned_pick_over_the_heuristic(cache):
    N, K = SHAPE
    heur = {M: {"N": N, "K": K, **S.heuristic(M, N, K)} for M in (1, 100, 300, 9000)}
    assert all(fp8_ops.spec(M, N, K, DEV) == heur[M] for M in heur)           # no table: the heuristic
    # a pick that is not the heuristic's, for the 128-row bucket and the unbounded one
    other = {b: next(c for c in S.candidates(b, N, K) if S.with_bound(b, c) != S.heuristic(b or 9000, N, K))
             for b in (128, None)}
    tune.record({tune.key(DEV, FP8, None, N, K, b): {"config": c, "ms": 0.01, "rows": [b or 8192]}
                 for b, c in other.items()})
    assert json.loads((cache / tune.TABLE).read_text())["picks"]              # round trip through the file
    tune.reload()
    for M in (65, 100, 128):
        assert fp8_ops.spec(M, N, K, DEV) == {"N": N, "K": K, **S.with_bound(128, other[128])}
    assert fp8_ops.spec(9000, N, K, DEV) == {"N": N, "K": K, **S.with_bound(None, other[None])}
    assert fp8_ops.spec(1, N, K, DEV) == heur[1] and fp8_ops.spec(300, N, K, DEV) == heur[300]   # untuned buckets
    assert fp8_ops.spec(100, N, K, "NVIDIA H100 80GB HBM3") == heur[100]       # picks are per device
    assert fp8_ops.spec(100, N, K) == heur[100]                                # no device: no table
    assert fp8_ops.spec(100, N, K, DEV) is fp8_ops.spec(70, N, K, DEV)         # memoized per bucket


def test_a_new_pick_takes_effect_after_reload(cache):
    N, K = SHAPE
    first = fp8_ops.spec(20, N, K, DEV)
    assert first == {"N": N, "K": K, **S.heuristic(20, N, K)}
    pick = next(c for c in S.candidates(64, N, K) if S.with_bound(64, c) != S.heuristic(64, N, K))
    tune.record({tune.key(DEV, FP8, None, N, K, 64): {"config": pick, "ms": 0.01, "rows": [17, 64]}})  # reloads
    assert fp8_ops.spec(20, N, K, DEV) == {"N": N, "K": K, **S.with_bound(64, pick)}


def test_cli_parses(capsys, monkeypatch):
    from axe.cli import main
    assert main(["tune", "gemm_fp8", "plan", "--shapes", "4096x14336", "--buckets", "16", "inf"]) == 0
    out = [line for line in capsys.readouterr().out.split("\n") if line]
    assert out == tune.plan([SHAPE], FP8, None, buckets=[16, None], kernel=tune.GEMM_FP8)
    seen = []
    monkeypatch.setattr(tune, "run", lambda *a, **kw: seen.append((a, kw)) or [])
    assert main(["tune", "gemm_fp8", "run", "--shapes", "7168x2048", "--rounds", "5", "--out", "t.json"]) == 0
    assert seen == [(([(7168, 2048)], FP8, None, None, 5, "t.json"), {"kernel": tune.GEMM_FP8})]
    for bad in (["--layout", "col"], ["--dtype", "bfloat16"]):       # one layout, one dtype
        with pytest.raises(SystemExit):
            main(["tune", "gemm_fp8", "plan", "--shapes", "4096x14336", *bad])
