"""The FP8 GEMM's configuration selection (``kernels/gemm_fp8_select.py``): the heuristic against a
brute-force enumeration of its documented model, the candidates against the kernel's own refusals,
the bound each artifact is scheduled for, and the op's per-call pick (memoized per (N, K, bucket))."""

import itertools
import os
import sys

import pytest

from kernels import gemm_fp8_select as S
from kernels import gemm_select

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

#: (N, K): the MLP weights, DeepSeek-V3's six, and small or ragged ones
SHAPES = [(14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (3584, 18944), (2112, 7168), (24576, 1536),
          (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (576, 7168), (128, 128), (200, 1000),
          (1024, 6144), (2112, 1936)]
MS = (1, 7, 16, 17, 64, 100, 128, 129, 256, 300, 384, 512, 700, 768, 1000, 1024, 1025, 2048, 4096, 5000, 8192, 9000)


def model_time(N, K, bn, s, sms, rows, decode=False):
    """The documented model, written out: ⌈⌈N/bn⌉·s·rows / sms⌉ waves, each ⌈⌈K/128⌉ / s⌉ k-blocks of
    (bn + 64) plus 4096 per extra slice; in a decode bucket k-blocks of (max(bn, 96) + 160) plus 2560
    per extra slice."""
    units = -(-N // bn) * s * rows
    waves = -(-units // sms)
    width, k_block, split = (max(bn, 96), 160, 2560) if decode else (bn, 64, 4096)
    return waves * (-(-(-(-K // 128)) // s) * (width + k_block) + (s - 1) * split)


def brute_force(M, N, K, sms=132):
    """The heuristic by enumeration: every (bn, slices) the bucket allows — decode buckets (≤ 128
    rows) bn 64, 128 or 256 and 1, 2, 4 or 8 slices; middle buckets (≤ 1024) bn 128, 192, 256 uncut and
    128 or 256 in 2, 3, 4 or 6 slices; larger buckets bn 128, 192, 256 uncut (CTA pairs aside: the
    model has no term for them); a tile no wider than N,
    slices of at least 8 k-blocks — the least model time, then fewer slices, then the wider tile."""
    bound = next(b for b in gemm_select.BUCKETS if b is None or b >= M)
    rows = -(-(bound or 8192) // 128)
    kb = -(-K // 128)
    options = []
    for bn, s in itertools.product((64, 128, 192, 256), range(1, 9)):
        if bn > N or (s > 1 and kb // s < 8):
            continue
        if bound is not None and bound <= 128:
            ok = bn != 192 and s in (1, 2, 4, 8)
        elif bound is not None and bound <= 1024:
            ok = bn != 64 and (s == 1 or (bn != 192 and s in (2, 3, 4, 6)))
        else:
            ok = bn != 64 and s == 1
        if ok:
            options.append((model_time(N, K, bn, s, sms, rows, bound is not None and bound <= 128), s, -bn))
    t, s, bn = min(options)
    return bound, -bn, s


@pytest.mark.parametrize("N, K", SHAPES)
def test_heuristic_is_the_decode_tile_or_the_least_modelled_candidate(N, K):
    """Buckets 16 and 64: the transposed decode tile, in the most slices (1, 2, 4, 8; slices of at
    least 8 k-blocks) whose N/128 tiles x slices fit one wave; buckets above 1024 rows with N ≥ 256
    and K ≥ 6144 or N ≥ 28672: the 256-wide CTA pair on the run-time grid; other buckets: the
    model's pick."""
    for M in MS:
        for sms in (132, 114):
            got = S.heuristic(M, N, K, sms)
            bound = next(b for b in gemm_select.BUCKETS if b is None or b >= M)
            if bound in (16, 64) and N >= 128:
                kb, tiles = -(-K // 128), -(-N // 128)
                s = max(s for s in (1, 2, 4, 8) if s == 1 or (kb // s >= 8 and tiles * s <= sms))
                want = {"tile_m": bound, "stages": S.TILE_M_STAGES[bound], "max_rows": bound}
                assert got == {**want, **({"split_k": s} if s > 1 else {})}, (M, N, K, sms, got)
                continue
            if (bound is None or bound > 2048) and N >= 256 and (K >= 6144 or N >= 28672):
                assert got == {"bn": 256, "stages": S.STAGES[256], "cluster": 2}, (M, N, K, sms, got)
                continue
            assert got == S.modelled(M, N, K, sms)
            bound, bn, s = brute_force(M, N, K, sms)
            assert (got["bn"], got.get("split_k", 1)) == (bn, s), (M, N, K, sms, got)
            assert got["stages"] == S.STAGES[bn]
            scheduled = bound is not None and bound <= 1024 and (bound <= 128 or s > 1)
            assert got.get("max_rows") == (bound if scheduled else None), (M, got)


def _figures(name):
    import json
    return json.load(open(os.path.join(ROOT, "benchmarks", "results", name)))


def test_the_pair_rule_against_the_measured_pairs():
    """Every shape of the static-M run (H200; the 16 MLP weights at M = 8192, DeepSeek-V3's six at
    4096): the large buckets' rule picks the 256-wide CTA pair exactly where the pair ran faster than
    the uncut 256-wide tile; and for every shape it picks, the run-time-M uncut tile the every-M sweep ran in
    the buckets above 1024 rows is below cuBLAS (median over M = 2048, 4096, 8192), so the pair
    replaces a tile that has room to gain."""
    figures = _figures("gemm_fp8-2026-11-23-h200-run4.json")["figures"]
    assert len(figures) == 22
    for f in figures:
        ms = f["ms"]
        for bound in (4096, 8192, None):
            assert S.pairs_win(bound, f["N"], f["K"]) == (ms["axe_bn256_c2"] < ms["axe_bn256"]), (f["model"], f["proj"])
        assert not S.pairs_win(1024, f["N"], f["K"]) and not S.pairs_win(2048, f["N"], f["K"])
    ratios = {}
    for r in _figures("gemm_fp8-allm-2026-11-27-h200.json")["rows"]:
        if r["M"] >= 2048 and r.get("cublas_ms") and r.get("axe_ms"):
            ratios.setdefault((r["N"], r["K"]), []).append(r["cublas_ms"] / r["axe_ms"])
    picked = [nk for nk in ratios if S.pairs_win(None, *nk)]
    assert len(ratios) == 16 and len(picked) == 12, (len(ratios), len(picked))
    for nk in picked:
        assert len(ratios[nk]) == 3 and sorted(ratios[nk])[1] < 1, (nk, ratios[nk])


def test_the_model_is_the_16_bit_one_in_fp8_k_blocks():
    for (N, K), bn, s, rows in itertools.product(SHAPES, (64, 128, 256), (1, 2, 4), (1, 3)):
        assert S.cost(N, K, bn, s, 132, rows) == model_time(N, K, bn, s, 132, rows)
        assert S.cost(N, K, bn, s, 132, rows, decode=True) == model_time(N, K, bn, s, 132, rows, decode=True)


def test_decode_picks_against_the_measured_sweep():
    """Every candidate (without the decode tile) of the 16 MLP shapes at M = 1, 16, 64 and 128,
    measured on an H200 (the data the decode constants were fitted to): the model's pick is within 2%
    of the fastest candidate on average and 15% at worst, where the 16-bit constants were 5.7% and
    29% off."""
    import json
    import re
    path = os.path.join(ROOT, "benchmarks", "results", "gemm_fp8-allm-2026-11-27-h200.json")
    regrets = []
    for r in json.load(open(path))["rows"]:
        if r["M"] > 128 or not r.get("candidates_ms"):
            continue
        us = {}
        for name, t in r["candidates_ms"].items():
            split = re.search(r"split_k(\d+)", name)
            us[(int(re.search(r"_bn(\d+)", name).group(1)), int(split.group(1)) if split else 1)] = t
        pick = S.modelled(r["M"], r["N"], r["K"])
        regrets.append(us[(pick["bn"], pick.get("split_k", 1))] / min(us.values()))
    assert len(regrets) == 64
    assert sum(regrets) / len(regrets) < 1.02 and max(regrets) < 1.15, (sum(regrets) / len(regrets), max(regrets))


def test_buckets_are_the_16_bit_gemms():
    assert S.BUCKETS is gemm_select.BUCKETS
    for M in MS:
        b = S.bucket(M)
        assert (b is None or b >= M) and all(x < M for x in gemm_select.BUCKETS if x is not None and (b is None or x < b))


def test_scheduled_rows_bounds_exactly_the_fixed_grids():
    for bound, cfg in itertools.product(gemm_select.BUCKETS, (dict(bn=128), dict(bn=128, split_k=2), dict(bn=256, cluster=2),
                                                              dict(bn=128, stream_k=True))):
        fixed = cfg.get("split_k", 1) > 1 or cfg.get("cluster", 1) > 1 or cfg.get("stream_k", False)
        want = bound if bound is not None and bound <= 1024 and (bound <= 128 or fixed) else None
        assert S.scheduled_rows(bound, cfg) == want, (bound, cfg)


@pytest.mark.parametrize("N, K", [(4096, 14336), (2112, 1936), (576, 7168), (128, 128), (32768, 512)])
def test_every_candidate_composes(N, K):
    """Each candidate of every bucket is a configuration the kernel composes (its refusals are
    raised by ``make`` before any build), scheduled for its bucket where ``scheduled_rows`` says."""
    from kernels import gemm_fp8
    for bound in gemm_select.BUCKETS:
        cands = S.candidates(bound, N, K)
        assert cands and len({S.name(c) for c in cands}) == len(cands)
        for c in cands:
            cfg = S.with_bound(bound, c)
            k = gemm_fp8.make_dynamic(N, K, **cfg)
            assert k.meta["max_rows"] == S.scheduled_rows(bound, c) and k.meta["M"] is None


def test_split_candidates_keep_slices_the_split_k_scheduler_takes():
    """SplitK's conditions (at least 2 k-blocks a slice, every slice starting inside K) hold for
    every split the candidates offer."""
    from kernels.parts.schedulers.split_k import SplitK
    for (N, K), bound in itertools.product(SHAPES, gemm_select.BUCKETS):
        for c in S.candidates(bound, N, K):
            if c.get("split_k", 1) > 1 and "tile_m" in c:       # the decode tile: the grid of Cᵀ
                SplitK(N, bound, 128, c["tile_m"], 132, 16, S.k_iters(K), c["split_k"], 64)
            elif c.get("split_k", 1) > 1:
                SplitK(bound or 1024, N, 128, c["bn"], 132, 16, S.k_iters(K), c["split_k"], 64)


def test_the_op_picks_once_per_bucket(monkeypatch):
    """``fp8_ops.spec`` asks the heuristic once per (N, K, bucket) and returns the same dict for
    every M of the bucket (a call costs one bisect and a lookup)."""
    pytest.importorskip("torch")
    from axe.torch import fp8_ops
    calls = []
    real = S.heuristic
    monkeypatch.setattr(fp8_ops, "_PICKS", {})
    monkeypatch.setattr(fp8_ops.SELECT, "heuristic", lambda *a: calls.append(a) or real(*a))
    picks = {M: fp8_ops.spec(M, 4096, 14336) for M in (1, 5, 16, 17, 64, 65, 128, 3000, 4096)}
    assert len(calls) == 4                      # buckets 16, 64, 128 and 4096
    assert picks[1] is picks[5] is picks[16] and picks[17] is picks[64] and picks[65] is picks[128]
    assert picks[3000] is picks[4096] and picks[16] is not picks[17]
    for M, s in picks.items():
        assert s == {"N": 4096, "K": 14336, **real(M, 4096, 14336)}


@pytest.mark.parametrize("M, kb", [(7, 3), (8, 1), (1, 5), (130, 2)])
def test_the_op_reads_deepgemm_scales_in_place_and_copies_others(M, kb):
    """``a_scale`` in DeepGEMM's layout is passed as the (kb, round_up(M, 4)) array it is stored in
    (no copy); row-major it is copied into one; the kernel's view holds a_scale's values either way."""
    torch = pytest.importorskip("torch")
    from axe.torch import fp8_ops
    sa = torch.rand(M, kb) + 0.5
    Mp = -(-M // 4) * 4
    for scale, in_place in ((fp8_ops.deepgemm_scales(sa), True), (sa.contiguous(), kb == 1 and Mp == M)):
        got = fp8_ops._stored_scale(scale, M, kb)
        assert got.shape == (kb, Mp) and got.is_contiguous()
        assert torch.equal(got[:, :M], sa.t()) and (got.data_ptr() == scale.data_ptr()) == in_place


def test_the_decode_tile_pick_is_the_fastest_measured_candidate():
    """Every candidate of buckets 16 and 64 of two Llama-3.1-8B weights, timed in interleaved rounds
    on an H200 (tune_fp8_decode-2026-11-27-h200.json): the heuristic's pick is the candidate of least
    summed time over the bucket's sample rows, in all four."""
    import json
    path = os.path.join(ROOT, "benchmarks", "results", "tune_fp8_decode-2026-11-27-h200.json")
    total = {}
    for r in json.load(open(path))["rows"]:
        key = (r["N"], r["K"], r["bucket"])
        total.setdefault(key, {}).setdefault(r["config"], 0.0)
        total[key][r["config"]] += r["ms"]
    assert len(total) == 4
    for (N, K, bound), t in total.items():
        pick = {"split_k": 1, **{k: v for k, v in S.heuristic(bound, N, K).items() if k != "max_rows"}}
        assert S.name(pick) == min(t, key=t.get), (N, K, bound, S.name(pick), sorted(t, key=t.get)[:3])


def test_the_pair_rule_starts_above_2048_rows_as_measured_at_run_time():
    """Run-time pairs against the uncut 256-wide tile, every shape the rule picks, H100 (two sweeps of
    one tree, with and without the pairs): at M = 2048 the pairs are slower on most of them, at 4096
    and 8192 faster on most — so bucket 2048 keeps the uncut tile and the larger ones take the pair."""
    key = lambda r: (r["N"], r["K"], r["M"])          # noqa: E731
    before = {key(r): r["cublas_ms"] / r["axe_ms"] for r in _figures("gemm_fp8-allm-2026-11-27-h100.json")["rows"]
              if r["M"] >= 2048}
    pairs = {key(r): (r["cublas_ms"] / r["axe_ms"], "cluster2" in r["artifact"])
             for r in _figures("gemm_fp8-allm-2026-11-27-h100-pairs.json")["rows"] if r["M"] >= 2048}
    for M in (2048, 4096, 8192):
        ran = [(before[k], x) for k, (x, pair) in pairs.items() if k[2] == M and pair]
        assert len(ran) == 16, (M, len(ran))
        faster = sum(x > b for b, x in ran)
        assert (faster > len(ran) // 2) == S.pairs_win(M, 4096, 14336), (M, faster)
