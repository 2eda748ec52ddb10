"""Two k-blocks per wgmma wait (``k_per_wait=2``, :meth:`kernels.parts.mainloops.tma_wgmma.Cooperative.k_pairs`).

Oracles: the generated CUDA source (the wgmma instructions between two commits: one step's), ptxas's
own report (no serialized wgmma), and the configuration's refusals by name.  The values are checked
on the GPU (``tests/gpu/cases_gemm.py``: ``kp2*``).
"""

import os
import re

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from kernels import gemm  # noqa: E402


def steps(source):
    """The wgmma instructions of each commit group, in source order."""
    body = source[source.index("__global__ void"):]
    body = body[body.index("{", body.index(")")):]          # the kernel's body, past the declarations
    groups, n = [], 0
    for line in body.splitlines():
        n += len(re.findall(r"tvm_builtin_ptx_wgmma_\w*mma_async\w*\(", line))
        if "wgmma_commit_group" in line:
            groups.append(n)
            n = 0
    return groups


@pytest.mark.parametrize("K,expect", [(576, [8, 8, 4]), (512, [8, 8, 8]), (128, [8])])
def test_steps_are_pairs_and_an_odd_count_ends_with_one(K, expect):
    """K = 576 is 9 k-blocks: a first pair, a loop of pairs (3 trips, one in the source), a last single
    k-block; 8 k-blocks end with a pair; 2 k-blocks are one step.  Each k-block of a 128-wide tile is 4
    wgmma (k16) per consumer; ptxas issues them without serializing."""
    art = gemm.build(512, 512, K, "bfloat16", "col", tile_n=128, k_per_wait=2)
    assert steps(art.cuda_source) == expect
    assert "serialized" not in art.log and "C7520" not in art.log


def test_the_112_wide_tile_pairs_its_7_slots():
    art = gemm.build_dynamic(3584, 1024, "bfloat16", "col", max_rows=512, tile_n=112, stages=7, k_per_wait=2)
    assert steps(art.cuda_source) == [8, 8, 8] and "serialized" not in art.log
    assert art.launch["dynamic_smem"] == 7 * (128 + 112) * 64 * 2 + 2 * 64 * 64 * 2


@pytest.mark.parametrize("options,why", [
    (dict(k_per_wait=3), "k_per_wait must be 1, or 2"),
    (dict(k_per_wait=2, schedule="pingpong"), "schedule='pingpong'"),
    (dict(k_per_wait=2, stream_k=True), "stream_k=True"),
    (dict(k_per_wait=2, in_flight=1), "in_flight=0"),
])
def test_refusals_name_the_option(options, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        gemm.make(512, 512, 512, "bfloat16", "col", **options)


def test_one_k_block_is_refused():
    with pytest.raises(ValueError, match="at least 2 k-blocks"):
        gemm.make(512, 512, 64, "bfloat16", "col", k_per_wait=2)
