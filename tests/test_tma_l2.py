"""``benchmarks/tma_l2.py``: which (artifact, M) pairs the L2-promotion A/B times, and that the only
thing its sides change is the tensor maps' promotion.

Oracles: hand-made caches (key.json specs as ``axe.cache`` writes them, FP8 folders as
``gemm_fp8_allm.py --build`` names them) with the expected pairs written out; a real artifact's
``launch.json`` compared field by field after the override.
"""

import json
import os
import sys

import pytest

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import tma_l2  # noqa: E402


def _entry(root, name, spec):
    d = root / "kernels.gemm.make_dynamic" / name
    d.mkdir(parents=True)
    (d / "key.json").write_text(json.dumps({"spec": spec}))


def test_each_m_runs_on_the_tightest_bound_and_large_m_on_unbounded(tmp_path):
    base = {"N": 4096, "K": 14336, "dtype": "bfloat16", "b_major": "col"}
    _entry(tmp_path, "a", {**base, "max_rows": 16, "split_k": 4})
    _entry(tmp_path, "b", {**base, "max_rows": 16, "split_k": 2})       # a second candidate of the same bound
    _entry(tmp_path, "c", {**base, "max_rows": 128})
    _entry(tmp_path, "d", {**base})                                       # unbounded: the large-M artifact
    _entry(tmp_path, "e", {**base, "N": 8192, "max_rows": 64})
    fp8 = tmp_path / "fp8"
    for name in ("gemm_fp8_dyn_4096x7168_bn256_stages4", "gemm_fp8_dyn_4096x7168_max_rows16_stages12_tile_m16"):
        (fp8 / name).mkdir(parents=True)
    got = sorted((os.path.basename(os.path.normpath(d)), m)
                 for _, _, d, m in tma_l2.served(tma_l2.entries([str(tmp_path), str(fp8)]), (1, 16, 64, 128, 8192)))
    assert got == sorted([("a", 1), ("a", 16), ("b", 1), ("b", 16), ("c", 64), ("c", 128), ("d", 8192),
                          ("e", 1), ("e", 16), ("e", 64),
                          ("gemm_fp8_dyn_4096x7168_max_rows16_stages12_tile_m16", 1),
                          ("gemm_fp8_dyn_4096x7168_max_rows16_stages12_tile_m16", 16),
                          ("gemm_fp8_dyn_4096x7168_bn256_stages4", 8192)])
    (kind, spec, _), = [e for e in tma_l2.entries([str(fp8)]) if "tile_m16" in e[2]]
    assert kind == "gemm_fp8" and spec == {"N": 4096, "K": 7168, "config": "max_rows16_stages12_tile_m16", "max_rows": 16}


@pytest.fixture(scope="module")
def decode_artifact(tmp_path_factory):
    from kernels import gemm

    d = tmp_path_factory.mktemp("tma_l2") / "g"
    gemm.build_dynamic(256, 256, "bfloat16", "col", max_rows=16, tile_m=16, tile_n=128).save(str(d))
    return str(d)


@pytest.mark.parametrize("size", [0, 128, 256])
def test_a_side_changes_only_the_promotion(decode_artifact, size):
    import axe.runtime as rt
    from axe.backends.cuda.schedules.tma import L2_PROMOTION

    with open(os.path.join(decode_artifact, "launch.json")) as f:
        built = json.load(f)
    assert {s["l2_promotion"] for s in built["tensormaps"]} == {L2_PROMOTION}
    side = tma_l2.promoted(rt, decode_artifact, size)
    assert [{**s, "l2_promotion": L2_PROMOTION} for s in side.launch["tensormaps"]] == built["tensormaps"]
    assert {s["l2_promotion"] for s in side.launch["tensormaps"]} == {size}
    assert {k: v for k, v in side.launch.items() if k != "tensormaps"} == \
        {k: v for k, v in built.items() if k != "tensormaps"}
