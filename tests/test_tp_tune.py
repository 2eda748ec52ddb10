"""The tensor-parallel ops' measured path choice (``axe/torch/tp_tune.py``, ``axe.torch.tp.choose``).

Oracles: fake tables written to a temporary cache and read back, the fused kernels' shape rules
written out by hand for the shapes used (rows per rank a multiple of 128, at least 128), fake
timers with known medians, the argmin of the measured times, and torch's own product for the
paths run on a one-rank gloo group.
"""

import json
import os
import random

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from axe.torch import tp, tp_tune, tune  # noqa: E402
from kernels import gemm_select  # noqa: E402

DEV = "NVIDIA H200"
AG, RS = "all_gather_matmul", "matmul_reduce_scatter"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder, no shipped folders, the tables forgotten before and after."""
    for name, value in (("AXE_CACHE_DIR", str(tmp_path)), ("AXE_SHIPPED_DIRS", "")):
        monkeypatch.setenv(name, value)
    tune.reload()
    yield tmp_path
    tune.reload()


def put(op, N, K, bound, ms, world=2, device=DEV):
    """Record one measured bucket as ``axe tune tp run`` does."""
    rows = [tp_tune.sample_rows(bound)]
    tune.record({tp_tune.key(device, world, op, "bfloat16", "col", N, K, bound): tp_tune.entry(ms, rows, 5)},
                name=tp_tune.TABLE)


def test_without_a_table_the_heuristic_decides(cache):
    for op, M, N, K, path in ((AG, 8192, 14336, 4096, "fused"), (AG, 2048, 14336, 4096, "nccl+axe"),
                              (RS, 128, 4096, 14336, "nccl+axe"), (RS, 8192, 4096, 14336, "fused")):
        c = tp.choose(op, M, N, K, 2, device=DEV)
        assert (c.path, c.source, c.ms) == (path, "heuristic", ())
        assert f"no tuned entry for {DEV} x2" in c.why
    assert "(heuristic: M=2048 < 4096" in tp.explain(AG, 2048, 14336, 4096, 2)


@pytest.mark.parametrize("fastest", tp_tune.PATHS)
def test_a_tuned_entry_decides_and_explain_names_every_path(cache, fastest):
    ms = {p: (0.1 if p == fastest else 0.2 + i / 10) for i, p in enumerate(tp_tune.PATHS)}
    put(RS, 4096, 14336, 512, ms)
    c = tp.choose(RS, 512, 4096, 14336, 2, device=DEV)
    assert (c.path, c.source, dict(c.ms)) == (fastest, "tuned", ms)
    line = tp.explain(RS, 512, 4096, 14336, 2, device=DEV)
    assert line.startswith(f"axe {RS} 512x4096x14336 on 2 GPUs: {fastest} (tuned: measured on {DEV} x2 at M=512")
    for p, v in ms.items():
        assert f"{p} {v:.3f} ms" in line
    # the entry serves its bucket only, and only its device and world
    assert tp.choose(RS, 400, 4096, 14336, 2, device=DEV).source == "tuned"           # bucket 512
    assert tp.choose(RS, 384, 4096, 14336, 2, device=DEV).source == "heuristic"       # bucket 384
    assert tp.choose(RS, 512, 4096, 14336, 4, device=DEV).source == "heuristic"
    assert tp.choose(RS, 512, 4096, 14336, 2, device="NVIDIA H100 80GB HBM3").source == "heuristic"
    assert tp.choose(RS, 512, 4096, 14336, 2).source == "heuristic"                   # no device named


def ag_fits(M, w=2):
    """ag_gemm's rule for these shapes (K % 64 == 0, N/w % 8 == 0): M/w a multiple of 128."""
    return M % w == 0 and (M // w) % 128 == 0


def test_the_pick_is_the_fastest_measured_path_that_runs_at_the_calls_rows(cache):
    """Law, by brute force over random tables: the path is the argmin of the measured times over the
    paths that run at M (the fused kernel only where it fits M, whatever the bucket's sample did)."""
    rnd = random.Random(7)
    for trial in range(40):
        ms = {p: rnd.choice((0.1, 0.2, 0.3, 0.4)) for p in tp_tune.PATHS if p != "fused" or rnd.random() < 0.8}
        put(AG, 14336, 4096, 8192, ms)
        for M in (4098, 5000, 7936, 8000, 8192):
            runs = {p: v for p, v in ms.items() if p != "fused" or ag_fits(M)}
            want = min(runs.values())
            c = tp.choose(AG, M, 14336, 4096, 2, device=DEV)
            assert c.source == "tuned" and ms[c.path] == want, (trial, M, ms, c)
            assert c.path == min(runs, key=lambda p: (runs[p], tp_tune.PATHS.index(p)))       # ties: PATHS order
            assert ("fused left out at M=" in c.why) == ("fused" in ms and not ag_fits(M))


def test_decide_and_entry_refuse_what_cannot_be_a_pick():
    assert tp_tune.decide({"nccl+axe": 0.2, "nccl+cublas": 0.2}) == "nccl+axe"
    with pytest.raises(ValueError, match="non-empty subset"):
        tp_tune.decide({})
    with pytest.raises(ValueError, match="non-empty subset"):
        tp_tune.decide({"nccl": 0.1})
    with pytest.raises(ValueError, match="rounds must be at least 3"):
        tp_tune.entry({"fused": 0.1}, [8192], 2)


def fake_timers(values, calls):
    """timers(op, M, N, K, dtype, layout) -> {path: a call returning the next of values[M][path]}."""
    def timers(op, M, N, K, dtype, layout):
        out = {}
        for p, seq in values[M].items():
            it = iter(seq)
            out[p] = lambda p=p, it=it: (calls.append((M, p)), next(it))[1]
        return out
    return timers


def test_run_takes_medians_of_interleaved_rounds_and_records_for_choose(cache):
    """nccl+axe has the single fastest timing at M=512 but the higher median: nccl+cublas is the
    pick; the rounds alternate the paths; the table written is what choose() then reads."""
    values = {512: {"fused": [0.9, 0.9, 0.9], "nccl+axe": [0.01, 0.5, 0.5], "nccl+cublas": [0.3, 0.3, 0.3]},
              8192: {"fused": [1.0, 1.2, 1.1], "nccl+axe": [1.5, 1.5, 1.5], "nccl+cublas": [1.4, 1.4, 1.4]}}
    calls, logs = [], []
    picks = tp_tune.run(RS, [(4096, 14336)], 2, DEV, fake_timers(values, calls), buckets=[512, 8192], rounds=3,
                        log=logs.append)
    assert calls == [(512, p) for p in tp_tune.PATHS] * 3 + [(8192, p) for p in tp_tune.PATHS] * 3
    k512 = tp_tune.key(DEV, 2, RS, "bfloat16", "col", 4096, 14336, 512)
    assert picks[k512] == {"pick": "nccl+cublas", "ms": {"fused": 0.9, "nccl+axe": 0.5, "nccl+cublas": 0.3},
                           "rows": [512], "rounds": 3}
    on_disk = json.loads((cache / tp_tune.TABLE).read_text())["picks"]
    assert on_disk == picks and len(logs) == 2 and "nccl+cublas" in logs[0]
    assert tp.choose(RS, 512, 4096, 14336, 2, device=DEV).path == "nccl+cublas"
    assert tp.choose(RS, 8192, 4096, 14336, 2, device=DEV).path == "fused"              # median 1.1
    assert (cache / tune.TABLE).exists() is False                                       # the GEMM table untouched
    with pytest.raises(ValueError, match="at least 3"):
        tp_tune.run(RS, [(4096, 14336)], 2, DEV, fake_timers(values, []), buckets=[512], rounds=2)
    with pytest.raises(RuntimeError, match="no path to time"):
        tp_tune.run(RS, [(4096, 14336)], 2, DEV, lambda *a: {}, buckets=[512])


def test_only_rank_zero_writes(cache):
    values = {8192: {"nccl+axe": [1.0] * 3, "nccl+cublas": [2.0] * 3}}
    tp_tune.run(AG, [(14336, 4096)], 2, DEV, fake_timers(values, []), buckets=[8192], rounds=3, rank=1, log=print)
    assert not (cache / tp_tune.TABLE).exists()


def test_plan_builds_the_fused_kernel_where_it_fits_and_the_gemm_of_every_bucket():
    lines = tp.plan(AG, [(14336, 4096)], 2)
    fused = sorted(int(w[2:]) for line in lines if line.startswith("kernels.ag_gemm:make ")
                   for w in line.split() if w.startswith("M="))
    rows = [tp_tune.sample_rows(b) for b in gemm_select.BUCKETS]
    assert fused == sorted(M for M in rows if ag_fits(M))
    assert 768 in fused and 384 not in fused                # 384 rows per rank: 3 tiles; 192: not whole tiles
    gemm = [line for line in lines if line.startswith(tune.KERNEL + " ")]
    want = {tune.plan_line(tune.KERNEL, "sm_90a", tune.spec_for("", 7168, 4096, "bfloat16", "col", M)) for M in rows}
    assert set(gemm) == want and len(lines) == len(set(lines))
    assert all("N=7168 " in line for line in gemm)          # the local GEMM: N/w columns of the gathered rows
    rs = tp.plan(RS, [(4096, 14336)], 4, buckets=[128, 512])
    assert [line.split()[0] for line in rs] == [tune.KERNEL, tune.KERNEL, "kernels.gemm_rs:make"]
    assert "K=3584 " in rs[0] and "M=512 " in rs[2] and "world=4" in rs[2]


def test_cli(cache, capsys):
    from axe.cli import main
    assert main(["tune", "tp", "plan", "--op", RS, "--shapes", "4096x14336", "--buckets", "8192"]) == 0
    assert capsys.readouterr().out.split("\n")[:2] == tp.plan(RS, [(4096, 14336)], 2, buckets=[8192])
    put(RS, 4096, 14336, 2048, {"fused": 0.5, "nccl+axe": 0.25, "nccl+cublas": 0.2})
    assert main(["tp", RS, "2048", "4096", "14336", "--device", DEV]) == 0
    assert capsys.readouterr().out.strip() == tp.explain(RS, 2048, 4096, 14336, 2, device=DEV)
    assert tp.explain(RS, 2048, 4096, 14336, 2, device=DEV).split(": ")[1] == "nccl+cublas (tuned"


def test_forced_paths_on_one_gloo_rank(mesh1):
    """The nccl+cublas path through the ops, on a one-rank group: torch's product; an unknown path is
    refused naming it; the ranks' figures pass through agree() unchanged on one rank."""
    group = mesh1.get_group()
    A, W = torch.randn(8, 16), torch.randn(12, 16)
    _, (C,) = tp.fused_all_gather_matmul(A, [W.t()], 0, group, return_A=False, path="nccl+cublas")
    torch.testing.assert_close(C, A @ W.t())
    torch.testing.assert_close(tp.fused_matmul_reduce_scatter(A, W.t(), "sum", 0, group, path="nccl+cublas"), A @ W.t())
    with pytest.raises(ValueError, match="path='nccl' is not supported"):
        tp.fused_matmul_reduce_scatter(A, W.t(), "sum", 0, group, path="nccl")
    assert tp_tune.agree({"fused": 0.5, "nccl+axe": 0.25}) == {"fused": 0.5, "nccl+axe": 0.25}
