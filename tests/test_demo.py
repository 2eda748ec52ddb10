"""The README's main job runs end to end on a CPU machine, as a short story; ``--verbose`` adds every
operator call's candidates."""

import shutil

import pytest

from axe import demo
from axe.cli import main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_demo_builds_every_kernel_for_every_target(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) <= 60, f"the default demo prints {len(out.splitlines())} lines"
    assert "declined" not in out and "use Ax." not in out          # no candidate lists, no advice to act on
    for name in ("transpose", "rmsnorm"):
        line = next(x for x in out.splitlines() if x.startswith(f"-- kernels/{name}.py::{name}:"))
        assert "sm_90a built" in line and "sm_100a built" in line
        for target in ("sm_90a", "sm_100a"):
            assert (demo.ROOT / "build" / "demo" / target / name / "launch.json").exists()
    fp8 = next(x for x in out.splitlines() if "gemm_fp8.py" in x)
    assert "sm_100a not built, as expected: gemm_fp8 on sm_100a" in fp8
    assert "S[(8,2,4,2):(4@lane,1@warp,1@lane,1)] + R[2:4@warp] + 5@warp" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_verbose_demo_shows_the_candidates(capsys):
    demo._kernels(verbose=True, only="transpose")
    out = capsys.readouterr().out
    assert "chosen: 1 x cp.async.bulk.tensor.2d" in out and "declined:" in out
    assert "sm_90a: built in" in out and "build/demo/sm_90a/transpose" in out and "chose copy→tma" in out
