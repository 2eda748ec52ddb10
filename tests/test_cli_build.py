"""``axe build`` / ``axe --help`` as a newcomer meets them: defaults stated, one folder per target,
an unknown target refused before nvcc runs (nothing left behind), no reST markup in help text."""

import glob
import os
import tempfile

import pytest

from axe.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_help_states_defaults_without_markup(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    out = capsys.readouterr().out
    assert "sm_90a (default)" in out and "default: build" in out and "OUTPUT/TARGET/KERNEL" in out


def test_unknown_target_is_refused_before_nvcc(tmp_path, capsys):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "axe_build_failed_*")))
    assert main(["build", os.path.join(ROOT, "kernels", "rmsnorm.py"), "--target", "sm_91x", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown target 'sm_91x'" in err and "sm_90a: Hopper" in err and "trn1" in err and "nvcc" not in err
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "axe_build_failed_*"))) == before
    assert not any(tmp_path.iterdir())


def test_targets_build_into_their_own_folders(tmp_path):
    src = os.path.join(ROOT, "kernels", "softmax.py")
    assert main(["build", src, "--target", "trn1", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "trn1" / "softmax").is_dir()
    assert not (tmp_path / "softmax").exists()
