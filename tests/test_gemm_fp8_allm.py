"""The FP8 every-M sweep's host side (``benchmarks/gemm_fp8_allm.py``), with fake timings: its rows'
fields, the DRAM-limit arithmetic, the summary, the artifact plan (one per distinct configuration,
every row's artifact in it), the slim carry, and a shape that hangs or crashes recorded as rows."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import gemm_fp8_allm as A  # noqa: E402

SHAPE = ("mlp", "Llama-3.1-8B", "down", 4096, 14336)
FIELDS = {"M", "N", "K", "dtype", "axe_ms", "cublas_ms", "triton_ms", "config", "dram_limit_ms"}


def test_rows_carry_the_fields_and_the_dram_limit_up_to_128_rows():
    rate = 3.0e12
    for m in A.MS:
        cfg = A.config_for(m, 4096, 14336)
        row = A.make_row(SHAPE, m, cfg, {"axe": 0.05, "cublas": 0.04, "triton": 0.09}, {"axe": 1e-3}, {}, rate)
        assert FIELDS - {"dram_limit_ms"} <= set(row) and ("dram_limit_ms" in row) == (m <= 128)
        assert (row["M"], row["N"], row["K"], row["dtype"]) == (m, 4096, 14336, "float8_e4m3fn")
        assert (row["axe_ms"], row["cublas_ms"], row["triton_ms"]) == (0.05, 0.04, 0.09) and row["config"] == cfg
        if m <= 128:
            # 4096·14336 e4m3 bytes + 32·112 fp32 block scales, read at 3 TB/s
            assert row["dram_limit_ms"] == pytest.approx((58720256 + 14336) / 3.0e12 * 1e3, rel=1e-12)
    row = A.make_row(SHAPE, 16, {}, {"cublas": 0.04}, {}, {"axe": "boom"}, rate)
    assert row["axe_ms"] is None and row["triton_ms"] is None and row["errors"] == {"axe": "boom"}


def test_dram_limit_is_weight_and_scale_bytes_over_the_rate():
    for n, k, rate in ((7168, 16384, 3.35e12), (576, 7168, 4.2e12), (2112, 1936, 1e12)):
        nb, kb = -(-n // 128), -(-k // 128)
        assert A.weight_bytes(n, k) == n * k + 4 * nb * kb
        assert A.dram_limit_ms(n, k, rate) == pytest.approx((n * k + 4 * nb * kb) * 1000 / rate, rel=1e-12)


def test_summary_from_fake_rows():
    rows = [A.make_row(SHAPE, m, {}, {"axe": a, "cublas": c}, {}, {}, 2e12)
            for m, a, c in ((1, 0.05, 0.04), (1, 0.02, 0.03), (1, 0.04, 0.04), (256, 0.1, None), (256, 0.2, 0.1))]
    s = A.summarize(rows)
    assert s["M=1"]["shapes"] == 3 and s["M=1"]["cublas_over_axe_median"] == pytest.approx(1.0)
    assert s["M=1"]["cublas_over_axe_min"] == pytest.approx(0.8)
    assert s["M=1"]["dram_share_median"] == pytest.approx(rows[0]["dram_limit_ms"] / 0.04)
    assert s["M=256"] == {"shapes": 1, "cublas_over_axe_median": 0.5, "cublas_over_axe_min": 0.5}


def test_the_plan_holds_every_rows_artifact_once():
    shapes = A.shapes()
    assert len(shapes) == 22 and len({(s[3], s[4]) for s in shapes}) == 22
    plan = A.plan(shapes)
    names = [p[3] for p in plan]
    assert len(names) == len(set(names))
    by_name = {p[3]: p for p in plan}
    for *_, n, k in shapes:
        per_shape = {A.artifact_name(n, k, A.config_for(m, n, k)) for m in A.MS}
        assert per_shape <= set(by_name) and len(per_shape) <= len(A.MS)
        for nm in per_shape:
            assert by_name[nm][:2] == (n, k)
    assert len(plan) < len(shapes) * len(A.MS)          # buckets sharing a configuration share its artifact


def test_slim_keeps_what_the_runtime_loads_and_the_carry_is_counted(tmp_path):
    d = tmp_path / "gemm_fp8_dyn_x"
    d.mkdir()
    for f, size in (("launch.json", 100), ("kernel.cubin", 3000), ("kernel.cu", 50000), ("kernel.ptx", 90000),
                    ("build.log", 10)):
        (d / f).write_bytes(b"x" * size)
    A.slim(str(d))
    assert sorted(os.listdir(d)) == ["kernel.cubin", "launch.json"]
    assert A.carry_bytes(str(tmp_path)) == 3100


def test_a_crashed_or_hung_shape_becomes_rows_with_the_reason(monkeypatch, tmp_path):
    """In process, a crash records every M with the error; in a child, the rows it wrote before it
    hung are kept and the other M record the timeout."""
    class Args:
        shape_timeout, artifacts, rounds = 0, "/nowhere", 3

    def crash(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access")
    monkeypatch.setattr(A, "run_shape", crash)
    rows = A.shape_rows(SHAPE, Args, 3e12)
    assert [r["M"] for r in rows] == list(A.MS)
    assert all("illegal memory access" in r["errors"]["shape"] and r["axe_ms"] is None for r in rows)
    assert all(("dram_limit_ms" in r) == (r["M"] <= 128) for r in rows)

    measured = [A.make_row(SHAPE, m, {}, {"axe": 0.05, "cublas": 0.04, "triton": 0.1}, {}, {}, 3e12) for m in (1, 16)]

    def hang(cmd, timeout, check):
        assert "4096x14336" in cmd and timeout == 7
        A.write(cmd[cmd.index("--part") + 1], measured)          # what the child wrote before it hung
        raise subprocess.TimeoutExpired(cmd, timeout)
    Args.shape_timeout = 7
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(subprocess, "run", hang)
    rows = A.shape_rows(SHAPE, Args, 3e12)
    assert rows[:2] == measured and [r["M"] for r in rows] == list(A.MS)
    assert all("timed out after 7 s" in r["errors"]["shape"] for r in rows[2:]) and os.listdir(tmp_path) == []


def test_the_json_is_replaced_whole(tmp_path):
    path = str(tmp_path / "r" / "gemm_fp8-allm.json")
    A.write(path, {"rows": [1]})
    A.write(path, {"rows": [1, 2]})
    assert json.load(open(path)) == {"rows": [1, 2]} and os.listdir(tmp_path / "r") == ["gemm_fp8-allm.json"]


def test_every_candidate_plan_adds_the_decode_buckets_candidates_and_the_pair_rules_sides():
    shapes = A.shapes()[:3]
    picks, every = A.plan(shapes), A.plan(shapes, every_candidate=True)
    assert {p[3] for p in picks} < {p[3] for p in every}
    for *_, n, k in shapes:
        for m in A.MS:
            cands = A.candidates_for(m, n, k)
            assert bool(cands) == (m <= 128 or m > 1024)
            if m > 1024:        # the pair rule's two sides, on the run-time grid
                assert cands == [dict(bn=256, stages=4), dict(bn=256, stages=4, cluster=2)]
            else:
                assert all(c.get("max_rows") == (16 if m <= 16 else 64 if m <= 64 else 128) for c in cands)
            assert {A.artifact_name(n, k, c) for c in cands} <= {p[3] for p in every}


def test_run_shape_checks_every_side_and_times_only_the_correct_ones(monkeypatch, tmp_path):
    """run_shape's control flow on the CPU with stand-ins: axe's artifact computes the reference,
    cuBLAS returns a wrong product, Triton raises; axe is timed (the fake timer's figure), cuBLAS is
    recorded wrong and Triton failed, neither timed; every row written after its M."""
    torch = pytest.importorskip("torch")
    import axe.runtime as rt
    import axe.torch.timing as timing
    import gemm_fp8
    from kernels.fp8_blocks import reference
    monkeypatch.setattr(A, "DEVICE", "cpu")
    monkeypatch.setattr(gemm_fp8, "DEVICE", "cpu")
    loaded = []

    def load(path):
        loaded.append(os.path.basename(path))
        return lambda a, w, sa, sb, c: c.copy_(reference(a, w, sa, sb)["C"].to(c.dtype))
    monkeypatch.setattr(rt, "load", load)
    monkeypatch.setattr(gemm_fp8.Cublas, "call", classmethod(
        lambda cls, a, w, sa, sb: ("fake", lambda: 2 * reference(a, w, sa, sb)["C"].to(torch.bfloat16))))

    def no_triton():
        def run(*_):
            raise RuntimeError("no GPU for Triton")
        return run
    monkeypatch.setattr(gemm_fp8, "triton_or_error", no_triton)
    monkeypatch.setattr(timing, "capture", lambda torch, fn: (fn, None))
    monkeypatch.setattr(timing, "graph_ms", lambda torch, g, reps, inner=10: 0.125)
    written = []
    shape = ("deepseek", "DeepSeek-V3", "576x256", 576, 256)
    rows = A.run_shape(shape, str(tmp_path), 2e12, 2, ms_list=(1, 130), on_row=lambda r: written.append(len(r)))
    assert written == [1, 2] and [r["M"] for r in rows] == [1, 130]
    for r in rows:
        assert r["axe_ms"] == 0.125 and r["cublas_ms"] is None and r["triton_ms"] is None
        assert r["rel_err"]["axe"] < 1e-2 and "relative error" in r["errors"]["cublas"]
        assert "no GPU for Triton" in r["errors"]["triton"] and r["cublas_call"] == "fake"
        assert r["artifact"] == A.artifact_name(576, 256, r["config"])
    assert loaded == [rows[0]["artifact"], rows[1]["artifact"]]
    assert "dram_limit_ms" in rows[0] and "dram_limit_ms" not in rows[1]
