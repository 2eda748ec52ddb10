"""The README's main job runs end to end on a CPU machine."""

import shutil

import pytest

from axe.cli import main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_demo_builds_every_kernel_for_every_target(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for name in ("transpose", "rmsnorm"):
        for target in ("sm_90a", "sm_100a"):
            assert f"{target}: built" in out and f"build/demo/{target}/{name}" in out
    assert "chosen: 1 x cp.async.bulk.tensor.2d" in out
    assert "S[(8,2,4,2):(4@lane,1@warp,1@lane,1)] + R[2:4@warp] + 5@warp" in out
